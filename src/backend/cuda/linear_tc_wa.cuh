// Small-M tensor-core product with linear_tc's bits, the weight as the MMA's A operand
// ("wa"; session 9; docs/cuda.md "Weight-as-A products with linear_tc's bits (linear_tc_wa)").
// M = 1..16 (one n8 tile of tokens per term at M <= 8, two at M <= 16).
//
// linear_tc (linear_tc.cuh) computes C[m][n] = Σ_k A[m][k]·B[k][n] with A = x's bf16 terms and
// B = the decoded weight: at M = 1 15 of A's 16 rows are zero. Here the product is transposed,
// Cᵀ = W·Xᵀ: A = 16 decoded weight rows, B = 8 token columns of one term. Per output element
// (token m, weight row n) everything linear_tc does is kept, operand for operand:
//  - the same products: x_t[m][k]·w[n][k] with the same bf16 x terms (split_terms8 below =
//    linear_tc's convert(), elementwise, NaN remainder → 0) and the same exact weight decoders
//    (tc::e4m3x2_to_bf16x2, tc::e2m1x4_to_bf16x4, raw bf16);
//  - at the same MMA k positions: the k32 stage permutation of linear_tc (lane q holds k
//    8q..8q+7; k-step s puts k 8q+4s+{0,1} at positions 2q..2q+1 and 8q+4s+{2,3} at 2q+8..+9)
//    is applied to A's weight rows and B's token columns alike. PTX fragments (g = lane / 4,
//    q = lane % 4): A a[0] (row g, pos 2q..+1) a[1] (row g+8, pos 2q..+1) a[2] (row g, pos
//    2q+8..+9) a[3] (row g+8, pos 2q+8..+9); B b[0] (pos 2q..+1, col g) b[1] (pos 2q+8..+9,
//    col g); C c[0], c[1] (row g, cols 2q, 2q+1), c[2], c[3] (row g+8, cols 2q, 2q+1). So weight
//    row n sits at A row n mod 16 and token m at B column m mod 8, and element (n, m) of D sees
//    exactly the 16 (position, product) pairs element (m, n) sees in linear_tc;
//  - accumulated in the same sequence: per stage k-step 0 then 1, terms x_2, x_1, x_0, each one
//    MMA into the block partial (zero at each scale block's start); zero operands past the
//    split's end / K (A and B both, in 8-k granules, as linear_tc's zero fill);
//  - the same promotion per scale block counted from the split's start,
//    acc = fmaf(partial, scale[n, kb], acc), at the block's last stage or the split's last;
//  - the caller's k_split (linear_tc_k_split) and partials [split][M][G·N] summed in split order
//    (v = ws[0]; v = v + ws[z], z ascending: tcr::split_reduce_pdl's adds, tc_ring.cuh).
// What is NOT guaranteed by the PTX ISA: that the tensor core's fp32 sum of an element's products
// does not depend on the element's place in the tile (row vs column roles of the operands). The
// products are exact and the positions equal, so any fixed-order summation gives the same bits;
// tests/cuda/cuda_linear_tc_wa_test.cpp checks it bitwise at every V4-Flash shape on the H200.
//
// Memory side (linear_tc_small's ring, cp.async fill): a CTA of 4 warps owns kTPW·64 weight rows
// (a warp kTPW m16 tiles) × one split; weights and the fp32 x of a slot's k stream through a ring
// of D slots in shared memory (64 bytes of every row per slot, padded pitch: conflict-free
// fragment reads), each slot with a "full" (cp.async.mbarrier.arrive.noinc by every thread) and
// an "empty" mbarrier (lane 0 of every warp); a slot is refilled once every warp has read it.
// x → bf16 terms: kShare = once per CTA per slot into a double-buffered term buffer (one named
// barrier per slot; each warp then reads its B fragments with one 16-byte load per term and
// token tile, reused by its kTPW weight tiles), else every warp splits what it needs in
// registers. PDL (pdl.cuh): the weight copies of the first D slots and the first scales are
// issued before griddepcontrol.wait, x after it; every CTA executes the wait.
#pragma once

#include "backend/cuda/linear_tc.cuh"
#include "backend/cuda/linear_tc_wa_decode.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tc_ring.cuh"

#include <cuda.h>  // CUtensorMap (wa2's TMA fill)

