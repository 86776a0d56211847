// Kernels of the prefill products on cuBLAS (prefill_gemm_kernels.h). All memory-bound helpers
// around the cuBLAS bf16 GEMMs: nothing here is on the hot path's arithmetic.
#include "backend/cuda/prefill_gemm_kernels.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/common.cuh"

namespace deepinfer::cuda::prefill {

namespace {

constexpr int kThreads = 256;

unsigned grid_capped(int64_t items) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((items + kThreads - 1) / kThreads, int64_t{1} << 20)));
}

// ---- exact decoders (values as doubles: every e4m3 / e2m1 × ue8m0 / f32 product is exact) ----
__device__ __forceinline__ double e4m3_value(uint32_t b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  if (e == 15 && m == 7) return __longlong_as_double(0x7FF8000000000000ll);  // NaN codes
  const double v = e == 0 ? ldexp(static_cast<double>(m), -9)
                          : ldexp(static_cast<double>(8 + m), e - 10);  // (1 + m/8)·2^(e−7)
  return (b & 0x80) ? -v : v;
}
__device__ __forceinline__ double e2m1_value(uint32_t n) {
  const int e = (n >> 1) & 3, m = n & 1;
  const double v = e == 0 ? 0.5 * m : ldexp(static_cast<double>(2 + m), e - 2);  // (1 + m/2)·2^(e−1)
  return (n & 8) ? -v : v;
}
__device__ __forceinline__ double scale_value(const void* s, int64_t i, bool f32) {
  if (f32) return static_cast<double>(static_cast<const float*>(s)[i]);
  const uint32_t b = static_cast<const uint8_t*>(s)[i];
  return b == 255 ? __longlong_as_double(0x7FF8000000000000ll) : ldexp(1.0, static_cast<int>(b) - 127);
}

// bf16 bits of v = code·scale (exact in double). ok stays true when the bf16 number is v itself
// and normal or zero (the tensor cores then see exactly the stored-format kernels' operand).
__device__ __forceinline__ uint32_t bf16_exact(double v, bool scale_inf, bool& ok) {
  if (v != v) {
    ok = ok && !scale_inf;  // ±inf scale × 0 code: the stored-format kernels give acc·inf
    return 0x7FC0u;
  }
  const float f = static_cast<float>(v);
  const uint32_t u = __float_as_uint(f);
  const bool exact = !scale_inf && isfinite(f) && static_cast<double>(f) == v &&
                     (u & 0xFFFFu) == 0 && (f == 0.f || fabsf(f) >= 0x1p-126f);
  ok = ok && exact;
  return exact ? (u >> 16) : static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(f)));
}

__global__ void split_rows_kernel(const float* __restrict__ x, int64_t K, const int32_t* __restrict__ perm,
                                  int64_t p0, int64_t x_div, int64_t rows, uint16_t* __restrict__ xs) {
  const int64_t k4s = K / 4, n = rows * k4s;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = i / k4s, k = 4 * (i % k4s);
    const int64_t r = perm ? perm[p0 + p] / x_div : p;
    const float4 v = *reinterpret_cast<const float4*>(x + r * K + k);
    float q[4] = {v.x, v.y, v.z, v.w};
    uint16_t* dst = xs + p * 3 * K + k;
#pragma unroll
    for (int t = 0; t < 3; ++t) {
      const __nv_bfloat162 h01 = __floats2bfloat162_rn(q[0], q[1]);
      const __nv_bfloat162 h23 = __floats2bfloat162_rn(q[2], q[3]);
      const uint32_t b01 = static_cast<uint32_t>(__bfloat16_as_ushort(h01.x)) |
                           (static_cast<uint32_t>(__bfloat16_as_ushort(h01.y)) << 16);
      const uint32_t b23 = static_cast<uint32_t>(__bfloat16_as_ushort(h23.x)) |
                           (static_cast<uint32_t>(__bfloat16_as_ushort(h23.y)) << 16);
      *reinterpret_cast<uint2*>(dst + t * K) = make_uint2(b01, b23);
      if (t < 2) {
        const float2 f01 = __bfloat1622float2(h01), f23 = __bfloat1622float2(h23);
        q[0] -= f01.x;
        q[1] -= f01.y;
        q[2] -= f23.x;
        q[3] -= f23.y;
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (q[j] != q[j]) q[j] = 0.f;  // ±inf x: the remainder inf − inf is not a term
      }
    }
  }
}

