// Routed experts of decode batches on the tensor cores (experts_mma.cuh / .cu): FP4 e2m1 experts
// with 1×32 ue8m0 scales (V4's routed experts), fp32 activations, mma.sync m16n8k16 with the
// weight rows as A and the expert's tokens × 3 fp16 planes of x as B. Same contract as
// gemv_experts_v2 (gemv.h): slots grouped by moe_group with tile_rows ≥ slots (row_off, act_off),
// out[slot, n] = x[slot / x_div] · deq(W_e[n]) for every grouped slot, slots left out (bad ids)
// not written; outputs in slot order. The arithmetic differs from the GEMV (fp16 planes, tensor-
// core sums): not bitwise equal to it; accuracy vs a double reference is tested to be as good.
// Plain C++17 header (included by cuda_backend.cpp, the test and bench_ops).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda::kernels {

// The layouts the kernel implements: e2m1 (fmt 2) with ue8m0 scales (not f32) of 1×32 blocks,
// every expert's weight rows 16-byte aligned (w_vec), N % 32 == 0, K % 256 == 0, K ≤ 16384,
// 1 ≤ num_experts ≤ 1024, and 32-bit indices (slots·N, N·K/2).
bool experts_mma_supported(int fmt, int64_t slots, int64_t num_experts, bool scaled, bool scale_f32,
                           bool w_vec, int64_t N, int64_t K, int64_t block_rows, int64_t block_cols);

// Device workspace one projection needs for x_rows input rows of K floats (fp16 planes + row
// exponents), in bytes (a multiple of 16).
size_t experts_mma_workspace_bytes(int64_t x_rows, int64_t K);

// Kernel variants: 1 = session 6 (32-row warp items, 8 warps per SM, grid cut to the items),
// 2 = session 7 (experts_mma_v2.cuh: 16-row items, 16 warps per SM, full-residency grid),
// 3 = variant 2 compiled for 12 warps per SM (more registers, no spill); all three give the same
// bits. 0 (or any other value) = the default, 1: on the H200 (session 7, bench_ops --mma-batch
// 1,16,2048) variant 2 was slower than 1 at batch 16 (gate_up 395.9 vs 352.4 µs, down 211.5 vs
// 191.8) and at 2,048 tokens (24.4 vs 14.8 ms), equal at batch 1 (46.5 vs 45.8).
constexpr int kExpertsMmaV1 = 1;
constexpr int kExpertsMmaV2 = 2;
constexpr int kExpertsMmaV2Regs = 3;
constexpr int kExpertsMmaDefault = kExpertsMmaV1;
// Session 8 (experts_mma_v3.cuh): 16-row items as variant 2, B from a rolling register window
// (a whole stage of latency per load) and a deeper per-warp ring: 4 = 12 warps per SM with
// 8-stage rings, 5 = 16 warps per SM with 6-stage rings. Same bits as 1, 2 and 3.
constexpr int kExpertsMmaV3 = 4;
constexpr int kExpertsMmaV3w16 = 5;

