// Routed experts of decode batches on the tensor cores, session 12 (issue 7, helper experts): the
// 16-row kernel of experts_mma_x.cuh (variant 6: v3's items, ring, decode and MMAs) with the B
// operand (the x planes of the pass's tokens) streamed through the warp's ring too, so that the
// math loop reads B from shared memory instead of global memory.
//
// Why: session 11 measured the weight stream alone (memonly) and the math alone (nostream: the
// ring filled once) at about the same speed (batch-16 gate_up 221 / 239 µs) but the whole kernel
// at 361–387 µs: they overlap only partly. Every deeper ring lost because it took L1 from the x
// planes, which every 16-row item of an expert re-reads with ld.global in the middle of its MMAs
// (a rolling window one stage ahead, but an L1 miss there is an L2 round trip under a saturated
// weight stream). Here, for passes of one n-tile (≤ 2 tokens: nearly every pass at batch 1–16),
// the producer copies the pass's 3 or 6 plane columns of the stage (256 k × 2 B each) with
// cp.async into the stage's slot, next to its weights and scales, kStages − 1 stages ahead; the
// consumer reads each block's B with one ld.shared.v4 (columns padded to 576 B: an even and an odd
// column share a wavefront). Passes of 2 or 4 n-tiles (3+ tokens of one expert in a pass) keep
// variant 6's global-memory window (experts_mma_x.cuh's compute_stage) — or, with passes of 2
// tokens (kPT = 2), every pass is one n-tile with B from the ring: an expert with more tokens
// streams its weights once per 2 tokens (from L2 after the first), and without the 2- / 4-n-tile
// code the kernel needs 120 registers instead of 168 (16 warps per SM).
//  - kMT = 2: 32-row items (two m-tiles share each B fragment: two independent MMA chains per
//    warp, half the B reads per weight byte) on warp ranges cut in 16-row units (kBal, as
//    experts_mma_x.cuh's kBalanced; a lone unit runs as a 16-row item); passes of 2 tokens.
//  - kL2: B copied with cp.async.cg (L2 only: L1 untouched) instead of .ca (allocated in L1,
//    which then serves the expert's next items).
// The prologue's weight stages are issued before the PDL wait (as in every x kernel); their B
// (the planes come from the split kernel) right after it, then the ring is drained once.
// Bits: B holds the same 16 bytes per lane and block as variant 6's loads, and every output is
// computed with variant 6's operations in its order (decode, two MMAs per 32-k block from zero,
// fma(partial, scale, acc) in k order, finish_pass's plane sum and 2^(14 − c)); an MMA's D column
// depends only on its own B column, so neither the pass size nor the m-tiles per item change an
// output — the same bits as variants 1–8 (cuda_experts_mma_test, memcmp).
// Built (experts_mma.h): 9 / 10 / 11 (16-row, kPT 8: 3-stage 12 warps / 2-stage 12 / 2-stage 12
// kL2), 12 / 13 / 14 (16-row, kPT 2: 2-stage 16 warps / the same kL2 / 3-stage 12), 15 / 16
// (32-row, kPT 2: 2-stage 12 warps / 3-stage 8), 17 (64-row, kPT 2, 2-stage 8 warps), 18 / 19 (kGB,
// kPT 2, 16 warps: 4 / 3 stages), 20 (32-row, kPT 1, 2-stage 16 warps), 21 (16-row, kPT 1, 3-stage
// 16 warps), 22 / 23 (16-row, kPT 1, 4-stage 12 warps, kL2 / not).
// H200 (session 12 checkpoint 2, bench_ops µs with a clean L2, batch 16 gate_up / down): variant 6
// 387 / 177, 7 383 / 199; 9-11 (B in the ring, 168 registers) 477-510 / 219-263: slower — the
// copies and shared-memory reads cost more than the L1 loads they replace; what wins is what the
// ring-fed B allows: 12 (121 registers, 16 warps) 333 / 191, 15 (two MMA chains per warp) 330 /
// 176, 17 340 / 192; with passes of 1 token (20, 21) a warp with a 2-token item takes twice as
// long as its neighbours: 425-466 gate_up. The model's auto since session 12
// (experts_mma_pick_s12): 15 from 9 to 128 slots (bench_model b8 / b16 2.29 / 3.55 vs 2.42 / 3.77
// ms/step with session 10's pick).
#pragma once

