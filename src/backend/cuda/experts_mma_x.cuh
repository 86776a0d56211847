// Routed experts of decode batches on the tensor cores, session 10 (issue 7, helper experts):
// session 8's v3 (experts_mma_v3.cuh: rolling B register window, per-lane producer pointers,
// per-warp cp.async ring, persistent full-residency grid, PDL behind the x split) generalised to
// warp items of kMT m-tiles (16·kMT weight rows that share every B fragment) and built with rings
// and carveouts that leave L1 room for the x planes.
//
// Why: per 16-row item a warp reads, besides its weights (16 rows × 128 B = 2 KB per 256-k stage),
// B = the x planes of its tokens: 3 planes × 256 k × 2 B = 1.5 KB per token per stage. At batch
// 16 (~1.2 tokens per active expert) that is 0.75–1.5 B of L1/L2 traffic per weight byte, re-read
// for every 16-row item of the expert (256 items of gate_up); session 6's 32-row items read half
// of it, and sessions 7 / 8's 16-row kernels (more warps, fewer instructions per byte) gained
// less than their instruction savings promised (v3: −45 % instructions per stage, −6…12 % time),
// while session 6 stays ahead of them once experts hold several tokens (batch 64). v3 also runs
// with the shared-memory carveout at its maximum (228 KB, ~204 KB of rings at 12 warps per SM), so
// L1 keeps ~28 KB for the planes, which several warps of one CTA (consecutive items of the same
// expert, the same tokens) read at about the same k. So:
//  - kMT m-tiles per item (1, 2 or 4: 16, 32 or 64 rows): each B fragment serves kMT·16 rows —
//    kMT times fewer B loads per weight byte (decode, MMAs and fma promotions per weight byte as
//    in v3; one ldmatrix.x4 per m-tile per two blocks);
//  - rings of kStages stages of kMT·2 KB (+ kMT·128 B of scales) and the carveout asked for just
//    the residency (experts_mma.cu, carveout_percent), so L1 keeps room for the x planes;
//  - kCoop: a stage's scales decoded once per warp into shared memory (a word per lane) instead
//    of 16 per lane (helps the 32- / 64-row builds at 255 registers, not the 16-row one);
//  - kBalanced (32-row items): warp ranges cut in 16-row units (a lone unit runs as a 16-row item);
//  - kMemOnly (bench only): the weight stream alone, the access pattern's own ceiling.
// Built (experts_mma.h): 6 = 16 rows, 12 warps per SM, 3 stages; 7 = 32 rows, 8 warps, 4 stages,
// kCoop, kBalanced; 8 = 64 rows, 8 warps, 2 stages, kCoop. H200 (session 10 checkpoint 2, bench_ops
// µs with a clean L2, 4,258 GB/s copy; before → after = the model's pick before → experts_mma_
// pick_x): gate_up batch 1 / 8 / 16: 39.4 → 29.8 (6), 192.2 → 158.7 (8), 374.9 → 377.7 (7); down
// 23.2 → 20.0, 108.8 → 82.7, 219.5 → 175.8 (6) — 42–55 % of copy at batch 8–16, where the weight
// stream alone (kMemOnly) reaches 74–80 %. Tried and dropped: an L2 bulk prefetch of each item
// (slower everywhere), L1 evict_last on the B loads (no gain), 12-warp 32-row and 16-warp 16-row
// builds (slower).
// Session 13 (helper experts1, batch 1): kIlp / kIlpW (more independent MMAs per stage: no gain
// on the H200 — ptxas already interleaves the blocks), kEarly (a start from one round of loads,
// the first pass's B setup before the PDL wait, the output slot before the pass) and kChain
// (launch_dependents after the PDL wait; the x split a PDL launch): ~1 µs per kernel at batch 1;
// kTiled (bench probe: contiguous 2 KB stages stream at most 3 % faster). Same bits throughout.
// Bits: every output is computed exactly as in sessions 6–8 — per 32-k block the two k-steps from
// zero in the MMA accumulator (same A / B registers: same decode, same k permutation), acc =
// fma(partial, scale, acc) in k order, the plane columns summed (h2 + h1) + h0, × 2^(14 − c) —
// so these variants equal variants 1–5 bit for bit (cuda_experts_mma_test, memcmp), and
// --batch-invariant may use them for any slot count.
#pragma once

#include "backend/cuda/experts_mma_v3.cuh"