namespace deepinfer::cuda::kernels::tcw {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTerms = tcr::kTerms;  // 3 bf16 terms of x
constexpr int kMaxSlots = 8;
constexpr int kBarBytes = 128;    // mbarriers at the start of shared memory
constexpr int kSlotRowBytes = 64; // bytes of each weight row per ring slot
constexpr int kWideSlotRowBytes = 256;  // kWide: 4x longer runs per row (bf16 head)

// Per format: bytes of one row per k32 stage, padded row pitch in a slot (the rows a quarter /
// half / whole warp reads at once fall in distinct banks), k per slot.
template <int kFmt> struct WFmt;
template <> struct WFmt<0> { static constexpr int kSRB = 64, kPitch = 64, kSK = 32; };   // bf16
template <> struct WFmt<1> { static constexpr int kSRB = 32, kPitch = 96, kSK = 64; };   // e4m3
template <> struct WFmt<2> { static constexpr int kSRB = 16, kPitch = 80, kSK = 128; };  // e2m1

template <int kTPW> constexpr int kRowsPerCta = kWarps * kTPW * 16;
// Slot geometry: bytes of each row per slot, padded pitch (wide: 256 + kSRB ≡ kSRB mod 128, the
// same bank pattern), k per slot.
template <int kFmt, bool kWide>
struct WGeom {
  static constexpr int kRowBytes = kWide ? kWideSlotRowBytes : kSlotRowBytes;
  static constexpr int kPitch = kWide ? kWideSlotRowBytes + WFmt<kFmt>::kSRB : WFmt<kFmt>::kPitch;
  static constexpr int kSK = kRowBytes / WFmt<kFmt>::kSRB * 32;
};

struct WaArgs {
  const float* x = nullptr;     // [M, lda] fp32 (group g reads columns g·K ..)
  int64_t lda = 0;
  const uint8_t* w = nullptr;   // [G·N, K] stored
  const void* scale = nullptr;  // [ceil(G·N/br), scale_cols] ue8m0 / f32, or null (bf16)
  int32_t scale_f32 = 0;
  int64_t M = 0, N = 0, K = 0, br = 1, scale_cols = 0;
  int64_t bc = tc::kPromoteUnscaled;  // promotion interval (scale block columns, multiple of 32)
  int64_t k_split = 0;
  float* out = nullptr;         // out or the split workspace
  int64_t ldo = 0;              // G·N
  int64_t split_stride = 0;     // M·G·N
  int32_t slots = 2;            // ring depth D (2..kMaxSlots)
  int32_t slot_bytes = 0;       // bytes per slot (weights, then x), a multiple of 128
  int32_t x_pitch = 0;          // bytes per x row in a slot (kSK·4 + 16)
  // Session 13, the split sums in the kernel (splits > 1 only): counters [G·ntiles] zero between
  // launches (the last CTA of a tile resets its own), final [M, G·N] the product. Null: the
  // caller launches tcr::split_reduce_pdl.
  unsigned* counters = nullptr;
  float* final_out = nullptr;
};

// mbarrier wrappers and linear_tc's x split into terms: tc_ring.cuh (shared with linear_tc_small).
using tcr::cp_async_arrive;
using tcr::mbar_arrive;
using tcr::mbar_fence_init;
using tcr::mbar_init;
using tcr::mbar_wait;
using tcr::split_terms8;

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// One weight row's k 8q..8q+7 of a stage, decoded: d[s][0] = k 8q+4s+{0,1} (positions 2q..+1),
// d[s][1] = k 8q+4s+{2,3} (positions 2q+8..+9) — linear_tc's B fragment of that row. kFast (e4m3
// only): the short decode of linear_tc_wa_decode.h (the same values except for the NaN codes).
template <int kFmt, bool kFast = false>
__device__ __forceinline__ void load_row(const uint8_t* src, uint32_t (&d)[2][2]) {
  if constexpr (kFmt == 1 && kFast) {
    const uint2 v = *reinterpret_cast<const uint2*>(src);
    uint32_t p[4];
    e4m3x4_scaled_bf16(v.x, p[0], p[1]);
    e4m3x4_scaled_bf16(v.y, p[2], p[3]);
    d[0][0] = bf16x2_mul(p[0], kBf16x2Pow120);
    d[0][1] = bf16x2_mul(p[1], kBf16x2Pow120);
    d[1][0] = bf16x2_mul(p[2], kBf16x2Pow120);
    d[1][1] = bf16x2_mul(p[3], kBf16x2Pow120);
  } else if constexpr (kFmt == 0) {
    const uint4 v = *reinterpret_cast<const uint4*>(src);
    d[0][0] = v.x;
    d[0][1] = v.y;
    d[1][0] = v.z;
    d[1][1] = v.w;
  } else if constexpr (kFmt == 1) {
    const uint2 v = *reinterpret_cast<const uint2*>(src);
    d[0][0] = tc::e4m3x2_to_bf16x2(v.x);
    d[0][1] = tc::e4m3x2_to_bf16x2(v.x >> 16);
    d[1][0] = tc::e4m3x2_to_bf16x2(v.y);
    d[1][1] = tc::e4m3x2_to_bf16x2(v.y >> 16);
  } else {
    const uint32_t v = *reinterpret_cast<const uint32_t*>(src);
    tc::e2m1x4_to_bf16x4(v, d[0][0], d[0][1]);
    tc::e2m1x4_to_bf16x4(v >> 16, d[1][0], d[1][1]);
  }
}

// ---- Pieces shared by wa_kernel and tcw2::wa2_kernel (the same operations in the same order) ----

// One m16 weight tile's MMAs for one k32 stage: per accumulator k-step 0 terms x_2, x_1, x_0, then
// k-step 1 (linear_tc's order). d[h][ks][half]: rows g / g + 8 decoded; xb[nt][t]: token tile nt's
// B fragment of term t.
template <int NT>
__device__ __forceinline__ void tile_mmas(float (&part)[NT][4], const uint32_t (&d)[2][2][2],
                                          const uint4 (&xb)[NT][tcr::kTerms]) {
#pragma unroll
  for (int ks = 0; ks < 2; ++ks)
#pragma unroll
    for (int t = tcr::kTerms - 1; t >= 0; --t)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint4 xv = xb[nt][t];
        tc::mma_bf16(part[nt], d[0][ks][0], d[1][ks][0], d[0][ks][1], d[1][ks][1], ks ? xv.z : xv.x,
                     ks ? xv.w : xv.y);
      }
}

// The promotion at a scale block's last stage: acc = fmaf(partial, scale, acc), partial = 0; the
// scale of row (tt, h) from its raw word cur[tt][h] (ue8m0 byte or f32 bits; 0 for rows past the
// end, srow < 0; 1 unscaled).
// Then (scaled) the next block's words become current: cur = nxt.
template <int kTPW, int NT, bool kScaled>
__device__ __forceinline__ void promote(float (&acc)[kTPW][NT][4], float (&part)[kTPW][NT][4],
                                        const int32_t (&srow)[kTPW][2], uint32_t (&cur)[kTPW][2],
                                        const uint32_t (&nxt)[kTPW][2], int32_t scale_f32) {
#pragma unroll
  for (int tt = 0; tt < kTPW; ++tt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float sc = !kScaled ? 1.f
                       : srow[tt][h] < 0 ? 0.f
                       : scale_f32 ? __uint_as_float(cur[tt][h])
                                   : tc::ue8m0_f32(static_cast<uint8_t>(cur[tt][h]));
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          acc[tt][nt][2 * h + jj] = fmaf(part[tt][nt][2 * h + jj], sc, acc[tt][nt][2 * h + jj]);
          part[tt][nt][2 * h + jj] = 0.f;
        }
    }
  if constexpr (kScaled) {
#pragma unroll
    for (int tt = 0; tt < kTPW; ++tt)
#pragma unroll
      for (int h = 0; h < 2; ++h) cur[tt][h] = nxt[tt][h];
  }
}