__global__ void dequant_kernel(DequantArgs a) {
  const int64_t k8s = a.K / 8, per = a.rows * k8s, n = a.count * per;
  const int64_t scale_cols = (a.K + a.bc - 1) / a.bc;
  bool ok = true;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i / per, rem = i % per, r = rem / k8s, k = 8 * (rem % k8s);
    const int64_t row = a.row0 + r;
    const void* w = a.w;
    const void* sc = a.scale;
    if (a.experts) {
      const int32_t e = a.experts[c];
      w = a.w_table[e];
      sc = a.s_table ? a.s_table[e] : nullptr;
    }
    uint32_t h[8];
    if (a.fmt == 0) {
      const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w) + row * a.K + k);
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) h[2 * j] = words[j] & 0xFFFFu, h[2 * j + 1] = words[j] >> 16;
    } else {
      const double s = scale_value(sc, (row / a.br) * scale_cols + k / a.bc, a.scale_f32);
      const bool s_inf = isinf(s);
      if (a.fmt == 1) {
        const uint2 v = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(w) + row * a.K + k);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint32_t b = ((j < 4 ? v.x : v.y) >> (8 * (j % 4))) & 0xFFu;
          h[j] = bf16_exact(e4m3_value(b) * s, s_inf, ok);
        }
      } else {
        const uint32_t v = *reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(w) + row * (a.K / 2) + k / 2);
#pragma unroll
        for (int j = 0; j < 8; ++j) h[j] = bf16_exact(e2m1_value((v >> (4 * j)) & 0xFu) * s, s_inf, ok);
      }
    }
    const uint4 o = make_uint4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16),
                               h[6] | (h[7] << 16));
    uint16_t* dst = a.out + (c * a.rows + r) * a.copies * a.K + k;
    for (int t = 0; t < a.copies; ++t) *reinterpret_cast<uint4*>(dst + t * a.K) = o;
  }
  if (!ok && a.inexact) *a.inexact = 1;
}

__global__ void sum_terms_kernel(const float* __restrict__ y, const int32_t* __restrict__ perm,
                                 int64_t p0, int64_t rows, int64_t N, float* __restrict__ o) {
  const int64_t n = rows * N;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = i / N, c = i % N;
    const float* yp = y + 3 * p * N + c;
    o[static_cast<int64_t>(perm[p0 + p]) * N + c] = (yp[0] + yp[N]) + yp[2 * N];
  }
}

__global__ void fallback_kernel(FallbackArgs a) {
  if (*a.inexact == 0) return;  // the common case: every weight element was exact
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int64_t scale_cols = (a.K + a.bc - 1) / a.bc;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       o < a.R * a.N; o += warps) {
    const int64_t r = o / a.N, n = o % a.N;
    const void* w = a.w;
    const void* sc = a.scale;
    int64_t xr = r, wr = (r % a.G) * a.N + n;
    if (a.ids) {
      const int32_t e = a.ids[r];
      if (e < 0 || e >= a.E) continue;  // a bad id: the slot stays as the caller left it
      w = a.w_table[e];
      sc = a.s_table ? a.s_table[e] : nullptr;
      xr = r / a.x_div;
      wr = n;
    }
    const float* xrow = a.x + xr * a.K;
    double acc = 0;
    for (int64_t k = lane; k < a.K; k += 32) {
      double v;
      if (a.fmt == 0) {
        v = static_cast<double>(__bfloat162float(__ushort_as_bfloat16(static_cast<const uint16_t*>(w)[wr * a.K + k])));
      } else {
        const double s = scale_value(sc, (wr / a.br) * scale_cols + k / a.bc, a.scale_f32);
        if (a.fmt == 1) {
          v = e4m3_value(static_cast<const uint8_t*>(w)[wr * a.K + k]) * s;
        } else {
          const uint32_t b = static_cast<const uint8_t*>(w)[wr * (a.K / 2) + k / 2];
          v = e2m1_value((k & 1) ? (b >> 4) : (b & 0xFu)) * s;
        }
      }
      acc += static_cast<double>(xrow[k]) * v;
    }
    for (int d = 16; d > 0; d >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, d);
    if (lane == 0) a.out[r * a.N + n] = static_cast<float>(acc);
  }
}

}  // namespace

void split_rows(const float* x, int64_t K, const int32_t* perm, int64_t p0, int64_t x_div,
                int64_t rows, uint16_t* xs, cudaStream_t s) {
  if (rows <= 0 || K <= 0) return;
  split_rows_kernel<<<grid_capped(rows * (K / 4)), kThreads, 0, s>>>(x, K, perm, p0, x_div, rows, xs);
}

void dequant_bf16(const DequantArgs& a, cudaStream_t s) {
  if (a.rows <= 0 || a.count <= 0 || a.K <= 0) return;
  dequant_kernel<<<grid_capped(a.count * a.rows * (a.K / 8)), kThreads, 0, s>>>(a);
}

void sum_terms(const float* y, const int32_t* perm, int64_t p0, int64_t rows, int64_t N, float* o,
               cudaStream_t s) {
  if (rows <= 0 || N <= 0) return;
  sum_terms_kernel<<<grid_capped(rows * N), kThreads, 0, s>>>(y, perm, p0, rows, N, o);
}

void exact_fallback(const FallbackArgs& a, int num_sms, cudaStream_t s) {
  if (a.R <= 0 || a.N <= 0) return;
  fallback_kernel<<<static_cast<unsigned>(std::max(1, num_sms) * 4), kThreads, 0, s>>>(a);
}

}  // namespace deepinfer::cuda::prefill
