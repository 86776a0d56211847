// The op interface every backend implements (STYLE.md 8): a small set of ops over contiguous
// Tensors, each checking shapes and dtypes at entry and returning a Status. Outputs are passed in
// (callers allocate), so an op never allocates on the hot path.
//
// Activations are F32 throughout. Weights reach ops as F32 (the CPU backend dequantizes
// BF16/FP8/FP4 checkpoints once at load time with `dequantize`; see docs/model.md).
// `supports_op(op, dtype)` says whether an op is available for a given element type of its main
// input (the weight for matmul/embedding/dequantize, F32 otherwise); models query it at load time.
//
// Conventions: shapes are written next to every parameter; "[S, nH, D]" means a contiguous
// row-major tensor. Index tensors are I32.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/tensor.h"
#include "common/status.h"

namespace deepinfer::backend {

enum class OpKind {
  kDequantize,
  kEmbedding,
  kMatmul,
  kRmsNorm,
  kRope,
  kAttention,
  kSoftmaxPool,
  kIndexerScores,
  kTopK,
  kMoeRoute,
  kSwiglu,
  kHcCoeffs,
  kHcCollapse,
  kHcExpand,
  kGatherRows,
  kScatterAddRows,
  kAdd,
  kCopy,
  kCompressorSlots,
};
const char* op_name(OpKind op);

enum class RopeStyle {
  kInterleavedTrailing,  // DeepSeek: pairs (D-r+2i, D-r+2i+1), the trailing r channels rotate
  kHalfLeading,          // HF Llama "rotate_half": pairs (i, i+r/2) over the leading r channels
};

enum class RouterScoring { kSqrtSoftplus, kSigmoid, kSoftmax };

struct RouterParams {
  RouterScoring scoring = RouterScoring::kSqrtSoftplus;
  int64_t top_k = 1;
  float routed_scaling_factor = 1.0f;
  bool renormalize = true;  // w = s[idx] / (sum s[idx] + 1e-20) (HF V4 always renormalises)
};

// Parameters of the mHC (manifold-constrained hyper-connection) coefficient op.
struct HcParams {
  int64_t hc = 4;              // number of residual streams
  int64_t sinkhorn_iters = 20; // >= 1
  float hc_eps = 1e-6f;
};

// A linear layer's weight in its stored format (deepseek-v4.md §8.4), for `Backend::linear`:
//   F32 / BF16 [N, K] (no scale); F8E4M3 [N, K] or FP4 e2m1 (F4E2M1 [N, K], or I8/U8 [N, K/2]
//   two codes a byte, low nibble first) with scale [ceil(N/block_rows), ceil(K/block_cols)]
//   (F8E8M0 or F32; multiplies).
struct Weight {
  Tensor w;
  Tensor scale;  // undefined when unscaled
  int64_t block_rows = 1, block_cols = 1;

  bool defined() const { return w.defined(); }
  bool packed_fp4() const { return w.dtype() == DType::kI8 || w.dtype() == DType::kU8; }
  int64_t rows() const { return w.dim(0); }
  int64_t cols() const { return packed_fp4() ? 2 * w.dim(1) : w.dim(1); }
  bool on_device() const { return w.on_device(); }
  // Rows [begin, end) (begin and end multiples of block_rows, or end = rows()).
  Weight row_slice(int64_t begin, int64_t end) const;
  // Same bytes seen as [rows, cols] (a stacked [E, N, K] weight as [E·N, K]).
  static Weight of(Tensor f32_or_bf16) { return Weight{std::move(f32_or_bf16), Tensor(), 1, 1}; }
};

// The routed experts of one MoE layer: gate_up[e] [2I, H] (rows 0..I−1 gate, I..2I−1 up) and
// down[e] [H, I], e < E. `prepare_experts` lets a backend build what it needs to reach them from
// device code (pointer tables); the model treats `prepared` as opaque.
struct ExpertSet {
  std::vector<Weight> gate_up, down;
  std::shared_ptr<void> prepared;
  int64_t num_experts() const { return static_cast<int64_t>(gate_up.size()); }
};

// One row's parameters for `Backend::sample` (the host sampler's steps 5–10; src/sample/sampler.h
// PlainSampleRow has the same fields and ranges).
struct SampleRowParams {
  float temperature = 1.0f;      // >= 0; < 1e-5: greedy
  int32_t top_k = 0;             // 0 or -1 = off, else >= 1
  float top_p = 1.0f;            // (0, 1]; 1 = off
  float min_p = 0.0f;            // [0, 1]; 0 = off
  uint64_t seed = 0;             // the request's resolved seed
  uint32_t sequence_index = 0;   // which of the request's n sequences
  uint32_t output_position = 0;  // index of the output token being drawn
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual bool supports_op(OpKind op, DType dtype = DType::kF32) const = 0;