// acc[tt][nt][c] (weight tile tt, token tile nt; c = 0, 1: row g, tokens 2q, 2q+1; c = 2, 3: row
// g + 8) and the block partials, zeroed.
template <int kTPW, int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[kTPW][NT][4], float (&part)[kTPW][NT][4]) {
#pragma unroll
  for (int tt = 0; tt < kTPW; ++tt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[tt][nt][c] = part[tt][nt][c] = 0.f;
}

// The scale-row offsets of the lane's weight rows wrow0 + 16·tt + g + 8h (-1 for rows >= row_end
// or unscaled weights; group rows start at grp_row0) and their raw words, zeroed.
template <int kTPW, bool kScaled>
__device__ __forceinline__ void init_scale_rows(int32_t (&srow)[kTPW][2], uint32_t (&cur)[kTPW][2],
                                                uint32_t (&nxt)[kTPW][2], int64_t wrow0, int64_t row_end,
                                                int64_t grp_row0, int64_t br, int64_t scale_cols, int g) {
#pragma unroll
  for (int tt = 0; tt < kTPW; ++tt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = wrow0 + tt * 16 + g + 8 * h;
      srow[tt][h] = kScaled && row < row_end ? static_cast<int32_t>(((grp_row0 + row) / br) * scale_cols) : -1;
      cur[tt][h] = nxt[tt][h] = 0;
    }
}

// Raw scale words of block `base` (the split's first block + b) for the lane's rows (0 where
// srow < 0): ue8m0 bytes or f32 bits.
template <int kTPW>
__device__ __forceinline__ void load_scale_words(uint32_t (&dst)[kTPW][2], const int32_t (&srow)[kTPW][2],
                                                 const void* scale, int32_t scale_f32, int32_t base) {
#pragma unroll
  for (int tt = 0; tt < kTPW; ++tt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t v = 0;
      if (srow[tt][h] >= 0) {
        const int32_t idx = srow[tt][h] + base;
        v = scale_f32 ? __float_as_uint(__ldg(static_cast<const float*>(scale) + idx))
                      : static_cast<uint32_t>(__ldg(static_cast<const uint8_t*>(scale) + idx));
      }
      dst[tt][h] = v;
    }
}

// The x split once per CTA: slot j's x (stages < nst, tokens < M, k < k_end; zeros elsewhere) →
// dst [SPS stages][kTerms][rows][32 k] bf16, one 8-k piece per thread and step (piece = (stage,
// token, 8-k group)); `rows` = the buffer's token rows (wa_kernel: kRows; wa2: M).
template <int SPS, int kThreads>
__device__ __forceinline__ void convert_terms(uint16_t* dst, const float* xsl, int xpf, int rows, int64_t M, int j,
                                              int nst, int64_t k_begin, int64_t k_end, int tid) {
  const int tstage = tcr::kTerms * rows * tc::kBK;
  for (int piece = tid; piece < SPS * rows * 4; piece += kThreads) {
    const int u = piece / (rows * 4), r = (piece / 4) % rows, c = piece % 4;
    const int i = j * SPS + u;
    uint4 t[tcr::kTerms];
    if (i < nst && r < M && k_begin + static_cast<int64_t>(i) * tc::kBK + 8 * c < k_end) {
      const float* xr = xsl + r * xpf + u * tc::kBK + 8 * c;
      tcr::split_terms8(*reinterpret_cast<const float4*>(xr), *reinterpret_cast<const float4*>(xr + 4), t);
    } else {
#pragma unroll
      for (int v = 0; v < tcr::kTerms; ++v) t[v] = make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int v = 0; v < tcr::kTerms; ++v)
      *reinterpret_cast<uint4*>(dst + u * tstage + (v * rows + r) * tc::kBK + 8 * c) = t[v];
  }
}

// acc → obase + m·ldo + row: token nt·8 + 2q + jj (< M), weight row wrow0 + 16·tt + g + 8h (< row_end).
template <int kTPW, int NT>
__device__ __forceinline__ void store_acc(float* obase, int64_t ldo, int64_t M, int64_t wrow0, int64_t row_end,
                                          int g, int q, const float (&acc)[kTPW][NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int64_t m = nt * 8 + 2 * q + jj;
      if (m >= M) continue;
      float* o = obase + m * ldo;
#pragma unroll
      for (int tt = 0; tt < kTPW; ++tt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = wrow0 + tt * 16 + g + 8 * h;
          if (row < row_end) o[row] = acc[tt][nt][2 * h + jj];
        }
    }
}

// The split sums in the kernel (session 13; wa_kernel and, since session 17, wr_kernel): the
// last CTA of a (group, bn-row tile) to get here sums the tile's splits, v = ws[0]; v = v + ws[z],
// z ascending — tcr::split_reduce_pdl's adds, so the same bits as the separate launch. p.out is
// the workspace [split][M][G·N] (this CTA's plane written), p.counters the tile counters (the
// last CTA resets its own to 0), p.final_out the product. Every thread of the CTA calls it.
// `tile` indexes the counters (the CTA's (group, tile) in grid order), `splits` counts the CTAs
// of the tile.
template <int kThreads>
__device__ __forceinline__ void last_cta_split_sums(const WaArgs& p, int64_t grp, int64_t n0,
                                                    int64_t bn, unsigned tile, unsigned splits) {
  __shared__ int last_flag;
  const int tid = threadIdx.x;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    const unsigned old = atomicAdd(p.counters + tile, 1u);
    const int last = old + 1 == splits;
    if (last) atomicExch(p.counters + tile, 0u);
    last_flag = last;
  }
  __syncthreads();
  if (!last_flag) return;
  __threadfence();
  const int64_t N = p.N, M = p.M;
  const int64_t rows = (N - n0 < bn ? N - n0 : bn);
  for (int64_t e = tid; e < M * rows; e += kThreads) {
    const int64_t off = (e / rows) * p.ldo + grp * N + n0 + e % rows;
    float v = 0.f;
#pragma unroll 1
    for (int64_t z0 = 0; z0 < splits; z0 += 16) {
      float t[16];
#pragma unroll
      for (int u = 0; u < 16; ++u)
        t[u] = z0 + u < splits ? __ldcg(p.out + (z0 + u) * p.split_stride + off) : 0.f;
#pragma unroll
      for (int u = 0; u < 16; ++u)
        if (z0 + u < splits) v = z0 + u == 0 ? t[u] : v + t[u];
    }
    p.final_out[off] = v;
  }
}

