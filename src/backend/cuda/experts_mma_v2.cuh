// Routed experts of decode batches on the tensor cores, variant 2 (issue 7, session 7): the same
// operands, MMAs and per-output arithmetic as session 6's kernel (experts_mma.cuh: read its
// header for the fragment layouts, the k permutation and the exactness argument), scheduled for
// more parallelism:
//  - a warp item is 16 weight rows (one m16 tile) instead of 32: twice the items, so at batch 1
//    (6 experts) 1,536 items per projection instead of 768 cover 132 SMs;
//  - a 5-stage cp.async ring of 2 KB stages per warp (8 KB ahead) and 4 CTAs of 4 warps per SM:
//    16 warps per SM (session 6: 8) to hide the latency of the decode → MMA → FMA chains, with
//    ~128 KB of weights in flight per SM;
//  - the product kernel is launched as a programmatic dependent of the x split (PDL): its CTAs
//    start while the split runs, issue their first weight stages (which do not depend on x),
//    then wait (griddepcontrol.wait) before the first x plane read — at batch 1 the split and a
//    launch gap are otherwise a serial ~5 µs in front of a ~15 µs stream;
//  - the grid is always the full residency (SMs × CTAs per SM) and the flat item list is cut
//    into equal contiguous warp ranges, so every SM gets the same share (session 6 cut the grid
//    to the items at batch 1: 192 CTAs on 132 SMs, 60 SMs with twice the work).
//  - moe_group's tiles of 8 rows (kExpertsMmaTileRows) as work units when the caller groups so:
//    an expert with many tokens is spread over many warps instead of one warp range;
// Bits: every output is computed exactly as in session 6 — per 32-k block the two k-steps sum in
// the MMA's f32 accumulator from zero, acc = fma(partial, scale, acc) in k order, plane columns
// summed (h2 + h1) + h0, times 2^(14 − c) — only which warp computes it and when changes, so
// variant 2's outputs equal variant 1's bit for bit (tested). Nothing in a slot's arithmetic
// depends on the other slots (their number, experts or order: the n-tile count of a pass only
// decides how many MMAs run side by side, each column summed on its own; c depends on the slot's
// x row alone), which is what --batch-invariant relies on.
#pragma once

#include "backend/cuda/experts_mma.cuh"

namespace deepinfer::cuda::kernels::emma2 {

using emma::Args;
using emma::kChunkK;
using emma::kMaxNT;
using emma::kPassTokens;
using emma::kRowBytes;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 16;                   // weight rows of a warp item (one m16 tile)
constexpr int kStages = 5;                  // per-warp cp.async ring (4 stages = 8 KB ahead)
constexpr int kWStage = kRows * kRowBytes;  // 2048 B of weights per stage
constexpr int kSStage = kRows * 8;          // 128 B: 8 ue8m0 scales per row per stage
constexpr int kWarpSmem = kStages * (kWStage + kSStage);
constexpr int kSmem = kWarps * kWarpSmem;   // 43,520 B: four CTAs per SM
// CTAs per SM the kernel is compiled for (__launch_bounds__): 4 → ≤ 128 registers (16 warps per
// SM; CUDA 13.0 ptxas: 128 used, no spill), 3 → ≤ 168 (12 warps per SM; 168 used). Both are
// built (variants 2 and 3 of experts_mma.h) for bench_ops to compare; their bits are the same.

// A warp's position in its work (emma::Cursor with 32-bit items: T = tiles · N/16 < 2^31 since
// tiles ≤ slots + E, slots·N < 2^31, N < 2^24 and E ≤ 1024 — experts_mma_supported).
struct Cursor {
  int item = 0;
  int e = 0, n0 = 0, pos0 = 0, m = 0, passes = 0, pass = 0, kc = 0;
};

// Item → (tile, rows): item = tile d · groups + 16-row group (Args::groups = N / 16); tile d is
// tile j = d − act_off[e] of expert e (moe_group's tiles of tile_rows sorted rows: with
// tile_rows ≥ slots one per active expert, as session 6; with 8 one per pass, so a crowded
// expert's passes spread over many warps).
__device__ __forceinline__ void set_item16(const Args& p, int item, Cursor& c) {
  c.item = item;
  const int d = item / p.groups;
  int lo = 0, hi = p.num_experts - 1;  // the last e with act_off[e] <= d holds tile d
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (__ldg(p.act_off + mid) <= d) lo = mid;
    else hi = mid - 1;
  }
  c.e = lo;
  c.n0 = (item - d * p.groups) * kRows;
  const int j = d - __ldg(p.act_off + lo);
  const int start = __ldg(p.row_off + lo);
  const int done = j * p.tile_rows;  // j = 0 when tile_rows ≥ slots
  c.pos0 = start + done;
  c.m = min(p.tile_rows, __ldg(p.row_off + lo + 1) - start - done);
  c.passes = (c.m + kPassTokens - 1) / kPassTokens;
  c.pass = 0;
  c.kc = 0;
}

