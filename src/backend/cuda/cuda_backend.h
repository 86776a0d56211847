// The CUDA backend: every op of backend/backend.h on the GPU. Tensors passed to it are views of
// device memory (Tensor::borrow of a device pointer); shapes and dtypes are checked on the host
// before each launch (STYLE.md 12), index contents on the device (kernels.h), reported by
// synchronize(). Ops are asynchronous on the backend's stream.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cuda/runtime.h"

namespace deepinfer::cuda {

struct CudaBackendOptions {
  int device = 0;
  // matmul through a fixed-tiling kernel whose result for a row is independent of the other rows
  // (cuBLAS may pick another algorithm, or split-K, for another M).
  bool batch_invariant = false;
  // FP8 weights × activations quantized to FP8 per 1×128 group (cuBLASLt block-scaled GEMM,
  // fp8_gemm.h) for large M; numerics differ from the weight-only path (activation rounding).
  bool fp8_activations = false;
  // Decode-step capture as CUDA graphs (supports_graphs(); also off with DEEPINFER_CUDA_GRAPHS=0).
  bool graphs = true;
  // begin_side on a second stream (also off with DEEPINFER_SIDE_STREAM=0).
  bool side_stream = true;
};

class TensorCache;
namespace kernels {
struct HcExpandIn;  // kernels.h
struct HcSiteNorm;
struct Wa2Options;  // linear_tc_wa.h
}  // namespace kernels

class CudaBackend : public backend::Backend {
 public:
  static StatusOr<std::unique_ptr<CudaBackend>> create(const CudaBackendOptions& options = {});
  ~CudaBackend() override;

  cudaStream_t stream() const;
  // Waits for all queued work; returns the first device-side error (bad token/expert/key id) or a
  // CUDA error, naming the op, and clears it.
  Status synchronize() override;

  const char* name() const override { return "cuda"; }
  bool supports_op(backend::OpKind op, DType dtype) const override;

  // Memory: tensors from a caching allocator (freed blocks are kept per size and reused in stream
  // order; cudaMalloc only when no cached block fits). Zero-filled on the stream.
  bool host_memory() const override { return false; }
  StatusOr<backend::Tensor> alloc(DType dtype, backend::Shape shape) override;
  StatusOr<backend::Tensor> empty(DType dtype, backend::Shape shape) override;
  Status upload(const backend::Tensor& host, backend::Tensor& dst) override;
  Status download(const backend::Tensor& src, backend::Tensor& host) override;
  // The data and the error flag into a pinned slot of a small pool (one per ticket in flight) by
  // two asynchronous copies, then an event; wait() syncs on the event only.
  StatusOr<std::unique_ptr<backend::Backend::PendingDownload>> download_async(
      const backend::Tensor& src, backend::Tensor& host) override;
  bool memory_info(uint64_t* free_bytes, uint64_t* total_bytes) const override;
  Status bind_thread() override;  // cudaSetDevice(options.device) for the calling thread
  // Bytes held by the allocator (in use + cached).
  uint64_t allocated_bytes() const;

  // CUDA graphs (backend.h): stream capture in relaxed mode; while capturing, tensors come from a
  // cache owned by the graph being recorded, and upload / download / synchronize refuse.
  bool supports_graphs() const override;
  Status begin_capture(const backend::Backend::Graph* pool_of) override;
  StatusOr<std::shared_ptr<backend::Backend::Graph>> end_capture() override;
  Status replay(const backend::Backend::Graph& graph) override;

  // Side queue (backend.h): a second non-blocking stream forked and joined by events (captured as
  // two graph branches); the tensor caches hold freed blocks until join_side; cuBLAS follows the
  // current stream.
  Status begin_side() override;
  Status end_side() override;
  Status join_side() override;

