// Session 16 (issue 7): "skinny_wg", the default mode's e4m3 dense products at 17..64 token rows
// (CudaBackend's default, DEEPINFER_DENSE_WG; the kernel serves 1..64) on warpgroup MMA (sm_90a). out [M, G·N] with out[m, j·N + n] = Σ_k x[m, j·K + k] ·
// deq(W[j·N + n, k]) for x [M, G·K] fp32, W [G·N, K] e4m3 with ue8m0 block scales of
// block_rows × 128 (G = 1 for a plain product, G > 1 for V4's grouped wo_a).
//
// Why: at 17..64 rows these products ran on linear_tc_small at ~0.4 TB/s (37 % of a batch-32
// step, with the head), which splits x into terms in every CTA. Here x is split ONCE per call into three
// exact bf16 planes, laid out in global memory as the exact shared-memory image wgmma reads, and
// each 64-k chunk of it is one bulk copy per CTA; the weight rows stream through registers.
// docs/cuda.md "Session 16: skinny_wg" has the design and its numbers.
//
// Arithmetic (its own bits, fixed by (G, N, K) and the k split — never by M, the other tokens'
// values, timing or the GPU's SM count):
//  - each weight element, decoded exactly (e4m3 → f16 → f32) and multiplied by its block scale
//    2^(E − 127) in f32 (exact for E ≥ 3), is rounded to bf16 — exact, as an e4m3 value times a
//    power of two has 4 significant bits (the A operand, in registers);
//  - x = h0 + h1 + h2 exactly per element (bf16 planes: hi = rn(x), h1 = rn(x − h0), h2 =
//    rn(x − h0 − h1); bf16 has fp32's exponent range, so no row scaling), the B columns
//    3m, 3m + 1, 3m + 2 of token m;
//  - products of two bf16 exact in the tensor core's fp32 accumulation; the k-steps of a
//    warpgroup's k slice chained in one accumulator in k order; per token ((S2 + S1) + S0); the
//    S k slices summed in slice order (v = ws[0]; v += ws[z]).
// Each output element's value depends only on its own B columns, so row m of an M-row call equals
// the 1-row call of x row m (the N of the MMA, 3M rounded up, changes only the number of columns).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda::kernels {

constexpr int64_t kSkinnyWgMaxRows = 64;

// The layouts implemented: e4m3 weights with ue8m0 scales (not f32), block_cols 128, block_rows
// >= 1; K % 128 == 0, K <= 2^20; G in 1..64; N >= 1, G·N < 2^31; w 16-byte aligned.
bool skinny_wg_supported(const void* w, int64_t G, int64_t N, int64_t K, bool scale_f32,
                         int64_t block_rows, int64_t block_cols);

// The k split S (a power of two: K / S a multiple of 512 unless S = 1) for (G, N, K).
int skinny_wg_split(int64_t G, int64_t N, int64_t K);

// Device workspace of a call at M rows (bytes; the B image and, when S > 1, the split partials).
size_t skinny_wg_workspace_bytes(int64_t M, int64_t G, int64_t N, int64_t K);

// Two or three launches (the x split; the product; the split sum when S > 1), in order on `s`,
// each a programmatic dependent of the one before when pdl. x [M, G·K] fp32 (any alignment),
// out [M, G·N], workspace of skinny_wg_workspace_bytes (16-byte aligned). false (nothing
// launched) when refused: M outside 1..64 or a layout skinny_wg_supported refuses.
bool skinny_wg_linear(const float* x, const void* w, const void* scale, int64_t M, int64_t G,
                      int64_t N, int64_t K, int64_t block_rows, float* out, void* workspace,
                      cudaStream_t s, bool pdl);

}  // namespace deepinfer::cuda::kernels