  // ---- memory ----
  // Tensors an op receives live in this backend's memory. A host backend (the CPU) uses plain
  // host tensors; a device backend's tensors are `on_device()` and only its ops, `upload` and
  // `download` touch them. Ops are queued in order on one stream; `download` and `synchronize`
  // wait for everything queued before them.
  virtual bool host_memory() const { return true; }
  // A zero-filled tensor in this backend's memory, freed when its last copy goes away.
  virtual StatusOr<Tensor> alloc(DType dtype, Shape shape);
  // The same without the fill (contents undefined): for outputs an op overwrites entirely.
  virtual StatusOr<Tensor> empty(DType dtype, Shape shape) { return alloc(dtype, std::move(shape)); }
  // dst (backend memory) = host (host memory); same dtype and numel. `host` may be reused as soon
  // as the call returns.
  virtual Status upload(const Tensor& host, Tensor& dst);
  // host (host memory) = src (backend memory); same dtype and numel; waits for queued work.
  virtual Status download(const Tensor& src, Tensor& host);
  // A download waited for later (docs/engine.md "Token ids on the device"): download_async queues
  // the copy of src (backend memory, at most kMaxAsyncDownloadBytes) behind the work queued so far
  // and returns; PendingDownload::wait() blocks until that copy — not the work queued after it —
  // has landed, then fills `host` (which must live until then) and reports a device-side error of
  // the work before it, as download does. The engine queues step N+1 before it reads step N's
  // sampled ids. A host backend copies at once. A ticket must not outlive its backend; wait() may
  // run on another thread than the one that queued (it touches only the ticket and the stream).
  class PendingDownload {
   public:
    virtual ~PendingDownload() = default;
    virtual Status wait() = 0;  // once
  };
  static constexpr uint64_t kMaxAsyncDownloadBytes = 64 << 10;
  virtual StatusOr<std::unique_ptr<PendingDownload>> download_async(const Tensor& src,
                                                                    Tensor& host);
  // Makes the calling thread able to run this backend's ops (a device backend selects its device
  // for the thread). Call once on every thread other than the creating one that runs ops.
  virtual Status bind_thread() { return OkStatus(); }
  // Free and total bytes of the device's memory; false for host backends.
  virtual bool memory_info(uint64_t* free_bytes, uint64_t* total_bytes) const {
    (void)free_bytes;
    (void)total_bytes;
    return false;
  }
  // Waits for queued work; reports a device-side error (bad index) of an earlier op.
  virtual Status synchronize() { return OkStatus(); }

