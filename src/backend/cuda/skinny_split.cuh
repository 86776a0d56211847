// Session 9 (skinny_mma.cuh): the exact split of fp32 token rows into three 16-bit planes (f16
// for e4m3 weights, bf16 for bf16 weights) — split_row, used by the split kernel and by the
// product kernel's fused split (M <= 2), so both give the same planes. See skinny_mma.cuh's header
// for the exactness argument. Session 10: the row exponent and the per-element split live in
// x_planes.cuh, shared with experts_mma.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda/x_planes.cuh"

namespace deepinfer::cuda::kernels::skinny {

constexpr int kPlanes = xplanes::kPlanes;
using xplanes::from16;
using xplanes::to16;

// One token row xr [K] split by the 256 threads of a CTA: plane p at dst + p·stride (natural k
// order); returns c (to every thread). red: 8 floats of shared memory; every thread must call it.
// The row exponent and the planes are x_planes.cuh's (the same as experts_mma's split).
template <bool kBf16>
__device__ __forceinline__ int split_row(const float* __restrict__ xr, int K, uint16_t* dst, int64_t stride,
                                         float* red) {
  const int c = xplanes::row_exponent256(xr, K, red);
  // Session 15: xplanes::kBatch loads issued before the first split (the stores to dst may alias
  // xr for the compiler, so it kept each load behind the previous element's stores).
  constexpr int kB = xplanes::kBatch;
  for (int k0 = threadIdx.x; k0 < K; k0 += 256 * kB) {
    float v[kB];
    xplanes::load_batch(xr, K, k0, v);
#pragma unroll
    for (int j = 0; j < kB; ++j) {
      const int k = k0 + 256 * j;
      if (k >= K) break;
      uint16_t h0, h1, h2;
      xplanes::split3<kBf16>(v[j], c, h0, h1, h2);
      dst[k] = h0;
      dst[stride + k] = h1;
      dst[2 * stride + k] = h2;
    }
  }
  return c;
}

// planes[m][p][k] (natural k order), row_exp[m] = c. x [M, K] fp32, any alignment.
template <bool kBf16>
__global__ void __launch_bounds__(256) split_kernel(const float* __restrict__ x, int K,
                                                    uint16_t* __restrict__ planes,
                                                    int32_t* __restrict__ row_exp) {
  __shared__ float red[8];
  pdl::launch_dependents();  // the product kernel may start streaming its weights now
  pdl::wait();               // x may be written by the previous kernel
  const int64_t r = blockIdx.x;
  const int c = split_row<kBf16>(x + r * K, K, planes + r * kPlanes * static_cast<int64_t>(K), K, red);
  if (threadIdx.x == 0) row_exp[r] = c;
}

}  // namespace deepinfer::cuda::kernels::skinny