#include "backend/cuda/experts_mma_x.cuh"

namespace deepinfer::cuda::kernels::emmxb {

using emma::Args;
using emma::kChunkK;
using emma::kMaxNT;
using emma::kPassTokens;
using emma::kRowBytes;
using emma2::Cursor;
using emma3::PassB;
using emmx::kBlocks;
using emmx::kThreads;
using emmx::kTile;
using emmx::kWarps;
using emmx::XCursor;

constexpr int kColBytes = kChunkK * 2;      // one plane column (token, plane) of a stage: 512 B
constexpr int kColStride = kColBytes + 64;  // padded: columns alternate bank halves
// B bytes of a stage for passes of kPT tokens: 3 plane columns per token, at most 2 tokens (one
// n-tile): 3456 B, or 1728 with passes of 1 token.
constexpr int b_stage_bytes(int kPT) { return (kPT == 1 ? 3 : 6) * kColStride; }

// Options (template kF, a bit set): kL2 — B copied with cp.async.cg (L2 only: L1 untouched)
// instead of .ca; kBal — 32-row items on warp ranges cut in 16-row units (experts_mma_x.cuh's
// kBalanced; kMT = 2 only); kGB — B not through the ring: every pass loads it from global memory
// as variant 6 does (its rolling window), the ring holds weights and scales only (with kPT = 2:
// variant 6 without its 2- / 4-n-tile code, few registers, deep rings at 16 warps per SM).
constexpr int kL2 = 1;
constexpr int kBal = 2;
constexpr int kGB = 4;
// kQuick (session 13) — experts_mma_x.cuh's kEarly and kChain for these kernels: the warp's range
// and first expert from one round of loads (emmx::warp_start), each one-n-tile pass's output slot
// and row exponent loaded before the pass, launch_dependents right after the PDL wait (the x split
// launched as a PDL dependent by experts_mma). Same operations on the outputs: the same bits.
constexpr int kQuick = 8;
// kCost (session 15) — warp ranges balanced by passes instead of items (cost_range): an item of a
// tile with m tokens costs ⌈m / kPT⌉ passes over its weights, so with item-count ranges the warps
// holding an expert with 3+ tokens (two passes at kPT = 2; in 2 of 3 random batch-16 routings)
// worked twice as long as the rest (Nsight Compute, batch 16: SMs active 77 % of the kernel). The
// items and every operation on them are unchanged: the same bits.
constexpr int kCost = 16;
constexpr int xf(int kF) { return (kF & kBal) != 0 ? emmx::kBalanced : 0; }

// Passes of the tiles of expert e (tile_rows-token tiles, the last one partial) and its token and
// tile counts; cost_range's unit (× Args::groups per item row of tiles).
template <int kPT>
__device__ __forceinline__ int expert_passes(const Args& p, int e, int& n, int& tiles) {
  n = __ldg(p.row_off + e + 1) - __ldg(p.row_off + e);
  tiles = __ldg(p.act_off + e + 1) - __ldg(p.act_off + e);
  if (tiles <= 0) return 0;
  const int tr = p.tile_rows, last = n - (tiles - 1) * tr;
  return (tiles - 1) * ((tr + kPT - 1) / kPT) + (last + kPT - 1) / kPT;
}

// The first item whose start (in passes, items in order, an item of a tile of m tokens costing
// ⌈m / kPT⌉) is ≥ c, and a lower bound of its expert; T (all items) when c ≥ total. Lane L holds
// experts [L·per, L·per + per) with exclusive prefix excl and inclusive incl (× groups).
template <int kPT>
__device__ __forceinline__ void item_at_cost(const Args& p, int64_t c, int64_t total, int per,
                                             int lane, int64_t excl, int64_t incl, int& item,
                                             int& e_lb) {
  const int G = p.groups;
  const int T = __ldg(p.act_off + p.num_experts) * G;
  if (c >= total) {
    item = T;
    e_lb = 0;
    return;
  }
  const unsigned owner = __ballot_sync(0xffffffffu, excl <= c && c < incl);
  const int L = __ffs(owner) - 1;  // exactly one lane: the prefixes partition [0, total)
  int it = T, eb = 0;
  if (lane == L) {
    int64_t r = c - excl;
    for (int j = 0; j < per; ++j) {
      const int e = lane * per + j;
      if (e >= p.num_experts) break;
      int n, tiles;
      const int64_t ce = static_cast<int64_t>(expert_passes<kPT>(p, e, n, tiles)) * G;
      if (r >= ce) {
        r -= ce;
        continue;
      }
      eb = e;
      const int d0 = __ldg(p.act_off + e);
      for (int t = 0; t < tiles; ++t) {
        const int m = min(p.tile_rows, n - t * p.tile_rows);
        const int pt = (m + kPT - 1) / kPT;
        const int64_t ct = static_cast<int64_t>(pt) * G;
        if (r < ct) {
          const int u = static_cast<int>((r + pt - 1) / pt);  // first unit starting at or after r
          it = (d0 + t) * G + u;                              // u == G: the next tile's first item
          break;
        }
        r -= ct;
      }
      break;
    }
  }
  item = __shfl_sync(0xffffffffu, it, L);
  e_lb = __shfl_sync(0xffffffffu, eb, L);
}

// Warp `warp`'s range [i0, i1) with the grid's warps sharing the total passes evenly (warp w: the
// items starting in [C·w / W, C·(w+1) / W)), and a lower bound e0 of i0's expert.
template <int kPT>
__device__ __forceinline__ void cost_range(const Args& p, int warps_per_cta, int warp, int lane,
                                           int& i0, int& i1, int& e0) {
  const int per = (p.num_experts + 31) / 32;
  int64_t local = 0;
  for (int j = 0; j < per; ++j) {
    const int e = lane * per + j;
    if (e < p.num_experts) {
      int n, tiles;
      local += static_cast<int64_t>(expert_passes<kPT>(p, e, n, tiles)) * p.groups;
    }
  }
  int64_t incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int64_t v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  const int64_t total = __shfl_sync(0xffffffffu, incl, 31), excl = incl - local;
  const int64_t W = static_cast<int64_t>(gridDim.x) * warps_per_cta;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * warps_per_cta + warp;
  int e_end;
  item_at_cost<kPT>(p, total * w / W, total, per, lane, excl, incl, i0, e0);
  item_at_cost<kPT>(p, total * (w + 1) / W, total, per, lane, excl, incl, i1, e_end);
}

// A stage slot of items of kMT m-tiles: weights (kMT · 2 KB), scales (kMT · 128 B), B (not with
// kGB).
template <int kMT, int kF, int kPT>
struct Geo {
  static constexpr int kWStage = kMT * emmx::kTileBytes;
  static constexpr int kSStage = kMT * kTile * 8;
  static constexpr int kBBytes = (kF & kGB) != 0 ? 0 : b_stage_bytes(kPT);
  static constexpr int kStageBytes = kWStage + kSStage + kBBytes;
  static_assert(kStageBytes % 16 == 0, "stage slots must stay 16-byte aligned");
};

constexpr int smem_bytes(int kMT, int kStages, int kF, int kPT) {
  return kWarps * kStages *
         (kMT * (emmx::kTileBytes + kTile * 8) + ((kF & kGB) != 0 ? 0 : b_stage_bytes(kPT)));
}

template <int kF>
__device__ __forceinline__ void cp_async16_b(uint32_t dst, const void* src) {
  if constexpr ((kF & kL2) != 0)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(a));
  return v;
}

