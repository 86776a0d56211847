// Session 9 (skinny_mma.cuh): the exact split of fp32 token rows into three 16-bit planes (f16
// for e4m3 weights, bf16 for bf16 weights) — split_row, used by the split kernel and by the
// product kernel's fused split (M <= 2), so both give the same planes. See skinny_mma.cuh's header
// for the exactness argument.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/pdl.cuh"

namespace deepinfer::cuda::kernels::skinny {

constexpr int kPlanes = 3;

template <bool kBf16>
__device__ __forceinline__ uint16_t to16(float v) {
  if constexpr (kBf16) return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  else return __half_as_ushort(__float2half_rn(v));
}
template <bool kBf16>
__device__ __forceinline__ float from16(uint16_t h) {
  if constexpr (kBf16) return __bfloat162float(__ushort_as_bfloat16(h));
  else return __half2float(__ushort_as_half(h));
}

// One token row xr [K] split by the 256 threads of a CTA: plane p at dst + p·stride (natural k
// order); returns c (to every thread). red: 8 floats of shared memory; every thread must call it.
template <bool kBf16>
__device__ __forceinline__ int split_row(const float* __restrict__ xr, int K, uint16_t* dst, int64_t stride,
                                         float* red) {
  float m = 0.f;
  int bad = 0;
  for (int k = threadIdx.x; k < K; k += 256) {
    const float a = fabsf(xr[k]);
    if (a <= 3.402823466e38f) m = fmaxf(m, a);
    else bad = 1;  // inf or NaN: c = 0, the planes carry it into the products
  }
  bad = __syncthreads_or(bad);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  m = red[0];
#pragma unroll
  for (int w = 1; w < 8; ++w) m = fmaxf(m, red[w]);
  __syncthreads();  // red may be written again by the next call
  int c = 0;
  if (!bad && m > 0.f) {
    int ex = 0;
    frexpf(m, &ex);  // m ∈ [2^(ex−1), 2^ex)
    c = 15 - ex;     // m · 2^c ∈ [2^14, 2^15)
  }
  for (int k = threadIdx.x; k < K; k += 256) {
    const float v = ldexpf(xr[k], c);  // exact (power of two, in range)
    const uint16_t h0 = to16<kBf16>(v);
    const float r1 = v - from16<kBf16>(h0);  // exact
    const uint16_t h1 = to16<kBf16>(r1);
    const float r2 = r1 - from16<kBf16>(h1);  // exact
    dst[k] = h0;
    dst[stride + k] = h1;
    dst[2 * stride + k] = to16<kBf16>(r2);
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
