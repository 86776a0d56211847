// CUDA kernels behind the CUDA backend, one family per .cu file, on raw device pointers.
// Semantics are exactly those of the ops in backend/backend.h (see there for shapes); the CPU
// backend is the oracle (tests/cuda/cuda_ops_test.cpp). All activations are fp32.
//
// Batch invariance by construction: every kernel computes a row (token) with a fixed thread
// mapping and a fixed reduction order that depend only on that row's sizes, never on how many rows
// are in the batch (one row per block for norms and attention, no split-K picked by batch size).
//
// Index arguments that the host cannot check without a device sync (token ids, expert ids, key
// ids) are bounds-checked on the device: a bad index writes zeros and sets `*error_flag` to a
// non-zero code (kErr*), which the backend reads back at its next synchronize().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::kernels {

enum ErrorCode : int32_t {
  kErrNone = 0,
  kErrEmbeddingId = 1,
  kErrGatherId = 2,
  kErrScatterId = 3,
  kErrHashExpertId = 4,
  kErrKeyId = 5,
  kErrKeyOffsets = 6,
  kErrIndexerKeys = 7,
  kErrPlaceIds = 8,
  kErrTokenIds = 9,
};
const char* error_code_name(int32_t code);

// y[M,N] = x · rsqrt(mean(x²) + eps) (· w[N] if non-null). In place allowed.
void rms_norm(const float* x, const float* w, int64_t M, int64_t N, float eps, float* y,
              cudaStream_t s);
// Whether rms_norm takes its scalar kernel (256 threads, a float a thread) for these rows: N not
// a multiple of 4, N < 2048, or a pointer not 16-byte aligned.
bool rms_norm_scalar_rows(const float* x, const float* w, const float* y, int64_t N);
// Rotary width limit of the rope kernel (cos/sin of one token's frequencies in shared memory).
constexpr int64_t kRopeMaxHalf = 512;
// In place on x[S, nh, D]; half = r/2 pairs. interleaved_trailing: DeepSeek layout, else
// rotate-half on the leading r channels.
void rope(float* x, const int32_t* positions, const float* inv_freq, int64_t S, int64_t nh,
          int64_t D, int64_t half, bool interleaved_trailing, float mscale, bool inverse,
          cudaStream_t s);
// y[S, nh, D] = rope(rms_norm(x) per head row (· w[D] if non-null)), forward rotation; bitwise
// rms_norm then rope for D where rms_norm_rope_supported(D) (rows narrower than 2048). y may be x.
bool rms_norm_rope_supported(int64_t D);
void rms_norm_rope(const float* x, const float* w, const int32_t* positions, const float* inv_freq,
                   int64_t S, int64_t nh, int64_t D, int64_t half, float eps,
                   bool interleaved_trailing, float mscale, float* y, cudaStream_t s);
// Session 12: ya [Ma, Na] = rms_norm(a; wa) and yb [S, nh, D] = rms_norm_rope(b; wb, …) in one
// launch (backend.h rms_norm_and_rope), each bitwise its own kernel's result; for a's rows where
// rms_norm_scalar_rows and D where rms_norm_rope_supported. One eps for both.
void rms_norm_and_rope(const float* a, const float* wa, int64_t Ma, int64_t Na, float* ya,
                       const float* b, const float* wb, const int32_t* positions,
                       const float* inv_freq, int64_t S, int64_t nh, int64_t D, int64_t half,
                       float eps, bool interleaved_trailing, float mscale, float* yb,
                       cudaStream_t s);
// out[M, I] = silu(min(g, lim)) · clamp(u, -lim, lim), gate_up[M, 2I]; lim <= 0: no clamp.
void swiglu(const float* gate_up, int64_t M, int64_t I, float limit, float* out, cudaStream_t s);
// out[n, d] = Σ_l softmax_l(scores[:, l, c]) · values[:, l, c].
void softmax_pool(const float* values, const float* scores, int64_t n, int64_t L, int64_t d,
                  float* out, cudaStream_t s);
// mHC coefficients per token (see backend.h hc_coeffs). head=true: pre only.
void hc_coeffs(const float* mix, const float* base, const float* scale, int64_t S, int64_t hc,
               int64_t iters, float eps, bool head, float* pre, float* post, float* comb,
               cudaStream_t s);
void hc_collapse(const float* x, const float* pre, int64_t S, int64_t hc, int64_t H, float* out,
                 cudaStream_t s);
// y2 [S, H] (session 12, may be null): the expand of y + y2 (add's arithmetic, one fp32 add).
void hc_expand(const float* x, const float* y, const float* post, const float* comb, int64_t S,
               int64_t hc, int64_t H, float* out, cudaStream_t s, const float* y2 = nullptr);