// kRows: 8 (M <= 8: one n8 token tile) or 16 (two). kTPW: m16 weight tiles per warp (1 or 2).
// kShare: x split into terms once per CTA (else per warp). The bits depend on none of them.
// kFast: e4m3 weights through the short decode (linear_tc_wa_decode.h). kWide: 256 bytes of each
// row per slot (2 CTAs per SM) instead of 64 (4 CTAs per SM). kDeep: 3 CTAs per SM with a deeper
// ring (~72 KB each) instead of 4 (~56 KB).
template <int kFmt, int kRows, int kTPW, bool kShare, bool kFast = false, bool kWide = false, bool kDeep = false>
__global__ void __launch_bounds__(kThreads, kWide ? 2 : kDeep ? 3 : 4)
wa_kernel(const WaArgs p) {
  using F = WFmt<kFmt>;
  using GM = WGeom<kFmt, kWide>;
  constexpr int SRB = F::kSRB, PITCH = GM::kPitch, SK = GM::kSK;
  constexpr int SPS = GM::kRowBytes / SRB;  // k32 stages per slot
  constexpr int NT = kRows / 8;             // n8 token tiles
  constexpr int BN = kRowsPerCta<kTPW>;  // weight rows per CTA
  constexpr int WR = kTPW * 16;             // weight rows per warp
  constexpr bool kScaled = kFmt != 0;
  constexpr int kWBytes = BN * PITCH;       // weight part of a slot
  constexpr int kTermStage = kTerms * kRows * tc::kBK;  // bf16 of one stage's terms
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);  // [kMaxSlots]: slot landed
  uint64_t* empty = full + kMaxSlots;                   // [kMaxSlots]: slot read by every warp
  uint8_t* ring = smem + kBarBytes;
  // kShare: [2][SPS stages][kTerms][kRows][32 k] bf16 after the ring.
  uint16_t* tbuf = reinterpret_cast<uint16_t*>(ring + static_cast<int64_t>(p.slots) * p.slot_bytes);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
  const int D = p.slots;
  const int64_t N = p.N, K = p.K, M = p.M;
  const int64_t ntiles = (N + BN - 1) / BN;
  const int64_t grp = blockIdx.x / ntiles;
  const int64_t n0 = (blockIdx.x % ntiles) * BN;
  const int64_t row_bytes = tc::w_bytes<kFmt>(K);
  const uint8_t* wb = p.w + row_bytes * grp * N;
  const float* xg = p.x + grp * K;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.k_split;
  const int64_t k_end = k_begin + p.k_split < K ? k_begin + p.k_split : K;
  const int nst = k_end > k_begin ? static_cast<int>((k_end - k_begin + tc::kBK - 1) / tc::kBK) : 0;
  const int nslots = k_end > k_begin ? static_cast<int>((k_end - k_begin + SK - 1) / SK) : 0;
  const int xpf = p.x_pitch / 4;  // floats per x row in a slot

  if (tid == 0) {
    for (int s = 0; s < D; ++s) {
      mbar_init(full + s, kThreads);
      mbar_init(empty + s, kWarps);
    }
    mbar_fence_init();
  }
  __syncthreads();

  // cp.async fill: a warp copies its own WR weight rows (lane l: 16-byte pieces l, l+32, ..;
  // a warp instruction covers 8 whole 64-byte row pieces), the CTA's threads share the x rows.
  constexpr int EPC = kFmt == 0 ? 8 : kFmt == 1 ? 16 : 32;  // weight elements per 16 bytes
  constexpr int WPR = GM::kRowBytes / 16;                     // 16-byte pieces per row and slot
  constexpr int XPR = SK * 4 / 16;                            // 16-byte pieces per x row and slot
  auto cp_w = [&](int j, int s) {
    const int64_t k0 = k_begin + static_cast<int64_t>(j) * SK;
    uint8_t* dst = ring + static_cast<int64_t>(s) * p.slot_bytes;
#pragma unroll
    for (int t = 0; t < WR * WPR / 32; ++t) {
      const int piece = lane + 32 * t, r = warp * WR + piece / WPR, c = piece % WPR;
      const int64_t k = k0 + c * EPC;
      if (n0 + r < N && k < k_end)
        tc::cp_async16(dst + r * PITCH + c * 16, wb + (n0 + r) * row_bytes + tc::w_bytes<kFmt>(k), 16);
    }
  };
  auto cp_x = [&](int j, int s) {
    const int64_t k0 = k_begin + static_cast<int64_t>(j) * SK;
    uint8_t* dst = ring + static_cast<int64_t>(s) * p.slot_bytes + kWBytes;
    for (int piece = tid; piece < M * XPR; piece += kThreads) {
      const int m = piece / XPR, c = piece % XPR;
      const int64_t k = k0 + 4 * c;
      if (k < k_end) tc::cp_async16(dst + m * p.x_pitch + c * 16, xg + m * p.lda + k, 16);
    }
  };

  // Prologue: every slot's weights before griddepcontrol.wait (immutable), x after it.
  const int pro = nslots < D ? nslots : D;
  for (int j = 0; j < pro; ++j) cp_w(j, j);

  // Scales of this lane's weight rows n0 + WR·warp + 16·tt + g + 8h, raw words of block b (cur)
  // and b + 1 (nxt), loaded two promotions ahead of their use.
  int32_t srow[kTPW][2];
  uint32_t cur[kTPW][2], nxt[kTPW][2];
  const int64_t wrow0 = n0 + warp * WR;
  init_scale_rows<kTPW, kScaled>(srow, cur, nxt, wrow0, N, grp * N, p.br, p.scale_cols, g);
  const int spb = static_cast<int>(p.bc / tc::kBK);          // stages per scale block
  const int nblk = (nst + spb - 1) / spb;
  const int32_t kb0 = static_cast<int32_t>(k_begin / p.bc);  // first scale block of this split
  auto load_scales = [&](int b, uint32_t (&dst)[kTPW][2]) {
    load_scale_words<kTPW>(dst, srow, p.scale, p.scale_f32, kb0 + b);
  };
  if constexpr (kScaled) {
    if (nblk > 0) load_scales(0, cur);
    if (nblk > 1) load_scales(1, nxt);
  }

  pdl::wait();  // x (and the outputs) belong to earlier kernels from here on
  // (A thread's arrival on slot j's barrier waits for all its copies so far, so slot 0 lands with
  // the whole prologue: the D slots were in flight together anyway.)
  for (int j = 0; j < pro; ++j) {
    cp_x(j, j);
    cp_async_arrive(full + j);
  }

  // kShare: slot j's x (stages < nst, tokens < M, k < k_end; zeros elsewhere) → term buffer
  // j & 1, one 8-k piece per thread and step (piece = (stage, token, 8-k group)).
  auto convert_slot = [&](int j, const float* xsl) {
    convert_terms<SPS, kThreads>(tbuf + (j & 1) * SPS * kTermStage, xsl, xpf, kRows, M, j, nst, k_begin, k_end, tid);
  };

  float acc[kTPW][NT][4], part[kTPW][NT][4];  // zero_acc's layout
  zero_acc<kTPW, NT>(acc, part);

  const bool warp_has_rows = wrow0 < N;  // warp-uniform
  int blk = 0, left = spb;               // current scale block, its stages still to run
  for (int j = 0, s = 0, ph = 0; j < nslots; ++j) {
    mbar_wait(full + s, static_cast<uint32_t>(ph));
    const uint8_t* wsl = ring + static_cast<int64_t>(s) * p.slot_bytes;
    const float* xsl = reinterpret_cast<const float*>(wsl + kWBytes);
    if constexpr (kShare) {
      convert_slot(j, xsl);
      // Every warp's terms of slot j written; every warp also done with slot j − 2's buffer.
      asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
    }
    const uint16_t* tsl = tbuf + (j & 1) * SPS * kTermStage;
#pragma unroll
    for (int u = 0; u < SPS; ++u) {
      const int i = j * SPS + u;  // stage index in the split
      if (i >= nst) break;
      const bool k_ok = k_begin + static_cast<int64_t>(i) * tc::kBK + 8 * q < k_end;
      if (warp_has_rows) {
        // B: token g (+ 8) of every term, k 8q..8q+7 (t.x / t.y k-step 0, t.z / t.w k-step 1).
        uint4 xb[NT][kTerms];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int m = nt * 8 + g;
          if (kShare && m < M) {
#pragma unroll
            for (int t = 0; t < kTerms; ++t)
              xb[nt][t] = *reinterpret_cast<const uint4*>(tsl + u * kTermStage + (t * kRows + m) * tc::kBK + 8 * q);
          } else if (!kShare && k_ok && m < M) {
            const float* xr = xsl + m * xpf + u * tc::kBK + 8 * q;
            split_terms8(*reinterpret_cast<const float4*>(xr), *reinterpret_cast<const float4*>(xr + 4), xb[nt]);
          } else {
#pragma unroll
            for (int t = 0; t < kTerms; ++t) xb[nt][t] = make_uint4(0u, 0u, 0u, 0u);
          }
        }
#pragma unroll
        for (int tt = 0; tt < kTPW; ++tt) {
          // A: weight rows g and g + 8 of tile tt, decoded (zero past N / the split's end).
          uint32_t d[2][2][2];  // [h: row g / g + 8][k-step][position half]
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = warp * WR + tt * 16 + g + 8 * h;
            if (k_ok && n0 + r < N) {
              load_row<kFmt, kFast>(wsl + r * PITCH + u * SRB + q * (SRB / 4), d[h]);
            } else {
              d[h][0][0] = d[h][0][1] = d[h][1][0] = d[h][1][1] = 0u;
            }
          }
          tile_mmas<NT>(part[tt], d, xb);  // linear_tc's order
        }
      }
      if (--left == 0 || i == nst - 1) {  // last stage of the block (or split): promote
        promote<kTPW, NT, kScaled>(acc, part, srow, cur, nxt, p.scale_f32);
        if (kScaled && blk + 2 < nblk) load_scales(blk + 2, nxt);
        ++blk;
        left = spb;
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + s);
    if (j + D < nslots) {  // refill this slot with slot j + D once every warp has read it
      mbar_wait(empty + s, static_cast<uint32_t>(ph));
      cp_w(j + D, s);
      cp_x(j + D, s);
      cp_async_arrive(full + s);
    }
    if (++s == D) s = 0, ph ^= 1;
  }
  pdl::launch_dependents();

  // acc → out (or split plane blockIdx.y of the workspace): token nt·8 + 2q + jj, weight row
  // wrow0 + 16·tt + g + 8h.
  store_acc<kTPW, NT>(p.out + blockIdx.y * p.split_stride + grp * N, p.ldo, M, wrow0, N, g, q, acc);
  if (p.counters != nullptr && gridDim.y > 1)
    last_cta_split_sums<kThreads>(p, grp, n0, BN, blockIdx.x, gridDim.y);
}

}  // namespace deepinfer::cuda::kernels::tcw