namespace deepinfer::cuda::kernels::emmx {

using emma::Args;
using emma::kChunkK;
using emma::kMaxNT;
using emma::kRowBytes;
using emma2::Cursor;
using emma3::PassB;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlocks = kChunkK / 32;  // 8 scale blocks per stage
constexpr int kTile = 16;              // rows of an m-tile
constexpr int kTileBytes = kTile * kRowBytes;  // 2048 B of weights per m-tile per stage

template <int kMT>
struct Geo {
  static constexpr int kRows = kTile * kMT;            // weight rows of a warp item
  static constexpr int kWStage = kMT * kTileBytes;     // weight bytes per stage
  static constexpr int kSStage = kRows * 8;            // scale bytes per stage
  static constexpr int kStageBytes = kWStage + kSStage;
};

// Shared memory of a CTA: the warps' rings, and with kCoop each warp's decoded scales of one stage
// (kMT·16 rows × 8 floats).
constexpr int smem_bytes(int kMT, int kStages, bool kCoop) {
  return kWarps * (kStages * kMT * (kTileBytes + kTile * 8) + (kCoop ? kMT * kTile * 32 : 0));
}

// Four ue8m0 scale bytes (word w, byte j = block j) as the f32 bit patterns of 2^(e − 127), every
// code exact (255: NaN, 0: 2^-127) — the values of emma::stage_scale<true>; codes 1..254 by a shift
// into the exponent field (emma::stage_scale<false>'s), the rare word holding 0 or 255 byte by byte.
__device__ __forceinline__ uint4 decode_scales4(uint32_t w) {
  uint4 f;
  f.x = (w << 23) & 0x7F800000u;
  f.y = (w << 15) & 0x7F800000u;
  f.z = (w << 7) & 0x7F800000u;
  f.w = (w >> 1) & 0x7F800000u;
  if (emma::has_00_or_ff(w)) {
    uint32_t v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t e = (w >> (8 * j)) & 0xFFu;
      v[j] = e == 0xFFu ? 0x7FC00000u : (e == 0 ? 0x00400000u : e << 23);
    }
    f = make_uint4(v[0], v[1], v[2], v[3]);
  }
  return f;
}

// Kernel options (template kF, a bit set): kBalanced — warp ranges in 16-row units (32-row
// items only, see set_item).
constexpr int kBalanced = 1;
// kMemOnly — bench only (experts_mma_memonly): the same grid, items, producer and ring, but no
// decode / MMA / B loads / outputs (each stage is consumed by one shared load per lane): the
// weight stream's own speed for this access pattern, an upper bound for the kernel.
constexpr int kMemOnly = 2;
// kTiled (session 13, bench only, with kMemOnly and kMT = 1): the same stream but each stage reads
// 2 KB CONTIGUOUS bytes of the warp's 32 KB item (stage kc: bytes [2048·kc, 2048·kc + 2048))
// instead of 128 B of each of its 16 rows (2 KB apart): the speed a weight layout tiled per stage
// (16 rows × 256 k stored together) would stream at. Wrong data for the math: memonly only.
constexpr int kTiled = 64;

// kIlp (session 13) — passes of one n-tile (1–2 tokens: batch 1) of 16-row items compute each half
// stage (4 blocks) as: the 4 blocks' first MMAs (k-step 0, from zero), then their second MMAs,
// then the fma promotions of the 4 blocks in block order (compute_stage_ilp) — the same operations
// on the same operands as compute_stage, so the same bits; with in-order issue a block's second
// MMA no longer waits right behind its first, nor its fmas behind both.
constexpr int kIlp = 4;
// kIlpW (session 13) — the same for the whole stage (compute_stage_w): the stage's two scale words
// per row decoded per lane at its top (decode_scales4: every code exact — the values of
// stage_scale<true>, which equal stage_scale<false>'s for codes 1..254 — so no warp vote and no
// second code path), its 4 ldmatrix issued together, the 8 blocks' k-step-0 MMAs, their k-step-1
// MMAs, then the 32 fmas in block order. Same operations on the same operands: the same bits.
constexpr int kIlpW = 8;

// kEarly (session 13) — a shorter start and end of each warp's work: the warp's range and first
// expert from one round of independent loads (warp_start: act_off[E] and act_off[1 .. E − 1]
// spread over the lanes, the expert = a warp count, instead of a load of act_off[E] and then a
// binary search of ~8 dependent loads); the first pass's B columns (perm → slot → plane pointers)
// set up before the PDL wait (the routing is complete before the x split starts: only the B loads
// wait); in passes of one n-tile the output slot and row exponent loaded before the pass, not after
// it. The work and every operation on it are unchanged: the same bits.
constexpr int kEarly = 16;
// kChain (session 13) — every CTA lets the next kernel of the stream (swiglu / combine_slots, PDL
// launches) start right after its own PDL wait: their launch and CTA placement happen while this
// grid runs (they take SM resources only as this grid's CTAs retire; their wait() still waits for
// this grid's completion). With it experts_mma launches the x split as a PDL dependent too
// (split_kernel: wait, then launch_dependents): no launch gap behind a PDL kernel. Same bits.
constexpr int kChain = 32;

