// The GEMV's routed-expert launch (gemv.h): one problem per distinct selected expert (grid.y an
// upper bound, min(slots, E); CTAs past the real count exit), the expert's token rows staged in
// shared memory, its weight streamed once per tile of those rows.
#include "backend/cuda/gemv.h"

#include "backend/cuda/gemv.cuh"
#include "backend/cuda/gemv_experts.cuh"

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

namespace {

// Chunks per lane the second version instantiates (K ≤ 8192).
int experts_v2_cpl(int64_t K) {
  const int64_t c = (K / 32 + 31) / 32;
  return c <= 1 ? 1 : c <= 2 ? 2 : c <= 4 ? 4 : 8;
}

size_t experts_v2_smem(int64_t K) {
  return static_cast<size_t>(gemv_x::kMaxMT) * (K / 32) * gemv_x::kChunkFloats * sizeof(float);
}

template <int kCPL>
void launch_v2(const gemv_x::Args& a, cudaStream_t s) {
  constexpr int kR = kCPL >= 4 ? 1 : 4 / kCPL;  // 4 chunk loads per lane per group
  auto* kernel = gemv_x::experts_kernel<kCPL, kR>;
  const size_t smem = experts_v2_smem(a.K);
  gemv_x::Args p = a;
  p.groups = (a.N + kR - 1) / kR;
  static std::atomic<uint64_t> attr_set{0};
  opt_in_smem_per_device(attr_set, kernel, static_cast<int>(experts_v2_smem(8192)));
  static const int sms = gemv::device_sms();
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, gemv_x::kThreads, smem) != cudaSuccess) {
    cudaGetLastError();
    per_sm = 1;
  }
  per_sm = per_sm < 1 ? 1 : per_sm;
  kernel<<<static_cast<unsigned>(sms * per_sm), gemv_x::kThreads, smem, s>>>(p);
}

}  // namespace

bool gemv_experts_v2_supported(int fmt, int64_t slots, int64_t num_experts, bool scaled,
                               bool w_vec, int64_t N, int64_t K, int64_t block_cols) {
  if (fmt != 2 || !scaled || !w_vec || K <= 0 || K % 32 != 0 || K > 8192 || N <= 0) return false;
  if (block_cols < 32 || block_cols % 32 != 0 || ((block_cols / 32) & (block_cols / 32 - 1)) != 0) return false;
  if (num_experts <= 0 || num_experts > 1024) return false;
  const int64_t lim = int64_t{1} << 31;
  return slots * N < lim && slots * K < lim && N * K < lim * 2;
}

void gemv_experts_v2(const float* x, int64_t x_div, const int32_t* perm, const int32_t* row_off,
                     const int32_t* act_off, int64_t slots, int64_t num_experts,
                     const void* const* w_table, const void* const* s_table, bool scale_f32,
                     int64_t N, int64_t K, int64_t block_rows, int64_t block_cols, float* out,
                     cudaStream_t s) {
  if (slots == 0 || N == 0 || num_experts == 0) return;
  gemv_x::Args a;
  a.x = x;
  a.x_div = static_cast<int32_t>(x_div);
  a.perm = perm;
  a.row_off = row_off;
  a.act_off = act_off;
  a.num_experts = static_cast<int32_t>(num_experts);
  a.w_table = w_table;
  a.s_table = s_table;
  a.scale_f32 = scale_f32 ? 1 : 0;
  a.x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  a.N = static_cast<int32_t>(N);
  a.K = static_cast<int32_t>(K);
  a.chunks = static_cast<int32_t>(K / 32);
  a.br = static_cast<int32_t>(block_rows);
  a.scale_cols = static_cast<int32_t>((K + block_cols - 1) / block_cols);
  int l = 0;
  while ((int64_t{1} << l) < block_cols / 32) ++l;
  a.cpb_log2 = l;
  a.out = out;
  switch (experts_v2_cpl(K)) {
    case 1: launch_v2<1>(a, s); break;
    case 2: launch_v2<2>(a, s); break;
    case 4: launch_v2<4>(a, s); break;
    default: launch_v2<8>(a, s); break;
  }
}

}  // namespace deepinfer::cuda::kernels