// Session 10 (experts_mma_x.cuh): v3 generalised to warp items of kMT m-tiles (16·kMT rows that
// share each B fragment: kMT times fewer x-plane loads per weight byte), rings sized to leave L1
// room for the x planes (the carveout just holds the residency): 6 = 16-row items, 12 warps per
// SM, 3-stage rings, per-lane scale decode (DEEPINFER_EXPERTS_KERNEL=x2); 7 = 32-row items, 8
// warps, 4-stage rings, scales decoded once per warp, warp ranges balanced in 16-row units (x3);
// 8 = 64-row items, 8 warps, 2-stage rings, scales once per warp (x4; N % 64 == 0, else 7). Same
// bits as 1–5.
constexpr int kExpertsMmaX16 = 6;
constexpr int kExpertsMmaX32 = 7;
constexpr int kExpertsMmaX64 = 8;
// Session 12 (experts_mma_xb.cuh): variant 6 with B (the x planes of passes of ≤ 2 tokens) copied
// through the warp's ring next to the weights and read from shared memory in the math loop: 9 =
// 3-stage rings (12 warps per SM), 10 = 2-stage rings, 11 = 2-stage rings with the B copies
// bypassing L1 (cp.async.cg). Same bits as 1–8. 12 / 13 / 14: passes of 2 tokens (every pass one
// n-tile with B from the ring; an expert with more tokens streams its weights once per 2 tokens;
// no 2- / 4-n-tile code: 120 registers) — 12 = 16 warps per SM with 2-stage rings, 13 = 12 with
// L2-only B copies, 14 = 12 warps per SM with 3-stage rings.
constexpr int kExpertsMmaXB3 = 9;
constexpr int kExpertsMmaXB2 = 10;
constexpr int kExpertsMmaXB2L2 = 11;
constexpr int kExpertsMmaXB2T16 = 12;
constexpr int kExpertsMmaXB2T16L2 = 13;
constexpr int kExpertsMmaXB3T = 14;
// 15 / 16: 32-row items (two m-tiles share each B fragment, two independent MMA chains per warp)
// on warp ranges balanced in 16-row units, passes of 2 tokens: 15 = 12 warps per SM, 2-stage
// rings; 16 = 8 warps per SM, 3-stage rings.
constexpr int kExpertsMmaXB32w12 = 15;
constexpr int kExpertsMmaXB32w8 = 16;
// 17: 64-row items (4 m-tiles share each B fragment; N % 64 == 0, else 15), passes of 2 tokens, 8
// warps per SM, 2-stage rings. 18 / 19: variant 6's kernel (B from global memory, no B in the
// ring) with passes of 2 tokens — 128 registers: 16 warps per SM with 4- / 3-stage rings (more
// weight bytes in flight per SM: batch 1).
constexpr int kExpertsMmaXB64 = 17;
constexpr int kExpertsMmaXG16s4 = 18;
constexpr int kExpertsMmaXG16s3 = 19;
// 20 / 21: passes of 1 token (B through the ring: 3 columns, 1.7 KB per stage; an expert with more
// tokens streams its weights once per token) — 20 = 32-row items, 16 warps per SM, 2-stage rings
// (128 registers); 21 = 16-row items, 16 warps, 3-stage rings.
constexpr int kExpertsMmaXB32w16 = 20;
constexpr int kExpertsMmaXB16s3t1 = 21;
// 22 / 23: 16-row items, passes of 1 token, 12 warps per SM with 4-stage rings (3 stages of weights
// in flight per warp: batch 1, where each warp streams about one item) — 22 with the B copies
// through L2 only (cp.async.cg), 23 through L1.
constexpr int kExpertsMmaXB16s4t1L2 = 22;
constexpr int kExpertsMmaXB16s4t1 = 23;
// Session 13 (helper experts1; batch 1..8): variant 6's kernel (experts_mma_x.cuh: 16-row items,
// B from global memory, 12 warps per SM) with more independent work per stage in passes of one
// n-tile (1–2 tokens: the batch-1 case, where each warp computes about one 32 KB item of 16
// stages one after the other and the math alone takes as long as the weight stream alone —
// session 11: 23.9 vs 21.4 µs for gate_up): 24 = kIlp (per half stage the 4 blocks' first MMAs,
// then their second ones, then the fmas in block order), 3-stage rings; 25 = kIlpW (the whole
// stage so: its 4 ldmatrix together, 16 MMAs, 32 fmas; scales decoded per lane, no warp vote),
// 3-stage rings; 26 = 25 with 2-stage rings (more L1). Passes of 2+ n-tiles as variant 6. The same
// operations on the same operands as every other variant: the same bits as 1–23. Measured (H200,
// session 13 checkpoint 2, batch 1 gate_up + down µs clean-l2): 24 30.7 + 20.0, 25 31.6 + 19.8,
// 26 30.5 + 19.4 vs variant 6 31.5 + 19.7 — no gain (bench_model: 25 +3 % at batch 1).
constexpr int kExpertsMmaXI3 = 24;
constexpr int kExpertsMmaXW3 = 25;
constexpr int kExpertsMmaXW2 = 26;
// 27: 25 with kEarly (experts_mma_x.cuh): the warp's range and first expert from one round of
// loads (a warp count over act_off instead of a binary search of dependent loads) and the first
// pass's B columns set up before the PDL wait — a shorter start (the ring's first weight bytes
// leave earlier; at batch 1 each warp's one item is the critical path). Same bits.
constexpr int kExpertsMmaXW3E = 27;
// 28: variant 6 with kEarly alone. 29: variant 6 with kEarly and kChain (experts_mma_x.cuh: the
// next kernel may launch right after this grid's PDL wait; the x split launched as a PDL
// dependent, no launch gap behind swiglu). 30: 24 (kIlp) with kEarly and kChain. 31: 15 (the
// batch 8 / 16 auto) with kQuick (experts_mma_xb.cuh: kEarly's start / end and kChain). Same bits.
constexpr int kExpertsMmaXE3 = 28;
constexpr int kExpertsMmaXC3 = 29;
constexpr int kExpertsMmaXIC3 = 30;
constexpr int kExpertsMmaXB32Q = 31;
// 32: 29 with 2-stage rings (session 11: 2 stages measured slightly faster at batch 1, more L1).
// Measured (same run; batch 1 gate_up + down µs clean-l2): 27 30.5 + 19.2, 28 30.1 + 19.1, 29
// 30.8 + 19.0, 30 31.1 + 19.7, 32 29.1 + 18.9, 15 29.8 + 19.4, 31 28.9 + 18.1 (the best; batch 8
// 137.7 + 73.0 vs 15's 139.1 + 74.7; batch 16 261.0 + 135.5 vs 262.1 + 136.9).
constexpr int kExpertsMmaXC2 = 32;
// Session 15: 33 = 15 (the batch 8 / 16 auto) with warp ranges balanced by passes (kCost,
// experts_mma_xb.cuh) instead of items. Same bits.
constexpr int kExpertsMmaXB32C = 33;
constexpr int kExpertsMmaLast = kExpertsMmaXB32C;

