// Routed experts of decode batches on the tensor cores, v3 (issue 7, session 8, helper exp): the
// operands, MMAs and per-output arithmetic of sessions 6 and 7 (experts_mma.cuh has the fragment
// layouts, the k permutation and the exactness argument; experts_mma_v2.cuh the 16-row items and
// moe_group's 8-row tiles), rescheduled after the H200 profile of session 7's kernels (Nsight
// Compute, decode step, session 8): at batch 1 the 12-warp kernel issued 0.35 instructions per
// scheduler per cycle with half of the stall cycles on L1TEX scoreboards (the B loads, issued at
// the top of each 2 KB stage and consumed right away), DRAM at 24 %; at batch 16 the session-6
// kernel issued 0.50 per scheduler (DRAM 31–41 %) and ~540 instructions per 2 KB stage — the
// loop around the ~280-instruction core (per-stage table loads for the weight pointers, a binary
// search per item, per-stage address arithmetic) cost as much as the MMAs and the FP4 decode.
// So v3:
//  - B (the x planes): each lane keeps a rolling register window of D blocks (32 k) per n-tile
//    (8 at one n-tile, 4 at two, 1 at four: window()) and refills the slot of block b with
//    block b + D right after block b's MMAs — at one n-tile a B load has a whole stage of work
//    to arrive in; loads are one instruction each (a stage base + an immediate offset);
//  - a deeper per-warp cp.async ring: kStages (8 at 12 warps per SM, 6 at 16) stages of 16
//    rows × 256 k = 2 KB of weights + 128 B of scales, 14 KB (10 KB) ahead per warp;
//  - the producer keeps this lane's weight / scale source pointers and its four swizzled
//    destinations (a lane copies 4 × 16 B of one row: row lane / 2, 32-byte sector j of the
//    stage, half lane % 2) and advances them by a constant per stage; the next item's expert is
//    found by scanning act_off forward from the current one (items are in order);
//  - one instruction fewer per 8 FP4 codes in the decode (decode_e2m1x8 below, same bits);
//  - columns of absent tokens (a pass with one token, lanes g = 6, 7) read the pass's first
//    token: an MMA's D column j depends on B column j only, and those columns are never written
//    out, so no zero fill and no branch per load;
//  - every CTA executes griddepcontrol.wait, also one without work (pdl.cuh's contract).
// Unchanged: the x split kernel, the persistent full-residency grid cut into equal contiguous
// warp ranges of 16-row items, the product launched as a programmatic dependent of the split
// (weight stages in flight before the wait), the scale decode, the MMA sequence per block (two
// k-steps from zero, fma(partial, scale, acc) in k order), the plane sum (h2 + h1) + h0 and the
// 2^(14 − c) factor — so v3's outputs equal sessions 6 / 7's bit for bit (tested by memcmp), and
// --batch-invariant may use any of them for any slot count.
#pragma once

#include "backend/cuda/experts_mma_v2.cuh"

