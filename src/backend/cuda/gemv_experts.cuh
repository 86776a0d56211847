// Routed-expert GEMV for decode, second version (session 5): FP4 e2m1 experts with ue8m0 / f32
// block scales, every selected expert's weights streamed once per tile of its tokens, at as many
// bytes in flight as the SM holds. Same per-element arithmetic as gemv.cuh (bit for bit: the
// chunk partials, their promotion and the lane tree are those of the first version), so both
// kernels, the plain GEMV and one-slot-at-a-time products agree exactly.
//
// What changed against gemv.cuh's expert launch (which read the experts at ≈ 0.5–0.7 TB/s):
//  - Work is one flat list of row groups over all active experts (expert-major); CTA b of a
//    persistent grid owns the contiguous range [b·T/grid, (b+1)·T/grid) of it, so every CTA
//    streams the same number of bytes whatever the number of distinct experts (the old grid
//    reserved CTAs for min(slots, E) experts and idled those past the real count). A range spans
//    at most a few experts; the CTA stages each expert's token rows once per tile of kMaxMT.
//  - A warp owns kR whole rows per group (kR = 4 / chunks-per-lane: 1 row for K = 4096, 2 for
//    K = 2048), each lane kCPL 16-byte chunks of each (chunk c of a row to lane c % 32, as before),
//    and software-pipelines its groups: the next group's weights (and scales) are in flight while
//    the current one is decoded (4 × 16 B per lane), and the two groups after that are already
//    prefetched into L2 (prefetch.global.L2: no registers held), so ~3 groups (~100 KB per SM)
//    of DRAM traffic are in flight; the first groups are issued before the x rows are staged.
//  - x rows in shared memory padded (36 floats per 32-float chunk) instead of XOR-swizzled: a
//    lane's x addresses are a fixed base plus compile-time offsets (no index arithmetic in the
//    loop, 32-bit everywhere), and a quarter-warp's 16-byte reads hit 8 distinct bank groups.
//  - Weights loaded with ld.global.nc.L1::no_allocate (read once, never kept in L1).
//  - The decode drops its fp32 multiply by 2^126 (kScaledX: the staged x rows carry the power of
//    two instead; exact, same bits, checked per tile) — ~5 instead of ~6 instructions per weight
//    element at one token (SASS), the issue-bound ceiling of a CUDA-core FP4 GEMV.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv.cuh"