// DEEPINFER_EXPERTS_KERNEL=x1: per projection and slot count the variant that measured fastest on
// the H200 (session 10 checkpoint 2, bench_ops --mma-batch 1,8,16,32, µs with a clean L2, against
// today's auto pick): K ≤ 2048 (down-like) variant 6 (batch 1 / 8 / 16: 20.0 / 82.7 / 175.8 vs
// 23.2 / 108.8 / 219.5); K > 2048 (gate_up-like: 24 KB of x planes per token) variant 6 up to 40
// slots (batch 1: 29.8 vs 39.4), 8 from 41 to 64 (batch 8: 158.7 vs 192.2; with fewer slots its
// 64-row items leave warps idle), 7 up to 128 (batch 16: 377.7 vs 374.9); above 128 slots
// (--batch-invariant prefill, batch 32 on) session 6's kernel for both projections, as auto
// (batch 32 gate_up 619.6 vs 629.4 for 7). All the same bits.
int experts_mma_pick_x(int64_t slots, int64_t K);

// Session 12: variant `xb` (9..23) for both projections up to 128 slots, session 6's kernel above
// (as experts_mma_pick_x).
int experts_mma_pick_xb(int64_t slots, int xb);

// Session 12 picks (DEEPINFER_EXPERTS_KERNEL; every variant gives the same bits), per slot count
// and projection (K > 2048: gate_up-like):
//  mode 0 ("auto"): variant 6 up to 8 slots (batch 1), 15 from 9 to 128 (bench_model checkpoint
//    1, H200 ms/step batch 1 / 8 / 16: 15 everywhere 1.06 / 2.31 / 3.72 vs experts_mma_pick_x
//    1.05 / 2.41 / 3.86), session 6's above 128;
//  modes 1 / 2 / 3 ("x1" / "x2" / "x3"): as auto with variant 22 / 21 / 19 up to 8 slots (batch-1
//    candidates: 16-row items with deeper rings or 16 warps per SM).
//  (checkpoint 2, ms/step b1 / b8 / b16: auto 1.05 / 2.29 / 3.55, pick_x 1.05 / 2.42 / 3.77; 20
//  from 9 slots 2.66 / 4.31; 18 at batch 1 1.07; 17 for gate_up from 9 slots 2.30 / 3.67.)
// "x4" = experts_mma_pick_x (the session-10 auto).
//  Session 13 (final mapping; bench_ops checkpoint 2, H200, batch 1 µs clean-l2 / warm, gate_up +
//    down: 31 28.9 + 18.1 / 32.4 + 19.8 vs auto 30.8 + 20.1 / 35.9 + 22.9; batch 8 137.7 + 73.0 vs
//    138.5 + 75.0; batch 16 261.0 + 135.5 vs 262.3 + 136.4):
//    mode 5 ("x5"): variant 31 (auto's 15 with kQuick) at every slot count up to 128, session 6's
//      above — the candidate for auto;
//    mode 6 ("x6"): 31 up to 8 slots only, auto's 15 from 9 to 128;
//    modes 7 / 8 ("x7" / "x8"): 29 / 32 up to 8 slots, auto above;
//    mode 9 ("x9"): 29 up to 8 slots, 31 from 9 to 128 (bench_model checkpoint 2: 1.02 / 2.23 /
//      3.53 vs auto 1.02-1.04 / 2.24-2.25 / 3.54-3.55).
//  Session 15: auto (mode 0) and modes 1..3, 6..8 take variant 33 (15 with pass-balanced warp
//    ranges) from 9 to 128 slots, auto also from 129 to kExpertsMmaDecodeMaxSlots (session 6's
//    there before); mode 10 ("x0") is the session 12-14 auto (15 from 9 to 128, 1 above).
int experts_mma_pick_s12(int64_t slots, int64_t K, int mode);