// With `expand` (hc_expand_pre), the fused sites first compute the previous site's expand
// x_new = post ⊗ y + Cᵀ·x_prev (hc_expand's arithmetic, written to x_new) and run on x_new
// (`x` is ignored).
struct HcExpandIn {
  const float* x_prev;  // [S, hc, H]
  const float* y;       // [S, H]
  const float* post;    // [S, hc]
  const float* comb;    // [S, hc, hc]
  float* x_new;         // [S, hc, H], must not alias x_prev
  const float* y2 = nullptr;  // [S, H] or null: y + y2 is expanded (hc_site only, not hc_pre_s6)
};
// Session 6's fused site (hyper_connection.cu; S <= 64 by design, kept for the bench and
// DEEPINFER_CUDA_HC=fused_s6): partial products of X [S, hc·H] with fn [N, hc·H]
// (N = head ? hc : (2+hc)·hc) and Σx² per 128-column chunk, then per row the norm, the Sinkhorn
// coefficients and the collapse out [S, H]. part: scratch of hc_pre_s6_chunks(hc·H) · S · (N+1)
// floats. post/comb unused when head.
bool hc_pre_s6_supported(int64_t hc, bool head);
int64_t hc_pre_s6_chunks(int64_t K);
void hc_pre_s6(const float* x, const float* fn, const float* base, const float* scale, int64_t S,
               int64_t hc, int64_t H, int64_t iters, float hc_eps, float norm_eps, bool head,
               float* part, float* post, float* comb, float* out, cudaStream_t s,
               const HcExpandIn* expand = nullptr);

// Session 7's fused site (hc_site.cu) for every S: one whole mHC site (backend.h hc_pre) in two
// kernels. A token's outputs (post, comb, collapsed, and x_new with expand) are a function of
// that token's inputs and the sizes (hc, H) only: the same bits for any S, any position of the
// row, any mode and with or without PDL (the arithmetic is fixed per 128-column chunk; docs/cuda.md
// "mHC site for every S"). Supported when hc_site_supported(hc, head) (hc <= 4).
// Modes (which partial-product kernel; kAuto picks by S): kRows = a warp per (row, chunk), for
// decode-sized S; kTile1 / kTile4 = 64-row register tiles over 1 / 4 chunks per CTA.
enum class HcSiteMode { kAuto, kRows, kTile1, kTile4 };
bool hc_site_supported(int64_t hc, bool head);
HcSiteMode hc_site_mode(int64_t S, HcSiteMode mode);  // resolves kAuto
// Floats of the `part` scratch the site needs for these sizes and mode.
int64_t hc_site_scratch_floats(int64_t S, int64_t hc, int64_t H, bool head, HcSiteMode mode);
// pdl: both kernels launched with programmatic dependent launch (they wait for the previous
// kernel before touching anything but fn/base/scale; the finish kernel starts while the partial
// kernel runs).
// norm (session 12, backend.h hc_pre_norm): also out [S, H] = rms_norm(collapsed, weight [H] or
// null, eps), bitwise rms_norm's result. In the finish kernel (one CTA per row collapses and
// normalises it with rms_norm's thread mapping) except for kTile4 partials or float4-sized rows
// with misaligned streams: then the finish kernel and rms_norm as two launches.
struct HcSiteNorm {
  const float* weight;  // [H] or null
  float eps;
  float* out;  // [S, H]
};
void hc_site(const float* x, const float* fn, const float* base, const float* scale, int64_t S,
             int64_t hc, int64_t H, int64_t iters, float hc_eps, float norm_eps, bool head,
             float* part, float* post, float* comb, float* out, cudaStream_t s,
             const HcExpandIn* expand, bool pdl, HcSiteMode mode = HcSiteMode::kAuto,
             const HcSiteNorm* norm = nullptr);
// out[S, T] indexer scores (see backend.h indexer_scores).
// key_start [S] may be null (every row reads keys from row 0); Tk = rows of keys.
void indexer_scores(const float* q, const float* weights, const float* keys,
                    const int32_t* visible, const int32_t* key_start, int64_t S, int64_t nI,
                    int64_t cI, int64_t T, int64_t Tk, float weight_scale, float dot_scale,
                    float* out, int32_t* error_flag, cudaStream_t s);
// dst[layout[s,0] + j] = src[s, j] + layout[s,2] for j < layout[s,1] (see backend.h place_ids).
void place_ids(const int32_t* src, int64_t S, int64_t k, const int32_t* layout, int32_t* dst,
               int64_t n, int32_t* error_flag, cudaStream_t s);
// dst[map[i,1]] = src[map[i,0]] for i < n (see backend.h scatter_ids); a pair outside sets
// kErrTokenIds.
void scatter_ids(const int32_t* src, int64_t m, const int32_t* map, int64_t n, int32_t* dst,
                 int64_t d, int32_t* error_flag, cudaStream_t s);