// ================================================================================================
// Session 10 (DEEPINFER_SMALL_LINEAR=x1..x4): "wa2" — the same per-element arithmetic as
// wa_kernel above (so linear_tc's bits), with a different memory side:
//  - a table of up to kMaxProj projections of one x (linear_multi under --batch-invariant: one
//    launch for wq_a + wkv + ...; a grouped linear is one entry with G groups), each with its own
//    N and its own k_split (the one linear_tc_k_split gives it alone, so every output keeps the
//    bits of a single linear_tc call);
//  - work items (projection, group, BN-row tile, split) taken by a persistent grid (CTA b: items
//    b, b + gridDim.x, ..); the ring keeps streaming across items: the refill after a slot is
//    the CTA's next slot in item order, also when that belongs to its next item, so a CTA has
//    D slots in flight from its first to its last byte (no per-CTA ramp, no waves);
//  - ring slots of kRowBytes (128) bytes of each weight row, stored unpadded: filled by 16-byte
//    cp.async with the chunks of row r XOR-swizzled by swz(r), or (kTma) by 2-D TMA boxes of one
//    k32 stage each (conflict-free fragment reads either way, no pitch padding);
//  - the split partials summed by the LAST CTA of a (group, tile) to finish (a per-tile counter,
//    fused reduce: no second launch), in split order with the same adds as
//    tcr::split_reduce_pdl (v = ws[0]; v = v + ws[z], z ascending), or by one separate reduce
//    launch over every projection (wa2_reduce_kernel: Wa2Options::fused_reduce off, or too few
//    counters). H200: the fused sums gain ~1 us at M = 1 and lose beyond (the last CTA's loads are
//    serial L2 round trips: wq_a M = 16 31 vs 16.5 us), so CudaBackend fuses them at M = 1 only.
// The counters live in a __device__ array (zero at module load; the last CTA of a tile resets its
// counter to 0), so two wa2 launches with fused reduce must not run concurrently on one device
// (stream order, PDL included, is fine: a launch touches counters only after griddepcontrol.wait).
// ================================================================================================
namespace deepinfer::cuda::kernels::tcw2 {

constexpr int kMaxProj = 8;
constexpr int kMaxSlots = 14;
constexpr int kBarBytes = 256;  // full[kMaxSlots], empty[kMaxSlots], the "last CTA" flag

struct Proj {
  const uint8_t* w = nullptr;   // [G·N, K] stored (group g: rows g·N ..)
  const void* scale = nullptr;  // [ceil(G·N / br), scale_cols] or null (bf16)
  const float* x = nullptr;     // row m of group g's x at x + m·lda + g·K
  float* out = nullptr;         // row m of group g's out at out + m·ldo + g·N
  float* ws = nullptr;          // split partial z at ws + z·plane (same row / column layout)
  int64_t N = 0, G = 1, lda = 0, ldo = 0, plane = 0, k_split = 0;
  int32_t splits = 1, ntiles = 0, scale_cols = 0;
  int32_t item0 = 0;            // first item of this projection
  int32_t counter0 = 0;         // first tile counter (fused reduce; splits > 1 only)
};

struct Args {
  // kTma: a 2-D tensor map per projection over its [G·N rows, K] weight (box: one k32 stage of
  // BN rows, no swizzle, L2 promotion 256 B), filled by the host.
  CUtensorMap tmap[kMaxProj];
  Proj p[kMaxProj];
  int32_t nproj = 0, items = 0;
  int64_t M = 0, K = 0, br = 1, bc = tc::kPromoteUnscaled;
  int32_t scale_f32 = 0;
  int32_t slots = 2, slot_bytes = 0, x_pitch = 0;
  int32_t fused = 0;             // 1: the last CTA of a tile sums its splits
  // 1 (one projection, G = 1, one split): CTA b takes the m16 row tiles
  // [b·T / grid, (b + 1)·T / grid) (T = ceil(N / 16)) in items of up to BN rows — balanced to one
  // tile instead of one BN-row item (the head: 1,010 items on 528 CTAs).
  int32_t balanced = 0;
  unsigned* counters = nullptr;  // fused: [total tiles with splits > 1], zero between launches
};

template <int kFmt> struct Fmt;
template <> struct Fmt<0> { static constexpr int kSRB = 64; };  // bf16: bytes of a row per k32 stage
template <> struct Fmt<1> { static constexpr int kSRB = 32; };  // e4m3
template <> struct Fmt<2> { static constexpr int kSRB = 16; };  // e2m1

// Swizzle of row r's 16-byte chunks: c → c ^ swz(r). A fragment read (row g / g + 8, stage u,
// lane q) touches chunk u·CPS + q·CPS/4 (CPS = chunks per stage and row); the rows one load
// phase reads (bf16: 2 rows of 64 bytes, e4m3: 4 of 32, e2m1: 8 of 16) land in distinct 16-byte
// bank groups of a 128-byte line.
template <int kFmt>
__device__ __forceinline__ int swz(int r) {
  constexpr int CPS = Fmt<kFmt>::kSRB / 16;
  return (r & (8 / CPS - 1)) * CPS;
}

// One work item: projection, group, split, BN-row tile.
struct Item {
  int pj;
  int64_t grp, z, n0, n_end, k_begin, k_end;  // rows [n0, n_end) of group grp, split z
  int nst, nslots;
};

// Items of CTA b: strided (b, b + grid, ..) or, balanced, its own row range.
__device__ __forceinline__ int cta_items(const Args& a, int bn) {
  if (a.balanced) {
    const int64_t T = (a.p[0].N + 15) / 16;
    const int64_t t0 = static_cast<int64_t>(blockIdx.x) * T / gridDim.x;
    const int64_t t1 = static_cast<int64_t>(blockIdx.x + 1) * T / gridDim.x;
    return static_cast<int>((16 * (t1 - t0) + bn - 1) / bn);
  }
  return blockIdx.x < static_cast<unsigned>(a.items)
             ? static_cast<int>((a.items - 1 - static_cast<int64_t>(blockIdx.x)) / gridDim.x + 1)
             : 0;
}

template <int BN, int SK>
__device__ __forceinline__ Item decode_item(const Args& a, int li) {
  if (a.balanced) {
    const Proj& P = a.p[0];
    const int64_t T = (P.N + 15) / 16;
    const int64_t t0 = static_cast<int64_t>(blockIdx.x) * T / gridDim.x;
    const int64_t t1 = static_cast<int64_t>(blockIdx.x + 1) * T / gridDim.x;
    Item it;
    it.pj = 0;
    it.grp = 0;
    it.z = 0;
    it.n0 = 16 * t0 + static_cast<int64_t>(li) * BN;
    const int64_t lim = 16 * t1 < P.N ? 16 * t1 : P.N;
    it.n_end = it.n0 + BN < lim ? it.n0 + BN : lim;
    it.k_begin = 0;
    it.k_end = a.K;
    it.nst = static_cast<int>((a.K + tc::kBK - 1) / tc::kBK);
    it.nslots = static_cast<int>((a.K + SK - 1) / SK);
    return it;
  }
  const int item = static_cast<int>(blockIdx.x) + li * static_cast<int>(gridDim.x);
  int pj = 0;
#pragma unroll 1
  while (pj + 1 < a.nproj && item >= a.p[pj + 1].item0) ++pj;
  const Proj& P = a.p[pj];
  const int64_t local = item - P.item0;
  const int64_t per_split = P.G * P.ntiles;
  Item it;
  it.pj = pj;
  it.z = local / per_split;
  const int64_t r = local % per_split;
  it.grp = r / P.ntiles;
  it.n0 = (r % P.ntiles) * BN;
  it.n_end = it.n0 + BN < P.N ? it.n0 + BN : P.N;
  it.k_begin = it.z * P.k_split;
  it.k_end = it.k_begin + P.k_split < a.K ? it.k_begin + P.k_split : a.K;
  it.nst = it.k_end > it.k_begin ? static_cast<int>((it.k_end - it.k_begin + tc::kBK - 1) / tc::kBK) : 0;
  it.nslots = it.k_end > it.k_begin ? static_cast<int>((it.k_end - it.k_begin + SK - 1) / SK) : 0;
  return it;
}

// kRows 8 / 16 (token tiles), kTPW m16 weight tiles per warp, kWarps warps, kRowBytes bytes of
// each row per slot (a multiple of 128), kMinCtas the launch bounds' CTAs per SM. The x split is
// once per CTA and slot (wa_kernel's kShare); the bits depend on none of these.
// One 2-D TMA box (k coordinate c0 in elements, row c1) into shared dst, completing on bar.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int32_t c0, int32_t c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          tc::smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(tc::smem_u32(bar))
      : "memory");
}

