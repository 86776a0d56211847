// The GEMV's routed-expert launch (gemv.h): one problem per distinct selected expert (grid.y an
// upper bound, min(slots, E); CTAs past the real count exit), the expert's token rows staged in
// shared memory, its weight streamed once per tile of those rows.
#include "backend/cuda/gemv.h"

#include "backend/cuda/gemv.cuh"

namespace deepinfer::cuda::kernels {

void gemv_experts(int fmt, const float* x, int64_t x_div, const int32_t* perm,
                  const int32_t* row_off, const int32_t* act_off, int64_t slots,
                  int64_t num_experts, const void* const* w_table, const void* const* s_table,
                  bool scale_f32, bool w_vec, int64_t N, int64_t K, int64_t block_rows,
                  int64_t block_cols, float* out, cudaStream_t s) {
  if (slots == 0 || N == 0 || num_experts == 0) return;
  gemv::Args a;
  a.x = x;
  a.x_div = x_div;
  a.w_table = w_table;
  a.s_table = s_table;
  a.perm = perm;
  a.row_off = row_off;
  a.act_off = act_off;
  a.num_experts = static_cast<int32_t>(num_experts);
  a.scale_f32 = scale_f32 ? 1 : 0;
  a.x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && K % 4 == 0;
  a.N = N;
  a.K = K;
  a.br = s_table ? block_rows : 1;
  a.scale_cols = s_table ? (K + block_cols - 1) / block_cols : 0;
  const int epc = fmt == 0 ? 8 : fmt == 1 ? 16 : fmt == 2 ? 32 : 4;
  int l = 0;
  while (s_table && (int64_t{1} << l) < block_cols / epc) ++l;
  a.cpb_log2 = l;
  a.x_stride = gemv::x_stride_floats(K);
  a.out = out;
  a.ldo = N;
  // Decode batches spread few tokens over many experts: two staged rows cover most experts (a
  // third token re-reads the expert); four when there are more slots than experts.
  const int mt = gemv_tile_rows(slots <= num_experts ? 2 : 4, K);
  const int64_t problems = slots < num_experts ? slots : num_experts;
  if (fmt == 0) gemv::launch_mt<0, true>(a, mt, problems, w_vec, s);
  else if (fmt == 1) gemv::launch_mt<1, true>(a, mt, problems, w_vec, s);
  else if (fmt == 2) gemv::launch_mt<2, true>(a, mt, problems, w_vec, s);
  else gemv::launch_mt<3, true>(a, mt, problems, w_vec, s);
}

}  // namespace deepinfer::cuda::kernels
