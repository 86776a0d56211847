// Small-M tensor-core product with linear_tc's bits and the weight as the MMA's A operand
// (session 9; linear_tc_wa.cuh for the arithmetic and why its bits are linear_tc's; docs/cuda.md
// "Weight-as-A products with linear_tc's bits (linear_tc_wa)"). Host-only header (C++17/20 safe).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::kernels {

// M bound: up to two n8 tiles of tokens per MMA.
constexpr int64_t kLinearTcWaMaxRows = 16;

// Whether linear_tc_wa takes the product: linear_tc_supported's layout (fmt 0 bf16, 1 e4m3,
// 2 e2m1; row bytes a multiple of 16; w and x 16-byte aligned; block_cols a multiple of 32 when
// scaled) and 1 <= M <= kLinearTcWaMaxRows.
bool linear_tc_wa_supported(int fmt, const void* w, const float* x, int64_t M, int64_t K,
                            bool scaled, int64_t block_cols);

// out [M, G·N] = x [M, G·K] · deq(w [G·N, K])ᵀ per group, meant to be bitwise equal to
// linear_tc(...) with the same arguments and the same k_split (a multiple of 32 and of
// block_cols, e.g. linear_tc_k_split(M, G·N, K, block_cols or 0, batch_invariant)). When
// k_split < K, `workspace` holds [ceil(K / k_split), M, G·N] floats, summed in split order (the
// same adds as linear_tc's reduction). scale [ceil(G·N / block_rows), ceil(K / block_cols)] ue8m0
// or f32 (fewer than 2^31 elements), null for bf16. pdl: both launches with programmatic
// dependent launch (pdl.cuh); share_x: x split into bf16 terms once per CTA (else per warp);
// tiles_per_warp: 1 or 2 m16 weight tiles per warp (CTAs of 64 or 128 weight rows). The bits are
// the same for every pdl / share_x / tiles_per_warp. fast_e4m3 (e4m3 only; then 128-row CTAs
// and x split per CTA): the short decode of linear_tc_wa_decode.h — the same bits unless the
// weight holds a NaN code (decoded as ±480 instead of NaN). wide (bf16 only; then 128-row CTAs
// and x split per CTA): ring slots of 256 bytes per weight row and 2 CTAs per SM instead of 64
// bytes and 4 (longer DRAM runs: the head). deep (e4m3 only; 128-row CTAs, x split per CTA): 3
// CTAs per SM with a deeper ring (~72 KB each) instead of 4 (~56 KB). The bits depend on neither.
// fused_reduce (session 13): the split partials summed by the last CTA of each tile (the same
// adds, no second launch; tile counters shared with wa2, so launches must be stream-ordered).
void linear_tc_wa(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                  int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows,
                  int64_t block_cols, int64_t k_split, float* out, float* workspace, cudaStream_t s,
                  bool pdl = true, bool share_x = true, int tiles_per_warp = 2,
                  bool fast_e4m3 = false, bool wide = false, bool deep = false,
                  bool fused_reduce = false);

// ---- Session 17: wr (linear_tc_wr.cuh) ------------------------------------------------------
// linear_tc_wa's arithmetic (so linear_tc's bits) for e4m3 weights with the weight rows loaded
// straight into registers (each warp: 16 rows × one split, all its loads issued before
// griddepcontrol.wait when the split is ≤ 512 k) and x's terms split once per CTA into shared
// memory. Takes fmt 1 (e4m3) with block_cols 128 (ue8m0 or f32 scales), K and k_split multiples
// of 128, min(k_split, K) <= 1024, N a multiple of 16 (per group), 1 <= M <= 16, w and x 16-byte
// aligned.
bool linear_tc_wr_supported(int fmt, const void* w, const float* x, int64_t M, int64_t N, int64_t K,
                            int64_t G, int64_t block_cols, int64_t k_split);
// out [M, G·N] = x [M, G·K] · deq(w [G·N, K])ᵀ per group: linear_tc_wa's contract (bitwise
// linear_tc with the same k_split; workspace [splits, M, G·N] when k_split < K; pdl; fused_reduce
// = the split sums in each tile's last CTA, counters shared with wa / wa2). The caller checks
// linear_tc_wr_supported first.
void linear_tc_wr(const float* x, const void* w, const void* scale, bool scale_f32, int64_t M,
                  int64_t N, int64_t K, int64_t G, int64_t block_rows, int64_t k_split, float* out,
                  float* workspace, cudaStream_t s, bool pdl = true, bool fused_reduce = false);

// For the device test: out [512] (device) ← for every e4m3 code c, out[c] = linear_tc's decode
// of the pair (c, c) (bf16x2 bits), out[256 + c] = the short decode's.
void linear_tc_wa_decode_table(uint32_t* out, cudaStream_t s);

// For the device test, the transposition question on bare MMAs: `trials` (a multiple of 4)
// independent chains of `steps` m16n8k16 bf16 MMAs; x, w [trials][16][16·steps] bf16 bits (device);
// out_n, out_t [trials][16 x rows][16 w rows] (device): x·wᵀ with x in A / w in B (linear_tc's
// roles) and with w in A / x in B (linear_tc_wa's), same k positions. Equal bits = the hypothesis.
void linear_tc_wa_mma_probe(const uint16_t* x, const uint16_t* w, int trials, int steps, float* out_n,
                            float* out_t, cudaStream_t s);