namespace deepinfer::cuda::kernels::emma3 {

using emma::Args;
using emma::kChunkK;
using emma::kMaxNT;
using emma::kPassTokens;
using emma::kRowBytes;
using emma2::Cursor;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = emma2::kRows;            // 16 weight rows per warp item
constexpr int kWStage = emma2::kWStage;        // 2048 B of weights per stage
constexpr int kSStage = emma2::kSStage;        // 128 B of scales per stage
constexpr int kStageBytes = kWStage + kSStage;
constexpr int kBlocks = kChunkK / 32;          // 8 scale blocks per stage

// Shared memory of a CTA whose warps run kStages-deep rings.
constexpr int smem_bytes(int kStages) { return kWarps * kStages * kStageBytes; }

// Blocks of B lookahead per n-tile (divides kBlocks): the whole stage at one n-tile, half at two,
// one block at four (4 n-tiles, 7–8 tokens of one expert in a pass, are rare at decode; a deeper
// window there spills).
template <int NT>
constexpr int window() { return NT == 1 ? 8 : NT == 2 ? 4 : 1; }

// Item → (expert, tile rows) as emma2::set_item16, with the expert found by a forward scan from
// `e` (a lower bound: the previous item's expert, or 0).
// Tile d (of item `item`) → c's expert, tokens and passes (e: a lower bound of the expert, scanned
// forward); c.n0 is the caller's.
__device__ __forceinline__ void set_tile(const Args& p, int item, int d, int e, Cursor& c) {
  c.item = item;
  while (__ldg(p.act_off + e + 1) <= d) ++e;  // the last e with act_off[e] <= d holds tile d
  c.e = e;
  const int j = d - __ldg(p.act_off + e);
  const int start = __ldg(p.row_off + e);
  const int done = j * p.tile_rows;
  c.pos0 = start + done;
  c.m = min(p.tile_rows, __ldg(p.row_off + e + 1) - start - done);
  c.passes = (c.m + kPassTokens - 1) / kPassTokens;
  c.pass = 0;
  c.kc = 0;
}

__device__ __forceinline__ void set_item(const Args& p, int item, int e, Cursor& c) {
  const int d = item / p.groups;
  set_tile(p, item, d, e, c);
  c.n0 = (item - d * p.groups) * kRows;
}

// The producer: its cursor and this lane's copy sources for the current stage.
struct Producer {
  Cursor c;
  const uint8_t* w = nullptr;   // weights: row n0 + lane / 2, byte 16 · (lane % 2) of stage kc
  const uint8_t* s = nullptr;   // scales: row n0 + lane % 16, byte 8 · kc
  const uint8_t* w0 = nullptr;  // the same at stage 0 (a pass restarts there)
  const uint8_t* s0 = nullptr;
  bool s_aligned = true;        // the expert's scale rows are 8-byte aligned (cp.async of 8 B)
};

__device__ __forceinline__ void producer_item(const Args& p, int item, int e, int lane, Producer& pr) {
  set_item(p, item, e, pr.c);
  const size_t rb = static_cast<uint32_t>(p.K) / 2;
  pr.w0 = static_cast<const uint8_t*>(p.w_table[pr.c.e]) + (pr.c.n0 + (lane >> 1)) * rb + (lane & 1) * 16;
  pr.s0 = static_cast<const uint8_t*>(p.s_table[pr.c.e]) +
          static_cast<size_t>(pr.c.n0 + (lane & (kRows - 1))) * static_cast<uint32_t>(p.scale_cols);
  pr.w = pr.w0;
  pr.s = pr.s0;
  pr.s_aligned = (reinterpret_cast<uintptr_t>(pr.s0) & 7) == 0;  // scale_cols % 8 == 0 (K % 256)
}

// The producer's next stage of its item (and pass); true when the item is done (all its passes).
template <typename P>
__device__ __forceinline__ bool producer_next_stage(const Args& p, P& pr) {
  pr.w += kRowBytes;
  pr.s += 8;
  if (++pr.c.kc < p.chunks) return false;
  pr.c.kc = 0;
  pr.w = pr.w0;
  pr.s = pr.s0;
  return ++pr.c.pass >= pr.c.passes;
}

__device__ __forceinline__ void producer_advance(const Args& p, int end, int lane, Producer& pr) {
  if (!producer_next_stage(p, pr)) return;
  if (pr.c.item + 1 < end) producer_item(p, pr.c.item + 1, pr.c.e, lane, pr);
  else pr.c.item = end;
}

// 8 scale bytes of a row: a cp.async when the source is 8-byte aligned, else plain loads and a
// shared store (slow, correct).
__device__ __forceinline__ void copy_scales8(const uint8_t* src, uint8_t* dst, bool aligned) {
  if (aligned) {
    emma::cp_async8(emma::smem_u32(dst), src);
    return;
  }
  uint2 v{0, 0};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t b = __ldg(src + j);
    if (j < 4) v.x |= b << (8 * j);
    else v.y |= b << (8 * (j - 4));
  }
  *reinterpret_cast<uint2*>(dst) = v;
}

// The stage's cp.async copies: this lane's 4 × 16 B of weights (dst: the slot + its swizzled
// offsets, unit u of row r stored at u ^ (r & 7) as in sessions 6 / 7) and, lanes 0..15, the 8
// scale bytes of row lane (plain loads and a shared store when the expert's scale rows are not
// 8-byte aligned: slow, correct). Sector j of a row is copied by instruction j, so each
// instruction reads 16 whole 32-byte sectors.
__device__ __forceinline__ void issue_stage(const Producer& pr, uint32_t w_slot, uint8_t* s_slot,
                                            const uint32_t (&dst)[4], int lane) {
#pragma unroll
  for (int j = 0; j < 4; ++j) emma::cp_async16(w_slot + dst[j], pr.w + 32 * j);
  if (lane < kRows) copy_scales8(pr.s, s_slot + lane * 8, pr.s_aligned);
}

