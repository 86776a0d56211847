// The exact split of an fp32 token row into three 16-bit planes, shared by the decode routed
// experts (experts_mma.cuh: f16 planes, each 8 k permuted) and the skinny products
// (skinny_split.cuh: f16 or bf16 planes, natural k order), so both compute the same row exponent
// and the same planes (issue 7, session 10; until then each header had its own copy).
//
// A row x [K] with max |x| ∈ [2^(ex−1), 2^ex) gets c = 15 − ex, so max |x · 2^c| ∈ [2^14, 2^15)
// (the f16 normal range without overflow; bf16 has fp32's exponent range). Each element
// v = x · 2^c (exact: a power of two, in range) is split h0 = rn16(v), h1 = rn16(v − h0),
// h2 = rn16(v − h0 − h1), every difference exact in fp32, so x = 2^-c (h0 + h1 + h2 + r) with
// |r| tiny (33 significant bits for f16, 24 for bf16). A row holding inf or NaN (or all zeros)
// gets c = 0: the planes carry the non-finite values into the products.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::kernels::xplanes {

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

// The row exponent c of row xr [K], computed by the 256 threads of a CTA (every thread must call
// it; c returned to all). red: 8 floats of shared memory, free again when this returns.
// Session 15: a thread reads its elements kBatch at a time, all loads issued before the first is
// used (one memory round trip per kBatch elements instead of one per element: the loop's trip
// count is not known, so the compiler kept the loads one by one). The maximum does not depend
// on the order: the same c.
constexpr int kBatch = 8;

// This thread's elements k0 + 256·j (j < kBatch) of row xr, 0 past K, all loads issued together
// (row_exponent256 and skinny's split_row).
__device__ __forceinline__ void load_batch(const float* __restrict__ xr, int K, int k0,
                                           float (&v)[kBatch]) {
#pragma unroll
  for (int j = 0; j < kBatch; ++j) v[j] = k0 + 256 * j < K ? xr[k0 + 256 * j] : 0.f;
}

__device__ __forceinline__ int row_exponent256(const float* __restrict__ xr, int K, float* red) {
  float m = 0.f;
  int bad = 0;
  for (int k0 = threadIdx.x; k0 < K; k0 += 256 * kBatch) {
    float v[kBatch];
    load_batch(xr, K, k0, v);
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const float a = fabsf(v[j]);
      if (a <= 3.402823466e38f)
        m = fmaxf(m, a);
      else
        bad = 1;  // inf or NaN
    }
  }
  bad = __syncthreads_or(bad);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
  __syncthreads();
  m = red[0];
#pragma unroll
  for (int w = 1; w < 8; ++w) m = fmaxf(m, red[w]);
  __syncthreads();  // red may be written again by the caller's next call
  int c = 0;
  if (!bad && m > 0.f) {
    int ex = 0;
    frexpf(m, &ex);  // m ∈ [2^(ex−1), 2^ex)
    c = 15 - ex;     // m · 2^c ∈ [2^14, 2^15)
  }
  return c;
}

// The three planes of one element x of a row with exponent c.
template <bool kBf16>
__device__ __forceinline__ void split3(float x, int c, uint16_t& h0, uint16_t& h1, uint16_t& h2) {
  const float v = ldexpf(x, c);  // exact (a power of two, in range)
  h0 = to16<kBf16>(v);
  const float r1 = v - from16<kBf16>(h0);  // exact
  h1 = to16<kBf16>(r1);
  const float r2 = r1 - from16<kBf16>(h1);  // exact
  h2 = to16<kBf16>(r2);
}

}  // namespace deepinfer::cuda::kernels::xplanes