  // ---- captured work (CUDA graphs; docs/cuda.md "CUDA graphs for decode") ----
  // begin_capture() records the ops issued after it instead of running them; end_capture()
  // returns them as a graph that replay() runs again, with the same pointers and arguments, as
  // often as wanted. Tensors allocated while capturing come from memory owned by the returned
  // graph: their addresses stay fixed for every replay, and nothing outside the graph reuses them
  // while it lives. Inputs that change between replays must be written into such fixed tensors
  // (upload into them before replay); an op that needs the host during capture (upload, download,
  // synchronize, a host-built list) makes end_capture fail, after which the backend is back in
  // normal mode and nothing was run. Backends without graphs: supports_graphs() is false and the
  // three calls are Unimplemented.
  class Graph {
   public:
    virtual ~Graph() = default;
  };
  virtual bool supports_graphs() const { return false; }
  // pool_of: allocate from the memory of that earlier graph instead of fresh memory (graphs that
  // always replay one after another in capture order may share it: a block one frees is reused
  // by a later one, as in an eager step).
  virtual Status begin_capture(const Graph* pool_of = nullptr) {
    (void)pool_of;
    return Unimplemented(std::string("graphs: not implemented by the ") + name() + " backend");
  }
  virtual StatusOr<std::shared_ptr<Graph>> end_capture() {
    return Unimplemented(std::string("graphs: not implemented by the ") + name() + " backend");
  }
  virtual Status replay(const Graph& graph) {
    (void)graph;
    return Unimplemented(std::string("graphs: not implemented by the ") + name() + " backend");
  }

  // ---- a side queue (session 14; docs/cuda.md "The shared expert beside the routed ones") ----
  // begin_side(): the ops issued until end_side() go to a second queue that starts after the work
  // queued so far and runs beside the main queue's later work; join_side() makes the main queue
  // wait for it. Memory freed between begin_side() and join_side() is not handed out again
  // before join_side() (neither queue can reuse a block the other may still use). Works while
  // capturing (the graph gets two branches). Every begin_side() that succeeded must be followed
  // by end_side() and join_side(), also after an error. A backend with one queue answers
  // Unimplemented and the caller runs the ops in line.
  virtual Status begin_side() {
    return Unimplemented(std::string("begin_side: the ") + name() + " backend has one queue");
  }
  virtual Status end_side() { return FailedPrecondition("end_side without begin_side"); }
  virtual Status join_side() { return FailedPrecondition("join_side without begin_side"); }

  // ---- weights ----
  // out [N, K] F32 = dequantized w. w: F32/BF16/F16 [N, K] (scale null); F8E4M3 [N, K] with
  // scale [ceil(N/block_rows), ceil(K/block_cols)] (F8E8M0 or F32, multiplies); F4E2M1 [N, K]
  // or I8/U8 [N, K/2] (two codes a byte, low nibble first) with scale likewise.
  virtual Status dequantize(const Tensor& w, const Tensor* scale, int64_t block_rows,
                            int64_t block_cols, Tensor& out) = 0;
  // out [S, H] = table [V, H] (F32) rows at ids [S]; an id outside [0, V) is kOutOfRange.
  virtual Status embedding(const Tensor& table, const Tensor& ids, Tensor& out) = 0;