// The producer: experts_mma_x.cuh's (weights, scales) and the B sources of its pass: bt[t] =
// plane 0 of token t of the pass at this lane's 16 bytes of stage 0 (planes 1, 2: + Args::plane);
// ntok = the pass's tokens when they fit one n-tile (1 or 2), else 0 (no B copies: the consumer
// loads B from global memory).
struct ProducerB : emmx::Producer {
  const uint16_t* bt[2] = {nullptr, nullptr};
  int ntok = 0;
};

// Tokens of the cursor's pass: passes of kPT tokens (kPassTokens = 8, or 2: every pass one n-tile).
template <int kPT>
__device__ __forceinline__ int pass_tokens(const Cursor& c) {
  return min(kPT, c.m - c.pass * kPT);
}

// experts_mma_x.cuh's set_item with passes of kPT tokens.
template <int kMT, int kF, int kPT>
__device__ __forceinline__ void set_item(const Args& p, int item, int e, int end, XCursor& c) {
  emmx::set_item<kMT, xf(kF)>(p, item, e, end, c);
  if constexpr (kPT != kPassTokens) c.passes = (c.m + kPT - 1) / kPT;
}

template <int kPT>
__device__ __forceinline__ void producer_pass_b(const Args& p, int lane, ProducerB& pr) {
  const int cnt = pass_tokens<kPT>(pr.c);
  pr.ntok = cnt <= 2 ? cnt : 0;
  const int base = pr.c.pos0 + pr.c.pass * kPT;
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int slot = __ldg(p.perm + base + (t < cnt ? t : 0));
    pr.bt[t] = p.planes + static_cast<int64_t>(slot / p.x_div) * p.K + lane * 8;
  }
}