// emma::decode_e2m1x8 with one instruction fewer (the same four f16x2 words for every u, checked
// exhaustively on the host): the odd nibbles' high bytes are a bit-select of u >> 3 (value bits
// into 1..3) and u (the sign, bit 7) under one mask, then the f16 mask — no pre-masking of u.
__device__ __forceinline__ void decode_e2m1x8(uint32_t u, uint32_t (&d)[4]) {
  constexpr uint32_t kM = 0x0E0E0E0Eu;
  const uint32_t pe = ((u << 1) & kM) | ((u << 4) & 0x80808080u);
  const uint32_t po = (((u >> 3) & kM) | (u & ~kM)) & 0x8E8E8E8Eu;
  d[0] = __byte_perm(pe, 0u, 0x2404);
  d[1] = __byte_perm(po, 0u, 0x2404);
  d[2] = __byte_perm(pe, 0u, 0x3414);
  d[3] = __byte_perm(po, 0u, 0x3414);
}

// The B column of this lane for each n-tile of a pass: token 2·nt + g / 3 of the pass, plane
// g % 3; an absent token (or g ≥ 6) reads the pass's first token (its D column is never used).
// col[nt] already points at this lane's 16 bytes of block 0 (+ t · 8 halves).
struct PassB {
  const uint16_t* col[kMaxNT];
  int nt = 1;  // n-tiles in use (1, 2 or 4)
};

__device__ __forceinline__ void setup_pass_b(const Args& p, const Cursor& c, int lane, PassB& pb) {
  const int g = lane >> 2, t = lane & 3;
  const int base = c.pass * kPassTokens;
  const int cnt = min(kPassTokens, c.m - base);
  const int tiles = (cnt + 1) / 2;
  pb.nt = tiles <= 1 ? 1 : tiles <= 2 ? 2 : 4;
#pragma unroll
  for (int nt = 0; nt < kMaxNT; ++nt) {
    int tb = 2 * nt + g / 3;  // token of the column (pass-relative)
    if (g >= 6 || tb >= cnt) tb = 0;
    const int slot = __ldg(p.perm + c.pos0 + base + tb);
    const int64_t xrow = slot / p.x_div;
    pb.col[nt] = p.planes + (g % 3) * p.plane + xrow * p.K + t * 8;
  }
}

// 16 bytes of B at p (k-step 0's b0, b1 then k-step 1's of one block; the planes are stored with
// each 8 k permuted, experts_mma.cuh). A volatile asm, so that it stays where it is written
// between the (volatile) MMAs — the window is the program order (a plain __ldg is hoisted, with
// its address arithmetic, to the top of the stage); p = a stage base + a constant, which ptxas
// folds into the load's immediate offset.
__device__ __forceinline__ uint4 load_b(const uint16_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// One stage (16 rows × 256 k, stage kc of the pass) against NT n-tiles with the rolling B window
// bq (slot b % D holds block b of this stage on entry; refilled with block b + D). ldm[i]: this
// lane's ldmatrix offsets of blocks 2i, 2i + 1 in a slot.
template <int NT, bool kExact>
__device__ __forceinline__ void compute_stage(uint32_t w_slot, const uint8_t* ss, const PassB& pb, int kc,
                                              bool more, const uint32_t (&ldm)[4], int lane,
                                              float (&acc)[kMaxNT][4], uint4 (&bq)[window<NT>()][NT]) {
  constexpr int D = window<NT>();
  const int g = lane >> 2;
  uint2 sc[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) sc[h] = *reinterpret_cast<const uint2*>(ss + (g + 8 * h) * 8);
  const uint16_t* cb[NT];  // this stage's block 0 of each column
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) cb[nt] = pb.col[nt] + kc * kChunkK;
  uint32_t q[4];
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    if (b % 2 == 0) emma::ldmatrix_x4(q, w_slot + ldm[b / 2]);
    const int bb = b & 1;
    uint32_t dg[4], d8[4];  // rows g and g + 8
    decode_e2m1x8(q[2 * bb], dg);
    decode_e2m1x8(q[2 * bb + 1], d8);
    const float s_g = emma::stage_scale<kExact>(sc[0], b), s_g8 = emma::stage_scale<kExact>(sc[1], b);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint4 bv = bq[b % D][nt];
      float d[4];
      emma::mma_f16_zero(d, dg[0], d8[0], dg[1], d8[1], bv.x, bv.y);
      emma::mma_f16(d, dg[2], d8[2], dg[3], d8[3], bv.z, bv.w);
      acc[nt][0] = fmaf(d[0], s_g, acc[nt][0]);
      acc[nt][1] = fmaf(d[1], s_g, acc[nt][1]);
      acc[nt][2] = fmaf(d[2], s_g8, acc[nt][2]);
      acc[nt][3] = fmaf(d[3], s_g8, acc[nt][3]);
    }
    // Refill: block b + D of the pass (this stage's, or the next stage's first ones).
    if (b + D < kBlocks || more) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) bq[b % D][nt] = load_b(cb[nt] + (b + D) * 32);
    }
  }
}