__device__ __forceinline__ void advance16(const Args& p, Cursor& c, int end) {
  if (++c.kc < p.chunks) return;
  c.kc = 0;
  if (++c.pass < c.passes) return;
  if (c.item + 1 < end) set_item16(p, c.item + 1, c);
  else c.item = end;
}

// cp.async copies of the cursor's stage: 16 rows × 128 bytes of weights (16-byte unit u of row r
// at unit u ^ (r & 7), as in session 6) and 16 rows × 8 scale bytes (lanes 0..15).
__device__ __forceinline__ void issue_stage16(const Args& p, const Cursor& c, uint8_t* sw, uint8_t* ss,
                                            int lane) {
  const uint32_t rb = static_cast<uint32_t>(p.K) / 2;
  const uint8_t* wb = static_cast<const uint8_t*>(p.w_table[c.e]) +
                      static_cast<size_t>(c.n0) * rb + c.kc * kRowBytes;
  const int unit = lane & 7;
  const uint32_t sw0 = emma::smem_u32(sw);
#pragma unroll
  for (int i = 0; i < kRows / 4; ++i) {
    const int row = (lane >> 3) + 4 * i;
    emma::cp_async16(sw0 + row * kRowBytes + ((unit ^ (row & 7)) << 4), wb + row * rb + unit * 16);
  }
  if (lane < kRows) {
    const uint8_t* sb = static_cast<const uint8_t*>(p.s_table[c.e]) +
                        static_cast<size_t>(c.n0 + lane) * static_cast<uint32_t>(p.scale_cols) + c.kc * 8;
    if ((reinterpret_cast<uintptr_t>(sb) & 7) == 0) {
      emma::cp_async8(emma::smem_u32(ss + lane * 8), sb);
    } else {  // scale rows not 8-byte aligned: plain loads (slow, correct)
      uint2 v{0, 0};
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t b = __ldg(sb + j);
        if (j < 4) v.x |= b << (8 * j);
        else v.y |= b << (8 * (j - 4));
      }
      *reinterpret_cast<uint2*>(ss + lane * 8) = v;
    }
  }
}

// B columns of one pass (col g of this lane: token 2·nt + g / 3 of the pass, plane g % 3;
// nullptr: zero column): emma::Pass without the output fields, which finish_pass reloads (fewer
// live registers through the k loop).
struct Pass {
  const uint16_t* bcol[kMaxNT];
  int nt = 1;  // n-tiles in use (1, 2 or 4)
};

__device__ __forceinline__ void setup_pass(const Args& p, const Cursor& c, int lane, Pass& ps) {
  const int g = lane >> 2;
  const int base = c.pass * kPassTokens;
  const int cnt = min(kPassTokens, c.m - base);
  const int tiles = (cnt + 1) / 2;
  ps.nt = tiles <= 1 ? 1 : tiles <= 2 ? 2 : 4;
#pragma unroll
  for (int nt = 0; nt < kMaxNT; ++nt) {
    ps.bcol[nt] = nullptr;
    const int tb = 2 * nt + g / 3;  // token of the column (pass-relative)
    if (g < 6 && tb < cnt) {
      const int slot = __ldg(p.perm + c.pos0 + base + tb);
      const int64_t xrow = slot / p.x_div;
      ps.bcol[nt] = p.planes + (g % 3) * p.plane + xrow * p.K;
    }
  }
}

template <int NT>
__device__ __forceinline__ void load_b(const Pass& ps, int kc, int b, int t, uint4 (&bq)[NT]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (ps.bcol[nt] != nullptr) {
      bq[nt] = __ldg(reinterpret_cast<const uint4*>(ps.bcol[nt] + kc * kChunkK + b * 32) + t);
    } else {
      bq[nt] = make_uint4(0, 0, 0, 0);
    }
  }
}

