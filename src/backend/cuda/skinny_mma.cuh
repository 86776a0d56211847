// Session 9 (helper skinny, issue 7): the default-mode small-M dense product on tensor cores,
// "skinny_mma". out[m, n] = Σ_k x[m, k] · deq(W[n, k]) for M = 1..16 fp32 rows of x and a dense
// weight stored as e4m3 with 128-column block scales (ue8m0 or f32) or as bf16. See docs/cuda.md
// "Small-M dense products on tensor cores (skinny_mma)" for the design and its numbers.
//
// The bet (as experts_mma.cuh for the FP4 experts): the WEIGHT ROWS are the MMA's A operand, so
// every m16n8k16 carries 16 weight rows × 16 k (256 e4m3 bytes / 512 bf16 bytes), and x is split
// exactly into three 16-bit planes that are the B columns: column j of the launch = token j / 3,
// plane j % 3 — at M ≤ 2 one n8 tile serves every token, M = 16 needs 6 n-tiles (NT = ceil(3M/8)).
//
// Fragment layouts (PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type"),
// g = lane / 4, t = lane % 4, a .b32 register holds two 16-bit values, the lower index low:
//   A (16×16 row-major): a0 = (row g, cols 2t, 2t+1)    a1 = (row g+8, cols 2t, 2t+1)
//                        a2 = (row g, cols 2t+8, 2t+9)  a3 = (row g+8, cols 2t+8, 2t+9)
//   B (16×8, k × n):     b0 = (rows 2t, 2t+1; col g)    b1 = (rows 2t+8, 2t+9; col g)
//   C/D (16×8 f32):      c0, c1 = (row g; cols 2t, 2t+1)  c2, c3 = (row g+8; cols 2t, 2t+1)
// The k permutation (only the pairing of A's and B's k matters): lane (g, t) owns 16 k of a
// 64-k chunk for weight rows g and g+8 — its "local" k j = 0..15 — and feeds local k (4s, 4s+1)
// as MMA columns (2t, 2t+1) and (4s+2, 4s+3) as (2t+8, 2t+9) in k-step s = 0..3. B's lane (g, t)
// holds column g's x at the same local k of the same t, as 8 words (word i = local k 2i, 2i+1):
// b0 = word 2s, b1 = word 2s+1. Local k of lane t in the chunk:
//   e4m3: k = 16t + j (one 16-byte ld.global.nc per row per chunk; 4 lanes read a row's 64 bytes)
//   bf16: k = 8t + j for j < 8, 32 + 8t + (j − 8) for j ≥ 8 (two 16-byte loads per row, each
//         instruction reading 64 contiguous bytes of every row).
// e4m3 → f16 by cvt.rn.f16x2.e4m3x2 (two codes per instruction, exact: every e4m3 value is an
// f16; the low byte becomes the low half). bf16 weights go to the bf16 MMA as they are.
//
// Exactness (experts_mma.cuh's argument): per token row c with max|x| · 2^c ∈ [2^14, 2^15) (c = 0
// for an all-zero or non-finite row); v = x · 2^c (exact) = h0 + h1 + h2 (+ r) with h0 = rn(v),
// h1 = rn(v − h0), h2 = rn(v − h0 − h1), every difference exact in fp32; f16 planes (e4m3
// weights): |r| ≤ 2^-25 absolute, i.e. ≤ 2^-39 relative to the row's max; bf16 planes (bf16
// weights, the bf16 MMA): x = h0 + h1 + h2 exactly (3 × 8 significant bits ≥ fp32's 24, the
// exponent range of fp32). Products of two 16-bit floats are exact in the tensor core's f32
// accumulation, so the only roundings are the f32 sums.
//
// Order of the sums of one output element (fixed by (format, N, K, variant) alone — never by M,
// the other columns, the grid's timing or the projections fused into the launch):
//   e4m3: per 128-k scale block the block's 8 k-steps from zero in the tensor core (k order),
//         acc = fma(partial, scale, acc) over the blocks of a warp's k-slice in k order;
//   bf16: the k-steps of the k-slice chained in the accumulator in k order;
//   then the S = KW·KC k-slice sums folded left in slice order (shared memory; across the KC
//   CTAs of a cluster through distributed shared memory), then per token ((S2 + S1) + S0) of the
//   three plane columns, times 2^-c. No atomics; no dependence on which warp or CTA finishes first.
// A column's D value depends only on its own B column (each output element of an MMA is its own
// dot product), so the columns of other tokens — present or not, values of any kind — do not
// change a token's bits: row m of an M-row call equals the 1-row call of x row m.
//
// Work: the rows of a projection form m16 tiles; the K range is cut into S = KW·KC slices of
// whole units (unit = 128 k for e4m3 = one scale block; 64 k for bf16); a CTA of 8 warps takes
// RW = 8 / KW row groups of MT m-tiles × KW slices (warp w: row group w / KW, slice w % KW), a
// cluster of KC CTAs the KC slice groups of those rows (KC = 1 unless the bench asks for more:
// the H200 mid-run found the cluster epilogue slow). Each warp streams its (16·MT rows × slice)
// with 16-byte ld.global.nc loads held in a ring of R units of registers (R − 1 units in flight
// while one is computed; the first R units are issued before griddepcontrol.wait).
//
// x planes: from the split kernel's workspace, or (kFused, M ≤ 2) split by every CTA into shared
// memory after the wait (split_row: the same arithmetic, the same bits). Session 15, grouped
// products (Args::xg = G groups, one projection per group, skinny_grouped_linear): projection j
// reads x columns [j·K, j·K + K) — its own planes and row exponent per token (the split kernel
// runs on the M·G rows of K, a fused CTA splits its group's columns) — and writes out columns
// [j·N, j·N + N) of rows Proj::ldo = G·N apart.
//
// PDL (pdl.cuh): before wait() a CTA only loads weights and scales (immutable); x (or its planes)
// is read and out written after it; every thread executes wait(); launch_dependents() after the
// CTA's main loop. The split kernel waits before reading x and signals its dependents at once.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda/skinny_split.cuh"

