// Weight-only-quantized linear layer: out[m, g·N + n] = Σ_k x[m, g·K + k] · deq(w[g·N + n, k])
// with the weight read in its stored format (bf16, e4m3 + block scales, e2m1 + group scales, or
// f32) and fp32 math. Memory-bound shape (decode): one warp per output row n; lane l owns the
// 16-byte chunks l, l + 32, ... of the row, four loads in flight; each chunk is decoded once and
// used for up to 8 rows of x; the 32 lane partials are summed by a fixed xor tree. An element's
// bits depend only on its own x row and weight row — never on M — so the kernel is
// batch-invariant by construction.
#include <cuda_bf16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda::kernels {

namespace {

constexpr int kWarps = 8;   // rows n per block (one warp each)
constexpr int kMTile = 8;   // rows of x per block
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane

// Elements per 16-byte chunk: bf16 8, e4m3 16, e2m1 32, f32 4.
template <int kFmt> struct Fmt;
template <> struct Fmt<0> { static constexpr int kElems = 8; };
template <> struct Fmt<1> { static constexpr int kElems = 16; };
template <> struct Fmt<2> { static constexpr int kElems = 32; };
template <> struct Fmt<3> { static constexpr int kElems = 4; };

__device__ __forceinline__ float ue8m0(uint8_t e) {
  return e == 0xFF ? __int_as_float(0x7FC00000) : __int_as_float(static_cast<int>(e) << 23);
}

// e4m3fn → fp32 with integer ops only (no table, no ldexpf): normal codes map to the fp32
// exponent e + 120 and the top mantissa bits; subnormals are m · 2^-9; S.1111.111 is NaN.
__device__ __forceinline__ float e4m3(uint32_t v) {
  const uint32_t e = (v >> 3) & 0xF, m = v & 0x7, sign = (v & 0x80) << 24;
  const uint32_t normal = sign | ((e + 120) << 23) | (m << 20);
  const uint32_t sub = sign | __float_as_uint(static_cast<float>(m) * 0.001953125f);  // m · 2^-9
  return (e == 0xF && m == 0x7) ? __int_as_float(0x7FC00000)
                                : __uint_as_float(e == 0 ? sub : normal);
}

// e2m1 → fp32 with integer ops only: codes 2..7 are 2^((c>>1)−1)·(1 + (c&1)/2), code 1 is 0.5.
__device__ __forceinline__ float e2m1(uint32_t code) {
  const uint32_t c = code & 7, sign = (code & 8) << 28;
  const uint32_t mag = c >= 2 ? (((c >> 1) + 126) << 23) | ((c & 1) << 22) : (c == 1 ? (126u << 23) : 0u);
  return __int_as_float(static_cast<int>(sign | mag));
}

// Row n's weights as bytes: bf16 2 per element, e4m3 1, e2m1 half, f32 4.
template <int kFmt>
__device__ __forceinline__ int64_t row_bytes(int64_t K) {
  return kFmt == 0 ? 2 * K : kFmt == 1 ? K : kFmt == 2 ? K / 2 : 4 * K;
}

// Decodes one 16-byte chunk (kElems weights, unscaled).
template <int kFmt>
__device__ __forceinline__ void decode(const uint4& q, float* wv) {
  const uint32_t u[4] = {q.x, q.y, q.z, q.w};
  if (kFmt == 0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      wv[2 * j] = __int_as_float(static_cast<int>(u[j] << 16));
      wv[2 * j + 1] = __int_as_float(static_cast<int>(u[j] & 0xFFFF0000u));
    }
  } else if (kFmt == 1) {
#pragma unroll
    for (int j = 0; j < 16; ++j) wv[j] = e4m3(u[j / 4] >> (8 * (j % 4)));
  } else if (kFmt == 2) {
#pragma unroll
    for (int j = 0; j < 32; ++j) wv[j] = e2m1(u[j / 8] >> (4 * (j % 8)));
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) wv[j] = __int_as_float(static_cast<int>(u[j]));
  }
}

// Element k of row `w` (the unaligned path), unscaled.
template <int kFmt>
__device__ __forceinline__ float element(const uint8_t* w, int64_t k) {
  if (kFmt == 0) return __int_as_float(static_cast<int>(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(w)[k]) << 16));
  if (kFmt == 1) return e4m3(w[k]);
  if (kFmt == 2) return e2m1(w[k / 2] >> (4 * (k & 1)));
  return reinterpret_cast<const float*>(w)[k];
}

__device__ __forceinline__ float scale_at(const void* scale, bool scale_f32, int64_t i) {
  return scale_f32 ? static_cast<const float*>(scale)[i] : ue8m0(static_cast<const uint8_t*>(scale)[i]);
}