// One stage (16 rows × 256 k) against NT n-tiles: acc[nt][i] += block partial · scale, the
// operations of emma::compute_stage for one m-tile.
template <int NT, bool kExact>
__device__ __forceinline__ void compute_stage(const uint8_t* sw, const uint8_t* ss, const Pass& ps,
                                              int kc, int lane, float (&acc)[kMaxNT][4]) {
  const int g = lane >> 2, t = lane & 3;
  uint2 sc[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) sc[h] = *reinterpret_cast<const uint2*>(ss + (g + 8 * h) * 8);
  const uint32_t sw0 = emma::smem_u32(sw);
  // ldmatrix row of this lane: matrix q = lane / 8 → rows +8 for q odd, unit +1 for q ≥ 2.
  const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8;
  const int lunit = lane >> 4;
  uint4 bq[2][NT];  // B of blocks b (in use) and b + 1 (in flight)
  load_b<NT>(ps, kc, 0, t, bq[0]);
  uint32_t q[4];
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    if (b % 2 == 0) emma::ldmatrix_x4(q, sw0 + lrow * kRowBytes + (((b + lunit) ^ (lrow & 7)) << 4));
    if (b < 7) load_b<NT>(ps, kc, b + 1, t, bq[(b + 1) & 1]);
    const int bb = b & 1;
    uint32_t dg[4], d8[4];  // rows g and g + 8
    emma::decode_e2m1x8(q[2 * bb], dg);
    emma::decode_e2m1x8(q[2 * bb + 1], d8);
    const float s_g = emma::stage_scale<kExact>(sc[0], b), s_g8 = emma::stage_scale<kExact>(sc[1], b);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint4& bv = bq[b & 1][nt];
      float d[4];
      emma::mma_f16_zero(d, dg[0], d8[0], dg[1], d8[1], bv.x, bv.y);
      emma::mma_f16(d, dg[2], d8[2], dg[3], d8[3], bv.z, bv.w);
      acc[nt][0] = fmaf(d[0], s_g, acc[nt][0]);
      acc[nt][1] = fmaf(d[1], s_g, acc[nt][1]);
      acc[nt][2] = fmaf(d[2], s_g8, acc[nt][2]);
      acc[nt][3] = fmaf(d[3], s_g8, acc[nt][3]);
    }
  }
}

template <int NT>
__device__ __forceinline__ void compute_stage_any(const uint8_t* sw, const uint8_t* ss, const Pass& ps,
                                                  int kc, int chunks, int lane, float (&acc)[kMaxNT][4]) {
  if (kc + 1 < chunks) {  // next stage's x plane rows into L1
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      if (ps.bcol[nt] != nullptr)
        asm volatile("prefetch.global.L1 [%0];" ::"l"(ps.bcol[nt] + (kc + 1) * kChunkK + (lane & 3) * 64));
  }
  // Fast scale decode unless some scale of the stage's 16 rows is 0x00 or 0xFF (lane L checks
  // row L % 16; both decodes give the same value for every other code).
  const uint2 mine = *reinterpret_cast<const uint2*>(ss + (lane & (kRows - 1)) * 8);
  if (__any_sync(0xffffffffu, emma::has_00_or_ff(mine.x) || emma::has_00_or_ff(mine.y)))
    compute_stage<NT, true>(sw, ss, ps, kc, lane, acc);
  else
    compute_stage<NT, false>(sw, ss, ps, kc, lane, acc);
}

// The output this lane writes for n-tile nt of cursor c's pass (t = lane % 4 < 2: token 2·nt + t
// of the pass): its offset slot · N (-1: none) and 14 − c of its x row.
__device__ __forceinline__ void pass_output(const Args& p, const Cursor& c, int nt, int lane,
                                            int64_t& out_off, int& out_exp) {
  const int t = lane & 3;
  const int base = c.pass * kPassTokens;
  const int cnt = min(kPassTokens, c.m - base);
  const int to = 2 * nt + t;  // output token of this lane (t < 2)
  out_off = -1;
  out_exp = 0;
  if (t < 2 && to < cnt) {
    const int slot = __ldg(p.perm + c.pos0 + base + to);
    out_off = static_cast<int64_t>(slot) * p.N;
    out_exp = 14 - __ldg(p.row_exp + slot / p.x_div);
  }
}