namespace deepinfer::cuda::kernels::skinny {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxRows = 16;   // tokens
constexpr int kMaxNT = 6;      // n8 tiles: ceil(3·16 / 8)
constexpr int kMaxProj = 8;    // projections of one x in one launch

struct Proj {
  const uint8_t* w = nullptr;   // [N, K] stored (e4m3 bytes or bf16), row n at w + n·row_bytes
  const void* scale = nullptr;  // [ceil(N / br), K / 128] ue8m0 or f32 (e4m3 only)
  float* out = nullptr;         // [M, N]
  int32_t N = 0;
  int32_t kw = 1;               // k-slices per CTA (1, 2, 4, 8); RW = 8 / kw m-tiles per CTA
  int32_t cta_end = 0;          // CTA groups (blockIdx.x / KC) of projections 0..this one
  int32_t xslot = 0;            // grouped product: the group (x columns [xslot·K, xslot·K + K))
  int64_t ldo = 0;              // out row stride (N, or G·N for a group of a grouped product)
};

struct Args {
  Proj proj[kMaxProj];
  int32_t nproj = 0;
  const uint16_t* planes = nullptr;  // [M][3][K] 16-bit planes (f16 for e4m3, bf16 for bf16)
  const float* x = nullptr;          // fused split (M ≤ 2): x [M, K] fp32, split per CTA
  const int32_t* row_exp = nullptr;  // [M] c of each token row
  int32_t M = 0, K = 0;
  int32_t xg = 1;                    // x groups: x [M, xg·K]; planes / row_exp per (token, group)
  int32_t kc = 1;                    // cluster size (k-slice groups per m-tile group)
  int32_t units = 0;                 // K / unit
  int32_t br = 128;                  // scale block rows (multiple of 16)
  int32_t scols = 0;                 // scale columns (K / 128)
};

// ---- device helpers ----------------------------------------------------------------------------

__device__ __forceinline__ uint4 ldg_nc(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Two e4m3 codes (bytes 0, 1 / 2, 3 of u) as f16x2, low byte → low half.
__device__ __forceinline__ void e4m3x4_to_f16x2(uint32_t u, uint32_t& lo, uint32_t& hi) {
  asm("{\n\t.reg .b16 a, b;\n\t"
      "mov.b32 {a, b}, %2;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, a;\n\t"
      "cvt.rn.f16x2.e4m3x2 %1, b;\n\t}"
      : "=r"(lo), "=r"(hi)
      : "r"(u));
}

// d = A·B + (kZero ? 0 : d), f16 or bf16 inputs, f32 accumulate.
template <bool kBf16, bool kZero>
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                    uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    if constexpr (kZero)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%10,%10,%10,%10};\n"
          : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.f));
    else
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    if constexpr (kZero)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%10,%10,%10,%10};\n"
          : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.f));
    else
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Block scale as f32: ue8m0 e → 2^(e − 127) (0 → 2^-127, 255 → NaN), or the f32 value.
template <bool kF32>
__device__ __forceinline__ float load_scale(const void* s, int64_t i) {
  if constexpr (kF32) {
    return __ldg(static_cast<const float*>(s) + i);
  } else {
    const uint32_t e = __ldg(static_cast<const uint8_t*>(s) + i);
    return e == 0xFFu ? __int_as_float(0x7FC00000)
                      : (e == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(e << 23)));
  }
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// ---- one unit of a warp's k-slice ----------------------------------------------------------------
// A warp owns MT m16 tiles (MT = 1, or 2 for variant tc3 at NT ≥ 2: B fragments shared by 32
// weight rows, the same arithmetic per element). Ring slot of a unit: q[mt][0..3] (e4m3: row g
// chunks 0, 1, row g+8 chunks 0, 1 — 16 codes each; bf16: row g local k 0..7, 8..15, row g+8 the
// same) and the e4m3 unit's block scale per m-tile.