// ---- Session 10: wa2 (linear_tc_wa.cuh, DEEPINFER_SMALL_LINEAR=x1..x4) ------------------------
// linear_tc_wa's arithmetic (so linear_tc's bits, per output element) with a persistent grid, a
// ring that streams across work items (cp.async 16-byte pieces into swizzled slots, or 2-D TMA
// boxes), a table of up to kLinearTcWa2MaxProj projections of one x (linear_multi: one launch for
// several weights) and, optionally, the split partials summed by the last CTA of each tile (no
// second launch) — see the header of tcw2 in linear_tc_wa.cuh.
constexpr int kLinearTcWa2MaxProj = 8;

// One projection: out [M, G·N] = x [M, G·K] · deq(w [G·N, K])ᵀ per group, with its own k_split
// (linear_tc_k_split for this weight alone: then its bits are linear_tc's for that weight).
struct WaProjection {
  const void* w = nullptr;
  const void* scale = nullptr;  // null for bf16
  const float* x = nullptr;     // x row m, group g at x + m·lda + g·K (16-byte aligned)
  int64_t lda = 0;
  float* out = nullptr;         // [M, G·N], contiguous
  int64_t N = 0, G = 1, k_split = 0;
};

// Memory side (the bits depend on neither): CTAs of 4 warps × 2 m16 weight tiles (128 rows),
// 128 bytes of each weight row per ring slot, the ring sized for Wa2Options::ctas_per_sm.
enum class Wa2Geometry {
  kSmall,     // slots filled by every thread's 16-byte cp.async (XOR-swizzled rows)
  kTmaSmall,  // slots filled by 2-D TMA boxes of one k32 stage × 128 rows (one thread issues them)
};
struct Wa2Options {
  Wa2Geometry geom = Wa2Geometry::kSmall;
  bool fused_reduce = true;  // the last CTA of a tile sums its splits (else one reduce launch)
  bool pdl = true;           // programmatic dependent launch (pdl.cuh)
  int ctas_per_sm = 4;       // 1..4: the ring is sized for this many CTAs per SM (4: ~56 KB each)
};

// DEEPINFER_SMALL_LINEAR's session-10 variants (CudaBackend::linear / linear_multi): 1..4 for
// "x1".."x4", 0 for every other value.
int linear_tc_wa2_variant(const char* small_linear);
// Whether variant v runs a single product of `rows` weight rows (all groups) × K at M rows on
// wa2 (else linear_tc_wa, as `w`): x1, x2 and x4 the bf16 head (>= 16 M elements), x3 nothing.
bool linear_tc_wa2_takes_single(int variant, int fmt, int64_t rows, int64_t K, int64_t M);
// The options variant v uses for such a product (or a linear_multi group whose largest weight
// has `rows` rows): the head on kTmaSmall, linear_multi's groups on kSmall; the split sums in the
// kernel at M = 1 only (beyond, the last CTA's sums are latency-bound), never with x4.
Wa2Options linear_tc_wa2_options(int variant, int fmt, int64_t rows, int64_t K, int64_t M);
// Whether variant v fuses linear_multi's projections under --batch-invariant (x2, x3, x4; x1 is
// the head alone) at M rows (M <= 16), and whether a weight of rows × K may join a fused group
// (< 16 M elements: the large FP8 ones measured slower fused).
bool linear_tc_wa2_fuses_multi(int variant, int64_t M);
bool linear_tc_wa2_multi_member(int64_t rows, int64_t K);

// Whether wa2 takes these projections: 1..kLinearTcWa2MaxProj of them, fmt 0 (bf16) or 1 (e4m3;
// all with the same scale dtype and block shape), each linear_tc_wa_supported at this M, K with
// k_split a positive multiple of 32 and of block_cols (scaled), G·N ≥ 1, out 16-byte aligned.
bool linear_tc_wa2_supported(int fmt, const WaProjection* p, int n, int64_t M, int64_t K,
                             int64_t block_cols);
// Floats of workspace linear_tc_wa2 needs: [splits, M, G·N] per projection with k_split < K,
// one after the other (0 when none is split).
int64_t linear_tc_wa2_workspace_floats(const WaProjection* p, int n, int64_t M, int64_t K);
// Launches the product (and, without fused_reduce, one reduce launch). Returns false, launching
// nothing, when linear_tc_wa2_supported is false or o.ctas_per_sm is not 1..4. With fused_reduce, tile counters in a
// __device__ array are used: two such launches must not run concurrently on one device (stream
// order, PDL included, is fine); when a call would need more counters than there are, the
// separate reduce launch is used instead.
bool linear_tc_wa2(int fmt, const WaProjection* p, int n, bool scale_f32, int64_t M, int64_t K,
                   int64_t block_rows, int64_t block_cols, float* workspace, cudaStream_t s,
                   const Wa2Options& o);

}  // namespace deepinfer::cuda::kernels