// warp_range + first_expert (kEarly): [i0, i1) as emma3::warp_range, e0 = the last e < E with
// act_off[e] <= i0 / groups (act_off is non-decreasing from act_off[0] = 0: the count of
// e in 1 .. E − 1 with act_off[e] <= d). The first 8·32 entries are loaded before act_off[E] is
// needed (no dependence among the loads); more experts loop.
__device__ __forceinline__ void warp_start(const Args& p, int warps_per_cta, int warp, int lane,
                                           int& i0, int& i1, int& e0) {
  constexpr int kPer = 8;
  const int E = p.num_experts;
  int v[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int e = 1 + lane + 32 * j;
    v[j] = e < E ? __ldg(p.act_off + e) : 0x7FFFFFFF;
  }
  const int n_active = __ldg(p.act_off + E);
  const int64_t T = static_cast<int64_t>(n_active) * p.groups;
  const int64_t W = static_cast<int64_t>(gridDim.x) * warps_per_cta;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * warps_per_cta + warp;
  i0 = static_cast<int>(T * w / W);
  i1 = static_cast<int>(T * (w + 1) / W);
  const int d = i0 / p.groups;
  int cnt = 0;
#pragma unroll
  for (int j = 0; j < kPer; ++j) cnt += v[j] <= d;
#pragma unroll 1
  for (int e = 1 + lane + 32 * kPer; e < E; e += 32) cnt += __ldg(p.act_off + e) <= d;
  e0 = __reduce_add_sync(0xffffffffu, cnt);
}

// A warp's position: emma2::Cursor and the m-tiles of the current item (kMT, or with kBal 1 at
// an odd start / a lone last unit of the warp's range).
struct XCursor : Cursor {
  int mts = 1;
};

// Item → (expert, tile rows) as emma3::set_item, for items of kMT·16 rows (Args::groups =
// N / (kMT·16)); kBal (kMT = 2): item = a 16-row unit (Args::groups = N / 16), the warp's range is
// cut in units and the item spans units item, item + 1 (mts = 2) unless item is odd or the last
// unit of the range (mts = 1): ranges of equal units instead of equal 32-row items (at batch 16
// a whole 32-row item of imbalance is ~8 % of a warp's work). Pairs never straddle tiles (N / 16
// is even).
template <int kMT, int kF>
__device__ __forceinline__ void set_item(const Args& p, int item, int e, int end, XCursor& c) {
  constexpr bool kBal = (kF & kBalanced) != 0;
  static_assert(!kBal || kMT == 2, "unit-balanced ranges are implemented for 32-row items");
  c.mts = kBal ? ((item & 1) != 0 || item + 1 >= end ? 1 : 2) : kMT;
  const int d = item / p.groups;
  emma3::set_tile(p, item, d, e, c);
  c.n0 = (item - d * p.groups) * (kBal ? kTile : Geo<kMT>::kRows);
}

// The next item index: + the units this item spans (kBalanced), else + 1 (items of kMT·16 rows).
template <int kF>
__device__ __forceinline__ int item_step(const XCursor& c) {
  return (kF & kBalanced) != 0 ? c.mts : 1;
}

// The producer: its cursor and this lane's copy sources of m-tile 0 for the current stage
// (m-tile mt: + mt·16 rows).
struct Producer {
  XCursor c;
  const uint8_t* w = nullptr;   // weights: row n0 + lane / 2, byte 16 · (lane % 2) of stage kc
  const uint8_t* s = nullptr;   // scales: row n0 + lane % min(rows, 32), byte 8 · kc
  const uint8_t* w0 = nullptr;  // the same at stage 0 (a pass restarts there)
  const uint8_t* s0 = nullptr;
  uint32_t tile_step = 0;       // bytes between m-tiles (16 rows)
  uint32_t srow32 = 0;          // scale bytes of 32 rows
  bool s_aligned = true;
};

template <int kMT, int kF>
__device__ __forceinline__ void producer_item(const Args& p, int item, int e, int end, int lane,
                                              Producer& pr) {
  set_item<kMT, kF>(p, item, e, end, pr.c);
  const uint32_t rb = static_cast<uint32_t>(p.K) / 2;
  constexpr int kSRows = Geo<kMT>::kRows < 32 ? Geo<kMT>::kRows : 32;
  pr.w0 = static_cast<const uint8_t*>(p.w_table[pr.c.e]) + static_cast<size_t>(pr.c.n0 + (lane >> 1)) * rb +
          (lane & 1) * 16;
  pr.s0 = static_cast<const uint8_t*>(p.s_table[pr.c.e]) +
          static_cast<size_t>(pr.c.n0 + (lane & (kSRows - 1))) * static_cast<uint32_t>(p.scale_cols);
  pr.w = pr.w0;
  pr.s = pr.s0;
  pr.tile_step = kTile * rb;
  pr.srow32 = 32u * static_cast<uint32_t>(p.scale_cols);
  pr.s_aligned = (reinterpret_cast<uintptr_t>(pr.s0) & 7) == 0;  // scale_cols % 8 == 0 (K % 256)
}