template <int MT>
struct Rows {
  const uint8_t* g[MT];   // row g of each m-tile (clamped to a valid row)
  const uint8_t* g8[MT];  // row g + 8
  int64_t srow[MT];       // scale row of each m-tile (clamped)
};

// Issues the loads of unit u (k0 = u · unit).
template <bool kBf16, bool kF32, int MT>
__device__ __forceinline__ void load_unit(const Args& a, const Proj& pj, const Rows<MT>& rw, int u, int t,
                                          uint4 (&q)[MT][4], float (&sc)[MT]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    if constexpr (kBf16) {
      const int64_t o = 2 * (static_cast<int64_t>(u) * 64 + 8 * t);  // bytes
      q[mt][0] = ldg_nc(rw.g[mt] + o);
      q[mt][1] = ldg_nc(rw.g[mt] + o + 64);
      q[mt][2] = ldg_nc(rw.g8[mt] + o);
      q[mt][3] = ldg_nc(rw.g8[mt] + o + 64);
      sc[mt] = 1.f;
    } else {
      const int64_t o = static_cast<int64_t>(u) * 128 + 16 * t;
      q[mt][0] = ldg_nc(rw.g[mt] + o);
      q[mt][1] = ldg_nc(rw.g[mt] + o + 64);
      q[mt][2] = ldg_nc(rw.g8[mt] + o);
      q[mt][3] = ldg_nc(rw.g8[mt] + o + 64);
      sc[mt] = load_scale<kF32>(pj.scale, rw.srow[mt] * a.scols + u);
    }
  }
}

// B words of column pointer `col` (plane row) for local k of lane t at chunk base k0; kSmem: col
// points into shared memory (the fused split), else global (ld.global.nc).
template <bool kBf16, bool kSmem = false>
__device__ __forceinline__ void load_b(const uint16_t* col, int64_t k0, int t, uint32_t (&b)[8]) {
  const uint16_t* p0 = kBf16 ? col + k0 + 8 * t : col + k0 + 16 * t;
  const uint16_t* p1 = kBf16 ? col + k0 + 32 + 8 * t : col + k0 + 16 * t + 8;
  uint4 lo, hi;
  if constexpr (kSmem) {
    lo = *reinterpret_cast<const uint4*>(p0);
    hi = *reinterpret_cast<const uint4*>(p1);
  } else {
    lo = __ldg(reinterpret_cast<const uint4*>(p0));
    hi = __ldg(reinterpret_cast<const uint4*>(p1));
  }
  b[0] = lo.x; b[1] = lo.y; b[2] = lo.z; b[3] = lo.w;
  b[4] = hi.x; b[5] = hi.y; b[6] = hi.z; b[7] = hi.w;
}

