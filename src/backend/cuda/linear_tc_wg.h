// Session 18 (issue 7, the --batch-invariant target at 17..64 rows): "wg" — linear_tc's bits on
// warpgroup MMA (sm_90a). Host-only header (C++17/20 safe); the kernels and the argument for
// the bits: linear_tc_wg.cu; design and numbers: docs/cuda.md "Session 18".
//
// out [M, G·N] = x [M, G·K] · deq(w [G·N, K])ᵀ per group, bitwise equal to linear_tc(...) with
// the same arguments and the same k_split — so under --batch-invariant it may replace
// linear_tc_small (mma.sync, ~100 TFLOP/s of three-term work at 32 rows) for any M it takes.
// The weight rows are wgmma's A operand (registers, linear_tc's k permutation), x's three bf16
// terms its B operand (an image in global memory, bulk-copied per 64-k chunk), and the terms
// x_2, x_1, x_0 of each k16 step chained into the scale block's partial exactly as linear_tc's
// m16n8k16 MMAs chain them. The H200 gives wgmma.m64nNk16 and mma.m16n8k16 the same bits for the
// same operands in the same k positions (checked in session 18 before this was written, and by
// the kernel's own bitwise tests against linear_tc).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda::kernels {

constexpr int64_t kLinearTcWgMaxRows = 64;

// The layouts taken: fmt 0 (bf16, unscaled: linear_tc's 128-column promotion) or 1 (e4m3 with
// block_cols 128, ue8m0 or f32 scales, any block_rows); 1 <= M <= 64; G >= 1; N >= 1 per group,
// G·N < 2^31; K and k_split multiples of 128 (so scale blocks and splits align with the 64-k
// chunks), K <= 2^20; w and x 16-byte aligned.
bool linear_tc_wg_supported(int fmt, const void* w, const float* x, int64_t M, int64_t N, int64_t K,
                            int64_t G, int64_t block_cols, int64_t k_split);

// Device workspace of a call (bytes): the x-term image and, when k_split < K, the split partials
// [splits, M, G·N] (fp32).
size_t linear_tc_wg_workspace_bytes(int64_t M, int64_t N, int64_t K, int64_t G, int64_t k_split);

// Two or three launches in order on `s` (the x split into the term image; the product; the split
// sums in split order when k_split < K), each a programmatic dependent of the one before when pdl.
// scale [ceil(G·N / block_rows), K / 128] ue8m0 or f32 (scale_f32), null for bf16. workspace of
// linear_tc_wg_workspace_bytes, 16-byte aligned; it is written only after the first launch's
// griddepcontrol.wait, so consecutive calls on one stream may share it. false (nothing launched)
// when refused (linear_tc_wg_supported).
bool linear_tc_wg(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                  int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows, int64_t k_split,
                  float* out, void* workspace, cudaStream_t s, bool pdl = true);

}  // namespace deepinfer::cuda::kernels