// Session 15: the default mode's decode routed experts run here up to this many slots and 8 slots
// per expert (was 128: from batch 22 on the prefill grouped GEMM moe_tc took V4's decode step,
// H200 bench_model batch 21 4.40 vs 22 14.90 ms per step, moe_tc 85 % of a batch-32 step; at
// batch 192 / 256 24.9 / 28.2 vs 43.4 / 42.6 ms with moe_tc); above it moe_tc (prefill).
constexpr int64_t kExpertsMmaDecodeMaxSlots = 2048;

// moe_group tile rows that give variants 2 and 3 one work unit per pass of 8 tokens (the
// better balance when experts have many tokens); the bits do not depend on the tiling.
constexpr int kExpertsMmaTileRows = 8;

// Bench only (bench_ops --mma-batch, session 10): the weight stream of variant 6 (memonly = 1)
// or 7 (2) alone — the same grid, items, copies and rings, no compute, no outputs (out[0] may be
// written): the speed of the access pattern itself. Same arguments as experts_mma (no x split).
// Session 13: 3 = variant 6's stream with every stage read as 2 KB contiguous bytes of the item
// (experts_mma_x.cuh kTiled: what a per-stage tiled weight layout would stream at; H200 clean-l2
// gate_up batch 1 / 8 / 16: 22.0 / 115.0 / 214.2 µs vs 22.2 / 118.1 / 221.2 — at most 3 %).
void experts_mma_memonly(int memonly, const int32_t* perm, const int32_t* row_off, const int32_t* act_off,
                         int64_t slots, int64_t num_experts, const void* const* w_table,
                         const void* const* s_table, int64_t N, int64_t K, float* out, cudaStream_t s,
                         int64_t tile_rows);

// One projection. x [x_rows, K] fp32 (any alignment; slot i reads row i / x_div); perm/row_off/
// act_off from moe_group(ids, slots, E, tile_rows, ...) with tile_rows = kExpertsMmaTileRows or
// ≥ slots (0 here: max(slots, 1) was used; variant 1 handles only that one: given 8-row tiles it
// runs each expert once per tile — the same outputs, redundant work); w_table / s_table: [E]
// device pointers to e2m1 [N, K/2 bytes] / ue8m0 [N, K/32]; workspace: experts_mma_workspace_bytes
// (x_rows, K) bytes, 16-byte aligned; out [slots, N]. Two launches on stream s (x split, product;
// variants 2 and 3 launch the product as a programmatic dependent of the split).
// zero_bad_ids (session 12): non-null = the ids [slots] moe_group grouped; the rows of slots with
// a bad id (< 0 or ≥ num_experts) are then written as +0 (by the x split: no zero-filled out
// buffer needed), every other row as without it.
void experts_mma(const float* x, int64_t x_rows, int64_t x_div, const int32_t* perm,
                 const int32_t* row_off, const int32_t* act_off, int64_t slots, int64_t num_experts,
                 const void* const* w_table, const void* const* s_table, int64_t N, int64_t K,
                 void* workspace, float* out, cudaStream_t s, int variant = 0,
                 int64_t tile_rows = 0, const int32_t* zero_bad_ids = nullptr);

}  // namespace deepinfer::cuda::kernels
