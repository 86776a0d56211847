// Weight-only-quantized linear layer: out[m, g·N + n] = Σ_k x[m, g·K + k] · deq(w[g·N + n, k])
// with the weight read in its stored format (bf16, e4m3 + block scales, e2m1 + group scales, or
// f32) and fp32 math. Memory-bound shape (decode): one warp per kWRows output rows n; lane l owns
// the 16-byte chunks l, l + 32, ... of each row, four loads in flight; each chunk is decoded once
// and used for up to 8 rows of x, each x chunk loaded once for the warp's rows; the 32 lane
// partials are summed by a fixed xor tree. An element's
// bits depend only on its own x row and weight row — never on M — so the kernel is
// batch-invariant by construction.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda::kernels {

namespace {

constexpr int kWarps = 4;   // warps per block (fewer, smaller blocks: the decode registers limit occupancy)
constexpr int kMTile = 8;   // rows of x per block
constexpr int kUnroll = 8;  // 16-byte weight loads in flight per lane (over its kWRows rows)
constexpr int kWRows = 2;   // weight rows per warp (each x chunk load serves both)

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
    // Two codes per instruction: cvt.rn.f16x2.e4m3x2 (exact: every e4m3 value, NaN included, is
    // an f16), then f16 → f32 (exact).
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const __nv_fp8x2_storage_t pair =
          static_cast<__nv_fp8x2_storage_t>((u[j / 2] >> (16 * (j % 2))) & 0xFFFFu);
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      wv[2 * j] = f.x;
      wv[2 * j + 1] = f.y;
    }
  } else if (kFmt == 2) {
    // Four codes at a time by byte permutes: the magnitude's fp32 bytes 3 and 2 come from two
    // 8-entry tables (codes 0..7 = 0, .5, 1, 1.5, 2, 3, 4, 6), are paired into bf16 halves, and
    // the sign bits are moved in; bf16 → f32 is a shift. Same values as e2m1() (−0 included).
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t v = u[j / 2] >> (16 * (j % 2));  // codes 4j .. 4j+3 in the low 16 bits
      const uint32_t mag = v & 0x7777u;
      const uint32_t hi = __byte_perm(0x3F3F3F00u, 0x40404040u, mag);
      const uint32_t lo = __byte_perm(0xC0800000u, 0xC0804000u, mag);
      const uint32_t p01 = __byte_perm(lo, hi, 0x5140) | ((v << 12) & 0x8000u) | ((v << 24) & 0x80000000u);
      const uint32_t p23 = __byte_perm(lo, hi, 0x7362) | ((v << 4) & 0x8000u) | ((v << 16) & 0x80000000u);
      wv[4 * j] = __uint_as_float(p01 << 16);
      wv[4 * j + 1] = __uint_as_float(p01 & 0xFFFF0000u);
      wv[4 * j + 2] = __uint_as_float(p23 << 16);
      wv[4 * j + 3] = __uint_as_float(p23 & 0xFFFF0000u);
    }
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