  // ---- linear algebra ----
  // Grouped GEMM: out [M, G*N] with out[:, g*N + n] = x[:, g*K : (g+1)*K] · w[g*N + n, :].
  // x [M, G*K] F32, w [G*N, K] F32. groups = 1 is the plain linear layer y = x · wᵀ.
  virtual Status matmul(const Tensor& x, const Tensor& w, Tensor& out, int64_t groups = 1) = 0;
  // The same product with a weight in its stored format: out [M, G·N] = x [M, G·K] · deq(w)ᵀ,
  // w [G·N, K]. F32 weights go to `matmul`; other formats where supports_op(kMatmul, dtype).
  virtual Status linear(const Tensor& x, const Weight& w, Tensor& out, int64_t groups = 1);
  // Several products of the same x: outs[i] [M, N_i] = x [M, K] · deq(ws[i])ᵀ (groups = 1), i <
  // ws.size() == outs.size(). The default calls `linear` on each pair in order (the CPU's bits); a
  // device backend may compute them in fewer launches, each output with the bits `linear` gives it.
  virtual Status linear_multi(const Tensor& x, std::span<const Weight* const> ws,
                              std::span<Tensor* const> outs);
  // out [M, N] = x / sqrt(mean(x², last axis) + eps) (· weight [N] if non-null). In-place ok.
  virtual Status rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) = 0;
  // In place on x [S, nh, D]: rotate r = 2·inv_freq.numel() channels of every head by angle
  // fp32(positions[s]) · inv_freq[i] (fp32 product), cos/sin scaled by `mscale`; `inverse`
  // negates the angle. positions [S] I32, inv_freq [r/2] F32.
  virtual Status rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeStyle style,
                      float mscale, bool inverse) = 0;
  // out [S, nh, D] = rope(rms_norm(x) per head row of D (· weight [D] if non-null), positions,
  // inv_freq, style, mscale) — the forward rotation. x [S, nh, D]; out may be x. The default makes
  // the two calls; a device backend may fuse them.
  virtual Status rms_norm_rope(const Tensor& x, const Tensor* weight, float eps,
                               const Tensor& positions, const Tensor& inv_freq, RopeStyle style,
                               float mscale, Tensor& out);
  // out_a [M, N] = rms_norm(a [M, N], weight_a) and out_b [S, nh, D] = rms_norm_rope(b [S, nh, D],
  // weight_b, eps, positions, inv_freq, style, mscale): two independent row norms (the attention's
  // q_norm and its kv norm + rope), one eps. The default makes the two calls in that order; a
  // device backend may run them as one launch (each output bitwise its own call's).
  virtual Status rms_norm_and_rope(const Tensor& a, const Tensor* weight_a, Tensor& out_a,
                                   const Tensor& b, const Tensor* weight_b, float eps,
                                   const Tensor& positions, const Tensor& inv_freq, RopeStyle style,
                                   float mscale, Tensor& out_b);
  // out [S, nH, Dv]: for query s, head h (kv head h / (nH/nKV)), softmax over the keys listed in
  // key_ids[key_offsets[s] .. key_offsets[s+1]) of (q[s,h]·k[j]) · scale, plus, when sinks [nH]
  // is non-null, a sink logit sinks[h] (unscaled) in the denominator only; weights · v[j].
  // q [S, nH, D], k [T, nKV, D], v [T, nKV, Dv] (may be the same tensor as k),
  // key_offsets [S+1] I32, key_ids [nnz] I32. A query with no key gets zeros. max_keys: the
  // longest list when the caller knows it (−1: unknown); device backends size work splits by it.
  virtual Status attention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& key_offsets, const Tensor& key_ids, const Tensor* sinks,
                           float scale, Tensor& out, int64_t max_keys = -1) = 0;
  // out [n, d] = Σ_l softmax_l(scores[:, l, c]) · values[:, l, c], per row and channel
  // independently (compressor pooling). values, scores [n, L, d]; -inf scores weigh 0.
  virtual Status softmax_pool(const Tensor& values, const Tensor& scores, Tensor& out) = 0;

  // ---- Lightning indexer ----
  // out [S, T]: out[s,t] = Σ_h (weights[s,h]·weight_scale) · relu(q[s,h]·keys[b_s + t]) ·
  // dot_scale for t < visible[s], else -inf. q [S, nI, cI], weights [S, nI], keys [Tk, cI],
  // visible [S] I32. b_s = key_start[s] when key_start [S] I32 is given (rows of several
  // sequences, each reading its own keys; out [S, T] with any T; visible[s] <= T and
  // b_s + visible[s] <= Tk, else kOutOfRange), else 0 and T = Tk.
  virtual Status indexer_scores(const Tensor& q, const Tensor& weights, const Tensor& keys,
                                const Tensor& visible, float weight_scale, float dot_scale,
                                Tensor& out, const Tensor* key_start = nullptr) = 0;
  // ids [S, k] I32: per row the k' = min(k, T) largest scores [S, T], ordered by higher score
  // first and, among equal scores, lower index first (deepseek-v4.md §5.5); picks whose score is
  // -inf and slots past k' are -1.
  virtual Status topk(const Tensor& scores, int64_t k, Tensor& ids) = 0;

  // dst[layout[s,0] + j] = src[s, j] + layout[s,2] for j < layout[s,1]: places rows of picks
  // (top-k entry ids) into a key-id list without a trip to the host. src [S, k] I32,
  // layout [S, 3] I32, dst [n] I32. A pick of -1 within the count, a count > k or a range
  // outside dst is kOutOfRange (a device backend reports it at its next synchronize).
  virtual Status place_ids(const Tensor& src, const Tensor& layout, Tensor& dst);

  // ---- token ids that stay on the device (docs/engine.md "Token ids on the device") ----
  // dst[map[i, 1]] = src[map[i, 0]] for every row i of map [n, 2] I32: the ids a sampler wrote
  // (src [m] I32) placed into the next step's inputs (dst [d] I32) without a trip to the host.
  // A pair outside src or dst is kOutOfRange (a device backend: at its next synchronize).
  virtual Status scatter_ids(const Tensor& src, const Tensor& map, Tensor& dst);
  // out [S, C] I32 = table [V, C] I32 rows at ids [S] I32 (a hash layer's tid2eid[token] for
  // tokens known only on the device); an id outside [0, V) is kOutOfRange (device: at the next
  // synchronize, its row left as -1).
  virtual Status gather_ids(const Tensor& table, const Tensor& ids, Tensor& out);

  // ---- MoE ----
  // Router. logits [S, E]. Selection: top-k of score + bias (bias [E] optional, selection only;
  // ties to the lower expert id), or, when hash_ids [S, k] I32 is given, those ids (may repeat).
  // Weights from the unbiased scores, renormalised, times routed_scaling_factor.
  // ids [S, k] I32, weights [S, k] F32.
  virtual Status moe_route(const Tensor& logits, const Tensor* bias, const Tensor* hash_ids,
                           const RouterParams& params, Tensor& ids, Tensor& weights) = 0;
  // Routed experts: out [S, H] += Σ_j weights[s, j] · expert_{ids[s, j]}(x[s]), the sum over j in
  // order 0..k−1 for every s (expert(x) = (silu(min(g, lim)) ⊙ clamp(u)) · downᵀ, [g | u] =
  // x · gate_upᵀ). x [S, H], ids [S, k] I32, weights [S, k] F32. The base implementation groups
  // the rows by expert on the host; device backends may run them in place.
  virtual Status moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                             const ExpertSet& experts, float swiglu_limit, Tensor& out);
  // moe_experts into out as if out were zero first (the same adds, starting from +0), whatever out
  // holds: the caller needs no fill (on a device, a memset node fewer in the decode graph).
  // Default: moe_experts into a zeroed tensor, copied to out.
  virtual Status moe_experts_set(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                 const ExpertSet& experts, float swiglu_limit, Tensor& out);
  // out[s] += Σ_j weights[s, j] · slot_out[s·k + j], j ascending. slot_out [S·k, H], weights
  // [S, k] (any shape of S·k elements). The base implementation is scatter_add_rows with owner
  // s = i / k; a device backend may run it directly, with the same per-element arithmetic.
  virtual Status combine_slots(const Tensor& slot_out, const Tensor& weights, int64_t k, Tensor& out);
  virtual Status prepare_experts(ExpertSet& experts) {
    (void)experts;
    return OkStatus();
  }
  // out [M, I] = silu(min(g, limit)) · clamp(u, -limit, limit), gate_up [M, 2I] = [g | u].
  // limit <= 0 means no clamp.
  virtual Status swiglu(const Tensor& gate_up, float limit, Tensor& out) = 0;
  // out [M, H] = src [N, H] rows at ids [M].
  virtual Status gather_rows(const Tensor& src, const Tensor& ids, Tensor& out) = 0;
  // out[ids[i]] += weights[i] · src[i] for i in order; src [M, H], ids [M] I32, weights [M] F32
  // (null = 1), out [N, H].
  virtual Status scatter_add_rows(const Tensor& src, const Tensor& ids, const Tensor* weights,
                                  Tensor& out) = 0;

  // ---- manifold-constrained hyper-connections (deepseek-v4.md §3) ----
  // mix [S, (2+hc)·hc] (site) or [S, hc] (head) = rms(flatten(X)) · fnᵀ. With scale [3]:
  // pre [S, hc], post [S, hc], comb [S, hc, hc] (Sinkhorn-Knopp). With scale [1] (HyperHead):
  // pre only (post/comb null).
  virtual Status hc_coeffs(const Tensor& mix, const Tensor& base, const Tensor& scale,
                           const HcParams& params, Tensor& pre, Tensor* post, Tensor* comb) = 0;
  // out [S, H] = Σ_j pre[s, j] · X[s, j, :]. X [S, hc, H], pre [S, hc].
  virtual Status hc_collapse(const Tensor& x, const Tensor& pre, Tensor& out) = 0;
  // out [S, hc, H]: out[s,k] = post[s,k]·y[s] + Σ_j comb[s,j,k]·X[s,j]. out must not alias X.
  virtual Status hc_expand(const Tensor& x, const Tensor& y, const Tensor& post,
                           const Tensor& comb, Tensor& out) = 0;
  // hc_expand of y + y2 (y2 [S, H]; the sum as add computes it). The default makes the two calls
  // (the sum in a temporary); a device backend may add inside the expand (same bits).
  virtual Status hc_expand_sum(const Tensor& x, const Tensor& y, const Tensor& y2,
                               const Tensor& post, const Tensor& comb, Tensor& out);
  // One whole mHC site before its sublayer (HC_map, deepseek-v4.md §3.1; or the HyperHead §3.3
  // when scale is [1] and post/comb are null): collapsed [S, H] = Σ_j pre[s,j]·X[s,j], with
  // pre/post/comb = hc_coeffs(rms(flatten(X); norm_eps) · fnᵀ, base, scale). X [S, hc, H],
  // fn [(2+hc)·hc or hc, hc·H] F32, base [(2+hc)·hc or hc], post [S, hc], comb [S, hc, hc].
  // The default composes rms_norm → matmul → hc_coeffs → hc_collapse (the CPU's bits); a device
  // backend may fuse them (same result within fp32 rounding).
  virtual Status hc_pre(const Tensor& x, const Tensor& fn, const Tensor& base, const Tensor& scale,
                        const HcParams& params, float norm_eps, Tensor* post, Tensor* comb,
                        Tensor& collapsed);
  // The previous site's hc_expand followed by this site's hc_pre: x [S, hc, H] (out) =
  // hc_expand(x_prev [S, hc, H], y [S, H], post_prev [S, hc], comb_prev [S, hc, hc]), then
  // hc_pre(x, …). x must not alias x_prev. The default makes the two calls; a device backend may
  // fuse them (x bitwise equal to hc_expand's).
  virtual Status hc_expand_pre(const Tensor& x_prev, const Tensor& y, const Tensor& post_prev,
                               const Tensor& comb_prev, Tensor& x, const Tensor& fn,
                               const Tensor& base, const Tensor& scale, const HcParams& params,
                               float norm_eps, Tensor* post, Tensor* comb, Tensor& collapsed);
  // hc_pre, then out [S, H] = rms_norm(collapsed, weight [H] or null, eps): the sublayer's input
  // (the attention / MoE norm, or the final norm after the HyperHead). The default makes the two
  // calls; a device backend may fuse them (collapsed and out bitwise those of the two calls).
  virtual Status hc_pre_norm(const Tensor& x, const Tensor& fn, const Tensor& base,
                             const Tensor& scale, const HcParams& params, float norm_eps,
                             Tensor* post, Tensor* comb, Tensor& collapsed, const Tensor* weight,
                             float eps, Tensor& out);
  // hc_expand_pre, then the same rms_norm of collapsed into out [S, H]. y2 [S, H] (may be null):
  // the previous site's output is y + y2 (add's arithmetic), e.g. the MoE's shared expert and
  // routed sum, added here instead of by a separate add.
  virtual Status hc_expand_pre_norm(const Tensor& x_prev, const Tensor& y, const Tensor* y2,
                                    const Tensor& post_prev, const Tensor& comb_prev, Tensor& x,
                                    const Tensor& fn, const Tensor& base, const Tensor& scale,
                                    const HcParams& params, float norm_eps, Tensor* post,
                                    Tensor* comb, Tensor& collapsed, const Tensor* weight,
                                    float eps, Tensor& out);

  // ---- compressor (deepseek-v4.md §6.3) ----
  // Assembles the pooling slots of n closed windows of m rows. kv, gate [n·m, coff·d] are the raw
  // projections in token order (coff = 1: HCA, 2: CSA), ape [m, coff·d] the position bias.
  // values, scores [n, coff·m, d]:
  //   HCA: slot j of window i = kv[i·m+j], gate[i·m+j] + ape[j].
  //   CSA: slot m+j = b-half (channels d..2d) of row i·m+j, gate + ape[j, d..2d); slot j = a-half
  //        (channels 0..d) of row (i−1)·m+j with gate + ape[j, 0..d); for i = 0 the a-half comes
  //        from overlap_kv / overlap_gate [m, d] (gate already biased), or, when they are null,
  //        is value 0 with score −inf (entry 0 has no a-part).
  // CSA with next_overlap_kv/_gate [m, d] non-null: they receive window n−1's biased a-halves
  // (they may alias overlap_kv / overlap_gate).
  virtual Status compressor_slots(const Tensor& kv, const Tensor& gate, const Tensor& ape,
                                  const Tensor* overlap_kv, const Tensor* overlap_gate, int64_t m,
                                  Tensor& values, Tensor& scores, Tensor* next_overlap_kv,
                                  Tensor* next_overlap_gate) = 0;

  // ---- elementwise / movement ----
  virtual Status add(const Tensor& a, const Tensor& b, Tensor& out) = 0;  // same shapes, F32
  virtual Status copy(const Tensor& src, Tensor& dst) = 0;                // same dtype and numel
  // dsts[i] ← srcs[i] for every i, in one call (each pair as `copy`; no pair's dst may overlap
  // another pair's src or dst). The default calls copy per pair; a device backend may make one
  // launch of them all (the per-sequence KV rows of a decode step: docs/cuda.md "Batched copies").
  virtual Status copy_many(std::span<const Tensor> srcs, std::span<Tensor> dsts);

  // ---- sampling (docs/engine.md "Sampling on the device") ----
  // ids [S] I32 = one token per row of logits [S, V] F32 with rows[s]'s parameters, as the host
  // sampler's steps 5–10 (src/sample/sampler.h): greedy (temperature < 1e-5) is the argmax, ties
  // to the lowest id; otherwise temperature → min-p → top-k → top-p → the exponential race keyed
  // by (seed, sequence_index, output_position, token). The CPU backend runs the host sampler's
  // own code (bit-identical); a device backend gives the same greedy ids and draws from the same
  // distribution (its exp/log may differ in the last ulp). rows.size() must be S; a parameter out
  // of range is InvalidArgument naming the row and field. Backends without it: Unimplemented.
  virtual Status sample(const Tensor& logits, std::span<const SampleRowParams> rows, Tensor& ids) {
    (void)logits;
    (void)rows;
    (void)ids;
    return Unimplemented(std::string("sample: not implemented by the ") + name() + " backend");
  }
};

struct CpuBackendOptions {
  // Reference mode: single-threaded scalar loops, fp32 accumulation in plain order, no fusion.
  // The oracle other backends (and the fast CPU mode) are tested against.
  bool reference = false;
  int num_threads = 0;  // fast mode: 0 = the process-wide pool (DEEPINFER_NUM_THREADS)
};
std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options = {});

}  // namespace deepinfer::backend