namespace deepinfer::cuda::kernels::gemv_x {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Token rows staged per tile: an expert with more tokens is streamed once per tile of 2 (decode
// batches rarely route more than two tokens to one expert; tiles of 4 made the kernel spill).
constexpr int kMaxMT = 2;
constexpr int kChunkFloats = 36;   // staged floats per 32-element chunk (4 of padding)

// Decode without the fp32 multiply by 2^126 (one instruction of ~6 per weight element): the
// weights stay at value · 2^-126 (the bitwise move of gemv.cuh) and the staged x row m carries
// 2^(126 − k_m) instead, with k_m = max(0, e − 1) for the row's largest |x| in [2^e, 2^(e+1)).
// Then every product x'·w' and fma of the chain is exactly 2^-k_m times the old one, and rounds
// the same way, when (checked per row at staging; a tile with any row failing uses the multiply):
//  - x' does not overflow: |x| < 2^(k+2) (true by the choice of k);
//  - no value of the chain overflows in either domain: max |x| < 2^118 (32 products ≤ 6|x|);
//  - every exact product is a multiple of 2^-149 in the scaled domain, so a result below
//    2^-126 there is exact in both domains: each nonzero |x| ≥ 2^(k−125) (x normal);
// and x' = x · 2^(126−k) is exact (a power of two, no overflow); the partial is multiplied back
// by 2^k (exact) before the scale's fma. Non-finite x: the multiply path. Same bits either way.
constexpr bool kScaledX = true;
constexpr int kChunkF4 = kChunkFloats / 4;

struct Args {
  const float* x = nullptr;  // token rows of K floats; slot i reads row i / x_div
  int32_t x_div = 1;
  const int32_t* perm = nullptr;     // sorted position -> slot (moe_group)
  const int32_t* row_off = nullptr;  // [E+1] first sorted position of each expert
  const int32_t* act_off = nullptr;  // [E+1] active experts before e
  int32_t num_experts = 0;
  const void* const* w_table = nullptr;  // [E] -> e2m1 [N, K]
  const void* const* s_table = nullptr;  // [E] -> scales [ceil(N / br), scale_cols]
  int32_t scale_f32 = 0;
  int32_t x_vec = 0;     // x rows 16-byte aligned (float4 staging)
  int32_t N = 0, K = 0;  // K % 32 == 0
  int32_t chunks = 0;    // K / 32
  int32_t br = 1, scale_cols = 0, cpb_log2 = 0;
  int32_t groups = 0;    // row groups per expert: ceil(N / kR)
  float* out = nullptr;  // [slots, N]
};

__device__ __forceinline__ uint4 ld_stream(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// One group's weights and scales (raw bits: a ue8m0 byte or f32 bits), for kR rows × kCPL chunks.
template <int kCPL, int kR>
struct Frag {
  uint4 q[kR][kCPL];
  uint32_t s[kR][kCPL];
};

// Issues the loads of rows n0 .. n0 + kR - 1 (zeros past N or past the row's chunks).
template <int kCPL, int kR>
__device__ __forceinline__ void load_group(const Args& p, const uint8_t* wb, const uint8_t* sb,
                                           int n0, int lane, Frag<kCPL, kR>& f) {
  const uint32_t rb = static_cast<uint32_t>(p.K) / 2;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const bool valid = n0 + r < p.N;
    const int n = valid ? n0 + r : n0;
    const uint8_t* row = wb + static_cast<size_t>(n) * rb + lane * 16;
    const int sr = p.br == 1 ? n : n / p.br;  // (V4's expert scales are 1×32: no division)
    const size_t srow = static_cast<size_t>(sr) * static_cast<uint32_t>(p.scale_cols);
#pragma unroll
    for (int j = 0; j < kCPL; ++j) {
      const bool ok = valid && lane + 32 * j < p.chunks;
      f.q[r][j] = ok ? ld_stream(row + 512 * j) : make_uint4(0, 0, 0, 0);
      f.s[r][j] = 0;
      if (ok) {
        const size_t si = srow + ((lane + 32 * j) >> p.cpb_log2);
        f.s[r][j] = p.scale_f32 ? __ldg(reinterpret_cast<const uint32_t*>(sb) + si)
                                : static_cast<uint32_t>(__ldg(sb + si));
      }
    }
  }
}

// Pulls rows n0 .. n0 + kR - 1 (weights and scales) into L2 without holding registers: the loads
// of a later group then hit L2, so each warp keeps ~3 groups of DRAM traffic in flight.
template <int kCPL, int kR>
__device__ __forceinline__ void prefetch_group(const Args& p, const uint8_t* wb, const uint8_t* sb,
                                               int n0, int lane) {
  const uint32_t rb = static_cast<uint32_t>(p.K) / 2;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    if (n0 + r >= p.N) break;
    const uint8_t* row = wb + static_cast<size_t>(n0 + r) * rb + lane * 16;
    const int sr = p.br == 1 ? n0 + r : (n0 + r) / p.br;
    const size_t srow = static_cast<size_t>(sr) * static_cast<uint32_t>(p.scale_cols);
#pragma unroll
    for (int j = 0; j < kCPL; ++j) {
      if (lane + 32 * j >= p.chunks) break;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(row + 512 * j));
      const size_t si = srow + ((lane + 32 * j) >> p.cpb_log2);
      asm volatile("prefetch.global.L2 [%0];" ::"l"(sb + (p.scale_f32 ? 4 * si : si)));
    }
  }
}