template <int kMT, int kF, int kPT>
__device__ __forceinline__ void producer_item_b(const Args& p, int item, int e, int end, int lane,
                                                ProducerB& pr) {
  emmx::producer_item<kMT, xf(kF)>(p, item, e, end, lane, pr);
  if constexpr (kPT != kPassTokens) pr.c.passes = (pr.c.m + kPT - 1) / kPT;
  producer_pass_b<kPT>(p, lane, pr);
}

template <int kMT, int kF, int kPT>
__device__ __forceinline__ void producer_advance_b(const Args& p, int end, int lane,
                                                   ProducerB& pr) {
  pr.w += kRowBytes;
  pr.s += 8;
  if (++pr.c.kc < p.chunks) return;
  pr.c.kc = 0;
  pr.w = pr.w0;
  pr.s = pr.s0;
  if (++pr.c.pass < pr.c.passes) {
    producer_pass_b<kPT>(p, lane, pr);
    return;
  }
  const int next = pr.c.item + emmx::item_step<xf(kF)>(pr.c);
  if (next < end)
    producer_item_b<kMT, kF, kPT>(p, next, pr.c.e, end, lane, pr);
  else
    pr.c.item = end;
}

// The stage's B: column 3·t + plane of token t (< ntok), this lane's 16 bytes of each.
template <int kF>
__device__ __forceinline__ void issue_b(const Args& p, const ProducerB& pr, uint32_t b_slot,
                                        int lane) {
  const int64_t off = static_cast<int64_t>(pr.c.kc) * kChunkK;
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    if (t < pr.ntok) {
#pragma unroll
      for (int pl = 0; pl < 3; ++pl)
        cp_async16_b<kF>(b_slot + (3 * t + pl) * kColStride + lane * 16,
                         pr.bt[t] + pl * p.plane + off);
    }
  }
}

struct RingB {
  ProducerB pr;
  int pslot = 0, cslot = 0;
  uint32_t w_base = 0;        // weight slot 0
  uint8_t* s_base = nullptr;  // scale slot 0
  uint32_t b_base = 0;        // B slot 0
  uint32_t dst[4];
  uint32_t ldm[4];
};

template <int kMT, int kStages, int kF, int kPT>
__device__ __forceinline__ void ring_step(const Args& p, int i1, int lane, RingB& r,
                                          uint32_t& w_slot, const uint8_t*& s_slot,
                                          uint32_t& b_slot) {
  using G = Geo<kMT, kF, kPT>;
  emma::cp_async_wait<kStages - 2>();
  __syncwarp();  // stage cslot visible to every lane; every lane is done with the slot pslot reuses
  if (r.pr.c.item < i1) {
    emmx::issue_stage<kMT>(r.pr, r.w_base + r.pslot * G::kWStage, r.s_base + r.pslot * G::kSStage,
                           r.dst, lane);
    if constexpr ((kF & kGB) == 0) issue_b<kF>(p, r.pr, r.b_base + r.pslot * G::kBBytes, lane);
    producer_advance_b<kMT, kF, kPT>(p, i1, lane, r.pr);
  }
  emma::cp_async_commit();
  r.pslot = r.pslot + 1 == kStages ? 0 : r.pslot + 1;
  w_slot = r.w_base + r.cslot * G::kWStage;
  s_slot = r.s_base + r.cslot * G::kSStage;
  b_slot = r.b_base + r.cslot * G::kBBytes;
  r.cslot = r.cslot + 1 == kStages ? 0 : r.cslot + 1;
}