// out[s, :] = table[ids[s], :] (table [V, C]); an id outside [0, V) sets kErrTokenIds, row -1.
void gather_ids(const int32_t* table, int64_t V, int64_t C, const int32_t* ids, int64_t S,
                int32_t* out, int32_t* error_flag, cudaStream_t s);
// ids[S, k]: top-k per row, higher score first, ties to the lower index; -inf picks and slots
// past min(k, T) are -1. Needs `workspace` of topk_workspace_bytes(S, T) bytes.
uint64_t topk_workspace_bytes(int64_t S, int64_t T);
void topk(const float* scores, int64_t S, int64_t T, int64_t k, int32_t* ids, void* workspace,
          cudaStream_t s);
// Router (see backend.h moe_route). scoring: 0 sqrtsoftplus, 1 sigmoid, 2 softmax. serial: the
// weights by lane 0's loops (k > 32 always; a test reference), else by lane (same bits).
void moe_route(const float* logits, const float* bias, const int32_t* hash_ids, int64_t S,
               int64_t E, int64_t k, int scoring, float routed_scaling, bool renormalize,
               int32_t* ids, float* weights, int32_t* error_flag, cudaStream_t s,
               bool serial = false);
// Attention over explicit key lists with optional sinks (see backend.h attention and the
// canonical chunk arithmetic in attention.cu). `parts`: scratch of attention_parts_floats(...)
// floats when that is > 0 (the split path), else null. max_keys bounds every key list.
void attention(const float* q, const float* k, const float* v, const int32_t* key_offsets,
               const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
               int64_t T, int64_t nKV, int64_t D, int64_t Dv, float scale, float* out,
               float* parts, int64_t max_keys, int32_t* error_flag, cudaStream_t s);
// Floats of split scratch the launch wants (0: no split) and the shared memory a block needs.
int64_t attention_parts_floats(int64_t S, int64_t nH, int64_t nKV, int64_t Dv, int64_t max_keys,
                               int num_sms);
size_t attention_smem_bytes(int64_t D, int64_t Dv, bool kv_shared);
// out[S, H] = table[ids[s]] (embedding) / src[ids[i]] (gather_rows).
void gather_rows(const float* table, const int32_t* ids, int64_t rows_out, int64_t rows_in,
                 int64_t H, float* out, int32_t* error_flag, int32_t error_code, cudaStream_t s);
// out[ids[i]] += w[i] · src[i], in order of i (deterministic: one thread per column).
// out[s, c] += w[s·k + j] · slot_out[s·k + j, c] for j = 0..k−1 in order: scatter_add_rows with
// owner s = i / k, element for element (one thread per (s, c) instead of one per column).
// overwrite: the running sum starts from +0 instead of out (the bits of a zero-filled out).
void combine_slots(const float* slot_out, const float* w, int64_t S, int64_t k, int64_t H,
                   float* out, cudaStream_t s, bool overwrite = false);
void scatter_add_rows(const float* src, const int32_t* ids, const float* w, int64_t M,
                      int64_t N, int64_t H, float* out, int32_t* error_flag, cudaStream_t s);
// Batch-invariant grouped GEMM (backend.h matmul semantics): out [M, G·N], x [M, G·K],
// w [G·N, K]; an element's bits depend on K, its x row and its w row only (matmul.cu: fixed
// chunks of matmul_chunk(K) columns, a fixed lane tree per chunk, chunks summed in order).
// config: the register blocking (0..3: 1×1, 2×2, 4×4, 4×8 rows × columns per CTA; 4: the
// session-4 tile kernel, other bits), −1 = matmul_fixed_config (picked for speed only).
void matmul_fixed(const float* x, const float* w, int64_t M, int64_t N, int64_t K, int64_t G,
                  float* out, cudaStream_t s, int config = -1);
int64_t matmul_chunk(int64_t K);
int matmul_fixed_config(int64_t M, int64_t N, int64_t K, int64_t G);
// Weight-only-quantized linear (backend.h linear): fmt 0 = bf16 (scale null), 1 = e4m3, 2 = e2m1
// packed two a byte, 3 = f32 (scale null); scale [ceil(G·N/block_rows), ceil(K/block_cols)] ue8m0 (or f32), null when
// unscaled; block_cols a multiple of 8. out [M, G·N], x [M, G·K]. Batch-invariant.
void linear_wq(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
               int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows, int64_t block_cols,
               float* out, cudaStream_t s);