// The 8 e2m1 codes of word i of a chunk as fp32: gemv.cuh's Unit<2> (codes moved bitwise into
// the bf16 layout of value · 2^-126), multiplied back by 2^126 unless kPasted (then the caller's
// x rows carry the 2^126: see kScaledX).
template <bool kPasted>
__device__ __forceinline__ void decode_e2m1(const uint4& q, int i, float* w) {
  const uint32_t u = i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w;
  constexpr float k2p126 = 8.507059173023461586584365185794205286e37f;  // 2^126
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t t = u >> (4 * j);
    const uint32_t o = ((t & 0x00070007u) << 6) | ((t & 0x00080008u) << 12);
    w[j] = __uint_as_float(o << 16);
    w[j + 4] = __uint_as_float(o & 0xFFFF0000u);
    if (!kPasted) w[j] *= k2p126, w[j + 4] *= k2p126;
  }
}

// acc[m][r] = the lane's share of row n0 + r against staged token row m (gemv.cuh's arithmetic:
// each chunk fma-chained in k order from zero, promoted by one fma with its scale, chunks in
// ascending order). kPasted: x row m is staged as x · 2^(126 − k_m) and the weights are left at
// value · 2^-126, so every product and partial is the exact one times 2^-k_m; the partial is
// multiplied back by up[m] = 2^k_m (exact) before its promotion — the same bits (kScaledX).
template <int kCPL, int kR, int kMT, bool kPasted>
__device__ __forceinline__ void compute_group(const Args& p, const Frag<kCPL, kR>& f,
                                              const float4* const (&xm)[kMT], const float* up,
                                              int lane, float (&acc)[kMT][kR]) {
  constexpr int kOut = 8, kCount = 4;  // 8 codes per 32-bit word, 4 words per chunk
#pragma unroll
  for (int m = 0; m < kMT; ++m)
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[m][r] = 0.f;
#pragma unroll
  for (int j = 0; j < kCPL; ++j) {
    if (lane + 32 * j >= p.chunks) break;
    float part[kMT][kR];
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
      for (int r = 0; r < kR; ++r) part[m][r] = 0.f;
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      float w[kR][kOut];
#pragma unroll
      for (int r = 0; r < kR; ++r) decode_e2m1<kPasted>(f.q[r][j], i, w[r]);
#pragma unroll
      for (int m = 0; m < kMT; ++m) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float4 xv = xm[m][32 * kChunkF4 * j + 2 * i + h];
#pragma unroll
          for (int r = 0; r < kR; ++r) {
            float a = part[m][r];
            a = fmaf(xv.x, w[r][4 * h + 0], a);
            a = fmaf(xv.y, w[r][4 * h + 1], a);
            a = fmaf(xv.z, w[r][4 * h + 2], a);
            a = fmaf(xv.w, w[r][4 * h + 3], a);
            part[m][r] = a;
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float s = p.scale_f32 ? __uint_as_float(f.s[r][j]) : gemv::ue8m0_to_float(f.s[r][j]);
#pragma unroll
      for (int m = 0; m < kMT; ++m)
        acc[m][r] = fmaf(kPasted ? part[m][r] * up[m] : part[m][r], s, acc[m][r]);
    }
  }
}

template <int kCPL, int kR, int kMT, bool kPasted>
__device__ __forceinline__ void finish_group(const Args& p, const Frag<kCPL, kR>& f,
                                             const float4* const (&xm)[kMT], const float* up,
                                             int lane, int n0, const int* ooff) {
  float acc[kMT][kR];
  compute_group<kCPL, kR, kMT, kPasted>(p, f, xm, up, lane, acc);
#pragma unroll
  for (int m = 0; m < kMT; ++m)
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float v = gemv::warp_sum(acc[m][r]);
      if (lane == 0 && n0 + r < p.N) p.out[static_cast<size_t>(ooff[m]) + n0 + r] = v;
    }
}