// B words of a whole unit (e4m3: 2 chunks; bf16: 1) of one column, for the prefetch at NT = 1.
template <bool kBf16, bool kSmem>
__device__ __forceinline__ void load_b_unit(const uint16_t* col, int64_t k0, int t, uint32_t (&b)[2][8]) {
  load_b<kBf16, kSmem>(col, k0, t, b[0]);
  if constexpr (!kBf16) load_b<false, kSmem>(col, k0 + 64, t, b[1]);
}

// e4m3 unit (128 k = one scale block): 8 k-steps from zero, then acc = fma(partial, scale, acc).
// kPre: B comes from bp (loaded a unit ahead; NT = 1), else loaded here from col.
template <int NT, int MT, bool kPre>
__device__ __forceinline__ void compute_e4m3(const uint4 (&q)[MT][4], const float (&sc)[MT],
                                             const uint16_t* const (&col)[NT], int64_t k0, int t,
                                             const uint32_t (&bp)[2][8], float (&acc)[MT][NT][4]) {
  float part[MT][NT][4];
#pragma unroll
  for (int ch = 0; ch < 2; ++ch) {
    uint32_t ag[MT][8], a8[MT][8];  // f16x2 of local k (2i, 2i+1), rows g / g+8
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        e4m3x4_to_f16x2(word(q[mt][ch], i), ag[mt][2 * i], ag[mt][2 * i + 1]);
        e4m3x4_to_f16x2(word(q[mt][2 + ch], i), a8[mt][2 * i], a8[mt][2 * i + 1]);
      }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      uint32_t b[8];
      if constexpr (kPre) {
#pragma unroll
        for (int i = 0; i < 8; ++i) b[i] = bp[ch][i];
      } else {
        load_b<false>(col[nt], k0 + 64 * ch, t, b);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          if (ch == 0 && s == 0)
            mma<false, true>(part[mt][nt], ag[mt][0], a8[mt][0], ag[mt][1], a8[mt][1], b[0], b[1]);
          else
            mma<false, false>(part[mt][nt], ag[mt][2 * s], a8[mt][2 * s], ag[mt][2 * s + 1], a8[mt][2 * s + 1],
                              b[2 * s], b[2 * s + 1]);
        }
    }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = fmaf(part[mt][nt][i], sc[mt], acc[mt][nt][i]);
}

// bf16 unit (64 k): 4 k-steps chained into the accumulator. kPre as compute_e4m3 (bp[0]).
template <int NT, int MT, bool kPre>
__device__ __forceinline__ void compute_bf16(const uint4 (&q)[MT][4], const uint16_t* const (&col)[NT],
                                             int64_t k0, int t, const uint32_t (&bp)[2][8],
                                             float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    uint32_t b[8];
    if constexpr (kPre) {
#pragma unroll
      for (int i = 0; i < 8; ++i) b[i] = bp[0][i];
    } else {
      load_b<true>(col[nt], k0, t, b);
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      // rows g / g+8, local k (2i, 2i+1): word i % 4 of q[.][i / 4] (row g) / q[.][2 + i / 4]
#pragma unroll
      for (int s = 0; s < 4; ++s)
        mma<true, false>(acc[mt][nt], word(q[mt][s / 2], (2 * s) % 4), word(q[mt][2 + s / 2], (2 * s) % 4),
                         word(q[mt][s / 2], (2 * s + 1) % 4), word(q[mt][2 + s / 2], (2 * s + 1) % 4),
                         b[2 * s], b[2 * s + 1]);
    }
  }
}

// Ring depth (units of registers per lane, 16·MT registers each) and CTAs per SM. MT = 1: two
// CTAs (16 warps, ≤ 128 registers) with 3 units (NT ≤ 3) or 2 units (bf16, NT ≥ 4) per warp;
// e4m3 at NT ≥ 4 (its block partials need 4·NT more registers: 128 spilled) one CTA per SM with a
// 4-unit ring (8 warps × 3 units × 2 KB = 48 KB in flight per SM). MT = 2: one CTA per SM, 3 units
// of 4 KB (8 warps × 2 units in flight × 4 KB = 64 KB per SM); e4m3 at NT ≥ 4 2 units (32 KB).
template <bool kBf16, int NT, int MT>
constexpr int ring_depth() { return MT == 2 ? (kBf16 || NT <= 3 ? 3 : 2) : NT <= 3 ? 3 : kBf16 ? 2 : 4; }
template <bool kBf16, int NT, int MT>
constexpr int min_blocks() { return MT == 2 ? 1 : NT <= 3 || kBf16 ? 2 : 1; }
// red row stride (floats): odd (conflict-free epilogue) unless 8 warps × 32 rows × 49 floats
// would pass the 48 KB static shared-memory limit.
template <int NT, int MT>
constexpr int red_stride() { return MT * 16 * (8 * NT + 1) * kWarps * 4 <= 49152 ? 8 * NT + 1 : 8 * NT; }