// One stage of a one-n-tile pass with B from the slot (bl: this lane's column + 16·t), MTA
// m-tiles sharing each B fragment: experts_mma_x.cuh's compute_stage<kMT, MTA, 1> (no kCoop) with
// each block's B from shared memory.
template <int kMT, int MTA, bool kExact>
__device__ __forceinline__ void compute_stage_sb(uint32_t w_slot, const uint8_t* ss, uint32_t bl,
                                                 const uint32_t (&ldm)[4], int lane,
                                                 float (&acc)[kMT][kMaxNT][4]) {
  const int g = lane >> 2;
  uint2 sc[MTA][2];
#pragma unroll
  for (int mt = 0; mt < MTA; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      sc[mt][h] = *reinterpret_cast<const uint2*>(ss + (kTile * mt + g + 8 * h) * 8);
  uint4 bv[kBlocks];
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) bv[b] = lds128(bl + b * 64);
  uint32_t q[MTA][4];
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    if (b % 2 == 0) {
#pragma unroll
      for (int mt = 0; mt < MTA; ++mt)
        emma::ldmatrix_x4(q[mt], w_slot + mt * emmx::kTileBytes + ldm[b / 2]);
    }
    const int bb = b & 1;
#pragma unroll
    for (int mt = 0; mt < MTA; ++mt) {
      uint32_t dg[4], d8[4];
      emma3::decode_e2m1x8(q[mt][2 * bb], dg);
      emma3::decode_e2m1x8(q[mt][2 * bb + 1], d8);
      const float s_g = emma::stage_scale<kExact>(sc[mt][0], b),
                  s_g8 = emma::stage_scale<kExact>(sc[mt][1], b);
      float d[4];
      emma::mma_f16_zero(d, dg[0], d8[0], dg[1], d8[1], bv[b].x, bv[b].y);
      emma::mma_f16(d, dg[2], d8[2], dg[3], d8[3], bv[b].z, bv[b].w);
      acc[mt][0][0] = fmaf(d[0], s_g, acc[mt][0][0]);
      acc[mt][0][1] = fmaf(d[1], s_g, acc[mt][0][1]);
      acc[mt][0][2] = fmaf(d[2], s_g8, acc[mt][0][2]);
      acc[mt][0][3] = fmaf(d[3], s_g8, acc[mt][0][3]);
    }
  }
}

// All stages of one pass of MTA m-tiles. NT == 1: B from the ring (b_off: this lane's offset in a
// B slot); NT 2 / 4 (kPT = 8, kMT = 1 only): variant 6's rolling window of global loads.
template <int kMT, int MTA, int NT, int kStages, int kF, int kPT>
__device__ __forceinline__ void run_pass(const Args& p, int i1, RingB& r, const PassB& pb,
                                         uint32_t b_off, int lane, float (&acc)[kMT][kMaxNT][4]) {
  if constexpr (NT == 1 && (kF & kGB) == 0) {
#pragma unroll 1
    for (int kc = 0; kc < p.chunks; ++kc) {
      uint32_t w_slot, b_slot;
      const uint8_t* s_slot;
      ring_step<kMT, kStages, kF, kPT>(p, i1, lane, r, w_slot, s_slot, b_slot);
      if (emmx::stage_needs_exact<MTA>(s_slot, lane))
        compute_stage_sb<kMT, MTA, true>(w_slot, s_slot, b_slot + b_off, r.ldm, lane, acc);
      else
        compute_stage_sb<kMT, MTA, false>(w_slot, s_slot, b_slot + b_off, r.ldm, lane, acc);
    }
  } else {
    static_assert(kMT == 1 && MTA == 1, "B from global memory: 16-row items only");
    constexpr int D = emma3::window<NT>();
    uint4 bq[D][NT];
#pragma unroll
    for (int j = 0; j < D; ++j)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) bq[j][nt] = emma3::load_b(pb.col[nt] + j * 32);
#pragma unroll 1
    for (int kc = 0; kc < p.chunks; ++kc) {
      uint32_t w_slot, b_slot;
      const uint8_t* s_slot;
      ring_step<kMT, kStages, kF, kPT>(p, i1, lane, r, w_slot, s_slot, b_slot);
      const bool more = kc + 1 < p.chunks;
      if (emmx::stage_needs_exact<1>(s_slot, lane))
        emmx::compute_stage<1, 1, NT, false, true>(w_slot, s_slot, nullptr, pb, kc, more, r.ldm,
                                                   lane, acc, bq);
      else
        emmx::compute_stage<1, 1, NT, false, false>(w_slot, s_slot, nullptr, pb, kc, more, r.ldm,
                                                    lane, acc, bq);
    }
  }
}

