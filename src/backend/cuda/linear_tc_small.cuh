// Small-M tensor-core product with linear_tc's bits, v2 ("small"; session 8; docs/cuda.md
// "Small-M products with linear_tc's bits, v2"). M = 1..64.
//
// The arithmetic is linear_tc's (linear_tc.cuh), operand for operand, per output element (m, n):
//  - x row m at row m mod 16 of m16 fragment m / 16 (rows ≥ M zero, as linear_tc's BM tile),
//    weight row n at MMA column n mod 8 (n8 fragments start at multiples of 8), the same
//    mma.sync m16n8k16 bf16 → fp32 (tc::mma_bf16), A = x terms, B = decoded weights;
//  - the same x split into 3 bf16 terms (split_terms8 below = linear_tc's convert(), elementwise),
//    the same exact weight decoders, the same k permutation inside a k32 stage (lane q holds k
//    8q..8q+7; k-step s takes 8q+4s+{0,1} → positions 2q..2q+1, 8q+4s+{2,3} → 2q+8..+9);
//  - per stage: k-step 0 then 1, terms x_2, x_1, x_0, into the block partial; zero operands past
//    the split's end / K (A and B both, in 8-k granules) and past row N (B);
//  - per scale block of bc columns counted from the split start: partial from zero, then
//    acc = fmaf(partial, scale, acc) at the block's last stage or the split's last stage, scale
//    decoded as linear_tc does (f32 bits or tc::ue8m0_f32; 0 past N; 1.f unscaled);
//  - the caller's k_split (linear_tc_k_split's plan) and partials [split][M][G·N] summed in split
//    order (v = ws[0]; v = v + ws[z], z ascending — tcr::split_reduce_pdl's adds, tc_ring.cuh).
// So every MMA sees the A, B, C registers of the same stage / k-step / term in linear_tc, and
// every fp32 operation after it is the same: equal bits by construction.
//
// The memory side (what differs from linear_tc and from session 7's gemv_tc):
//  - a CTA (4 warps) owns 128 weight rows × one split; its weights and x stream through a ring of
//    D slots in shared memory, each with a "full" and an "empty" mbarrier: a slot holds 64 bytes
//    of each of the 128 rows (1 / 2 / 4 k32 stages of bf16 / e4m3 / e2m1) plus the M fp32 x rows
//    of those k. Filled either by 16-byte cp.async from every thread (default: each warp its own
//    rows, arriving through cp.async.mbarrier.arrive.noinc) or by TMA 1-D bulk copies from warp 0
//    (kBulk: one per row and slot, completion counted in bytes); a slot is refilled once all 4
//    warps have arrived on its "empty" barrier. D is chosen on the host so that 3–4 CTAs fit per
//    SM: ~64–160 KB of weights in flight per SM;
//  - no CTA-wide barrier in the loop: warps wait on the slot's "full" mbarrier, read their B
//    fragments (conflict-free: padded row pitch) and their x rows from shared memory, split x into
//    terms in registers (each warp for itself) and run linear_tc's MMAs;
//  - programmatic dependent launch (pdl.cuh): the weight copies of the first D slots (and the
//    scales) are issued before griddepcontrol.wait, the x copies after it; the split reduction is
//    a PDL launch too (its launch overlaps this kernel's tail).
#pragma once

#include "backend/cuda/linear_tc.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tc_ring.cuh"

