// Routed experts on the tensor cores, "v2" (moe_tc.cu / moe_tc.cuh): FP4 experts, x pre-split
// into bf16 terms once per row, a deeper k64 cp.async pipeline. Same bits as the v1 grouped GEMM
// (kernels::experts_tc in kernels.h) for every slot; the grouping (kernels::moe_group) is shared
// and must use the tile_rows passed here (32 or 64: moe_tc_tile_rows()).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::kernels {

// Which grouped kernel serves prefill-sized FP4 expert batches (env DEEPINFER_CUDA_MOE_TC):
// 0 = "v1" (linear_tc.cuh tc_kernel), 1 = "v2": BM 64 × BN 128, 4 stages, 1 CTA (8 warps) per
// SM, 2 = "v2s3" (default): 3 stages, 2 CTAs per SM (≤ 128 registers), 3 = "v2n256": BM 64 ×
// BN 256, 4 stages, 16 warps (≤ 128 registers), 4 = "v3" (moe_tc_v3.cuh): BM 64 × BN 256, warp
// tiles 32 × 64, 4 stages, 1 CTA (8 warps) per SM, empty m16 fragments skipped — all of them the
// same bits for every slot (v1's arithmetic). 32-row tiles always run v2's BM 32 kernel.
int moe_tc_variant();
// m-tile rows for a batch: 32 for decode-sized batches (≤ 24 slots per expert on average: one
// sparse tile per picked expert, v2 <BM 32, 6 stages, 2 CTAs/SM> streams the weights), else 64.
int moe_tc_tile_rows(int64_t slots, int64_t num_experts);

// One projection can run on v2: FP4 (fmt 2) weights with scales whose block width is a multiple
// of 32, K a multiple of 64, x 16-byte aligned, tile_rows 32 or 64, at most 65535 work tiles.
bool moe_tc_supported(int fmt, const float* x, int64_t slots, int64_t num_experts, int64_t K,
                      bool scaled, int64_t block_cols, int tile_rows);

// terms [3][rows][K] bf16 (as uint16): x [rows, K] fp32 (row stride K) split into
// x_0 = bf16_rn(x), x_1 = bf16_rn(x − x_0), x_2 = bf16_rn(x − x_0 − x_1) (a NaN remainder, from an
// infinite x, becomes 0) — exactly the split of the v1 kernel. Within each group of 32 k the
// elements are permuted to the MMA k-step order: k = 8q + 4s + i (q < 4, s < 2, i < 4) is stored
// at 16s + 4q + i. K % 32 == 0 (else nothing is written).
void moe_tc_split_terms(const float* x, int64_t rows, int64_t K, uint16_t* terms, cudaStream_t s);

// out[slot, n] = x[slot / x_div] · deq(W_e[n]) for every grouped slot (slots left out are not
// written), W_e [N, K] e2m1 with scales [ceil(N/block_rows), ceil(K/block_cols)] (ue8m0 bytes,
// or f32 when scale_f32). terms: moe_tc_split_terms of x ([x_rows, K]). perm / row_off /
// tile_off from moe_group with tile_rows (32: the BM 32 kernel whatever `variant` says; 64: the
// variant, 0..4 as moe_tc_variant; 0 runs v2 (callers run v1 through experts_tc)). out [slots, N].
void moe_tc_experts(int variant, const uint16_t* terms, int64_t x_rows, int64_t x_div,
                    const int32_t* perm, const int32_t* row_off, const int32_t* tile_off,
                    int tile_rows, int64_t slots, int64_t num_experts, const void* const* w_table,
                    const void* const* s_table, bool scale_f32, int64_t N, int64_t K,
                    int64_t block_rows, int64_t block_cols, float* out, cudaStream_t s);

}  // namespace deepinfer::cuda::kernels
