#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/head_blas.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/pdl_config.h"
#include "backend/cuda/prefill_gemm_kernels.h"

namespace deepinfer::cuda::kernels {
namespace {

size_t align16(size_t b) { return (b + 15) / 16 * 16; }

// out[m, n] = (p[3m, n] + p[3m+1, n]) + p[3m+2, n]; four columns per thread when N % 4 == 0.
__global__ void plane_sum_kernel(const float* __restrict__ p, int64_t M, int64_t N,
                                 float* __restrict__ out) {
  pdl::enter();
  const int64_t m = blockIdx.y;
  if (m >= M) return;
  const float* p0 = p + 3 * m * N;
  const float* p1 = p0 + N;
  const float* p2 = p1 + N;
  float* o = out + m * N;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (N % 4 == 0) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < N / 4;
         c += stride) {
      const float4 a = reinterpret_cast<const float4*>(p0)[c],
                   b = reinterpret_cast<const float4*>(p1)[c],
                   d = reinterpret_cast<const float4*>(p2)[c];
      reinterpret_cast<float4*>(o)[c] =
          make_float4((a.x + b.x) + d.x, (a.y + b.y) + d.y, (a.z + b.z) + d.z, (a.w + b.w) + d.w);
    }
  } else {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < N;
         c += stride)
      o[c] = (p0[c] + p1[c]) + p2[c];
  }
}

}  // namespace

bool head_blas_takes(int64_t min_rows, int64_t M, int64_t N, int64_t K, const void* x,
                     const void* w, int64_t max_rows) {
  return M >= min_rows && M >= 1 && M <= max_rows && N >= 1 && K >= 4 && K % 4 == 0 &&
         N * K * 2 >= (int64_t{64} << 20) && N <= (int64_t{1} << 30) && K <= (int64_t{1} << 20) &&
         (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16 == 0;
}

size_t head_blas_workspace_bytes(int64_t M, int64_t N, int64_t K) {
  const int64_t S = std::min(M, kHeadBlasMaxRows);  // one slab's rows (reused by every slab)
  return align16(static_cast<size_t>(S) * 3 * K * 2) + align16(static_cast<size_t>(S) * 3 * N * 4);
}

Status head_blas_linear(cublasHandle_t blas, const float* x, const void* w, int64_t M, int64_t N,
                        int64_t K, void* ws, float* out, cudaStream_t s) {
  if (M == 0) return OkStatus();
  // Session 17: more than kHeadBlasMaxRows rows in slabs of that many (one GEMM of 3·64 term rows
  // is already at the tensor cores' rate: the weight re-read per slab costs ~nothing), the
  // workspace reused — the next slab's split waits for this slab's sum (stream order; the sum's
  // PDL launch is waited for by the split's own wait before it writes).
  while (M > kHeadBlasMaxRows) {
    DI_RETURN_IF_ERROR(head_blas_linear(blas, x, w, kHeadBlasMaxRows, N, K, ws, out, s));
    x += kHeadBlasMaxRows * K;
    out += kHeadBlasMaxRows * N;
    M -= kHeadBlasMaxRows;
  }
  uint16_t* xs = static_cast<uint16_t*>(ws);  // [M][3][K] = [3M][K]: row 3m + j = term j of row m
  float* planes = reinterpret_cast<float*>(static_cast<char*>(ws) +
                                           align16(static_cast<size_t>(M) * 3 * K * 2));
  prefill::split_rows(x, K, nullptr, 0, 1, M, xs, s);
  DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  // Column-major: planesᵀ [N, 3M] (ld N) = W [N, K] (row-major = K × N col-major, op T, ld K) ·
  // xsᵀ [K, 3M] (ld K).
  const float alpha = 1.f, beta = 0.f;
  DI_CUBLAS_RETURN_IF_ERROR(
      cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(3 * M),
                   static_cast<int>(K), &alpha, w, CUDA_R_16BF, static_cast<int>(K), xs,
                   CUDA_R_16BF, static_cast<int>(K), &beta, planes, CUDA_R_32F, static_cast<int>(N),
                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  const int64_t cols = N % 4 == 0 ? N / 4 : N;
  const unsigned bx = static_cast<unsigned>(std::min<int64_t>((cols + 255) / 256, 1024));
  pdl::launch(plane_sum_kernel, dim3(bx, static_cast<unsigned>(M)), dim3(256), 0, s,
              pdl::small_kernels(), planes, M, N, out);
  DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return OkStatus();
}

}  // namespace deepinfer::cuda::kernels