// emma3::setup_pass_b for a one-n-tile pass of kPT tokens (kGB): the B column of this lane —
// token g / 3 of the pass (an absent one, and g ≥ 6: the pass's first), plane g % 3.
template <int kPT>
__device__ __forceinline__ void setup_pass_b1(const Args& p, const Cursor& c, int lane, PassB& pb) {
  const int g = lane >> 2, t = lane & 3;
  const int base = c.pass * kPT;
  const int cnt = min(kPT, c.m - base);
  int tb = g / 3;
  if (g >= 6 || tb >= cnt) tb = 0;
  const int slot = __ldg(p.perm + c.pos0 + base + tb);
  pb.col[0] = p.planes + (g % 3) * p.plane + static_cast<int64_t>(slot / p.x_div) * p.K + t * 8;
  pb.nt = 1;
}

// The output of a one-n-tile pass of kPT tokens: emma2::pass_output's (slot, 2^(14 − c)) for the
// pass's tokens kPT·pass (and kPT·pass + 1 when kPT = 2) — the same values for the same token.
template <int kPT>
__device__ __forceinline__ void pass_output1(const Args& p, const Cursor& c, int lane,
                                             int64_t& out_off, int& out_exp) {
  if constexpr (kPT == kPassTokens) {
    emma2::pass_output(p, c, 0, lane, out_off, out_exp);
  } else {
    const int t = lane & 3;
    const int base = c.pass * kPT;
    out_off = -1;
    out_exp = 0;
    if (t < (kPT < 2 ? kPT : 2) && t < c.m - base) {
      const int slot = __ldg(p.perm + c.pos0 + base + t);
      out_off = static_cast<int64_t>(slot) * p.N;
      out_exp = 14 - __ldg(p.row_exp + slot / p.x_div);
    }
  }
}

// One one-n-tile pass of MTA m-tiles and its outputs.
template <int kMT, int MTA, int kStages, int kF, int kPT>
__device__ __forceinline__ void pass_sb(const Args& p, int i1, RingB& r, const PassB& pb,
                                        const XCursor& cc, uint32_t b_off, int lane,
                                        float (&acc)[kMT][kMaxNT][4]) {
  int64_t out_off;
  int out_exp;
  if constexpr ((kF & kQuick) != 0) {
    pass_output1<kPT>(p, cc, lane, out_off, out_exp);
    run_pass<kMT, MTA, 1, kStages, kF, kPT>(p, i1, r, pb, b_off, lane, acc);
  } else {
    run_pass<kMT, MTA, 1, kStages, kF, kPT>(p, i1, r, pb, b_off, lane, acc);
    pass_output1<kPT>(p, cc, lane, out_off, out_exp);
  }
#pragma unroll
  for (int mt = 0; mt < MTA; ++mt)
    emma2::finish_tile(p, out_off, out_exp, cc.n0 + kTile * mt, lane, acc[mt][0]);
}