namespace deepinfer::cuda::kernels::tcs {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kNF = 4;                 // n8 fragments per warp
constexpr int kBN = kWarps * kNF * 8;  // weight rows per CTA (128)
constexpr int kSlotRowBytes = 64;      // bytes of each weight row per ring slot (kWide: 256)
constexpr int kWideSlotRowBytes = 256;
constexpr int kMaxSlots = 8;
constexpr int kBarBytes = 128;         // mbarriers at the start of shared memory
constexpr int kTerms = 3;

// Per format: bytes of one row per k32 stage, padded row pitch in a slot (so the 8 rows a
// quarter / half / whole warp reads at once fall in distinct banks), k per slot.
template <int kFmt> struct SFmt;
template <> struct SFmt<0> { static constexpr int kSRB = 64, kPitch = 64, kSK = 32; };   // bf16
template <> struct SFmt<1> { static constexpr int kSRB = 32, kPitch = 96, kSK = 64; };   // e4m3
template <> struct SFmt<2> { static constexpr int kSRB = 16, kPitch = 80, kSK = 128; };  // e2m1
// Wide slots (256 bytes of each row: longer runs per DRAM page): pitch 256 + kSRB (≡ kSRB mod 128,
// the same bank pattern), k per slot 8× kSRB's 32.
template <int kFmt, bool kWide>
struct SGeom {
  static constexpr int kRowBytes = kWide ? kWideSlotRowBytes : kSlotRowBytes;
  static constexpr int kPitch = kWide ? kWideSlotRowBytes + SFmt<kFmt>::kSRB : SFmt<kFmt>::kPitch;
  static constexpr int kSK = kRowBytes / SFmt<kFmt>::kSRB * 32;
};

struct SmallArgs {
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

// mbarrier / bulk copy wrappers and the x split into terms: tc_ring.cuh (shared with linear_tc_wa).
using tcr::bulk_g2s;
using tcr::cp_async_arrive;
using tcr::mbar_arrive;
using tcr::mbar_arrive_expect;
using tcr::mbar_fence_init;
using tcr::mbar_init;
using tcr::mbar_wait;
using tcr::split_terms8;

// B fragments of one stage for fragment rows of this lane from the slot (linear_tc's compute()).
template <int kFmt>
__device__ __forceinline__ void load_b(const uint8_t* src, uint32_t (&b)[2][2]) {
  if constexpr (kFmt == 0) {
    const uint4 v = *reinterpret_cast<const uint4*>(src);
    b[0][0] = v.x;
    b[0][1] = v.y;
    b[1][0] = v.z;
    b[1][1] = v.w;
  } else if constexpr (kFmt == 1) {
    const uint2 v = *reinterpret_cast<const uint2*>(src);
    b[0][0] = tc::e4m3x2_to_bf16x2(v.x);
    b[0][1] = tc::e4m3x2_to_bf16x2(v.x >> 16);
    b[1][0] = tc::e4m3x2_to_bf16x2(v.y);
    b[1][1] = tc::e4m3x2_to_bf16x2(v.y >> 16);
  } else {
    const uint32_t v = *reinterpret_cast<const uint32_t*>(src);
    tc::e2m1x4_to_bf16x4(v, b[0][0], b[0][1]);
    tc::e2m1x4_to_bf16x4(v >> 16, b[1][0], b[1][1]);
  }
}

// CTAs per SM the registers are sized for (launch bounds; the host sizes the ring to match): 4 at
// M ≤ 8 and for bf16 at M ≤ 16 (105 registers), 3 for e4m3 / e2m1 at M ≤ 16 (128 would spill),
// 2 above; 2 with 256-byte slots (kWide: ≥ 76 KB of ring per CTA, so no more fit anyway).
template <int kFmt, int kRows>
constexpr int kCtasPerSm = kRows <= 8 || (kFmt == 0 && kRows <= 16) ? 4 : kRows <= 16 ? 3 : 2;

// kRows: 8 (M ≤ 8: A rows 8..15 are zero registers), 16, 32 or 64 (kRows / 16 m16 fragments).
// kBulk: how slots are filled — true: TMA 1-D bulk copies issued by warp 0 (one per row and slot,
// completion counted in bytes on the slot's mbarrier); false: 16-byte cp.async by every thread
// (a warp copies its own 32 weight rows, the CTA's threads share the x rows), each thread then
// arriving on the mbarrier through cp.async.mbarrier.arrive.noinc. kShare: the CTA's threads
// split a landed slot's x into bf16 terms once, into a double-buffered term buffer after the
// ring (one named barrier per slot), and warps read their A fragments from it; otherwise every
// warp splits the x it needs itself (4× the conversion work, no barrier). The bits depend on
// neither. kWide: slots of 256 bytes per row instead of 64 (cp.async fill only).
template <int kFmt, int kRows, bool kBulk, bool kShare, bool kWide>
__global__ void __launch_bounds__(kThreads, kWide ? 2 : kCtasPerSm<kFmt, kRows>)
small_kernel(const SmallArgs p) {
  using F = SFmt<kFmt>;
  using GM = SGeom<kFmt, kWide>;
  constexpr int SRB = F::kSRB, PITCH = GM::kPitch, SK = GM::kSK;
  constexpr int SPS = GM::kRowBytes / SRB;  // k32 stages per slot
  constexpr int MF = kRows <= 16 ? 1 : kRows / 16;
  constexpr int HALVES = kRows == 8 ? 1 : 2;
  constexpr bool kScaled = kFmt != 0;
  constexpr int kWBytes = kBN * PITCH;  // weight part of a slot
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
  const int64_t ntiles = (N + kBN - 1) / kBN;
  const int64_t grp = blockIdx.x / ntiles;
  const int64_t n0 = (blockIdx.x % ntiles) * kBN;
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
      // bulk: warp 0's 32 lanes arrive (with their byte counts); cp.async: every thread.
      mbar_init(full + s, kBulk ? 32 : kThreads);
      mbar_init(empty + s, kWarps);  // lane 0 of every warp
    }
    mbar_fence_init();
  }
  __syncthreads();