template <int kMT, int kF>
__device__ __forceinline__ void producer_advance(const Args& p, int end, int lane, Producer& pr) {
  if (!emma3::producer_next_stage(p, pr)) return;
  const int next = pr.c.item + item_step<kF>(pr.c);
  if (next < end) producer_item<kMT, kF>(p, next, pr.c.e, end, lane, pr);
  else pr.c.item = end;
}

// The stage's cp.async copies: per m-tile this lane's 4 × 16 B of one row into the m-tile's 2 KB
// region of the slot (v3's swizzle: unit u of row r at u ^ (r & 7)); the scale rows (8 B each)
// by lanes 0..min(rows, 32) − 1, one or two rounds (plain loads and shared stores when the
// expert's scale rows are not 8-byte aligned: slow, correct).
template <int kMT, int kF = 0>
__device__ __forceinline__ void issue_stage(const Producer& pr, uint32_t w_slot, uint8_t* s_slot,
                                            const uint32_t (&dst)[4], int lane) {
  if constexpr ((kF & kTiled) != 0) {
    static_assert(kMT == 1 && (kF & kMemOnly) != 0, "kTiled: a memonly probe of 16-row items");
    const uint8_t* item =
        pr.w0 - (lane >> 1) * (pr.tile_step >> 4) - (lane & 1) * 16;  // row n0, byte 0
#pragma unroll
    for (int j = 0; j < 4; ++j)
      emma::cp_async16(w_slot + dst[j], item + pr.c.kc * kTileBytes + 512 * j + 16 * lane);
  } else {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      if (mt == 0 || mt < pr.c.mts) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          emma::cp_async16(w_slot + mt * kTileBytes + dst[j], pr.w + mt * pr.tile_step + 32 * j);
      }
    }
  }
  constexpr int kRounds = Geo<kMT>::kRows < 32 ? 1 : Geo<kMT>::kRows / 32;
  const int rows = kTile * pr.c.mts;  // rows of this item (kMT·16, or 16 for a lone unit)
  if (rows >= 32 || lane < rows) {
#pragma unroll
    for (int r = 0; r < kRounds; ++r)
      emma3::copy_scales8(pr.s + r * pr.srow32, s_slot + (lane + 32 * r) * 8, pr.s_aligned);
  }
}

// One stage (kMT·16 rows × 256 k, stage kc of the pass) against NT n-tiles with v3's rolling B
// window bq (slot b % D holds block b of this stage on entry; refilled with block b + D); every
// B fragment feeds the MMAs of all kMT m-tiles. ldm[i]: this lane's ldmatrix offsets of blocks
// 2i, 2i + 1 inside an m-tile's region.
// kCoop: the scales come decoded from sf (the warp's scratch: [rows][8] floats of this stage),
// four blocks per 16-byte load; else from the stage's scale bytes ss, decoded per lane (v3's).
// MTA ≤ kMT: the m-tiles of this item (acc has kMT).
template <int kMT, int MTA, int NT, bool kCoop, bool kExact>
__device__ __forceinline__ void compute_stage(uint32_t w_slot, const uint8_t* ss, const float* sf,
                                              const PassB& pb, int kc, bool more, const uint32_t (&ldm)[4], int lane,
                                              float (&acc)[kMT][kMaxNT][4],
                                              uint4 (&bq)[emma3::window<NT>()][NT]) {
  constexpr int D = emma3::window<NT>();
  const int g = lane >> 2;
  uint2 sc[MTA][2];
  float fs[MTA][2][4];  // kCoop: rows g, g + 8 of each m-tile, blocks 4·(b / 4) … + 3
  if constexpr (!kCoop) {
#pragma unroll
    for (int mt = 0; mt < MTA; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        sc[mt][h] = *reinterpret_cast<const uint2*>(ss + (kTile * mt + g + 8 * h) * 8);
  }
  const uint16_t* cb[NT];  // this stage's block 0 of each column
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) cb[nt] = pb.col[nt] + kc * kChunkK;
  uint32_t q[MTA][4];
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    if (b % 2 == 0) {
#pragma unroll
      for (int mt = 0; mt < MTA; ++mt) emma::ldmatrix_x4(q[mt], w_slot + mt * kTileBytes + ldm[b / 2]);
    }
    if constexpr (kCoop) {
      if (b % 4 == 0) {
#pragma unroll
        for (int mt = 0; mt < MTA; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
          {
            const float4 v = *reinterpret_cast<const float4*>(sf + (kTile * mt + g + 8 * h) * 8 + b);
            fs[mt][h][0] = v.x;
            fs[mt][h][1] = v.y;
            fs[mt][h][2] = v.z;
            fs[mt][h][3] = v.w;
          }
      }
    }
    const int bb = b & 1;
#pragma unroll
    for (int mt = 0; mt < MTA; ++mt) {
      uint32_t dg[4], d8[4];  // rows g and g + 8 of m-tile mt
      emma3::decode_e2m1x8(q[mt][2 * bb], dg);
      emma3::decode_e2m1x8(q[mt][2 * bb + 1], d8);
      float s_g, s_g8;
      if constexpr (kCoop) {
        s_g = fs[mt][0][b % 4];
        s_g8 = fs[mt][1][b % 4];
      } else {
        s_g = emma::stage_scale<kExact>(sc[mt][0], b);
        s_g8 = emma::stage_scale<kExact>(sc[mt][1], b);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint4 bv = bq[b % D][nt];
        float d[4];
        emma::mma_f16_zero(d, dg[0], d8[0], dg[1], d8[1], bv.x, bv.y);
        emma::mma_f16(d, dg[2], d8[2], dg[3], d8[3], bv.z, bv.w);
        acc[mt][nt][0] = fmaf(d[0], s_g, acc[mt][nt][0]);
        acc[mt][nt][1] = fmaf(d[1], s_g, acc[mt][nt][1]);
        acc[mt][nt][2] = fmaf(d[2], s_g8, acc[mt][nt][2]);
        acc[mt][nt][3] = fmaf(d[3], s_g8, acc[mt][nt][3]);
      }
    }
    // Refill: block b + D of the pass (this stage's, or the next stage's first ones).
    if (b + D < kBlocks || more) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) bq[b % D][nt] = emma3::load_b(cb[nt] + (b + D) * 32);
    }
  }
}