// This lane's constant offsets in a 16-row × 128 B weight slot: its 4 cp.async destinations
// (row lane / 2, 32-byte sector j, half lane % 2; 16-byte unit u of row r stored at u ^ (r & 7))
// and its ldmatrix addresses of blocks 2i, 2i + 1 (matrix q = lane / 8: rows +8 for q odd, unit +1
// for q ≥ 2).
__device__ __forceinline__ void ring_offsets(int lane, uint32_t (&dst)[4], uint32_t (&ldm)[4]) {
  const int row = lane >> 1, h = lane & 1;
#pragma unroll
  for (int j = 0; j < 4; ++j) dst[j] = row * kRowBytes + (((2 * j + h) ^ (row & 7)) << 4);
  const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8;
  const int lunit = lane >> 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) ldm[i] = lrow * kRowBytes + (((2 * i + lunit) ^ (lrow & 7)) << 4);
}

// Warp `warp` of this CTA (warps_per_cta per CTA): its range [i0, i1) of the T = active tiles ×
// Args::groups items, [T·w / W, T·(w+1) / W) of the grid's W warps.
__device__ __forceinline__ void warp_range(const Args& p, int warps_per_cta, int warp, int& i0, int& i1) {
  const int n_active = __ldg(p.act_off + p.num_experts);
  const int64_t T = static_cast<int64_t>(n_active) * p.groups;
  const int64_t W = static_cast<int64_t>(gridDim.x) * warps_per_cta;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * warps_per_cta + warp;
  i0 = static_cast<int>(T * w / W);
  i1 = static_cast<int>(T * (w + 1) / W);
}