// The lane partials of kWR weight rows against kRows rows of x (x_rows[i], null past the end;
// wrows[r] null past the end): lane l owns the chunks l, l + 32, l + 64, ... of kElems elements
// of every row; each chunk is decoded once, scaled (a chunk never straddles a scale block:
// block_cols is a multiple of kElems, or the weight is unscaled) and fma'd into acc[i][r] in k
// order. A chunk of x is loaded once for all kWR weight rows (the loads of x, 2–8× the weight's
// bytes, bound this kernel). Aligned (vector) path when K % kElems == 0, else element loads. The
// per-element arithmetic (and so every result bit) is the same for any kWR and kRows.
template <int kFmt, int kRows, int kWR>
__device__ __forceinline__ void row_partials(const uint8_t* const* wrows, const void* scale,
                                             bool scale_f32, const int64_t* srow, int64_t K,
                                             int64_t bc, const float* const* x_rows, int lane,
                                             float (&acc)[kRows][kWR]) {
  constexpr int E = Fmt<kFmt>::kElems;
  // Chunks in flight per row: kUnroll loads per lane for the 8-bit/4-bit formats (more bytes per
  // decode), half that for bf16/f32 (whose decode registers are wider).
  constexpr int kLoads = (kFmt == 1 || kFmt == 2) ? kUnroll : kUnroll / 2;
  constexpr int kU = kLoads / kWR > 0 ? kLoads / kWR : 1;
  const int64_t scale_cols = bc > 0 ? (K + bc - 1) / bc : 0;
  if (K % E == 0) {
    const int64_t chunks = K / E;
    for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kU) {
      uint4 q[kU][kWR];
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int r = 0; r < kWR; ++r)
          if (c0 + 32 * u < chunks && wrows[r] != nullptr)
            q[u][r] = __ldg(reinterpret_cast<const uint4*>(wrows[r]) + c0 + 32 * u);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t c = c0 + 32 * u;
        if (c >= chunks) break;
        const int64_t k0 = c * E;
        float wv[kWR][E];
#pragma unroll
        for (int r = 0; r < kWR; ++r) {
          if (wrows[r] == nullptr) continue;
          decode<kFmt>(q[u][r], wv[r]);
          if (scale != nullptr) {
            const float sc = scale_at(scale, scale_f32, srow[r] * scale_cols + k0 / bc);
#pragma unroll
            for (int j = 0; j < E; ++j) wv[r][j] *= sc;
          }
        }
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
          if (x_rows[i] == nullptr) break;
          const float4* xr = reinterpret_cast<const float4*>(x_rows[i] + k0);
          float xv[E];
#pragma unroll
          for (int j = 0; j < E / 4; ++j) {
            const float4 t = xr[j];
            xv[4 * j] = t.x;
            xv[4 * j + 1] = t.y;
            xv[4 * j + 2] = t.z;
            xv[4 * j + 3] = t.w;
          }
#pragma unroll
          for (int r = 0; r < kWR; ++r) {
            if (wrows[r] == nullptr) continue;
            float a = acc[i][r];
#pragma unroll
            for (int j = 0; j < E; ++j) a = fmaf(xv[j], wv[r][j], a);
            acc[i][r] = a;
          }
        }
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < kWR; ++r) {
      if (wrows[r] == nullptr) continue;
      for (int64_t k0 = static_cast<int64_t>(lane) * E; k0 < K; k0 += 32 * E) {
        for (int j = 0; j < E && k0 + j < K; ++j) {
          const int64_t k = k0 + j;
          float wv = element<kFmt>(wrows[r], k);
          if (scale != nullptr) wv *= scale_at(scale, scale_f32, srow[r] * scale_cols + k / bc);
          for (int i = 0; i < kRows; ++i) {
            if (x_rows[i] == nullptr) break;
            acc[i][r] = fmaf(x_rows[i][k], wv, acc[i][r]);
          }
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
  // kWRows consecutive output rows per warp, all in one group g (N is padded per group).
  const int64_t per_group = (N + kWRows - 1) / kWRows;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kMTile;
  if (item >= G * per_group) return;
  const int64_t g = item / per_group, n0 = (item % per_group) * kWRows;
  const float* x_rows[kMTile];
#pragma unroll
  for (int i = 0; i < kMTile; ++i) x_rows[i] = m0 + i < M ? x + (m0 + i) * G * K + g * K : nullptr;
  const uint8_t* wrows[kWRows];
  int64_t srow[kWRows];
#pragma unroll
  for (int r = 0; r < kWRows; ++r) {
    const int64_t row = g * N + n0 + r;
    wrows[r] = n0 + r < N ? w + row * row_bytes<kFmt>(K) : nullptr;
    srow[r] = row / br;
  }
  float acc[kMTile][kWRows];
#pragma unroll
  for (int i = 0; i < kMTile; ++i)
#pragma unroll
    for (int r = 0; r < kWRows; ++r) acc[i][r] = 0.f;
  row_partials<kFmt, kMTile, kWRows>(wrows, scale, scale_f32, srow, K, bc, x_rows, lane, acc);
#pragma unroll
  for (int i = 0; i < kMTile; ++i)
#pragma unroll
    for (int r = 0; r < kWRows; ++r) {
      const float v = warp_sum(acc[i][r]);
      if (lane == 0 && m0 + i < M && n0 + r < N) out[(m0 + i) * G * N + g * N + n0 + r] = v;
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
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kWRows;
  const int64_t slot = blockIdx.y;
  if (n0 >= N) return;
  const int32_t e = ids[slot];
  if (e < 0 || e >= num_experts) {
    if (lane < kWRows && n0 + lane < N) out[slot * N + n0 + lane] = 0.f;
    if (n0 == 0 && lane == 0) set_error(error_flag, kErrHashExpertId);
    return;
  }
  const uint8_t* w = static_cast<const uint8_t*>(w_table[e]);
  const void* scale = s_table != nullptr ? s_table[e] : nullptr;
  const float* x_rows[1] = {x + (slot / x_div) * K};
  const uint8_t* wrows[kWRows];
  int64_t srow[kWRows];
#pragma unroll
  for (int r = 0; r < kWRows; ++r) {
    wrows[r] = n0 + r < N ? w + (n0 + r) * row_bytes<kFmt>(K) : nullptr;
    srow[r] = (n0 + r) / br;
  }
  float acc[1][kWRows];
#pragma unroll
  for (int r = 0; r < kWRows; ++r) acc[0][r] = 0.f;
  row_partials<kFmt, 1, kWRows>(wrows, scale, scale_f32, srow, K, bc, x_rows, lane, acc);
#pragma unroll
  for (int r = 0; r < kWRows; ++r) {
    const float v = warp_sum(acc[0][r]);
    if (lane == 0 && n0 + r < N) out[slot * N + n0 + r] = v;
  }
}

}  // namespace

void linear_slots(int fmt, const float* x, int64_t x_div, const int32_t* ids, int64_t num_slots,
                  int64_t num_experts, const void* const* w_table, const void* const* s_table,
                  bool scale_f32, int64_t N, int64_t K, int64_t block_rows, int64_t block_cols,
                  float* out, int32_t* error_flag, cudaStream_t s) {
  if (num_slots == 0 || N == 0) return;
  dim3 grid(grid_for(grid_for(N, kWRows), kWarps), static_cast<unsigned>(num_slots));
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
  dim3 grid(grid_for(G * grid_for(N, kWRows), kWarps), grid_for(M, kMTile));
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