// compute_stage for kMT = MTA = 1, one n-tile, scales decoded per lane (kIlp): per half stage the
// 4 blocks' k-step-0 MMAs, their k-step-1 MMAs, then the fmas in block order. The B window as
// compute_stage's (one n-tile: D = 8, every refill is the next stage's block b, issued after both
// of block b's MMAs).
template <bool kExact>
__device__ __forceinline__ void compute_stage_ilp(uint32_t w_slot, const uint8_t* ss,
                                                  const PassB& pb, int kc, bool more,
                                                  const uint32_t (&ldm)[4], int lane,
                                                  float (&acc)[1][kMaxNT][4],
                                                  uint4 (&bq)[emma3::window<1>()][1]) {
  constexpr int D = emma3::window<1>();
  static_assert(D == kBlocks, "one n-tile keeps a whole stage of B");
  const int g = lane >> 2;
  uint2 sc[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) sc[h] = *reinterpret_cast<const uint2*>(ss + (g + 8 * h) * 8);
  const uint16_t* cb = pb.col[0] + kc * kChunkK;  // this stage's block 0
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float d[4][4];
    uint32_t hi[4][4];  // block j's k-step-1 A registers: dg[2], d8[2], dg[3], d8[3]
    uint32_t q[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int b = 4 * half + j;
      if (j % 2 == 0) emma::ldmatrix_x4(q, w_slot + ldm[b / 2]);
      const int bb = b & 1;
      uint32_t dg[4], d8[4];  // rows g and g + 8
      emma3::decode_e2m1x8(q[2 * bb], dg);
      emma3::decode_e2m1x8(q[2 * bb + 1], d8);
      const uint4 bv = bq[b][0];
      emma::mma_f16_zero(d[j], dg[0], d8[0], dg[1], d8[1], bv.x, bv.y);
      hi[j][0] = dg[2];
      hi[j][1] = d8[2];
      hi[j][2] = dg[3];
      hi[j][3] = d8[3];
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int b = 4 * half + j;
      const uint4 bv = bq[b][0];
      emma::mma_f16(d[j], hi[j][0], hi[j][1], hi[j][2], hi[j][3], bv.z, bv.w);
      if (more) bq[b][0] = emma3::load_b(cb + (b + D) * 32);  // the next stage's block b
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int b = 4 * half + j;
      const float s_g = emma::stage_scale<kExact>(sc[0], b),
                  s_g8 = emma::stage_scale<kExact>(sc[1], b);
      acc[0][0][0] = fmaf(d[j][0], s_g, acc[0][0][0]);
      acc[0][0][1] = fmaf(d[j][1], s_g, acc[0][0][1]);
      acc[0][0][2] = fmaf(d[j][2], s_g8, acc[0][0][2]);
      acc[0][0][3] = fmaf(d[j][3], s_g8, acc[0][0][3]);
    }
  }
}