  Status dequantize(const backend::Tensor& w, const backend::Tensor* scale, int64_t block_rows,
                    int64_t block_cols, backend::Tensor& out) override;
  Status embedding(const backend::Tensor& table, const backend::Tensor& ids,
                   backend::Tensor& out) override;
  Status matmul(const backend::Tensor& x, const backend::Tensor& w, backend::Tensor& out,
                int64_t groups) override;
  // BF16 / FP8 (block scales) / FP4 (group scales) weights read in their stored format
  // (weight-only quantization, fp32 math); large M without --batch-invariant dequantizes to a
  // scratch fp32 weight and uses cuBLAS.
  Status linear(const backend::Tensor& x, const backend::Weight& w, backend::Tensor& out,
                int64_t groups) override;
  // Projections of one x at decode-sized M: weights of one format class in one streaming-GEMV
  // launch (gemv_multi.cuh; DEEPINFER_GEMV_DENSE), each output bitwise equal to linear's.
  Status linear_multi(const backend::Tensor& x, std::span<const backend::Weight* const> ws,
                      std::span<backend::Tensor* const> outs) override;
  // Routed experts in place on the device for small batches (S·k ≤ 128, or always with
  // --batch-invariant): one product kernel per projection over all (token, pick) slots, each slot
  // reading its expert's weight through pointer tables built by prepare_experts; larger batches
  // group rows by expert (the base implementation).
  Status moe_experts(const backend::Tensor& x, const backend::Tensor& ids,
                     const backend::Tensor& weights, const backend::ExpertSet& experts,
                     float swiglu_limit, backend::Tensor& out) override;
  // Session 13: moe_experts_into(set = true) — the paths that end in combine_slots write out (the
  // kernel starts from +0 instead of reading out: no memset node); the host-grouping fallback
  // fills out with zeros first.
  Status moe_experts_set(const backend::Tensor& x, const backend::Tensor& ids,
                         const backend::Tensor& weights, const backend::ExpertSet& experts,
                         float swiglu_limit, backend::Tensor& out) override;
  Status prepare_experts(backend::ExpertSet& experts) override;
  Status rms_norm(const backend::Tensor& x, const backend::Tensor* weight, float eps,
                  backend::Tensor& out) override;
  Status rope(backend::Tensor& x, const backend::Tensor& positions,
              const backend::Tensor& inv_freq, backend::RopeStyle style, float mscale,
              bool inverse) override;
  // One kernel (elementwise.cu rms_norm_rope, bitwise rms_norm then rope) for heads narrower than
  // 2048, else the base implementation.
  Status rms_norm_rope(const backend::Tensor& x, const backend::Tensor* weight, float eps,
                       const backend::Tensor& positions, const backend::Tensor& inv_freq,
                       backend::RopeStyle style, float mscale, backend::Tensor& out) override;
  // One launch (elementwise.cu rms_norm_and_rope) when a's rows take rms_norm's scalar kernel
  // and b's heads are narrower than 2048, with DEEPINFER_DECODE_FUSION on; else the two calls.
  Status rms_norm_and_rope(const backend::Tensor& a, const backend::Tensor* weight_a,
                           backend::Tensor& out_a, const backend::Tensor& b,
                           const backend::Tensor* weight_b, float eps,
                           const backend::Tensor& positions, const backend::Tensor& inv_freq,
                           backend::RopeStyle style, float mscale, backend::Tensor& out_b) override;
  Status attention(const backend::Tensor& q, const backend::Tensor& k, const backend::Tensor& v,
                   const backend::Tensor& key_offsets, const backend::Tensor& key_ids,
                   const backend::Tensor* sinks, float scale, backend::Tensor& out,
                   int64_t max_keys = -1) override;
  Status softmax_pool(const backend::Tensor& values, const backend::Tensor& scores,
                      backend::Tensor& out) override;
  Status indexer_scores(const backend::Tensor& q, const backend::Tensor& weights,
                        const backend::Tensor& keys, const backend::Tensor& visible,
                        float weight_scale, float dot_scale, backend::Tensor& out,
                        const backend::Tensor* key_start = nullptr) override;
  Status topk(const backend::Tensor& scores, int64_t k, backend::Tensor& ids) override;
  Status place_ids(const backend::Tensor& src, const backend::Tensor& layout,
                   backend::Tensor& dst) override;
  Status scatter_ids(const backend::Tensor& src, const backend::Tensor& map,
                     backend::Tensor& dst) override;
  Status gather_ids(const backend::Tensor& table, const backend::Tensor& ids,
                    backend::Tensor& out) override;
  Status moe_route(const backend::Tensor& logits, const backend::Tensor* bias,
                   const backend::Tensor* hash_ids, const backend::RouterParams& params,
                   backend::Tensor& ids, backend::Tensor& weights) override;
  Status swiglu(const backend::Tensor& gate_up, float limit, backend::Tensor& out) override;
  Status gather_rows(const backend::Tensor& src, const backend::Tensor& ids,
                     backend::Tensor& out) override;
  Status combine_slots(const backend::Tensor& slot_out, const backend::Tensor& weights, int64_t k,
                       backend::Tensor& out) override;
  Status scatter_add_rows(const backend::Tensor& src, const backend::Tensor& ids,
                          const backend::Tensor* weights, backend::Tensor& out) override;
  Status hc_coeffs(const backend::Tensor& mix, const backend::Tensor& base,
                   const backend::Tensor& scale, const backend::HcParams& params,
                   backend::Tensor& pre, backend::Tensor* post, backend::Tensor* comb) override;
  Status hc_collapse(const backend::Tensor& x, const backend::Tensor& pre,
                     backend::Tensor& out) override;
  Status hc_expand(const backend::Tensor& x, const backend::Tensor& y, const backend::Tensor& post,
                   const backend::Tensor& comb, backend::Tensor& out) override;
  // One kernel (the add inside the expand) with DEEPINFER_DECODE_FUSION on; else add, hc_expand.
  Status hc_expand_sum(const backend::Tensor& x, const backend::Tensor& y,
                       const backend::Tensor& y2, const backend::Tensor& post,
                       const backend::Tensor& comb, backend::Tensor& out) override;
  // One mHC site in two kernels (hc_site.cu) for hc <= 4: S <= kHcSiteMaxRows tokens, and every
  // S under --batch-invariant (a token's bits depend only on its own inputs; larger sites run the
  // composed path by default: faster there on the H200, session 7); hc > 4 or
  // DEEPINFER_CUDA_HC=composed: the base implementation (rms_norm → matmul → hc_coeffs →
  // hc_collapse). DEEPINFER_CUDA_HC=fused_s6: session 6's kernels (hyper_connection.cu
  // hc_pre_s6) for S <= kHcPreMaxRows, not under --batch-invariant (cuda_backend.cpp hc_path).
  static constexpr int64_t kHcPreMaxRows = 64;
  static constexpr int64_t kHcSiteMaxRows = 256;
  Status hc_pre(const backend::Tensor& x, const backend::Tensor& fn, const backend::Tensor& base,
                const backend::Tensor& scale, const backend::HcParams& params, float norm_eps,
                backend::Tensor* post, backend::Tensor* comb, backend::Tensor& collapsed) override;
  // The same with the previous site's hc_expand done by the first kernel (x written bitwise as
  // hc_expand writes it); same conditions, else the base implementation.
  Status hc_expand_pre(const backend::Tensor& x_prev, const backend::Tensor& y,
                       const backend::Tensor& post_prev, const backend::Tensor& comb_prev,
                       backend::Tensor& x, const backend::Tensor& fn, const backend::Tensor& base,
                       const backend::Tensor& scale, const backend::HcParams& params,
                       float norm_eps, backend::Tensor* post, backend::Tensor* comb,
                       backend::Tensor& collapsed) override;
  // hc_pre / hc_expand_pre with the rms_norm of collapsed: on the fused site, the norm runs in
  // its finish kernel (kernels.h hc_site with HcSiteNorm; bitwise rms_norm's output); else, or
  // with DEEPINFER_DECODE_FUSION=0, the base implementation (the site, then rms_norm).
  Status hc_pre_norm(const backend::Tensor& x, const backend::Tensor& fn,
                     const backend::Tensor& base, const backend::Tensor& scale,
                     const backend::HcParams& params, float norm_eps, backend::Tensor* post,
                     backend::Tensor* comb, backend::Tensor& collapsed,
                     const backend::Tensor* weight, float eps, backend::Tensor& out) override;
  Status hc_expand_pre_norm(const backend::Tensor& x_prev, const backend::Tensor& y,
                            const backend::Tensor* y2, const backend::Tensor& post_prev,
                            const backend::Tensor& comb_prev, backend::Tensor& x,
                            const backend::Tensor& fn, const backend::Tensor& base,
                            const backend::Tensor& scale, const backend::HcParams& params,
                            float norm_eps, backend::Tensor* post, backend::Tensor* comb,
                            backend::Tensor& collapsed, const backend::Tensor* weight, float eps,
                            backend::Tensor& out) override;
  Status add(const backend::Tensor& a, const backend::Tensor& b, backend::Tensor& out) override;
  Status copy(const backend::Tensor& src, backend::Tensor& dst) override;
  Status copy_many(std::span<const backend::Tensor> srcs, std::span<backend::Tensor> dsts) override;
  // Sampling on the device (sampling.h): one block per row; only the ids need to leave the GPU.
  Status sample(const backend::Tensor& logits, std::span<const backend::SampleRowParams> rows,
                backend::Tensor& ids) override;
  Status compressor_slots(const backend::Tensor& kv, const backend::Tensor& gate,
                          const backend::Tensor& ape, const backend::Tensor* overlap_kv,
                          const backend::Tensor* overlap_gate, int64_t m, backend::Tensor& values,
                          backend::Tensor& scores, backend::Tensor* next_overlap_kv,
                          backend::Tensor* next_overlap_gate) override;

