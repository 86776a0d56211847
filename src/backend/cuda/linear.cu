// Weight-only-quantized linear layer: out[m, g·N + n] = Σ_k x[m, g·K + k] · deq(w[g·N + n, k])
// with the weight read in its stored format (bf16, e4m3 + block scales, e2m1 + group scales) and
// fp32 math. Memory-bound shape (decode): one warp per output row n; lane l owns the k-chunks
// l·8, l·8 + 256, ...; each chunk's 8 weights are decoded once and used for up to 8 rows of x;
// the 32 lane partials are summed by a fixed xor tree. An element's bits depend only on its own x
// row and weight row — never on M — so the kernel is batch-invariant by construction.
#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda::kernels {

namespace {

constexpr int kWarps = 8;   // rows n per block
constexpr int kMTile = 8;   // rows of x per block
constexpr int kChunk = 8;   // weights per lane step

__device__ __forceinline__ float ue8m0(uint8_t e) {
  return e == 0xFF ? __int_as_float(0x7FC00000) : __int_as_float(static_cast<int>(e) << 23);
}

__device__ __forceinline__ float e4m3(uint32_t v) {
  v &= 0xFF;
  if ((v & 0x7F) == 0x7F) return __int_as_float(0x7FC00000);
  const int exp = (v >> 3) & 0xF, man = v & 0x7;
  const float mag = exp == 0 ? ldexpf(static_cast<float>(man), -9)
                             : ldexpf(static_cast<float>(8 + man), exp - 10);
  return (v & 0x80) ? -mag : mag;
}

__device__ __forceinline__ float e2m1(uint32_t code) {
  const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float mag = mags[code & 7];
  return (code & 8) ? -mag : mag;
}

// Decodes weights [k0, k0 + 8) of row n into wv (unscaled); k0 % 8 == 0. Vector loads when the
// row stride keeps them aligned (K % 16 == 0), element loads otherwise (with k < K bounds).
template <int kFmt>
__device__ __forceinline__ void load_chunk(const uint8_t* w, int64_t n, int64_t K, int64_t k0,
                                           bool vec, float wv[kChunk]) {
  if (kFmt == 0) {  // bf16
    const uint16_t* row = reinterpret_cast<const uint16_t*>(w) + n * K;
    if (vec) {
      const uint4 q = *reinterpret_cast<const uint4*>(row + k0);
      const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        wv[2 * j] = __int_as_float(static_cast<int>(u[j] << 16));
        wv[2 * j + 1] = __int_as_float(static_cast<int>(u[j] & 0xFFFF0000u));
      }
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j)
        wv[j] = k0 + j < K ? __int_as_float(static_cast<int>(static_cast<uint32_t>(row[k0 + j]) << 16)) : 0.f;
    }
  } else if (kFmt == 1) {  // e4m3
    const uint8_t* row = w + n * K;
    if (vec) {
      const uint2 q = *reinterpret_cast<const uint2*>(row + k0);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        wv[j] = e4m3(q.x >> (8 * j));
        wv[4 + j] = e4m3(q.y >> (8 * j));
      }
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) wv[j] = k0 + j < K ? e4m3(row[k0 + j]) : 0.f;
    }
  } else if (kFmt == 3) {  // f32
    const float* row = reinterpret_cast<const float*>(w) + n * K;
    if (vec) {
      const float4 a = *reinterpret_cast<const float4*>(row + k0);
      const float4 b = *reinterpret_cast<const float4*>(row + k0 + 4);
      wv[0] = a.x; wv[1] = a.y; wv[2] = a.z; wv[3] = a.w;
      wv[4] = b.x; wv[5] = b.y; wv[6] = b.z; wv[7] = b.w;
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) wv[j] = k0 + j < K ? row[k0 + j] : 0.f;
    }
  } else {  // e2m1, two codes a byte, low nibble first; K even
    const uint8_t* row = w + n * (K / 2);
    if (vec) {
      const uint32_t q = *reinterpret_cast<const uint32_t*>(row + k0 / 2);
#pragma unroll
      for (int j = 0; j < kChunk; ++j) wv[j] = e2m1(q >> (4 * j));
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const int64_t k = k0 + j;
        wv[j] = k < K ? e2m1(row[k / 2] >> (4 * (k & 1))) : 0.f;
      }
    }
  }
}