// The expert holding tile d: the last e with act_off[e] <= d (binary search).
__device__ __forceinline__ int first_expert(const Args& p, int d) {
  int lo = 0, hi = p.num_experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (__ldg(p.act_off + mid) <= d) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// The ring's state in a warp: the producer, the next slots to fill / consume, this lane's
// constant smem offsets.
struct Ring {
  Producer pr;
  int pslot = 0, cslot = 0;
  uint32_t w_base = 0;              // shared address of weight slot 0
  uint8_t* s_base = nullptr;        // scale slot 0
  uint32_t dst[4];                  // cp.async destinations of this lane in a weight slot
  uint32_t ldm[4];                  // ldmatrix addresses of this lane in a weight slot
};

// All stages of one pass (NT n-tiles): per stage, wait for it, issue the producer's next stage
// into the slot the previous stage freed, compute.
template <int NT, int kStages>
__device__ __forceinline__ void run_pass(const Args& p, int i1, Ring& r, const PassB& pb, int lane,
                                         float (&acc)[kMaxNT][4]) {
  constexpr int D = window<NT>();
  uint4 bq[D][NT];
#pragma unroll
  for (int j = 0; j < D; ++j)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) bq[j][nt] = load_b(pb.col[nt] + j * 32);
#pragma unroll 1
  for (int kc = 0; kc < p.chunks; ++kc) {
    emma::cp_async_wait<kStages - 2>();
    __syncwarp();  // stage cslot visible to every lane; every lane is done with the slot pslot reuses
    if (r.pr.c.item < i1) {
      issue_stage(r.pr, r.w_base + r.pslot * kWStage, r.s_base + r.pslot * kSStage, r.dst, lane);
      producer_advance(p, i1, lane, r.pr);
    }
    emma::cp_async_commit();
    r.pslot = r.pslot + 1 == kStages ? 0 : r.pslot + 1;
    const uint32_t w_slot = r.w_base + r.cslot * kWStage;
    const uint8_t* s_slot = r.s_base + r.cslot * kSStage;
    r.cslot = r.cslot + 1 == kStages ? 0 : r.cslot + 1;
    // Fast scale decode unless some scale of the stage's 16 rows is 0x00 or 0xFF (lane L checks
    // row L % 16; both decodes give the same value for every other code).
    const uint2 mine = *reinterpret_cast<const uint2*>(s_slot + (lane & (kRows - 1)) * 8);
    const bool more = kc + 1 < p.chunks;
    if (__any_sync(0xffffffffu, emma::has_00_or_ff(mine.x) || emma::has_00_or_ff(mine.y)))
      compute_stage<NT, true>(w_slot, s_slot, pb, kc, more, r.ldm, lane, acc, bq);
    else
      compute_stage<NT, false>(w_slot, s_slot, pb, kc, more, r.ldm, lane, acc, bq);
  }
}

// Persistent grid of the full residency; warp w owns items [T·w / W, T·(w+1) / W) of the flat
// list (tile-major, 16-row groups) and streams them through its own kStages-deep cp.async ring
// (no block-level synchronisation).
template <int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) experts_mma_v3_kernel(const Args p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Routing (moe_group's output) was complete before the split kernel started (an ordinary
  // launch), so it may be read before the wait, as session 7 does.
  int i0, i1;
  warp_range(p, kWarps, warp, i0, i1);
  if (i0 >= i1) {  // warp-uniform; nothing below synchronises more than the warp
    pdl::wait();
    return;
  }
  Ring r;
  uint8_t* mine = smem + warp * kStages * kStageBytes;
  r.w_base = emma::smem_u32(mine);        // [kStages][kWStage]
  r.s_base = mine + kStages * kWStage;    // [kStages][kSStage]
  ring_offsets(lane, r.dst, r.ldm);
  producer_item(p, i0, first_expert(p, i0 / p.groups), lane, r.pr);  // later items scan forward
  Cursor cc = r.pr.c;
#pragma unroll 1
  for (int s = 0; s < kStages - 1; ++s) {
    if (r.pr.c.item < i1) {
      issue_stage(r.pr, r.w_base + r.pslot * kWStage, r.s_base + r.pslot * kSStage, r.dst, lane);
      producer_advance(p, i1, lane, r.pr);
    }
    emma::cp_async_commit();
    r.pslot = r.pslot + 1 == kStages ? 0 : r.pslot + 1;
  }
  // The x planes and row exponents come from the split kernel this one may overlap (PDL).
  pdl::wait();
  float acc[kMaxNT][4];
  PassB pb;
#pragma unroll 1
  while (cc.item < i1) {
    setup_pass_b(p, cc, lane, pb);
#pragma unroll
    for (int nt = 0; nt < kMaxNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][i] = 0.f;
    if (pb.nt == 1) {
      run_pass<1, kStages>(p, i1, r, pb, lane, acc);
      emma2::finish_pass<1>(p, cc, lane, acc);
    } else if (pb.nt == 2) {
      run_pass<2, kStages>(p, i1, r, pb, lane, acc);
      emma2::finish_pass<2>(p, cc, lane, acc);
    } else {
      run_pass<4, kStages>(p, i1, r, pb, lane, acc);
      emma2::finish_pass<4>(p, cc, lane, acc);
    }
    if (++cc.pass < cc.passes) continue;
    if (cc.item + 1 < i1) set_item(p, cc.item + 1, cc.e, cc);
    else cc.item = i1;
  }
  emma::cp_async_wait<0>();
}

}  // namespace deepinfer::cuda::kernels::emma3