  // Producer (warp 0): lane l copies weight rows l, l+32, l+64, l+96 and x rows l, l+32 (< M).
  auto slot_cols = [&](int j) -> int64_t {  // valid k of slot j (a multiple of 8)
    const int64_t k0 = k_begin + static_cast<int64_t>(j) * SK;
    return (k0 + SK < k_end ? k0 + SK : k_end) - k0;
  };
  auto lane_bytes = [&](int j) -> uint32_t {
    const int64_t kn = slot_cols(j);
    uint32_t b = 0;
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (n0 + lane + 32 * u < N) b += static_cast<uint32_t>(tc::w_bytes<kFmt>(kn));
#pragma unroll
    for (int u = 0; u < 2; ++u)
      if (lane + 32 * u < M) b += static_cast<uint32_t>(4 * kn);
    return b;
  };
  auto copy_w = [&](int j, int s) {
    const int64_t k0 = k_begin + static_cast<int64_t>(j) * SK, kn = slot_cols(j);
    uint8_t* dst = ring + static_cast<int64_t>(s) * p.slot_bytes;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int r = lane + 32 * u;
      if (n0 + r < N)
        bulk_g2s(dst + r * PITCH, wb + (n0 + r) * row_bytes + tc::w_bytes<kFmt>(k0),
                 static_cast<uint32_t>(tc::w_bytes<kFmt>(kn)), full + s);
    }
  };
  auto copy_x = [&](int j, int s) {
    const int64_t k0 = k_begin + static_cast<int64_t>(j) * SK, kn = slot_cols(j);
    uint8_t* dst = ring + static_cast<int64_t>(s) * p.slot_bytes + kWBytes;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int m = lane + 32 * u;
      if (m < M)
        bulk_g2s(dst + m * p.x_pitch, xg + m * p.lda + k0, static_cast<uint32_t>(4 * kn), full + s);
    }
  };

  // cp.async fill: a warp's own weight rows (lane l: 16-byte pieces l, l+32, .. of the warp's
  // 32 rows × 64 bytes; a warp instruction covers 8 whole 64-byte row pieces), the x rows shared
  // by the CTA's threads.
  constexpr int EPC = kFmt == 0 ? 8 : kFmt == 1 ? 16 : 32;  // weight elements per 16 bytes
  constexpr int WPR = GM::kRowBytes / 16;                     // 16-byte pieces per row and slot
  constexpr int XPR = SK * 4 / 16;                            // 16-byte pieces per x row and slot
  auto cp_w = [&](int j, int s) {
    const int64_t k0 = k_begin + static_cast<int64_t>(j) * SK;
    uint8_t* dst = ring + static_cast<int64_t>(s) * p.slot_bytes;
#pragma unroll
    for (int t = 0; t < kNF * 8 * WPR / 32; ++t) {
      const int piece = lane + 32 * t, r = warp * (kNF * 8) + piece / WPR, c = piece % WPR;
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
  if constexpr (kBulk) {
    if (warp == 0) {
      for (int j = 0; j < pro; ++j) {
        mbar_arrive_expect(full + j, lane_bytes(j));
        copy_w(j, j);
      }
    }
  } else {
    for (int j = 0; j < pro; ++j) cp_w(j, j);
  }

  // Scales of this lane's output columns n0 + 32·warp + 8f + 2q + jj (linear_tc's srow), raw
  // words of block b (cur) and b + 1 (nxt), loaded two promotions ahead of their use.
  int32_t srow[kNF][2];
  uint32_t cur[kNF][2], nxt[kNF][2];
  const int64_t ncol0 = n0 + warp * (kNF * 8);
#pragma unroll
  for (int f = 0; f < kNF; ++f)
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int64_t col = ncol0 + f * 8 + 2 * q + jj;
      srow[f][jj] = kScaled && col < N ? static_cast<int32_t>(((grp * N + col) / p.br) * p.scale_cols) : -1;
      cur[f][jj] = nxt[f][jj] = 0;
    }
  const int spb = static_cast<int>(p.bc / tc::kBK);          // stages per scale block
  const int nblk = (nst + spb - 1) / spb;
  const int32_t kb0 = static_cast<int32_t>(k_begin / p.bc);  // first scale block of this split
  auto load_scales = [&](int b, uint32_t (&dst)[kNF][2]) {
#pragma unroll
    for (int f = 0; f < kNF; ++f)
#pragma unroll
      for (int jj = 0; jj < 2; ++jj) {
        uint32_t v = 0;
        if (srow[f][jj] >= 0) {
          const int32_t idx = srow[f][jj] + kb0 + b;
          v = p.scale_f32 ? __float_as_uint(__ldg(static_cast<const float*>(p.scale) + idx))
                          : static_cast<uint32_t>(__ldg(static_cast<const uint8_t*>(p.scale) + idx));
        }
        dst[f][jj] = v;
      }
  };
  if constexpr (kScaled) {
    if (nblk > 0) load_scales(0, cur);
    if (nblk > 1) load_scales(1, nxt);
  }

  pdl::wait();  // x (and the outputs) belong to earlier kernels from here on
  if constexpr (kBulk) {
    if (warp == 0)
      for (int j = 0; j < pro; ++j) copy_x(j, j);
  } else {
    // (A thread's arrival on slot j's barrier waits for all its copies so far, so slot 0 lands
    // with the whole prologue: the D slots were in flight together anyway.)
    for (int j = 0; j < pro; ++j) {
      cp_x(j, j);
      cp_async_arrive(full + j);
    }
  }

  // kShare: slot j's x (stages < nst, rows < M, k < k_end; zeros elsewhere) → term buffer j & 1,
  // one 8-k piece per thread and step (piece = (stage, row, 8-k group)).
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

  float acc[MF][kNF][4], part[MF][kNF][4];
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int f = 0; f < kNF; ++f)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[mf][f][c] = part[mf][f][c] = 0.f;

  const bool warp_has_rows = ncol0 < N;  // warp-uniform
  int blk = 0, left = spb;               // current scale block, its stages still to run
  for (int j = 0, s = 0, ph = 0; j < nslots; ++j) {
    mbar_wait(full + s, static_cast<uint32_t>(ph));
    const uint8_t* wsl = ring + static_cast<int64_t>(s) * p.slot_bytes;
    const float* xsl = reinterpret_cast<const float*>(wsl + kWBytes);
    if constexpr (kShare) {
      convert_slot(j, xsl);
      // Every warp's terms of slot j written; every warp also done with slot j − 1's buffer.
      asm volatile("bar.sync 1, %0;" ::"n"(kThreads) : "memory");
    }
    const uint16_t* tsl = tbuf + (j & 1) * SPS * kTermStage;
#pragma unroll
    for (int u = 0; u < SPS; ++u) {
      const int i = j * SPS + u;  // stage index in the split
      if (i >= nst) break;
      const bool k_ok = k_begin + static_cast<int64_t>(i) * tc::kBK + 8 * q < k_end;
      if (warp_has_rows) {
        uint32_t b[kNF][2][2];
#pragma unroll
        for (int f = 0; f < kNF; ++f) {
          const int r = warp * (kNF * 8) + f * 8 + g;
          if (k_ok && n0 + r < N) {
            load_b<kFmt>(wsl + r * PITCH + u * SRB + q * (SRB / 4), b[f]);
          } else {
            b[f][0][0] = b[f][0][1] = b[f][1][0] = b[f][1][1] = 0u;
          }
        }
#pragma unroll
        for (int mf = 0; mf < MF; ++mf) {
          uint4 a[HALVES][kTerms];
#pragma unroll
          for (int h = 0; h < HALVES; ++h) {
            const int m = mf * 16 + h * 8 + g;
            if (kShare && m < M) {
#pragma unroll
              for (int t = 0; t < kTerms; ++t)
                a[h][t] = *reinterpret_cast<const uint4*>(tsl + u * kTermStage + (t * kRows + m) * tc::kBK + 8 * q);
            } else if (!kShare && k_ok && m < M) {
              const float* xr = xsl + m * xpf + u * tc::kBK + 8 * q;
              split_terms8(*reinterpret_cast<const float4*>(xr), *reinterpret_cast<const float4*>(xr + 4), a[h]);
            } else {
#pragma unroll
              for (int t = 0; t < kTerms; ++t) a[h][t] = make_uint4(0u, 0u, 0u, 0u);
            }
          }
          // Per accumulator: k-step 0 terms x_2, x_1, x_0, then k-step 1 (linear_tc's order).
#pragma unroll
          for (int ks = 0; ks < 2; ++ks)
#pragma unroll
            for (int t = kTerms - 1; t >= 0; --t)
#pragma unroll
              for (int f = 0; f < kNF; ++f) {
                const uint4 r0 = a[0][t];
                const uint4 r8 = HALVES == 2 ? a[HALVES - 1][t] : make_uint4(0u, 0u, 0u, 0u);
                tc::mma_bf16(part[mf][f], ks ? r0.z : r0.x, ks ? r8.z : r8.x, ks ? r0.w : r0.y,
                             ks ? r8.w : r8.y, b[f][ks][0], b[f][ks][1]);
              }
        }
      }
      if (--left == 0 || i == nst - 1) {  // last stage of the block (or split): promote
#pragma unroll
        for (int f = 0; f < kNF; ++f)
#pragma unroll
          for (int jj = 0; jj < 2; ++jj) {
            const float sc = !kScaled ? 1.f
                             : srow[f][jj] < 0 ? 0.f
                             : p.scale_f32 ? __uint_as_float(cur[f][jj])
                                           : tc::ue8m0_f32(static_cast<uint8_t>(cur[f][jj]));
#pragma unroll
            for (int mf = 0; mf < MF; ++mf)
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                acc[mf][f][2 * h + jj] = fmaf(part[mf][f][2 * h + jj], sc, acc[mf][f][2 * h + jj]);
                part[mf][f][2 * h + jj] = 0.f;
              }
          }
        if constexpr (kScaled) {
#pragma unroll
          for (int f = 0; f < kNF; ++f)
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) cur[f][jj] = nxt[f][jj];
          if (blk + 2 < nblk) load_scales(blk + 2, nxt);
        }
        ++blk;
        left = spb;
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + s);
    if (j + D < nslots) {  // refill this slot with slot j + D once every warp has read it
      if constexpr (kBulk) {
        if (warp == 0) {
          mbar_wait(empty + s, static_cast<uint32_t>(ph));
          mbar_arrive_expect(full + s, lane_bytes(j + D));
          copy_w(j + D, s);
          copy_x(j + D, s);
        }
      } else {
        mbar_wait(empty + s, static_cast<uint32_t>(ph));
        cp_w(j + D, s);
        cp_x(j + D, s);
        cp_async_arrive(full + s);
      }
    }
    if (++s == D) s = 0, ph ^= 1;
  }
  pdl::launch_dependents();

  // acc → out (or split plane blockIdx.y of the workspace): rows 16mf + g (+ 8), columns 2q, 2q+1.
#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int h = 0; h < HALVES; ++h) {
      const int64_t m = mf * 16 + h * 8 + g;
      if (m >= M) continue;
      float* o = p.out + blockIdx.y * p.split_stride + m * p.ldo + grp * N;
#pragma unroll
      for (int f = 0; f < kNF; ++f)
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          const int64_t col = ncol0 + f * 8 + 2 * q + jj;
          if (col < N) o[col] = acc[mf][f][2 * h + jj];
        }
    }
}

// The split reduction: tcr::split_reduce_pdl (tc_ring.cuh).

}  // namespace deepinfer::cuda::kernels::tcs