template <int kFmt>
__global__ void __launch_bounds__(kWarps * 32)
linear_kernel(const float* __restrict__ x, const uint8_t* __restrict__ w, const void* scale,
              bool scale_f32, int64_t M, int64_t N, int64_t K, int64_t G, int64_t br, int64_t bc,
              float* __restrict__ out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;  // in [0, G·N)
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kMTile;
  if (row >= G * N) return;
  const int64_t g = row / N;
  const int64_t ldx = G * K;
  const int64_t scale_cols = bc > 0 ? (K + bc - 1) / bc : 0;
  const bool vec = (K % 16) == 0;
  float acc[kMTile];
#pragma unroll
  for (int i = 0; i < kMTile; ++i) acc[i] = 0.f;
  for (int64_t k0 = static_cast<int64_t>(lane) * kChunk; k0 < K; k0 += 32 * kChunk) {
    float wv[kChunk];
    load_chunk<kFmt>(w, row, K, k0, vec, wv);
    if (scale != nullptr) {  // one scale per chunk: bc is a multiple of 8
      const int64_t si = (row / br) * scale_cols + k0 / bc;
      const float s = scale_f32 ? static_cast<const float*>(scale)[si]
                                : ue8m0(static_cast<const uint8_t*>(scale)[si]);
#pragma unroll
      for (int j = 0; j < kChunk; ++j) wv[j] *= s;
    }
#pragma unroll
    for (int i = 0; i < kMTile; ++i) {
      const int64_t m = m0 + i;
      if (m >= M) break;
      const float* xr = x + m * ldx + g * K + k0;
      float a = acc[i];
      if (vec) {
        const float4 x0 = *reinterpret_cast<const float4*>(xr);
        const float4 x1 = *reinterpret_cast<const float4*>(xr + 4);
        a = fmaf(x0.x, wv[0], a); a = fmaf(x0.y, wv[1], a); a = fmaf(x0.z, wv[2], a);
        a = fmaf(x0.w, wv[3], a); a = fmaf(x1.x, wv[4], a); a = fmaf(x1.y, wv[5], a);
        a = fmaf(x1.z, wv[6], a); a = fmaf(x1.w, wv[7], a);
      } else {
#pragma unroll
        for (int j = 0; j < kChunk; ++j)
          if (k0 + j < K) a = fmaf(xr[j], wv[j], a);
      }
      acc[i] = a;
    }
  }
#pragma unroll
  for (int i = 0; i < kMTile; ++i) {
    float v = acc[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int64_t m = m0 + i;
    if (lane == 0 && m < M) out[m * G * N + row] = v;
  }
}

// One row of x per slot, the weight chosen per slot by ids[slot] from pointer tables (routed
// experts). Per element exactly linear_kernel's arithmetic (same chunks, fma order and xor tree),
// so a slot's result equals that of linear_wq on the expert's weight.
template <int kFmt>
__global__ void __launch_bounds__(kWarps * 32)
slots_kernel(const float* __restrict__ x, int64_t x_div, const int32_t* __restrict__ ids,
             int64_t num_experts, const void* const* __restrict__ w_table,
             const void* const* __restrict__ s_table, bool scale_f32, int64_t N, int64_t K,
             int64_t br, int64_t bc, float* __restrict__ out, int32_t* error_flag) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t slot = blockIdx.y;
  if (row >= N) return;
  const int32_t e = ids[slot];
  if (e < 0 || e >= num_experts) {
    if (lane == 0) out[slot * N + row] = 0.f;
    if (row == 0 && lane == 0) set_error(error_flag, kErrHashExpertId);
    return;
  }
  const uint8_t* w = static_cast<const uint8_t*>(w_table[e]);
  const void* scale = s_table != nullptr ? s_table[e] : nullptr;
  const float* xr0 = x + (slot / x_div) * K;
  const int64_t scale_cols = bc > 0 ? (K + bc - 1) / bc : 0;
  const bool vec = (K % 16) == 0;
  float a = 0.f;
  for (int64_t k0 = static_cast<int64_t>(lane) * kChunk; k0 < K; k0 += 32 * kChunk) {
    float wv[kChunk];
    load_chunk<kFmt>(w, row, K, k0, vec, wv);
    if (scale != nullptr) {
      const int64_t si = (row / br) * scale_cols + k0 / bc;
      const float sc = scale_f32 ? static_cast<const float*>(scale)[si]
                                 : ue8m0(static_cast<const uint8_t*>(scale)[si]);
#pragma unroll
      for (int j = 0; j < kChunk; ++j) wv[j] *= sc;
    }
    const float* xr = xr0 + k0;
    if (vec) {
      const float4 x0 = *reinterpret_cast<const float4*>(xr);
      const float4 x1 = *reinterpret_cast<const float4*>(xr + 4);
      a = fmaf(x0.x, wv[0], a); a = fmaf(x0.y, wv[1], a); a = fmaf(x0.z, wv[2], a);
      a = fmaf(x0.w, wv[3], a); a = fmaf(x1.x, wv[4], a); a = fmaf(x1.y, wv[5], a);
      a = fmaf(x1.z, wv[6], a); a = fmaf(x1.w, wv[7], a);
    } else {
#pragma unroll
      for (int j = 0; j < kChunk; ++j)
        if (k0 + j < K) a = fmaf(xr[j], wv[j], a);
    }
  }
  for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  if (lane == 0) out[slot * N + row] = a;
}

}  // namespace