// compute_stage for kMT = MTA = 1 and one n-tile, the whole stage at once (kIlpW; see there).
__device__ __forceinline__ void compute_stage_w(uint32_t w_slot, const uint8_t* ss, const PassB& pb,
                                                int kc, bool more, const uint32_t (&ldm)[4],
                                                int lane, float (&acc)[1][kMaxNT][4],
                                                uint4 (&bq)[emma3::window<1>()][1]) {
  constexpr int D = emma3::window<1>();
  static_assert(D == kBlocks, "one n-tile keeps a whole stage of B");
  const int g = lane >> 2;
  uint32_t q[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) emma::ldmatrix_x4(q[i], w_slot + ldm[i]);
  const uint2 sv0 = *reinterpret_cast<const uint2*>(ss + g * 8);        // row g
  const uint2 sv1 = *reinterpret_cast<const uint2*>(ss + (g + 8) * 8);  // row g + 8
  const uint16_t* cb = pb.col[0] + kc * kChunkK;                        // this stage's block 0
  float d[kBlocks][4];
  uint32_t hi[kBlocks][4];  // block b's k-step-1 A registers: dg[2], d8[2], dg[3], d8[3]
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    const int bb = b & 1;
    uint32_t dg[4], d8[4];  // rows g and g + 8
    emma3::decode_e2m1x8(q[b / 2][2 * bb], dg);
    emma3::decode_e2m1x8(q[b / 2][2 * bb + 1], d8);
    const uint4 bv = bq[b][0];
    emma::mma_f16_zero(d[b], dg[0], d8[0], dg[1], d8[1], bv.x, bv.y);
    hi[b][0] = dg[2];
    hi[b][1] = d8[2];
    hi[b][2] = dg[3];
    hi[b][3] = d8[3];
  }
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    const uint4 bv = bq[b][0];
    emma::mma_f16(d[b], hi[b][0], hi[b][1], hi[b][2], hi[b][3], bv.z, bv.w);
    if (more) bq[b][0] = emma3::load_b(cb + (b + D) * 32);  // the next stage's block b
  }
  const uint4 f[4] = {decode_scales4(sv0.x), decode_scales4(sv0.y), decode_scales4(sv1.x),
                      decode_scales4(sv1.y)};  // rows g (blocks 0-3, 4-7), g + 8 (0-3, 4-7)
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    const uint4 fg = f[b / 4], f8 = f[2 + b / 4];
    const int j = b % 4;
    const float s_g = __uint_as_float(j == 0 ? fg.x : j == 1 ? fg.y : j == 2 ? fg.z : fg.w);
    const float s_g8 = __uint_as_float(j == 0 ? f8.x : j == 1 ? f8.y : j == 2 ? f8.z : f8.w);
    acc[0][0][0] = fmaf(d[b][0], s_g, acc[0][0][0]);
    acc[0][0][1] = fmaf(d[b][1], s_g, acc[0][0][1]);
    acc[0][0][2] = fmaf(d[b][2], s_g8, acc[0][0][2]);
    acc[0][0][3] = fmaf(d[b][3], s_g8, acc[0][0][3]);
  }
}

// The ring's state in a warp.
struct Ring {
  Producer pr;
  int pslot = 0, cslot = 0;
  uint32_t w_base = 0;        // shared address of weight slot 0
  uint8_t* s_base = nullptr;  // scale slot 0
  uint32_t dst[4];            // cp.async destinations of this lane in an m-tile region
  uint32_t ldm[4];            // ldmatrix addresses of this lane in an m-tile region
  float* sf = nullptr;        // kCoop: the warp's decoded scales of the current stage
};

// True when some scale byte of the stage's rows is 0x00 or 0xFF (lane L checks rows L, L + 32, …
// modulo the row count; the whole warp gets the answer).
template <int kMT>
__device__ __forceinline__ bool stage_needs_exact(const uint8_t* s_slot, int lane) {
  constexpr int kRows = Geo<kMT>::kRows;
  constexpr int kRounds = kRows < 32 ? 1 : kRows / 32;
  bool any = false;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const uint2 mine = *reinterpret_cast<const uint2*>(s_slot + ((lane + 32 * r) & (kRows - 1)) * 8);
    any = any || emma::has_00_or_ff(mine.x) || emma::has_00_or_ff(mine.y);
  }
  return __any_sync(0xffffffffu, any);
}

// One step of the ring: wait for the consumer's next stage, issue the producer's next stage into
// the slot the previous one freed, hand out the consumer's slot (w_slot, s_slot) and advance.
template <int kMT, int kStages, int kF>
__device__ __forceinline__ void ring_step(const Args& p, int i1, int lane, Ring& r, uint32_t& w_slot,
                                          const uint8_t*& s_slot) {
  using G = Geo<kMT>;
  emma::cp_async_wait<kStages - 2>();
  __syncwarp();  // stage cslot visible to every lane; every lane is done with the slot pslot reuses
  if (r.pr.c.item < i1) {
    issue_stage<kMT, kF>(r.pr, r.w_base + r.pslot * G::kWStage, r.s_base + r.pslot * G::kSStage,
                         r.dst, lane);
    producer_advance<kMT, kF>(p, i1, lane, r.pr);
  }
  emma::cp_async_commit();
  r.pslot = r.pslot + 1 == kStages ? 0 : r.pslot + 1;
  w_slot = r.w_base + r.cslot * G::kWStage;
  s_slot = r.s_base + r.cslot * G::kSStage;
  r.cslot = r.cslot + 1 == kStages ? 0 : r.cslot + 1;
}