// kTma: the weight part of a slot filled by 2-D TMA boxes (thread 0: expect_tx, then one box
// per k32 stage: BN rows × SRB bytes, stored densely box after box — row r of stage u at
// u·BN·SRB + r·SRB, so the fragment reads are conflict-free without a swizzle) instead of every
// thread's 16-byte cp.async (H200: the head at 84 % of copy vs ~70 %: cp.async tops out at the
// per-SM limit on outstanding requests).
template <int kFmt, int kRows, int kTPW, int kWarps, int kRowBytes, int kMinCtas, bool kTma = false>
__global__ void __launch_bounds__(kWarps * 32, kMinCtas) wa2_kernel(const __grid_constant__ Args a) {
  constexpr int kThreads = kWarps * 32;
  constexpr int SRB = Fmt<kFmt>::kSRB;
  constexpr int SPS = kRowBytes / SRB;      // k32 stages per slot
  constexpr int SK = SPS * tc::kBK;         // k per slot
  constexpr int NT = kRows / 8;
  constexpr int WR = kTPW * 16;
  constexpr int BN = kWarps * WR;
  constexpr bool kScaled = kFmt != 0;
  constexpr int kWBytes = BN * kRowBytes;
  constexpr int EPC = kFmt == 0 ? 8 : kFmt == 1 ? 16 : 32;  // weight elements per 16 bytes
  constexpr int WPR = kRowBytes / 16;                       // 16-byte chunks per row and slot
  constexpr int XPR = SK * 4 / 16;                          // 16-byte pieces per x row and slot
  static_assert(kRowBytes % 128 == 0, "swizzle needs 8 chunks per row");
  static_assert((WR * WPR) % 32 == 0, "whole warp copies");
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem);
  uint64_t* empty = full + kMaxSlots;
  int* last_flag = reinterpret_cast<int*>(empty + kMaxSlots);
  uint8_t* ring = smem + kBarBytes;
  uint16_t* tbuf = reinterpret_cast<uint16_t*>(ring + static_cast<int64_t>(a.slots) * a.slot_bytes);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
  const int D = a.slots;
  const int64_t M = a.M;
  const int xpf = a.x_pitch / 4;
  // Term buffer [2][SPS stages][kTerms][M tokens][32 k] bf16 (only the M real tokens: the B
  // fragments of tokens >= M are zeros made in registers).
  const int tstage = tcr::kTerms * static_cast<int>(M) * tc::kBK;
  const int mrows = static_cast<int>(M);

  if (tid == 0) {
    for (int s = 0; s < D; ++s) {
      tcr::mbar_init(full + s, kThreads + (kTma ? 1 : 0));
      tcr::mbar_init(empty + s, kWarps);
    }
    tcr::mbar_fence_init();
  }
  __syncthreads();

  auto cp_w = [&](const Item& it, int j, int s) {
    if constexpr (kTma) {
      if (tid == 0) {
        uint8_t* dst = ring + static_cast<int64_t>(s) * a.slot_bytes;
        tcr::mbar_arrive_expect(full + s, static_cast<uint32_t>(kRowBytes * BN));
        const int32_t k0 = static_cast<int32_t>(it.k_begin + static_cast<int64_t>(j) * SK);
        const int32_t row = static_cast<int32_t>(it.grp * a.p[it.pj].N + it.n0);
#pragma unroll
        for (int u = 0; u < SPS; ++u) tma_load_2d(dst + u * BN * SRB, &a.tmap[it.pj], k0 + u * tc::kBK, row, full + s);
      }
      return;
    }
    const Proj& P = a.p[it.pj];
    const int64_t row_bytes = tc::w_bytes<kFmt>(a.K);
    const uint8_t* wb = P.w + row_bytes * (it.grp * P.N);
    const int64_t k0 = it.k_begin + static_cast<int64_t>(j) * SK;
    uint8_t* dst = ring + static_cast<int64_t>(s) * a.slot_bytes;
#pragma unroll
    for (int t = 0; t < WR * WPR / 32; ++t) {
      const int piece = lane + 32 * t, r = warp * WR + piece / WPR, c = piece % WPR;
      const int64_t k = k0 + c * EPC;
      if (it.n0 + r < it.n_end && k < it.k_end)
        tc::cp_async16(dst + r * kRowBytes + ((c ^ swz<kFmt>(r)) << 4),
                       wb + (it.n0 + r) * row_bytes + tc::w_bytes<kFmt>(k), 16);
    }
  };
  auto cp_x = [&](const Item& it, int j, int s) {
    const Proj& P = a.p[it.pj];
    const float* xg = P.x + it.grp * a.K;
    const int64_t k0 = it.k_begin + static_cast<int64_t>(j) * SK;
    uint8_t* dst = ring + static_cast<int64_t>(s) * a.slot_bytes + kWBytes;
    for (int piece = tid; piece < M * XPR; piece += kThreads) {
      const int m = piece / XPR, c = piece % XPR;
      const int64_t k = k0 + 4 * c;
      if (k < it.k_end) tc::cp_async16(dst + m * a.x_pitch + c * 16, xg + m * P.lda + k, 16);
    }
  };

  // Fill cursor: the CTA's slots in item order (CTA-local items 0 .. my_items - 1).
  const int my_items = cta_items(a, BN);
  int f_li = 0, f_j = 0;
  Item f_it;
  if (my_items > 0) f_it = decode_item<BN, SK>(a, 0);
  auto advance = [&](int& li, int& j, Item& it) {  // one slot on
    if (++j >= it.nslots) {
      j = 0;
#pragma unroll 1
      while (++li < my_items) {
        it = decode_item<BN, SK>(a, li);
        if (it.nslots > 0) break;
      }
    }
  };
  if (my_items > 0 && f_it.nslots == 0) {
    f_j = -1;
    advance(f_li, f_j, f_it);
  }
  // Prologue: the first D slots' weights before griddepcontrol.wait (immutable), their x after.
  const int st_li = f_li, st_j = f_j;
  const Item st_it = f_it;
  int pro = 0;
  for (; pro < D && f_li < my_items; ++pro) {
    cp_w(f_it, f_j, pro);
    advance(f_li, f_j, f_it);
  }
  pdl::wait();
  {
    int i2 = st_li, j2 = st_j;
    Item it2 = st_it;
    for (int s = 0; s < pro; ++s) {
      cp_x(it2, j2, s);
      tcr::cp_async_arrive(full + s);
      advance(i2, j2, it2);
    }
  }
  if (f_li >= my_items) pdl::launch_dependents();

  // kShare's x split of slot (item it, j) into term buffer `buf`.
  auto convert_slot = [&](const Item& it, int j, const float* xsl, int buf) {
    tcw::convert_terms<SPS, kThreads>(tbuf + buf * SPS * tstage, xsl, xpf, mrows, M, j, it.nst, it.k_begin,
                                      it.k_end, tid);
  };

  int c_seq = 0;  // slots consumed so far (ring slot c_seq % D, phase (c_seq / D) & 1)