void linear_slots(int fmt, const float* x, int64_t x_div, const int32_t* ids, int64_t num_slots,
                  int64_t num_experts, const void* const* w_table, const void* const* s_table,
                  bool scale_f32, int64_t N, int64_t K, int64_t block_rows, int64_t block_cols,
                  float* out, int32_t* error_flag, cudaStream_t s) {
  if (num_slots == 0 || N == 0) return;
  dim3 grid(grid_for(N, kWarps), static_cast<unsigned>(num_slots));
  const int64_t bc = s_table ? block_cols : 0;
#define DI_SLOTS(F)                                                                              \
  slots_kernel<F><<<grid, kWarps * 32, 0, s>>>(x, x_div, ids, num_experts, w_table, s_table,     \
                                               scale_f32, N, K, block_rows, bc, out, error_flag)
  if (fmt == 0) DI_SLOTS(0);
  else if (fmt == 1) DI_SLOTS(1);
  else if (fmt == 2) DI_SLOTS(2);
  else DI_SLOTS(3);
#undef DI_SLOTS
}

void linear_wq(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
               int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows, int64_t block_cols,
               float* out, cudaStream_t s) {
  if (M == 0 || N == 0 || G == 0) return;
  dim3 grid(grid_for(G * N, kWarps), grid_for(M, kMTile));
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const int64_t bc = scale ? block_cols : 0;
  if (fmt == 0)
    linear_kernel<0><<<grid, kWarps * 32, 0, s>>>(x, wb, scale, scale_f32, M, N, K, G, block_rows, bc, out);
  else if (fmt == 1)
    linear_kernel<1><<<grid, kWarps * 32, 0, s>>>(x, wb, scale, scale_f32, M, N, K, G, block_rows, bc, out);
  else if (fmt == 2)
    linear_kernel<2><<<grid, kWarps * 32, 0, s>>>(x, wb, scale, scale_f32, M, N, K, G, block_rows, bc, out);
  else
    linear_kernel<3><<<grid, kWarps * 32, 0, s>>>(x, wb, scale, scale_f32, M, N, K, G, block_rows, bc, out);
}

}  // namespace deepinfer::cuda::kernels