// All stages of one pass (NT n-tiles): per stage, wait for it, issue the producer's next stage
// into the slot the previous stage freed, compute.
template <int kMT, int MTA, int NT, int kStages, bool kCoop, int kF>
__device__ __forceinline__ void run_pass(const Args& p, int i1, Ring& r, const PassB& pb, int lane,
                                         float (&acc)[kMT][kMaxNT][4]) {
  constexpr int D = emma3::window<NT>();
  uint4 bq[D][NT];
#pragma unroll
  for (int j = 0; j < D; ++j)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) bq[j][nt] = emma3::load_b(pb.col[nt] + j * 32);
#pragma unroll 1
  for (int kc = 0; kc < p.chunks; ++kc) {
    uint32_t w_slot;
    const uint8_t* s_slot;
    ring_step<kMT, kStages, kF>(p, i1, lane, r, w_slot, s_slot);
    const bool more = kc + 1 < p.chunks;
    if constexpr (kCoop) {
      // The stage's MTA·16 × 8 scale bytes decoded once per warp (a word per lane and round) into
      // the scratch; ring_step's syncwarp ordered the previous stage's reads of it before these
      // writes, the one below these writes before this stage's reads.
      constexpr int kWords = MTA * kTile * 2;
#pragma unroll
      for (int j = 0; j < kWords / 32; ++j) {
        const int i = lane + 32 * j;
        const uint32_t word = *reinterpret_cast<const uint32_t*>(s_slot + 4 * i);
        *reinterpret_cast<uint4*>(r.sf + 4 * i) = decode_scales4(word);
      }
      __syncwarp();
      compute_stage<kMT, MTA, NT, true, true>(w_slot, s_slot, r.sf, pb, kc, more, r.ldm, lane, acc, bq);
    } else if constexpr ((kF & kIlpW) != 0 && kMT == 1 && NT == 1) {
      compute_stage_w(w_slot, s_slot, pb, kc, more, r.ldm, lane, acc, bq);
    } else if constexpr ((kF & kIlp) != 0 && kMT == 1 && NT == 1) {
      if (stage_needs_exact<MTA>(s_slot, lane))
        compute_stage_ilp<true>(w_slot, s_slot, pb, kc, more, r.ldm, lane, acc, bq);
      else
        compute_stage_ilp<false>(w_slot, s_slot, pb, kc, more, r.ldm, lane, acc, bq);
    } else if (stage_needs_exact<MTA>(s_slot, lane)) {
      compute_stage<kMT, MTA, NT, false, true>(w_slot, s_slot, r.sf, pb, kc, more, r.ldm, lane, acc, bq);
    } else {
      compute_stage<kMT, MTA, NT, false, false>(w_slot, s_slot, r.sf, pb, kc, more, r.ldm, lane, acc, bq);
    }
  }
}

// Sums the plane columns of each token ((h2 + h1) + h0), scales by 2^(14 − c), writes: the
// operations of emma2::finish_pass for each of the MTA m-tiles.
template <int kMT, int MTA, int NT>
__device__ __forceinline__ void finish_pass(const Args& p, const Cursor& c, int lane,
                                            const float (&acc)[kMT][kMaxNT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    int64_t out_off;
    int out_exp;
    emma2::pass_output(p, c, nt, lane, out_off, out_exp);
#pragma unroll
    for (int mt = 0; mt < MTA; ++mt)
      emma2::finish_tile(p, out_off, out_exp, c.n0 + kTile * mt, lane, acc[mt][nt]);
  }
}

// One pass of MTA m-tiles at the pass's n-tile count.
template <int kMT, int MTA, int kStages, bool kCoop, int kF>
__device__ __forceinline__ void item_pass(const Args& p, int i1, Ring& r, const PassB& pb, const Cursor& cc,
                                          int lane, float (&acc)[kMT][kMaxNT][4]) {
  if (pb.nt == 1) {
    if constexpr ((kF & kEarly) != 0) {
      // kEarly: the output slot and row exponent (perm, row_exp: two dependent loads) fetched
      // before the pass instead of after it — the same values, off the item's tail.
      int64_t out_off;
      int out_exp;
      emma2::pass_output(p, cc, 0, lane, out_off, out_exp);
      run_pass<kMT, MTA, 1, kStages, kCoop, kF>(p, i1, r, pb, lane, acc);
#pragma unroll
      for (int mt = 0; mt < MTA; ++mt)
        emma2::finish_tile(p, out_off, out_exp, cc.n0 + kTile * mt, lane, acc[mt][0]);
    } else {
      run_pass<kMT, MTA, 1, kStages, kCoop, kF>(p, i1, r, pb, lane, acc);
      finish_pass<kMT, MTA, 1>(p, cc, lane, acc);
    }
  } else if (pb.nt == 2) {
    run_pass<kMT, MTA, 2, kStages, kCoop, kF>(p, i1, r, pb, lane, acc);
    finish_pass<kMT, MTA, 2>(p, cc, lane, acc);
  } else {
    run_pass<kMT, MTA, 4, kStages, kCoop, kF>(p, i1, r, pb, lane, acc);
    finish_pass<kMT, MTA, 4>(p, cc, lane, acc);
  }
}

