// Batch-invariant fp32 GEMM (--batch-invariant): out[m, g·N + n] = Σ_k x[m, g·K + k] · w[g·N + n, k]
// with one fma chain per output element in k order 0..K−1. The tiling (32×32 tiles of out, 32-wide
// k steps) changes which thread computes an element, never the order of its sum, so an element's
// bits depend only on its own row of x and column of w — not on M (cuBLAS may switch algorithm or
// split K when M changes).
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda::kernels {

namespace {

constexpr int kTile = 32;
constexpr int kRowsPerThread = 4;  // blockDim = (32, 8)

__global__ void matmul_fixed_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                    int64_t M, int64_t N, int64_t K, int64_t G,
                                    float* __restrict__ out) {
  __shared__ float xs[kTile][kTile + 1];
  __shared__ float ws[kTile][kTile + 1];
  const int64_t g = blockIdx.z, n0 = static_cast<int64_t>(blockIdx.x) * kTile,
                m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  float acc[kRowsPerThread] = {0.f, 0.f, 0.f, 0.f};
  for (int64_t k0 = 0; k0 < K; k0 += kTile) {
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int row = ty + 8 * r;
      const int64_t m = m0 + row, n = n0 + row, k = k0 + tx;
      xs[row][tx] = (m < M && k < K) ? x[m * G * K + g * K + k] : 0.f;
      ws[row][tx] = (n < N && k < K) ? w[(g * N + n) * K + k] : 0.f;
    }
    __syncthreads();
    const int kmax = static_cast<int>(K - k0 < kTile ? K - k0 : kTile);
    for (int kk = 0; kk < kmax; ++kk)
      for (int r = 0; r < kRowsPerThread; ++r)
        acc[r] = fmaf(xs[ty + 8 * r][kk], ws[tx][kk], acc[r]);
    __syncthreads();
  }
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int64_t m = m0 + ty + 8 * r, n = n0 + tx;
    if (m < M && n < N) out[m * G * N + g * N + n] = acc[r];
  }
}

}  // namespace

void matmul_fixed(const float* x, const float* w, int64_t M, int64_t N, int64_t K, int64_t G,
                  float* out, cudaStream_t s) {
  if (M == 0 || N == 0 || G == 0) return;
  dim3 grid(grid_for(N, kTile), grid_for(M, kTile), static_cast<unsigned>(G));
  matmul_fixed_kernel<<<grid, dim3(kTile, 8), 0, s>>>(x, w, M, N, K, G, out);
}

}  // namespace deepinfer::cuda::kernels
