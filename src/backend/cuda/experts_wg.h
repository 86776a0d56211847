// Session 20 (issue 7, the --batch-invariant prefill): "experts wg" — the routed experts of
// experts_mma (experts_mma.h) with exactly its bits on warpgroup MMA (sm_90a), for batches where
// experts have many tokens each. Host-only header (C++17 safe); the kernel and the argument for
// the bits: experts_wg.cu; design and numbers: docs/cuda.md "Session 20".
//
// out[slot, n] = x[slot / x_div] · deq(W_e[n]) for every grouped slot, bitwise equal to
// experts_mma (any variant) with the same inputs: the same three f16 planes of x · 2^c, the same
// decoded weights at the same MMA k positions, per 32-k block two k16 steps from zero, promoted
// with fma(partial, scale, acc) in k order, the planes summed (h2 + h1) + h0 and scaled by
// 2^(14 − c). Where experts_mma streams an expert's weights once per 8 tokens through mma.sync,
// this kernel takes tiles of kExpertsWgTileRows tokens of one expert × 128 or 256 weight rows,
// the weights (decoded in registers) as wgmma's A operand and the tile's 96 plane columns as B.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda::kernels {

// Tokens of one expert per work tile: moe_group must be run with this tile_rows for the tile_off
// this kernel takes.
constexpr int kExpertsWgTileRows = 32;

// The layouts taken: experts_mma_supported's (e2m1 with 1×32 ue8m0 scales, K % 256 == 0,
// K ≤ 16384, ≤ 1024 experts, 32-bit indices) and N % 128 == 0. True also when the device is not
// an sm_90 one (the caller checks the device: experts_wg_device_ok).
bool experts_wg_supported(int fmt, int64_t slots, int64_t num_experts, bool scaled, bool scale_f32,
                          bool w_vec, int64_t N, int64_t K, int64_t block_rows, int64_t block_cols);

// Whether the current device runs the kernel (compute capability 9.0: wgmma).
bool experts_wg_device_ok();

// Device workspace of one projection: experts_mma_workspace_bytes(x_rows, K).
size_t experts_wg_workspace_bytes(int64_t x_rows, int64_t K);

// One projection, experts_mma's contract except the grouping: perm / row_off / tile_off from
// moe_group(ids, slots, E, kExpertsWgTileRows, ...). zero_bad_ids as experts_mma's. Two launches
// on s (the x split in the MMA's k order; the product as its programmatic dependent).
// variant: 1 = 128 weight rows per work item (one m64 tile per warpgroup); 2 / 3 = 256 rows (two
// m64 tiles per warpgroup sharing each B tile, in flight together / one after the other; need
// N % 256, else 1); 4 = 1 with a 3-stage ring at two CTAs per SM (128 registers); 0 = the
// default, 3 (where N allows). All give the same bits.
void experts_wg(const float* x, int64_t x_rows, int64_t x_div, const int32_t* perm,
                const int32_t* row_off, const int32_t* tile_off, int64_t slots, int64_t num_experts,
                const void* const* w_table, const void* const* s_table, int64_t N, int64_t K,
                void* workspace, float* out, cudaStream_t s, const int32_t* zero_bad_ids = nullptr,
                int variant = 0);

}  // namespace deepinfer::cuda::kernels