// The warp's groups gl, gl + kWarps, ... < gl1 of one expert against kMT staged rows; `a` holds
// the first group's loads (issued by the caller). Two register buffers, ping-pong: the next
// group's loads are issued before the current group is decoded.
template <int kCPL, int kR, int kMT, bool kPasted>
__device__ __forceinline__ void run_rows(const Args& p, Frag<kCPL, kR>& a, int gl, int gl1,
                                         const uint8_t* wb, const uint8_t* sb, const float* xs,
                                         int xrow, const int* ooff, const float* up, int lane) {
  const float4* xm[kMT];
#pragma unroll
  for (int m = 0; m < kMT; ++m) xm[m] = reinterpret_cast<const float4*>(xs + m * xrow) + lane * kChunkF4;
  Frag<kCPL, kR> b;
  constexpr int kAhead = 3 * kWarps;  // L2 prefetch distance (groups of this warp: 3)
  while (gl < gl1) {
    if (gl + kWarps < gl1) load_group<kCPL, kR>(p, wb, sb, (gl + kWarps) * kR, lane, b);
    if (gl + kAhead < gl1) prefetch_group<kCPL, kR>(p, wb, sb, (gl + kAhead) * kR, lane);
    finish_group<kCPL, kR, kMT, kPasted>(p, a, xm, up, lane, gl * kR, ooff);
    gl += kWarps;
    if (gl >= gl1) break;
    if (gl + kWarps < gl1) load_group<kCPL, kR>(p, wb, sb, (gl + kWarps) * kR, lane, a);
    if (gl + kAhead < gl1) prefetch_group<kCPL, kR>(p, wb, sb, (gl + kAhead) * kR, lane);
    finish_group<kCPL, kR, kMT, kPasted>(p, b, xm, up, lane, gl * kR, ooff);
    gl += kWarps;
  }
}

template <int kCPL, int kR>
__global__ void __launch_bounds__(kThreads, kCPL >= 8 ? 1 : 2) experts_kernel(const Args p) {
  extern __shared__ __align__(16) float xs[];  // [kMaxMT][chunks · 36]
  __shared__ int ooff[kMaxMT];                 // output row offsets (slot · N) of the tile
  __shared__ float up[kMaxMT];                 // 2^k_m of the staged rows (kScaledX)
  __shared__ float red_max[kWarps][kMaxMT], red_min[kWarps][kMaxMT];  // per-warp |x| stats
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n_active = p.act_off[p.num_experts];
  const int64_t total = static_cast<int64_t>(n_active) * p.groups;
  const int64_t g_begin = total * blockIdx.x / gridDim.x;
  const int64_t g_end = total * (blockIdx.x + 1) / gridDim.x;
  if (g_begin >= g_end) return;  // uniform over the CTA
  const int xrow = p.chunks * kChunkFloats;
  for (int64_t g = g_begin; g < g_end;) {
    const int d = static_cast<int>(g / p.groups);
    const int64_t seg_end = g_end < static_cast<int64_t>(d + 1) * p.groups ? g_end
                                                                           : static_cast<int64_t>(d + 1) * p.groups;
    const int gl0 = static_cast<int>(g - static_cast<int64_t>(d) * p.groups);
    const int gl1 = static_cast<int>(seg_end - static_cast<int64_t>(d) * p.groups);
    int lo = 0, hi = p.num_experts - 1;  // the expert e with act_off[e] == d and a token
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.act_off[mid] <= d) lo = mid;
      else hi = mid - 1;
    }
    const uint8_t* wb = static_cast<const uint8_t*>(p.w_table[lo]);
    const uint8_t* sb = static_cast<const uint8_t*>(p.s_table[lo]);
    const int pos0 = p.row_off[lo], rows = p.row_off[lo + 1] - pos0;
    for (int m0 = 0; m0 < rows; m0 += kMaxMT) {
      const int mt = rows - m0 < kMaxMT ? rows - m0 : kMaxMT;
      const int gl = gl0 + warp;
      Frag<kCPL, kR> a;
      if (gl < gl1) load_group<kCPL, kR>(p, wb, sb, gl * kR, lane, a);  // before staging
#pragma unroll
      for (int ahead = 1; ahead < 3; ++ahead)  // the loop prefetches from 3 groups ahead on
        if (gl + ahead * kWarps < gl1) prefetch_group<kCPL, kR>(p, wb, sb, (gl + ahead * kWarps) * kR, lane);
      __syncthreads();  // the previous tile's readers are done with xs and ooff
      if (tid < mt) ooff[tid] = p.perm[pos0 + m0 + tid] * p.N;
      for (int m = 0; m < mt; ++m) {
        const float* src = p.x + static_cast<size_t>(p.perm[pos0 + m0 + m] / p.x_div) * p.K;
        float* dst = xs + m * xrow;
        float mx = 0.f, mn = __int_as_float(0x7F800000);  // max |x| (NaN, inf: +inf), min |x| > 0
        auto stat = [&](float v) {
          const float av = fabsf(v);
          mx = av <= 3.402823466e38f ? fmaxf(mx, av) : __int_as_float(0x7F800000);
          if (av > 0.f) mn = fminf(mn, av);
        };
        if (p.x_vec) {
          const float4* s4 = reinterpret_cast<const float4*>(src);
          float4* d4 = reinterpret_cast<float4*>(dst);
          for (int i = tid; i < p.K / 4; i += kThreads) {
            const float4 v = __ldg(s4 + i);
            stat(v.x), stat(v.y), stat(v.z), stat(v.w);
            d4[(i >> 3) * kChunkF4 + (i & 7)] = v;
          }
        } else {
          for (int k = tid; k < p.K; k += kThreads) {
            const float v = __ldg(src + k);
            stat(v);
            dst[(k >> 5) * kChunkFloats + (k & 31)] = v;
          }
        }
        if (kScaledX) {
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) {
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
          }
          if (lane == 0) red_max[warp][m] = mx, red_min[warp][m] = mn;
        }
      }
      __syncthreads();
      // kScaledX: row m is staged as x · 2^(126 − k_m) when that is exact and the products stay
      // in fp32's normal range relative to the old arithmetic (see the comment at kScaledX);
      // every row of the tile must qualify, else the tile decodes with the multiply.
      bool pasted = kScaledX;
      int c_m[kMaxMT] = {};