// kMT: m-tiles per item (1: 16 rows; 2: 32 rows, with kBal on ranges of 16-row units). kPT: tokens
// per pass — kPassTokens (8: passes of 3+ tokens take variant 6's global B window; kMT = 1) or 2
// (every pass one n-tile with B from the ring: an expert with more tokens streams its weights
// once per 2 tokens; no 2- / 4-n-tile code, so fewer registers).
template <int kMT, int kStages, int kMinBlocks, int kF, int kPT>
__global__ void __launch_bounds__(kThreads, kMinBlocks) experts_mma_xb_kernel(const Args p) {
  static_assert(kMT == 1 || kPT <= 2, "32- / 64-row items need passes of 1 or 2 tokens");
  static_assert((kF & kGB) == 0 || (kMT == 1 && kPT == 2), "kGB: 16-row items, passes of 2 tokens");
  constexpr bool kRingB = (kF & kGB) == 0;
  using G = Geo<kMT, kF, kPT>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr bool kQ = (kF & kQuick) != 0;
  constexpr bool kC = (kF & kCost) != 0;
  static_assert(!(kQ && kC), "kQuick and kCost choose the warp ranges differently");
  int i0, i1, e0 = 0;
  if constexpr (kQ)
    emmx::warp_start(p, kWarps, warp, lane, i0, i1, e0);
  else if constexpr (kC)
    cost_range<kPT>(p, kWarps, warp, lane, i0, i1, e0);
  else
    emma3::warp_range(p, kWarps, warp, i0, i1);
  if (i0 >= i1) {  // warp-uniform; nothing below synchronises more than the warp
    pdl::wait();
    return;
  }
  if constexpr (!kQ && !kC) e0 = emma3::first_expert(p, i0 / p.groups);
  RingB r;
  uint8_t* mine = smem + warp * kStages * G::kStageBytes;
  r.w_base = emma::smem_u32(mine);                                        // [kStages][kWStage]
  r.s_base = mine + kStages * G::kWStage;                                 // [kStages][kSStage]
  r.b_base = emma::smem_u32(mine + kStages * (G::kWStage + G::kSStage));  // [kStages][kBBytes]
  emma3::ring_offsets(lane, r.dst, r.ldm);                                // per m-tile region
  producer_item_b<kMT, kF, kPT>(p, i0, e0, i1, lane, r.pr);
  XCursor cc = r.pr.c;
  ProducerB first = r.pr;  // replays the prologue's stages for their B after the wait
#pragma unroll 1
  for (int s = 0; s < kStages - 1; ++s) {
    if (r.pr.c.item < i1) {
      emmx::issue_stage<kMT>(r.pr, r.w_base + r.pslot * G::kWStage, r.s_base + r.pslot * G::kSStage,
                             r.dst, lane);
      producer_advance_b<kMT, kF, kPT>(p, i1, lane, r.pr);
    }
    emma::cp_async_commit();
    r.pslot = r.pslot + 1 == kStages ? 0 : r.pslot + 1;
  }
  // The x planes and row exponents come from the split kernel this one may overlap (PDL).
  pdl::wait();
  if constexpr (kQ) pdl::launch_dependents();
  if constexpr (kRingB) {
#pragma unroll 1
    for (int s = 0; s < kStages - 1; ++s) {
      if (first.c.item < i1) {
        issue_b<kF>(p, first, r.b_base + s * G::kBBytes, lane);
        producer_advance_b<kMT, kF, kPT>(p, i1, lane, first);
      }
    }
    emma::cp_async_commit();
    emma::cp_async_wait<0>();  // once: the ring's group count stays that of the weights' stages
  }
  float acc[kMT][kMaxNT][4];
  PassB pb;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll 1
  while (cc.item < i1) {
    const int cnt = pass_tokens<kPT>(cc);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kMaxNT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
    if constexpr (!kRingB) {
      setup_pass_b1<kPT>(p, cc, lane, pb);
      pass_sb<1, 1, kStages, kF, kPT>(p, i1, r, pb, cc, 0, lane, acc);
    } else if (kPT <= 2 || cnt <= 2) {
      // Column of this lane: token g / 3, plane g % 3; an absent token (and g ≥ 6) reads token 0's.
      const int col = g < 6 && g / 3 < cnt ? g : g % 3;
      const uint32_t b_off = static_cast<uint32_t>(col * kColStride + t * 16);
      if (kMT == 1 || cc.mts == kMT)
        pass_sb<kMT, kMT, kStages, kF, kPT>(p, i1, r, pb, cc, b_off, lane, acc);
      else
        pass_sb<kMT, 1, kStages, kF, kPT>(p, i1, r, pb, cc, b_off, lane, acc);
    } else if constexpr (kPT == kPassTokens) {
      emma3::setup_pass_b(p, cc, lane, pb);
      if (pb.nt == 2) {
        run_pass<1, 1, 2, kStages, kF, kPT>(p, i1, r, pb, 0, lane, acc);
        emmx::finish_pass<1, 1, 2>(p, cc, lane, acc);
      } else {
        run_pass<1, 1, 4, kStages, kF, kPT>(p, i1, r, pb, 0, lane, acc);
        emmx::finish_pass<1, 1, 4>(p, cc, lane, acc);
      }
    }
    if (++cc.pass < cc.passes) continue;
    const int next = cc.item + emmx::item_step<xf(kF)>(cc);
    if (next < i1)
      set_item<kMT, kF, kPT>(p, next, cc.e, i1, cc);
    else
      cc.item = i1;
  }
  emma::cp_async_wait<0>();
}

}  // namespace deepinfer::cuda::kernels::emmxb
