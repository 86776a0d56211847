// Streaming GEMV (gemv.cuh for the layout and the arithmetic): the stored-format product of
// backend.h `linear` for a few rows of x, and the routed experts with each selected expert's
// weights read once for all the tokens routed to it. Row-independent: an output element's bits
// depend only on its x row and weight row (never on M, the tile of x rows or the grid).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::kernels {

// Largest M the GEMV is meant for (the tensor-core kernel takes larger products).
constexpr int64_t kGemvMaxRows = 8;

// Whether the GEMV handles a weight: fmt 0 bf16, 1 e4m3, 2 e2m1 (K even), 3 f32; scaled (fmt 1/2
// with scales): block_cols a multiple of the 16-byte chunk's elements (16 / 32) with a power-of-two
// quotient; K small enough for one x row in shared memory (K ≤ 24576).
bool gemv_supported(int fmt, int64_t K, bool scaled, int64_t block_cols);
// Rows of x a CTA stages at once (1, 2, 4 or 8) for M rows of K floats: M's power-of-two ceiling,
// capped by the shared-memory budget. ceil(M / gemv_tile_rows) is how often the weight is read.
int gemv_tile_rows(int64_t M, int64_t K);

// out [M, G·N] = x [M, G·K] · deq(w [G·N, K]) per group (backend.h linear semantics); scale
// [ceil(G·N / block_rows), ceil(K / block_cols)] ue8m0 or f32, null for fmt 0 / 3.
// pdl (session 7, pdl.cuh): programmatic dependent launch — the kernel may start while the
// previous kernel of the stream runs, reading (prefetching) only w and scale until that kernel
// has completed, so w and scale must not be written by the kernels still in flight before it
// (model weights never are). Same bits either way.
void gemv_linear(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                 int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows,
                 int64_t block_cols, float* out, cudaStream_t s, bool pdl = false);

// Weight bytes a PDL-launched dense GEMV (gemv_linear, gemv_multi) prefetches into L2 before its
// wait, over its whole grid (each CTA / warp the first bytes of its own rows). Process-wide;
// default kGemvPdlPrefetchDefault; 0 = none (the launch is still PDL). For benchmarks.
constexpr int64_t kGemvPdlPrefetchDefault = int64_t{8} << 20;
void gemv_set_pdl_prefetch_bytes(int64_t bytes);
int64_t gemv_pdl_prefetch_bytes();

// Session 6 (gemv_multi.cuh): several projections of the same x in ONE launch, each warp keeping
// its next weight loads in flight while it computes. out_j [M, N_j] = x [M, K] · deq(W_j [N_j, K])ᵀ,
// bitwise equal to gemv_linear of each projection alone. Formats: bf16 (unscaled) and e4m3 with
// block scales (ue8m0 or f32, the same dtype and block shape for every projection); rows 16-byte
// aligned (row bytes % 16 == 0, aligned pointers); groups = 1; x rows of K floats, contiguous.
constexpr int kGemvMaxProjections = 8;
struct GemvProjection {
  const void* w = nullptr;      // [N, K] stored
  const void* scale = nullptr;  // [ceil(N / block_rows), ceil(K / block_cols)], null for bf16
  float* out = nullptr;         // [M, N] contiguous
  int64_t N = 0;
};
bool gemv_multi_supported(int fmt, int64_t K, bool scaled, int64_t block_cols);
// false (nothing launched) when the layout is refused: the caller runs gemv_linear per weight.
// deep: one CTA of 8 warps per SM with 8 loads per lane per step (else two CTAs, 4 loads);
// a speed choice only, the bits are the same. pdl: as gemv_linear's (the weights and scales are
// read before the previous kernel has completed).
bool gemv_multi(int fmt, const float* x, const GemvProjection* proj, int nproj, bool scale_f32,
                int64_t M, int64_t K, int64_t block_rows, int64_t block_cols, bool deep,
                cudaStream_t s, bool pdl = false);