// The lane partials of one weight row against kRows rows of x (x_rows[i], null past the end):
// lane l owns the chunks l, l + 32, l + 64, ... of kElems elements, each decoded once, scaled
// (a chunk never straddles a scale block: block_cols is a multiple of kElems, or the weight is
// unscaled) and fma'd into acc[i] in k order. Aligned (vector) path when K % kElems == 0, else
// element loads. Both kernels below use exactly this, so their per-element arithmetic agrees.
template <int kFmt, int kRows>
__device__ __forceinline__ void row_partials(const uint8_t* __restrict__ wrow, const void* scale,
                                             bool scale_f32, int64_t srow, int64_t K, int64_t bc,
                                             const float* const* x_rows, int lane,
                                             float acc[kRows]) {
  constexpr int E = Fmt<kFmt>::kElems;
  const int64_t scale_cols = bc > 0 ? (K + bc - 1) / bc : 0;
  if (K % E == 0) {
    const uint4* wq = reinterpret_cast<const uint4*>(wrow);
    const int64_t chunks = K / E;
    for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
      uint4 q[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (c0 + 32 * u < chunks) q[u] = __ldg(wq + c0 + 32 * u);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + 32 * u;
        if (c >= chunks) break;
        float wv[E];
        decode<kFmt>(q[u], wv);
        const int64_t k0 = c * E;
        if (scale != nullptr) {
          const float sc = scale_at(scale, scale_f32, srow * scale_cols + k0 / bc);
#pragma unroll
          for (int j = 0; j < E; ++j) wv[j] *= sc;
        }
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          if (x_rows[i] == nullptr) break;
          const float4* xr = reinterpret_cast<const float4*>(x_rows[i] + k0);
          float a = acc[i];
#pragma unroll
          for (int j = 0; j < E / 4; ++j) {
            const float4 xv = xr[j];
            a = fmaf(xv.x, wv[4 * j], a);
            a = fmaf(xv.y, wv[4 * j + 1], a);
            a = fmaf(xv.z, wv[4 * j + 2], a);
            a = fmaf(xv.w, wv[4 * j + 3], a);
          }
          acc[i] = a;
        }
      }
    }
  } else {
    for (int64_t k0 = static_cast<int64_t>(lane) * E; k0 < K; k0 += 32 * E) {
      for (int j = 0; j < E && k0 + j < K; ++j) {
        const int64_t k = k0 + j;
        float wv = element<kFmt>(wrow, k);
        if (scale != nullptr) wv *= scale_at(scale, scale_f32, srow * scale_cols + k / bc);
        for (int i = 0; i < kRows; ++i) {
          if (x_rows[i] == nullptr) break;
          acc[i] = fmaf(x_rows[i][k], wv, acc[i]);
        }
      }
    }
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
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
  const float* x_rows[kMTile];
#pragma unroll
  for (int i = 0; i < kMTile; ++i) x_rows[i] = m0 + i < M ? x + (m0 + i) * G * K + g * K : nullptr;
  float acc[kMTile];
#pragma unroll
  for (int i = 0; i < kMTile; ++i) acc[i] = 0.f;
  row_partials<kFmt, kMTile>(w + row * row_bytes<kFmt>(K), scale, scale_f32, row / br, K, bc,
                             x_rows, lane, acc);
#pragma unroll
  for (int i = 0; i < kMTile; ++i) {
    const float v = warp_sum(acc[i]);
    if (lane == 0 && m0 + i < M) out[(m0 + i) * G * N + row] = v;
  }
}

// One x row per slot, the weight chosen by ids[slot] from pointer tables (routed experts).
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
  const float* x_rows[1] = {x + (slot / x_div) * K};
  float acc[1] = {0.f};
  row_partials<kFmt, 1>(w + row * row_bytes<kFmt>(K), scale, scale_f32, row / br, K, bc, x_rows,
                        lane, acc);
  const float v = warp_sum(acc[0]);
  if (lane == 0) out[slot * N + row] = v;
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
#define DI_LINEAR(F)                                                                             \
  linear_kernel<F><<<grid, kWarps * 32, 0, s>>>(x, wb, scale, scale_f32, M, N, K, G, block_rows, \
                                                bc, out)
  if (fmt == 0) DI_LINEAR(0);
  else if (fmt == 1) DI_LINEAR(1);
  else if (fmt == 2) DI_LINEAR(2);
  else DI_LINEAR(3);
#undef DI_LINEAR
}

}  // namespace deepinfer::cuda::kernels