// One m-tile × n-tile of a pass: sums each token's plane columns ((h2 + h1) + h0), scales by
// 2^(14 − c), writes rows row0 + g and row0 + g + 8 (all lanes take part in the shuffles).
__device__ __forceinline__ void finish_tile(const Args& p, int64_t out_off, int out_exp, int row0, int lane,
                                            const float (&a4)[4]) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float v0 = a4[2 * h], v1 = a4[2 * h + 1];            // cols 2t, 2t+1
    const float a = __shfl_down_sync(0xffffffffu, v0, 1);     // col 2t+2
    const float b = __shfl_down_sync(0xffffffffu, v1, 1);     // col 2t+3
    const float sum = t == 0 ? (a + v1) + v0 : (b + a) + v1;  // t = 0: cols 0-2; t = 1: cols 3-5
    if (out_off >= 0) p.out[out_off + row0 + g + 8 * h] = scalbnf(sum, out_exp);
  }
}

// Sums the plane columns of each token ((h2 + h1) + h0), scales by 2^(14 − c), writes: the
// operations of emma::finish_pass for one m-tile.
template <int NT>
__device__ __forceinline__ void finish_pass(const Args& p, const Cursor& c, int lane,
                                            const float (&acc)[kMaxNT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    int64_t out_off;
    int out_exp;
    pass_output(p, c, nt, lane, out_off, out_exp);
    finish_tile(p, out_off, out_exp, c.n0, lane, acc[nt]);
  }
}

// Persistent grid of the full residency; warp w owns items [T·w / W, T·(w+1) / W) of the flat
// list (active expert-major, 16-row groups) and streams them through its own cp.async ring (no
// block-level synchronisation).
template <int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) experts_mma_v2_kernel(const Args p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint8_t* sw = smem + warp * kWarpSmem;  // [kStages][kWStage]
  uint8_t* ss = sw + kStages * kWStage;   // [kStages][kSStage]
  const int n_active = __ldg(p.act_off + p.num_experts);
  const int64_t T = static_cast<int64_t>(n_active) * p.groups;
  const int64_t W = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int i0 = static_cast<int>(T * w / W), i1 = static_cast<int>(T * (w + 1) / W);
  if (i0 >= i1) return;  // warp-uniform; nothing below synchronises more than the warp
  Cursor pc, cc;
  set_item16(p, i0, pc);
  cc = pc;
  int pj = 0;
#pragma unroll 1
  for (int s = 0; s < kStages - 1; ++s, ++pj) {
    if (pc.item < i1) {
      issue_stage16(p, pc, sw + (pj % kStages) * kWStage, ss + (pj % kStages) * kSStage, lane);
      advance16(p, pc, i1);
    }
    emma::cp_async_commit();
  }
  // The x planes and row exponents come from the split kernel this one may overlap (PDL): wait
  // for it (and its memory) before setup_pass / the first B load. Returns at once without PDL.
  pdl::wait();
  float acc[kMaxNT][4];
  Pass ps;
  int cj = 0;
#pragma unroll 1
  while (cc.item < i1) {
    emma::cp_async_wait<kStages - 2>();
    __syncwarp();  // stage cj visible to every lane; every lane is done with stage cj − 1's slot
    if (pc.item < i1) {
      issue_stage16(p, pc, sw + (pj % kStages) * kWStage, ss + (pj % kStages) * kSStage, lane);
      advance16(p, pc, i1);
    }
    emma::cp_async_commit();
    ++pj;
    if (cc.kc == 0) {
      setup_pass(p, cc, lane, ps);
#pragma unroll
      for (int nt = 0; nt < kMaxNT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = 0.f;
    }
    const uint8_t* w_slot = sw + (cj % kStages) * kWStage;
    const uint8_t* s_slot = ss + (cj % kStages) * kSStage;
    const bool last = cc.kc == p.chunks - 1;
    if (ps.nt == 1) {
      compute_stage_any<1>(w_slot, s_slot, ps, cc.kc, p.chunks, lane, acc);
      if (last) finish_pass<1>(p, cc, lane, acc);
    } else if (ps.nt == 2) {
      compute_stage_any<2>(w_slot, s_slot, ps, cc.kc, p.chunks, lane, acc);
      if (last) finish_pass<2>(p, cc, lane, acc);
    } else {
      compute_stage_any<4>(w_slot, s_slot, ps, cc.kc, p.chunks, lane, acc);
      if (last) finish_pass<4>(p, cc, lane, acc);
    }
    advance16(p, cc, i1);
    ++cj;
  }
  emma::cp_async_wait<0>();
}

}  // namespace deepinfer::cuda::kernels::emma2