template <int kMT, int kStages, int kMinBlocks, bool kCoop, int kF>
__global__ void __launch_bounds__(kThreads, kMinBlocks) experts_mma_x_kernel(const Args p) {
  constexpr bool kBal = (kF & kBalanced) != 0;
  using G = Geo<kMT>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Routing (moe_group's output) was complete before the split kernel started (an ordinary
  // launch), so it may be read before the wait, as sessions 7 / 8 do.
  constexpr bool kEarlyStart = (kF & kEarly) != 0;
  int i0, i1, e0 = 0;
  if constexpr (kEarlyStart)
    warp_start(p, kWarps, warp, lane, i0, i1, e0);
  else
    emma3::warp_range(p, kWarps, warp, i0, i1);
  if (i0 >= i1) {  // warp-uniform; nothing below synchronises more than the warp
    pdl::wait();
    return;
  }
  Ring r;
  uint8_t* mine = smem + warp * kStages * G::kStageBytes;
  r.w_base = emma::smem_u32(mine);        // [kStages][kWStage]
  r.s_base = mine + kStages * G::kWStage;  // [kStages][kSStage]
  r.sf = reinterpret_cast<float*>(smem + kWarps * kStages * G::kStageBytes) + warp * (G::kRows * 8);
  emma3::ring_offsets(lane, r.dst, r.ldm);  // per m-tile region (each is v3's 16-row slot)
  if constexpr (!kEarlyStart) e0 = emma3::first_expert(p, i0 / p.groups);
  producer_item<kMT, kF>(p, i0, e0, i1, lane, r.pr);
  XCursor cc = r.pr.c;
#pragma unroll 1
  for (int s = 0; s < kStages - 1; ++s) {
    if (r.pr.c.item < i1) {
      issue_stage<kMT, kF>(r.pr, r.w_base + r.pslot * G::kWStage, r.s_base + r.pslot * G::kSStage,
                           r.dst, lane);
      producer_advance<kMT, kF>(p, i1, lane, r.pr);
    }
    emma::cp_async_commit();
    r.pslot = r.pslot + 1 == kStages ? 0 : r.pslot + 1;
  }
  // kEarly: the first pass's B columns (routing only) before the wait.
  PassB pb;
  bool pb_ready = false;
  if constexpr (kEarlyStart) {
    emma3::setup_pass_b(p, cc, lane, pb);
    pb_ready = true;
  }
  // The x planes and row exponents come from the split kernel this one may overlap (PDL).
  pdl::wait();
  if constexpr ((kF & kChain) != 0) pdl::launch_dependents();
  if constexpr ((kF & kMemOnly) != 0) {
    uint32_t sink = 0;
#pragma unroll 1
    while (cc.item < i1) {
#pragma unroll 1
      for (int kc = 0; kc < p.chunks; ++kc) {
        uint32_t w_slot, v;
        const uint8_t* s_slot;
        ring_step<kMT, kStages, kF>(p, i1, lane, r, w_slot, s_slot);
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(w_slot + lane * 4));
        sink ^= v;
      }
      if (++cc.pass < cc.passes) continue;
      const int next = cc.item + item_step<kF>(cc);
      if (next < i1) set_item<kMT, kF>(p, next, cc.e, i1, cc);
      else cc.item = i1;
    }
    emma::cp_async_wait<0>();
    if (sink == 0x9E3779B9u && lane == 0) p.out[0] = 0.f;  // keeps the loads; (almost) never taken
    return;
  }
  float acc[kMT][kMaxNT][4];
#pragma unroll 1
  while (cc.item < i1) {
    if (!pb_ready) emma3::setup_pass_b(p, cc, lane, pb);
    pb_ready = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kMaxNT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
    if (!kBal || cc.mts == kMT) item_pass<kMT, kMT, kStages, kCoop, kF>(p, i1, r, pb, cc, lane, acc);
    else item_pass<kMT, 1, kStages, kCoop, kF>(p, i1, r, pb, cc, lane, acc);
    if (++cc.pass < cc.passes) continue;
    const int next = cc.item + item_step<kF>(cc);
    if (next < i1) set_item<kMT, kF>(p, next, cc.e, i1, cc);
    else cc.item = i1;
  }
  emma::cp_async_wait<0>();
}

}  // namespace deepinfer::cuda::kernels::emmx
