// gemv_tc: the weight-streaming tensor-core kernel with linear_tc's bits (linear_tc_gemv.cuh),
// launched with linear_tc's split plan and finished by linear_tc's split reduction.
#include "backend/cuda/linear_tc_gemv.h"

#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_tc_gemv.cuh"

namespace deepinfer::cuda::kernels {

bool linear_tc_gemv_supported(int fmt, const void* w, const float* x, int64_t M, int64_t K,
                              bool scaled, int64_t block_cols) {
  if (fmt < 0 || fmt > 2 || K <= 0 || M < 1 || M > kLinearTcGemvMaxRows) return false;
  const int64_t row_bytes = fmt == 0 ? 2 * K : fmt == 1 ? K : K / 2;
  if ((fmt == 2 && K % 2 != 0) || row_bytes % 16 != 0) return false;
  if (reinterpret_cast<uintptr_t>(w) % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) return false;
  if (scaled && (block_cols <= 0 || block_cols % tc::kBK != 0)) return false;
  return true;
}

namespace {

template <int kFmt>
void launch_rows(const tcg::GemvTcArgs& a, dim3 grid, cudaStream_t s) {
  if (a.M <= 8) tcg::gemv_tc_kernel<kFmt, 8><<<grid, tcg::kThreads, 0, s>>>(a);
  else tcg::gemv_tc_kernel<kFmt, 16><<<grid, tcg::kThreads, 0, s>>>(a);
}

}  // namespace

void linear_tc_gemv(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                    int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows,
                    int64_t block_cols, int64_t k_split, float* out, float* workspace,
                    cudaStream_t s) {
  if (M == 0 || N == 0 || G == 0) return;
  if (M > kLinearTcGemvMaxRows) {  // one m16 fragment holds the rows: linear_tc (the same bits)
    linear_tc(fmt, x, w, scale, scale_f32, M, N, K, G, block_rows, block_cols, k_split, out,
              workspace, s);
    return;
  }
  const int64_t splits = (K + k_split - 1) / k_split;
  tcg::GemvTcArgs a;
  tc::fill_linear_args(a, x, w, scale, scale_f32, M, N, K, G, block_rows, block_cols, k_split, out,
                       workspace);
  const dim3 grid(static_cast<unsigned>(G * ((N + tcg::kBN - 1) / tcg::kBN)),
                  static_cast<unsigned>(splits));
  if (fmt == 0) launch_rows<0>(a, grid, s);
  else if (fmt == 1) launch_rows<1>(a, grid, s);
  else launch_rows<2>(a, grid, s);
  if (splits > 1) linear_tc_reduce_splits(workspace, splits, M * G * N, out, s);
}

}  // namespace deepinfer::cuda::kernels