 private:
  // Resets the device error flag (stream-ordered) and returns code's OutOfRange.
  Status clear_error_flag(int32_t code);
  // moe_experts (set = false: adds into out) and moe_experts_set (set = true: out = the sum from
  // +0; the paths end in combine_slots_into(set), the host-grouping fallback zeroes out first).
  Status moe_experts_into(const backend::Tensor& x, const backend::Tensor& ids,
                          const backend::Tensor& weights, const backend::ExpertSet& experts,
                          float swiglu_limit, backend::Tensor& out, bool set);
  // Backend::moe_experts (host grouping, adds into out); with `set` out is zeroed first.
  Status moe_experts_host_grouped(const backend::Tensor& x, const backend::Tensor& ids,
                                  const backend::Tensor& weights, const backend::ExpertSet& experts,
                                  float swiglu_limit, backend::Tensor& out, bool set);
  // combine_slots; with `set` the running sum starts from +0 instead of out.
  Status combine_slots_into(const backend::Tensor& slot_out, const backend::Tensor& weights,
                            int64_t k, backend::Tensor& out, bool set);
  struct State;
  class AsyncDownload;  // download_async's ticket (cuda_backend.cpp)
  friend class AsyncDownload;
  explicit CudaBackend(std::unique_ptr<State> state);
  Status launched(const char* op);  // checks the launch of the op just queued
  Status refuse_in_capture(const char* what);
  // linear_tc_wa2_options, without the fused split sums on the side stream (their tile counters
  // are shared by every launch on the device).
  kernels::Wa2Options wa2_options(int variant, int fmt, int64_t rows, int64_t K, int64_t M)
      const;  // FailedPrecondition; remembered for end_capture
  // hc_pre / hc_expand_pre on the fused kernels (expand null: no expand).
  Status hc_pre_fused(const backend::Tensor& x, const backend::Tensor& fn,
                      const backend::Tensor& base, const backend::Tensor& scale,
                      const backend::HcParams& p, float norm_eps, backend::Tensor* post,
                      backend::Tensor* comb, backend::Tensor& collapsed,
                      const kernels::HcExpandIn* expand, const kernels::HcSiteNorm* norm = nullptr);
  // Whether hc_pre_norm / hc_expand_pre_norm fuse the norm (decode fusion on, the hc_site path).
  bool hc_norm_fused(const backend::Tensor& x, const backend::Tensor& scale,
                     const backend::HcParams& p) const;
  std::unique_ptr<State> st_;
};

}  // namespace deepinfer::cuda