// Session 8 (gemv_v3.cuh; docs/cuda.md "Dense decode GEMV v3"): the dense decode GEMV with the
// weights streamed through a TMA ring in shared memory (persistent grid, S·16 KB in flight per
// SM, the first tiles issued before the PDL wait). Its own arithmetic (row-independent, NOT the
// bits of gemv_linear / gemv_multi): bf16, and e4m3 with block scales (ue8m0 or f32, block_cols a
// multiple of 16 with a power-of-two quotient); rows of at most 16 KB, a multiple of 16 bytes,
// 16-byte aligned weights. Options (speed only; the bits depend on the format and K alone, except
// that NaN payloads may differ with decode 1 / 2):
struct Gemv3Options {
  int decode = 0;           // e4m3: 0 cvt.f16x2.e4m3x2 + cvt.f32.f16; 1 session 5's integer decode
                            // (×2^120 per element); 2 bits moved into f16 + cvt.f32.f16 (2^8 folded
                            // into the scale)
  int ctas_per_sm = 1;      // 2: two CTAs per SM (the small shared-memory budget only)
  bool deep = false;        // up to 8 ring stages in up to 220 KB (one CTA per SM, no PDL overlap)
  int64_t deep_from_bytes = 0;  // > 0: deep when the launch's weight bytes reach it (same plan of
                                // x rows per pass either way, so the same bits)
  bool auto_pick = false;   // "auto": the dispatch takes v3 only where it measured faster than s7
};
// Whether CudaBackend::linear / linear_multi give a weight [rows, K] (groups) to v3 under these
// options: always, except with auto_pick (H200, session 8 mid-run bench_ops, M = 1..8: v3 with two
// CTAs per SM beat s7 on wq_b / indexer wq_b (K = 1024) and on the ≤ 8 MB projections with rows of
// ≥ 4 KB — wq_a, wkv, compressors, router gate — and lost on wo_a, wo_b, the shared expert and
// the BF16 head).
bool gemv3_dispatch_takes(const Gemv3Options& o, int fmt, int64_t rows, int64_t K, int64_t groups);
// The options of a DEEPINFER_GEMV_KERNEL value ("auto" / "v1" default, "v2" two CTAs per SM,
// "v3" deep, "v4" integer decode, "a" f16 bit-move decode); false for the other names (e.g.
// "s7": the session-7 kernels).
bool gemv3_options_for(const char* name, Gemv3Options* out);
bool gemv3_supported(int fmt, int64_t K, bool scaled, int64_t block_cols);
// How often the weight is read for M rows (x rows staged per pass: shared-memory budget); 0 when
// unsupported or M is out of 1..kGemvMaxRows.
int gemv3_passes(int fmt, int64_t M, int64_t K, const Gemv3Options& o = {});
// gemv_linear's contract for bf16 / e4m3 (G ≤ 8 groups, each its own projection); false (nothing
// launched) when refused. pdl as gemv_linear's.
bool gemv3_linear(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                  int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows, int64_t block_cols,
                  float* out, cudaStream_t s, bool pdl = false, const Gemv3Options& o = {});
// gemv_multi's contract (projections of one x [M, K], ≤ 8, the same format and block shape),
// with this kernel's arithmetic; false (nothing launched) when refused.
bool gemv3_multi(int fmt, const float* x, const GemvProjection* proj, int nproj, bool scale_f32,
                 int64_t M, int64_t K, int64_t block_rows, int64_t block_cols, cudaStream_t s,
                 bool pdl = false, const Gemv3Options& o = {});

// Routed experts, slots grouped on the device by moe_group (kernels.h) with tile_rows >= slots,
// so that tile_off[e] counts the active experts before e: for every grouped slot,
// out[slot, n] = x[slot / x_div] · deq(W_e[n]) (W_e at w_table[e], scales at s_table[e] or null);
// slots left out (bad ids) are not written. Each active expert's weight is read once per
// gemv_tile_rows(slots, K) of its tokens. out [slots, N], x rows of K floats.
// w_vec: every expert's rows are 16-byte aligned (row bytes % 16 == 0, aligned pointers).
void gemv_experts(int fmt, const float* x, int64_t x_div, const int32_t* perm,
                  const int32_t* row_off, const int32_t* act_off, int64_t slots,
                  int64_t num_experts, const void* const* w_table, const void* const* s_table,
                  bool scale_f32, bool w_vec, int64_t N, int64_t K, int64_t block_rows,
                  int64_t block_cols, float* out, cudaStream_t s);

// The routed experts' second version (gemv_experts.cuh; session 5): same contract and the same
// bits as gemv_experts, for FP4 e2m1 experts with block scales (ue8m0 or f32, block_cols 32·2^j),
// 16-byte aligned rows (w_vec), K a multiple of 32 up to 8192, at most 1024 experts, and
// slots·N, slots·K < 2^31. A persistent grid splits all active experts' rows evenly over the
// CTAs; each warp keeps its next rows' weights in flight while it decodes the current ones.
bool gemv_experts_v2_supported(int fmt, int64_t slots, int64_t num_experts, bool scaled,
                               bool w_vec, int64_t N, int64_t K, int64_t block_cols);
void gemv_experts_v2(const float* x, int64_t x_div, const int32_t* perm, const int32_t* row_off,
                     const int32_t* act_off, int64_t slots, int64_t num_experts,
                     const void* const* w_table, const void* const* s_table, bool scale_f32,
                     int64_t N, int64_t K, int64_t block_rows, int64_t block_cols, float* out,
                     cudaStream_t s);

}  // namespace deepinfer::cuda::kernels