#pragma unroll 1
  for (int li = 0; li < my_items; ++li) {
    const Item it = decode_item<BN, SK>(a, li);
    const Proj& P = a.p[it.pj];
    const int64_t N = P.N;
    const int64_t wrow0 = it.n0 + warp * WR;
    int32_t srow[kTPW][2];
    uint32_t cur[kTPW][2], nxt[kTPW][2];
    tcw::init_scale_rows<kTPW, kScaled>(srow, cur, nxt, wrow0, it.n_end, it.grp * N, a.br, P.scale_cols, g);
    const int spb = static_cast<int>(a.bc / tc::kBK);
    const int nblk = (it.nst + spb - 1) / spb;
    const int32_t kb0 = static_cast<int32_t>(it.k_begin / a.bc);
    auto load_scales = [&](int b, uint32_t (&dst)[kTPW][2]) {
      tcw::load_scale_words<kTPW>(dst, srow, P.scale, a.scale_f32, kb0 + b);
    };
    if constexpr (kScaled) {
      if (nblk > 0) load_scales(0, cur);
      if (nblk > 1) load_scales(1, nxt);
    }
    float acc[kTPW][NT][4], part[kTPW][NT][4];
    tcw::zero_acc<kTPW, NT>(acc, part);
    const bool warp_has_rows = wrow0 < it.n_end;
    int blk = 0, left = spb;
#pragma unroll 1
    for (int j = 0; j < it.nslots; ++j, ++c_seq) {
      const int s = c_seq % D;
      const uint32_t ph = static_cast<uint32_t>((c_seq / D) & 1);
      tcr::mbar_wait(full + s, ph);
      const uint8_t* wsl = ring + static_cast<int64_t>(s) * a.slot_bytes;
      const float* xsl = reinterpret_cast<const float*>(wsl + kWBytes);
      convert_slot(it, j, xsl, c_seq & 1);
      asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
      const uint16_t* tsl = tbuf + (c_seq & 1) * SPS * tstage;
#pragma unroll
      for (int u = 0; u < SPS; ++u) {
        const int i = j * SPS + u;
        if (i >= it.nst) break;
        const bool k_ok = it.k_begin + static_cast<int64_t>(i) * tc::kBK + 8 * q < it.k_end;
        if (warp_has_rows) {
          uint4 xb[NT][tcr::kTerms];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const int m = nt * 8 + g;
            if (m < M) {
#pragma unroll
              for (int t = 0; t < tcr::kTerms; ++t)
                xb[nt][t] = *reinterpret_cast<const uint4*>(tsl + u * tstage + (t * mrows + m) * tc::kBK + 8 * q);
            } else {
#pragma unroll
              for (int t = 0; t < tcr::kTerms; ++t) xb[nt][t] = make_uint4(0u, 0u, 0u, 0u);
            }
          }
#pragma unroll
          for (int tt = 0; tt < kTPW; ++tt) {
            uint32_t d[2][2][2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = warp * WR + tt * 16 + g + 8 * h;
              if (k_ok && it.n0 + r < it.n_end) {
                const int byte = u * SRB + q * (SRB / 4);
                if constexpr (kTma) {
                  tcw::load_row<kFmt>(wsl + (u * BN + r) * SRB + q * (SRB / 4), d[h]);
                } else {
                  const int chunk = (byte >> 4) ^ swz<kFmt>(r);
                  tcw::load_row<kFmt>(wsl + r * kRowBytes + (chunk << 4) + (byte & 15), d[h]);
                }
              } else {
                d[h][0][0] = d[h][0][1] = d[h][1][0] = d[h][1][1] = 0u;
              }
            }
            tcw::tile_mmas<NT>(part[tt], d, xb);
          }
        }
        if (--left == 0 || i == it.nst - 1) {
          tcw::promote<kTPW, NT, kScaled>(acc, part, srow, cur, nxt, a.scale_f32);
          if (kScaled && blk + 2 < nblk) load_scales(blk + 2, nxt);
          ++blk;
          left = spb;
        }
      }
      __syncwarp();
      if (lane == 0) tcr::mbar_arrive(empty + s);
      if (f_li < my_items) {  // refill this slot with the CTA's next slot once every warp read it
        tcr::mbar_wait(empty + s, ph);
        cp_w(f_it, f_j, s);
        cp_x(f_it, f_j, s);
        tcr::cp_async_arrive(full + s);
        advance(f_li, f_j, f_it);
        if (f_li >= my_items) pdl::launch_dependents();
      }
    }

    // acc → out (one split) or split plane z of the workspace.
    const bool split = P.splits > 1;
    tcw::store_acc<kTPW, NT>((split ? P.ws + it.z * P.plane : P.out) + it.grp * N, P.ldo, M, wrow0, it.n_end, g, q,
                             acc);
    if (split && a.fused) {
      // The last CTA of this (group, tile) to get here sums the tile's splits in split order.
      __threadfence();
      __syncthreads();
      if (tid == 0) {
        unsigned* ctr = a.counters + P.counter0 + it.grp * P.ntiles + it.n0 / BN;
        const unsigned old = atomicAdd(ctr, 1u);
        const int last = old + 1 == static_cast<unsigned>(P.splits);
        if (last) atomicExch(ctr, 0u);
        *last_flag = last;
      }
      __syncthreads();
      if (*last_flag) {
        __threadfence();
        const int64_t rows = it.n_end - it.n0;
        const float* wsb = P.ws + it.grp * N + it.n0;
        float* ob = P.out + it.grp * N + it.n0;
        // The loads of up to 32 splits issued before their adds (one L2 round trip for the
        // V4 plans' <= 32 splits); the adds in split order.
        for (int64_t e = tid; e < M * rows; e += kThreads) {
          const int64_t m = e / rows, r = e % rows, off = m * P.ldo + r;
          float v = 0.f;
#pragma unroll 1
          for (int32_t z0 = 0; z0 < P.splits; z0 += 32) {
            float t[32];
#pragma unroll
            for (int u = 0; u < 32; ++u) t[u] = z0 + u < P.splits ? __ldcg(wsb + (z0 + u) * P.plane + off) : 0.f;
#pragma unroll
            for (int u = 0; u < 32; ++u)
              if (z0 + u < P.splits) v = z0 + u == 0 ? t[u] : v + t[u];
          }
          ob[off] = v;
        }
      }
      __syncthreads();  // last_flag is rewritten by the next item
    }
  }
  pdl::launch_dependents();
}

