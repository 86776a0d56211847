// Session 9 (issue 7): "skinny_mma", the default-mode small-M dense product on tensor cores
// (skinny_mma.cuh for the layout and the arithmetic; docs/cuda.md "Small-M dense products on
// tensor cores (skinny_mma)"). out_j [M, N_j] = x [M, K] · deq(W_j [N_j, K])ᵀ for M = 1..16 fp32
// rows of x, W_j stored as e4m3 with 128-column block scales (ue8m0 or f32, block rows a multiple
// of 16) or as bf16; one or several projections of the same x.
// Bits: fixed by (format, N_j, K, variant's split) — never by M, the other tokens, the other
// projections of a launch or timing (no atomics). Not the GEMV's bits (fp16/bf16 planes of x,
// tensor-core sums): tests bound both against a double reference.
// Plain C++17 header (included by cuda_backend.cpp, the test and bench_ops).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda::kernels {

constexpr int64_t kSkinnyMaxRows = 16;
constexpr int kSkinnyMaxProjections = 8;

// DEEPINFER_GEMV_KERNEL tc | tc1 | tc2 | tc3 (skinny_options_for parses it; false for anything
// else — the caller then keeps its old dispatch). Every variant computes the same bits for a
// product it takes (the k split S ≤ 8, inside one CTA, from (fmt, N, K); the m-tiles per warp and
// PDL are speed choices only):
//   tc  — the measured pick (H200, session 9 runs; skinny_takes), M ≤ 8 only (at 9..16
//         linear_tc_wa is as fast or faster): e4m3 weights of ≥ 8 MiB at every M ≤ 8, smaller
//         e4m3 weights at 3 ≤ M ≤ 8, bf16 weights of ≥ 8 MiB at 3 ≤ M ≤ 8 (the head at M = 8: 316
//         vs the GEMV's 679 µs; at M = 1 the GEMV streams it at 98 % of copy); two m16 tiles per
//         warp for e4m3 at M ≥ 9 (x's B fragments shared by 32 rows; tc1); PDL;
//   tc1 — every product skinny_supported allows (no pick), as tc otherwise;
//   tc2 — tc without programmatic dependent launch;
//   tc3 — tc with one m16 tile per warp everywhere.
struct SkinnyOptions {
  int variant = 0;    // 0 = tc, 1..3 = tc1..tc3
  int min_split = 1;  // bench only: the k split at least this (other bits where it grows)
  int max_split = 8;  // bench only: > 8 lets the split span a cluster of CTAs (session 9 mid-run:
                      // slower — the distributed-shared-memory epilogue; other bits)
};
bool skinny_options_for(const char* selector, SkinnyOptions* out);

// Whether CudaBackend's dispatch gives skinny_mma the product of M rows with this weight under
// `o` (the pick above; tc1: always). Call after skinny_supported.
bool skinny_takes(int fmt, int64_t N, int64_t K, int64_t M, const SkinnyOptions& o);

// The layouts the kernel implements: fmt 1 (e4m3, scaled, block_cols 128, block_rows a positive
// multiple of 16) with K % 128 == 0, or fmt 0 (bf16, unscaled) with K % 64 == 0; K ≤ 2^20,
// N ≥ 1, N·K < 2^31 · 16, weight pointer 16-byte aligned.
bool skinny_supported(int fmt, const void* w, int64_t N, int64_t K, bool scaled, int64_t block_rows,
                      int64_t block_cols);

// Cluster size (KC) the product of one (fmt, N, K) uses under `o`: projections of one x fuse
// into one launch only when equal (each keeps the split it has alone: the same bits).
int skinny_cluster_size(int fmt, int64_t N, int64_t K, const SkinnyOptions& o);
// The k split S = KW·KC (for the docs / bench labels).
int skinny_split(int fmt, int64_t N, int64_t K, const SkinnyOptions& o);

// Device workspace for the x planes of M rows of K (bytes, a multiple of 16).
size_t skinny_workspace_bytes(int64_t M, int64_t K);

struct SkinnyProjection {
  const void* w = nullptr;      // [N, K] stored
  const void* scale = nullptr;  // [ceil(N / block_rows), K / 128] ue8m0 or f32; null for bf16
  float* out = nullptr;         // [M, N] contiguous
  int64_t N = 0;
};

// The x split (one launch): fp32 x [M, K] (contiguous rows) → 16-bit planes (f16 for fmt 1,
// bf16 for fmt 0) in `workspace` (skinny_workspace_bytes(M, K), 16-byte aligned).
void skinny_split_x(int fmt, const float* x, int64_t M, int64_t K, void* workspace, cudaStream_t s,
                    bool pdl);

// The product of every projection (≤ kSkinnyMaxProjections, all skinny_supported with the same
// fmt, scale dtype, block shape and skinny_cluster_size) from the planes of skinny_split_x
// (launched before on the same stream). false (nothing launched) when refused.
bool skinny_product(int fmt, const SkinnyProjection* proj, int nproj, bool scale_f32, int64_t M,
                    int64_t K, int64_t block_rows, const void* workspace, cudaStream_t s, bool pdl,
                    const SkinnyOptions& o);

// Workspace skinny_linear needs (bytes; 0 when M ≤ 2 fuses the split into the product).
size_t skinny_linear_workspace_bytes(int fmt, int64_t N, int64_t M, int64_t K, const SkinnyOptions& o);

// One projection: at M ≤ 2 one launch (every CTA splits x into shared memory; workspace unused,
// may be null), else split + product (two launches, the product a programmatic dependent of the
// split when pdl; workspace of skinny_workspace_bytes(M, K)). The same bits either way. false
// (nothing launched) when refused.
bool skinny_linear(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                   int64_t M, int64_t N, int64_t K, int64_t block_rows, int64_t block_cols,
                   float* out, void* workspace, cudaStream_t s, bool pdl, const SkinnyOptions& o);

// Session 15: a grouped product (CudaBackend::linear with groups G > 1, V4's wo_a):
// out [M, G·N] with out[m, j·N + n] = Σ_k x[m, j·K + k] · deq(W[j·N + n, k]), x [M, G·K],
// W [G·N, K] — the G groups as G projections of one launch, each group's x columns split into
// their own planes (row exponent per token and group). The k split comes from (fmt, G·N, K), the
// same for every group. Bits: fixed by (fmt, G, N, K); row m of an M-row call equals the 1-row
// call of x row m. G in 2..8; e4m3 groups start on a scale block row (N % block_rows == 0).
bool skinny_grouped_supported(int fmt, const void* w, int64_t G, int64_t N, int64_t K, bool scaled,
                              int64_t block_rows, int64_t block_cols);
// Workspace skinny_grouped_linear needs (bytes; 0 when M ≤ 2 fuses the split into the product).
size_t skinny_grouped_workspace_bytes(int fmt, int64_t G, int64_t N, int64_t M, int64_t K,
                                      const SkinnyOptions& o);
// false (nothing launched) when refused.
bool skinny_grouped_linear(int fmt, const float* x, const void* w, const void* scale,
                           bool scale_f32, int64_t M, int64_t G, int64_t N, int64_t K,
                           int64_t block_rows, int64_t block_cols, float* out, void* workspace,
                           cudaStream_t s, bool pdl, const SkinnyOptions& o);

}  // namespace deepinfer::cuda::kernels