#pragma unroll
      for (int m = 0; m < kMaxMT; ++m) {
        if (!kScaledX || m >= mt) continue;
        float mx = 0.f, mn = __int_as_float(0x7F800000);
#pragma unroll
        for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_max[w][m]), mn = fminf(mn, red_min[w][m]);
        int k = 0;
        if (mx > 0.f) {
          const int emx = static_cast<int>((__float_as_uint(mx) >> 23) & 0xFF);  // 255: inf / NaN
          const int emn = static_cast<int>((__float_as_uint(mn) >> 23) & 0xFF);
          k = emx - 128 > 0 ? emx - 128 : 0;  // |x| < 2^(e+1) ≤ 2^(k+2), e = emx − 127
          if (emx == 0 || emx - 127 > 117 || emn == 0 || emn - 127 < k - 125) pasted = false;
        }
        c_m[m] = 126 - k;
        if (tid == 0) up[m] = __int_as_float((k + 127) << 23);
      }
      if (pasted) {  // rescale the elements this thread staged (exact: powers of two, no overflow)
        for (int m = 0; m < mt; ++m) {
          const float f = __int_as_float((c_m[m] + 127) << 23);
          float* dst = xs + m * xrow;
          if (p.x_vec) {
            float4* d4 = reinterpret_cast<float4*>(dst);
            for (int i = tid; i < p.K / 4; i += kThreads) {
              float4& v = d4[(i >> 3) * kChunkF4 + (i & 7)];
              v.x *= f, v.y *= f, v.z *= f, v.w *= f;
            }
          } else {
            for (int k = tid; k < p.K; k += kThreads) dst[(k >> 5) * kChunkFloats + (k & 31)] *= f;
          }
        }
      }
      __syncthreads();
      if (gl < gl1) {
        if (pasted) {
          if (mt == 1) run_rows<kCPL, kR, 1, true>(p, a, gl, gl1, wb, sb, xs, xrow, ooff, up, lane);
          else run_rows<kCPL, kR, 2, true>(p, a, gl, gl1, wb, sb, xs, xrow, ooff, up, lane);
        } else {  // rare (non-finite or extreme x): one staged row at a time, weights re-read
          for (int m = 0; m < mt; ++m) {
            if (m > 0) load_group<kCPL, kR>(p, wb, sb, gl * kR, lane, a);
            run_rows<kCPL, kR, 1, false>(p, a, gl, gl1, wb, sb, xs + m * xrow, xrow, ooff + m, up + m, lane);
          }
        }
      }
    }
    g = seg_end;
  }
}

}  // namespace deepinfer::cuda::kernels::gemv_x
