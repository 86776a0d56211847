// Tensor-core stored-format linear (see linear_tc.cuh for the arithmetic and fragment layouts):
// tile choice by M (all tiles give the same bits), the fixed split-K plan and its in-order
// reduction.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_tc.cuh"

namespace deepinfer::cuda::kernels {

namespace {

constexpr int kTerms = 3;  // bf16 terms of x: 3 makes the product fp32-accurate
constexpr int kBN = tc::kNF * 8 * 4;  // every instantiation below has WN = 4

int num_sms() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      return 132;
    }
    return v;
  }();
  return n;
}

int tile_rows_for(int64_t M) { return M <= 16 ? 16 : M <= 64 ? 64 : 128; }

// out[i] = Σ_z ws[z·n + i], z ascending (the fixed split order).
__global__ void split_reduce_kernel(const float* __restrict__ ws, int64_t splits, int64_t n,
                                    float* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = ws[i];
  for (int64_t z = 1; z < splits; ++z) v += ws[z * n + i];
  out[i] = v;
}

template <int kFmt>
void launch_fmt(const tc::TcArgs& a, int bm, dim3 grid, cudaStream_t s) {
  if (bm == 16) tc::launch_tc<kFmt, kTerms, 16, 1, 4, false>(a, grid, s);
  else if (bm == 64) tc::launch_tc<kFmt, kTerms, 64, 2, 4, false>(a, grid, s);
  else tc::launch_tc<kFmt, kTerms, 128, 2, 4, false>(a, grid, s);
}

}  // namespace

bool linear_tc_supported(int fmt, const void* w, const float* x, int64_t M, int64_t K,
                         bool scaled, int64_t block_cols) {
  if (fmt < 0 || fmt > 2 || K <= 0) return false;
  const int64_t row_bytes = fmt == 0 ? 2 * K : fmt == 1 ? K : K / 2;
  if ((fmt == 2 && K % 2 != 0) || row_bytes % 16 != 0) return false;
  if (reinterpret_cast<uintptr_t>(w) % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) return false;
  if (scaled && (block_cols <= 0 || block_cols % tc::kBK != 0)) return false;
  if ((M + 15) / 16 > 65535) return false;  // grid.y
  return true;
}

int64_t linear_tc_k_split(int64_t M, int64_t GN, int64_t K, int64_t block_cols,
                          bool batch_invariant) {
  const int64_t unit = block_cols > 0 ? block_cols : tc::kPromoteUnscaled;
  const int64_t tiles = (GN + kBN - 1) / kBN;  // n tiles over all groups (N ≥ 1 per group)
  const int64_t sms = num_sms();
  if (tiles >= sms) return K;
  // Outside batch-invariant mode a large M fills the GPU without splitting (M-dependent bits).
  const int64_t bm = tile_rows_for(M);
  if (!batch_invariant && ((M + bm - 1) / bm) * tiles >= sms) return K;
  // About two CTAs per SM, at most 8 splits (the workspace is splits × M × G·N floats), each
  // split at least 4 scale blocks wide.
  int64_t splits = (2 * sms + tiles - 1) / tiles;
  splits = std::min<int64_t>(splits, 8);
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, K / (4 * unit)));
  if (splits <= 1) return K;
  const int64_t per = (K + splits - 1) / splits;
  return (per + unit - 1) / unit * unit;
}

void linear_tc(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
               int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows,
               int64_t block_cols, int64_t k_split, float* out, float* workspace,
               cudaStream_t s) {
  if (M == 0 || N == 0 || G == 0) return;
  const int64_t splits = (K + k_split - 1) / k_split;
  tc::TcArgs a;
  a.x = x;
  a.lda = G * K;
  a.w = static_cast<const uint8_t*>(w);
  a.scale = scale;
  a.scale_f32 = scale_f32 ? 1 : 0;
  a.M = M;
  a.N = N;
  a.K = K;
  a.G = G;
  a.br = scale ? block_rows : 1;
  a.bc = scale ? block_cols : tc::kPromoteUnscaled;
  a.scale_cols = scale ? (K + block_cols - 1) / block_cols : 0;
  a.k_split = k_split;
  a.ldo = G * N;
  a.split_stride = M * G * N;
  a.out = splits > 1 ? workspace : out;
  const int bm = tile_rows_for(M);
  dim3 grid(static_cast<unsigned>(G * ((N + kBN - 1) / kBN)), static_cast<unsigned>((M + bm - 1) / bm),
            static_cast<unsigned>(splits));
  if (fmt == 0) launch_fmt<0>(a, bm, grid, s);
  else if (fmt == 1) launch_fmt<1>(a, bm, grid, s);
  else launch_fmt<2>(a, bm, grid, s);
  if (splits > 1) {
    const int64_t n = M * G * N;
    split_reduce_kernel<<<grid_for(n, 256), 256, 0, s>>>(workspace, splits, n, out);
  }
}

}  // namespace deepinfer::cuda::kernels
