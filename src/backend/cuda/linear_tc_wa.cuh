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
#pragma unroll
  for (int tt = 0; tt < kTPW; ++tt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = wrow0 + tt * 16 + g + 8 * h;
      srow[tt][h] = kScaled && row < N ? static_cast<int32_t>(((grp * N + row) / p.br) * p.scale_cols) : -1;
      cur[tt][h] = nxt[tt][h] = 0;
    }
  const int spb = static_cast<int>(p.bc / tc::kBK);          // stages per scale block
  const int nblk = (nst + spb - 1) / spb;
  const int32_t kb0 = static_cast<int32_t>(k_begin / p.bc);  // first scale block of this split
  auto load_scales = [&](int b, uint32_t (&dst)[kTPW][2]) {
#pragma unroll
    for (int tt = 0; tt < kTPW; ++tt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t v = 0;
        if (srow[tt][h] >= 0) {
          const int32_t idx = srow[tt][h] + kb0 + b;
          v = p.scale_f32 ? __float_as_uint(__ldg(static_cast<const float*>(p.scale) + idx))
                          : static_cast<uint32_t>(__ldg(static_cast<const uint8_t*>(p.scale) + idx));
        }
        dst[tt][h] = v;
      }
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
    uint16_t* dst = tbuf + (j & 1) * SPS * kTermStage;
    for (int piece = tid; piece < SPS * kRows * 4; piece += kThreads) {
      const int u = piece / (kRows * 4), r = (piece / 4) % kRows, c = piece % 4;
      const int i = j * SPS + u;
      uint4 t[kTerms];
      if (i < nst && r < M && k_begin + static_cast<int64_t>(i) * tc::kBK + 8 * c < k_end) {
        const float* xr = xsl + r * xpf + u * tc::kBK + 8 * c;
        split_terms8(*reinterpret_cast<const float4*>(xr), *reinterpret_cast<const float4*>(xr + 4), t);
      } else {
#pragma unroll
        for (int v = 0; v < kTerms; ++v) t[v] = make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int v = 0; v < kTerms; ++v)
        *reinterpret_cast<uint4*>(dst + u * kTermStage + (v * kRows + r) * tc::kBK + 8 * c) = t[v];
    }
  };

  // acc[tt][nt][c]: weight tile tt, token tile nt; c = 0, 1: row g, tokens 2q, 2q+1; c = 2, 3:
  // row g + 8.
  float acc[kTPW][NT][4], part[kTPW][NT][4];
#pragma unroll
  for (int tt = 0; tt < kTPW; ++tt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[tt][nt][c] = part[tt][nt][c] = 0.f;

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
          // Per accumulator: k-step 0 terms x_2, x_1, x_0, then k-step 1 (linear_tc's order).
#pragma unroll
          for (int ks = 0; ks < 2; ++ks)
#pragma unroll
            for (int t = kTerms - 1; t >= 0; --t)
#pragma unroll
              for (int nt = 0; nt < NT; ++nt) {
                const uint4 xv = xb[nt][t];
                tc::mma_bf16(part[tt][nt], d[0][ks][0], d[1][ks][0], d[0][ks][1], d[1][ks][1],
                             ks ? xv.z : xv.x, ks ? xv.w : xv.y);
              }
        }
      }
      if (--left == 0 || i == nst - 1) {  // last stage of the block (or split): promote
#pragma unroll
        for (int tt = 0; tt < kTPW; ++tt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float sc = !kScaled ? 1.f
                             : srow[tt][h] < 0 ? 0.f
                             : p.scale_f32 ? __uint_as_float(cur[tt][h])
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
          if (blk + 2 < nblk) load_scales(blk + 2, nxt);
        }
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
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int64_t m = nt * 8 + 2 * q + jj;
      if (m >= M) continue;
      float* o = p.out + blockIdx.y * p.split_stride + m * p.ldo + grp * N;
#pragma unroll
      for (int tt = 0; tt < kTPW; ++tt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t row = wrow0 + tt * 16 + g + 8 * h;
          if (row < N) o[row] = acc[tt][nt][2 * h + jj];
        }
    }
}

}  // namespace deepinfer::cuda::kernels::tcw