// Routed-expert products, one x row per slot: out[slot, n] = x[slot / x_div] · deq(W_e[n])
// with e = ids[slot] and W_e at w_table[e] (scales at s_table[e], or s_table null): the same
// per-element arithmetic as linear_wq (fmt 3 = f32). A bad expert id writes zeros and sets
// kErrHashExpertId. out [num_slots, N].
void linear_slots(int fmt, const float* x, int64_t x_div, const int32_t* ids, int64_t num_slots,
                  int64_t num_experts, const void* const* w_table, const void* const* s_table,
                  bool scale_f32, int64_t N, int64_t K, int64_t block_rows, int64_t block_cols,
                  float* out, int32_t* error_flag, cudaStream_t s);
// Tensor-core stored-format linear (linear_tc.cu / linear_tc.cuh): the product of linear_wq
// (fmt 0 bf16, 1 e4m3, 2 e2m1; no f32) with x split into 3 bf16 terms and mma.sync bf16, fp32
// accumulation, block scales promoted per scale block; the per-element arithmetic is independent
// of M (batch-invariant). linear_tc_supported: row bytes a multiple of 16, w and x 16-byte
// aligned, block_cols a multiple of 32 when scaled. k_split (linear_tc_k_split; block_cols 0 for
// unscaled weights) is the fixed split-K width (a function of G·N, K, block_cols and the GPU; of M
// too unless batch_invariant: then it is the split that fills the GPU at one 16-row tile);
// when it is < K, `workspace` holds [ceil(K/k_split), M, G·N] floats, summed in split order.
bool linear_tc_supported(int fmt, const void* w, const float* x, int64_t M, int64_t K,
                         bool scaled, int64_t block_cols);
int64_t linear_tc_k_split(int64_t M, int64_t GN, int64_t K, int64_t block_cols,
                          bool batch_invariant);
// Rows per launch when split (k_split < K): the workspace of one launch stays under 256 MiB
// (rows are independent, so slabs give the same bits); M when unsplit.
int64_t linear_tc_slab_rows(int64_t M, int64_t GN, int64_t K, int64_t k_split);
void linear_tc(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
               int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows,
               int64_t block_cols, int64_t k_split, float* out, float* workspace,
               cudaStream_t s);
// Routed experts on the tensor cores (linear_tc_moe.cu). moe_group: slots grouped by expert on
// the device (one block, num_experts <= 1024): perm [slots] (sorted position -> slot), row_off
// and tile_off [E+1] (first sorted position / first m-tile of `tile_rows` rows per expert); a bad
// id sets kErrHashExpertId and its slot is left out. experts_tc: out[slot, n] =
// x[slot / x_div] · deq(W_e[n]) for every grouped slot (slots left out are not written), the
// per-element arithmetic of linear_tc (no split). out [slots, N], x rows of K floats.
int experts_tc_tile_rows(int64_t slots, int64_t num_experts);
// One projection (x its input rows, K its width; weight rows must be 16-byte aligned, checked
// by the caller on the expert pointers).
bool experts_tc_supported(int fmt, const float* x, int64_t slots, int64_t num_experts, int64_t K,
                          bool scaled, int64_t block_cols);
void moe_group(const int32_t* ids, int64_t slots, int64_t num_experts, int tile_rows,
               int32_t* perm, int32_t* row_off, int32_t* tile_off, int32_t* error_flag,
               cudaStream_t s);
void experts_tc(int fmt, const float* x, int64_t x_div, const int32_t* perm,
                const int32_t* row_off, const int32_t* tile_off, int tile_rows, int64_t slots,
                int64_t num_experts, const void* const* w_table, const void* const* s_table,
                bool scale_f32, int64_t N, int64_t K, int64_t block_rows, int64_t block_cols,
                float* out, cudaStream_t s);
// Compressor slots (backend.h compressor_slots); overlap / next pointers may be null.
void compressor_slots(const float* kv, const float* gate, const float* ape,
                      const float* overlap_kv, const float* overlap_gate, int64_t n, int64_t m,
                      int64_t coff, int64_t d, float* values, float* scores, float* next_kv,
                      float* next_gate, cudaStream_t s);
void add(const float* a, const float* b, int64_t n, float* out, cudaStream_t s);
// copy_many.cu: up to kCopyManyMax device-to-device copies in one launch; every byte count a
// multiple of 4 (the pairs of one launch must not overlap).
constexpr int kCopyManyMax = 160;
struct CopyManyTable {
  const void* src[kCopyManyMax];
  void* dst[kCopyManyMax];
  int64_t bytes[kCopyManyMax];
  int n = 0;
};
void copy_many(const CopyManyTable& t, cudaStream_t s);
// Elementwise conversion of a weight tensor to fp32: dtype 0 = f32 copy, 1 = bf16, 2 = f16.
void to_f32(const void* in, int dtype, int64_t n, float* out, cudaStream_t s);

}  // namespace deepinfer::cuda::kernels