// The split sums of every projection with splits > 1 in one launch (when not fused): entry e
// covers blocks [b0[e], b0[e + 1]) over its M·G·N contiguous elements; the adds of
// tcr::split_reduce_pdl (v = ws[0]; v = v + ws[z], z ascending).
struct ReduceArgs {
  const float* ws[kMaxProj];
  float* out[kMaxProj];
  int64_t n[kMaxProj];
  int32_t splits[kMaxProj];
  int32_t b0[kMaxProj + 1];
  int32_t count = 0;
};

template <int kUnused = 0>
__global__ void __launch_bounds__(256) wa2_reduce_kernel(const __grid_constant__ ReduceArgs r) {
  pdl::wait();
  int e = 0;
  while (e + 1 < r.count && static_cast<int32_t>(blockIdx.x) >= r.b0[e + 1]) ++e;
  const int64_t i = static_cast<int64_t>(blockIdx.x - r.b0[e]) * blockDim.x + threadIdx.x;
  if (i >= r.n[e]) return;
  const float* ws = r.ws[e];
  float v = 0.f;
  for (int64_t z0 = 0; z0 < r.splits[e]; z0 += 8) {
    float t[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) t[u] = z0 + u < r.splits[e] ? __ldg(ws + (z0 + u) * r.n[e] + i) : 0.f;
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (z0 + u < r.splits[e]) v = z0 + u == 0 ? t[u] : v + t[u];
  }
  r.out[e][i] = v;
}

}  // namespace deepinfer::cuda::kernels::tcw2