// ---- the product kernel ---------------------------------------------------------------------
// grid.x = Σ_p groups_p · KC (clusters of KC consecutive CTAs when KC > 1), 256 threads. A CTA
// group covers RW · MT m-tiles (RW = 8 / KW warps' rows), m-tile (group·RW + rt)·MT + mt.
// kFused (NT = 1, KC = 1: M ≤ 2): every CTA splits x itself after the wait, into dynamic shared
// memory [3M][K + 8] (split_row: the split kernel's arithmetic, so the same planes and bits), and
// reads B from there — no split launch, no global round trip, no L2 latency per B load.
template <bool kBf16, bool kF32, int NT, int MT, bool kFused = false>
__global__ void __launch_bounds__(kThreads, (min_blocks<kBf16, NT, MT>())) product_kernel(const Args a) {
  static_assert(!kFused || (NT == 1 && MT == 1), "the fused split serves M <= 2 only");
  constexpr int C = red_stride<NT, MT>();
  constexpr int R = ring_depth<kBf16, NT, MT>();
  __shared__ float red[kWarps][16 * MT][C];  // each warp's k-slice sums of its m-tiles
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int KC = a.kc;
  const int grp = static_cast<int>(blockIdx.x) / KC, rank = static_cast<int>(blockIdx.x) % KC;
  int pi = 0;
  while (pi + 1 < a.nproj && grp >= a.proj[pi].cta_end) ++pi;
  const Proj& pj = a.proj[pi];
  const int grp0 = pi == 0 ? 0 : a.proj[pi - 1].cta_end;
  const int KW = pj.kw, RW = kWarps / KW;
  const int rt = warp / KW, kw = warp % KW;
  const int row0 = 16 * MT * ((grp - grp0) * RW + rt);  // first row of the warp's m-tiles
  const bool active = row0 < pj.N;
  const int S = KC * KW;
  const int nu = a.units / S;                   // units per slice (the host makes S divide units)
  const int u0 = (rank * KW + kw) * nu;
  const int64_t rb = kBf16 ? 2 * static_cast<int64_t>(a.K) : a.K;
  Rows<MT> rw;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int r = row0 + 16 * mt;
    rw.g[mt] = pj.w + min(r + g, pj.N - 1) * rb;
    rw.g8[mt] = pj.w + min(r + g + 8, pj.N - 1) * rb;
    rw.srow[mt] = kBf16 ? 0 : min(r, pj.N - 1) / a.br;
  }

  uint4 q[R][MT][4];
  float sc[R][MT];
  if (active) {
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r < nu) load_unit<kBf16, kF32, MT>(a, pj, rw, u0 + r, t, q[r], sc[r]);
  }
  pdl::wait();  // x planes (the split kernel) and out (earlier readers) from here on
  extern __shared__ __align__(16) uint8_t skinny_dyn[];  // kFused: [3M][K + 8] planes
  __shared__ float split_red[8];
  __shared__ int split_exp[2];
  const uint16_t* planes = a.planes;
  int64_t pstride = a.K;
  if constexpr (kFused) {
    uint16_t* xs = reinterpret_cast<uint16_t*>(skinny_dyn);
    pstride = a.K + 8;  // 2K + 16 bytes: the 8 column rows a quarter-warp reads hit distinct banks
    for (int m = 0; m < a.M; ++m) {
      const int64_t xrow = static_cast<int64_t>(m) * a.xg + pj.xslot;  // this group's K columns
      const int c =
          split_row<kBf16>(a.x + xrow * a.K, a.K, xs + kPlanes * m * pstride, pstride, split_red);
      if (threadIdx.x == 0) split_exp[m] = c;
    }
    __syncthreads();
    planes = xs;
  }

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
  if (active) {
    const uint16_t* col[NT];
    const int cols = kPlanes * a.M;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {  // columns past 3M: any valid plane row (their D is unused)
      const int c = min(8 * nt + g, cols - 1);
      // Plane rows: [3M] of this CTA's x (fused split), else [M·xg][3] (token, group) rows.
      const int64_t prow =
          kFused ? c
                 : (static_cast<int64_t>(c / kPlanes) * a.xg + pj.xslot) * kPlanes + c % kPlanes;
      col[nt] = planes + prow * pstride;
    }
    // NT = 1 (M ≤ 2): the B words of unit u + 1 are loaded while unit u is computed (their L2
    // latency off the warp's critical path); more n-tiles load B where they use it. The same
    // operands either way (the same bits).
    constexpr bool kPre = NT == 1;
    constexpr int64_t kUnitK = kBf16 ? 64 : 128;
    uint32_t bc[2][8] = {};
    if constexpr (kPre) load_b_unit<kBf16, kFused>(col[0], static_cast<int64_t>(u0) * kUnitK, t, bc);
#pragma unroll 1
    for (int ub = 0; ub < nu; ub += R) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int u = ub + r;
        if (u < nu) {
          const int64_t k0 = static_cast<int64_t>(u0 + u) * kUnitK;
          uint32_t bn[2][8] = {};
          if constexpr (kPre) {
            if (u + 1 < nu) load_b_unit<kBf16, kFused>(col[0], k0 + kUnitK, t, bn);
          }
          if constexpr (kBf16) compute_bf16<NT, MT, kPre>(q[r], col, k0, t, bc, acc);
          else compute_e4m3<NT, MT, kPre>(q[r], sc[r], col, k0, t, bc, acc);
          if (u + R < nu) load_unit<kBf16, kF32, MT>(a, pj, rw, u0 + u + R, t, q[r], sc[r]);
          if constexpr (kPre) {
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
              for (int i = 0; i < 8; ++i) bc[h][i] = bn[h][i];
          }
        }
      }
    }
  }
  pdl::launch_dependents();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      red[warp][16 * mt + g][8 * nt + 2 * t] = acc[mt][nt][0];
      red[warp][16 * mt + g][8 * nt + 2 * t + 1] = acc[mt][nt][1];
      red[warp][16 * mt + g + 8][8 * nt + 2 * t] = acc[mt][nt][2];
      red[warp][16 * mt + g + 8][8 * nt + 2 * t + 1] = acc[mt][nt][3];
    }
  namespace cg = cooperative_groups;
  if (KC > 1) cg::this_cluster().sync();  // every rank's partials written (release / acquire)
  else __syncthreads();
  // Output items of this CTA group: (token m, row of the group) — rows fastest (coalesced
  // stores); rank r of the cluster takes items r·256 + i, (r + KC)·256 + i, ... Each element:
  // slices folded left in slice order (rank-major, then the warp's kw), then ((S2 + S1) + S0)
  // · 2^-c.
  const int rows = 16 * MT * RW;
  const int items = a.M * rows;
  for (int i = rank * kThreads + threadIdx.x; i < items; i += KC * kThreads) {
    const int m = i / rows, rr = i % rows;
    const int wr = rr / (16 * MT), lr = rr % (16 * MT);  // warp row group, row within it
    const int n = 16 * MT * ((grp - grp0) * RW + wr) + lr;
    if (n >= pj.N) continue;
    float s[kPlanes];
#pragma unroll
    for (int p = 0; p < kPlanes; ++p) {
      const int c = kPlanes * m + p;
      float v = 0.f;
      for (int kr = 0; kr < KC; ++kr) {
        const float* rd = &red[0][0][0];
        if (KC > 1) rd = cg::this_cluster().map_shared_rank(rd, kr);
        for (int k = 0; k < KW; ++k) {
          const float x = rd[((wr * KW + k) * 16 * MT + lr) * C + c];
          v = (kr == 0 && k == 0) ? x : v + x;
        }
      }
      s[p] = v;
    }
    const float sum = (s[2] + s[1]) + s[0];
    const int c =
        kFused ? split_exp[m] : __ldg(a.row_exp + static_cast<int64_t>(m) * a.xg + pj.xslot);
    pj.out[static_cast<int64_t>(m) * pj.ldo + n] = scalbnf(sum, -c);
  }
  if (KC > 1) cg::this_cluster().sync();  // the other ranks' shared memory stays until read
}

}  // namespace deepinfer::cuda::kernels::skinny
