// CpuBackend: dispatches the Backend interface to the op files of this folder.
#include <memory>

#include "backend/cpu/context.h"
#include "backend/cpu/sampling.h"

namespace deepinfer::backend {

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& o) {
    ctx_.reference = o.reference;
    if (!o.reference) {
      if (o.num_threads > 0) {
        own_pool_ = std::make_unique<ThreadPool>(o.num_threads);
        ctx_.pool = own_pool_.get();
      } else {
        ctx_.pool = &ThreadPool::global();
      }
    }
  }
  const char* name() const override { return ctx_.reference ? "cpu-reference" : "cpu"; }

  bool supports_op(OpKind op, DType dtype) const override {
    switch (op) {
      case OpKind::kDequantize:
        return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16 ||
               dtype == DType::kF8E4M3 || dtype == DType::kF4E2M1 || dtype == DType::kI8 ||
               dtype == DType::kU8;
      case OpKind::kTopK:
      case OpKind::kMoeRoute:
        return dtype == DType::kF32;
      case OpKind::kCopy:
        return true;
      default:
        return dtype == DType::kF32;  // every other op: F32 activations and weights
    }
  }

  Status dequantize(const Tensor& w, const Tensor* scale, int64_t br, int64_t bc, Tensor& out) override {
    return cpu::dequantize(ctx_, w, scale, br, bc, out);
  }
  Status embedding(const Tensor& table, const Tensor& ids, Tensor& out) override {
    return cpu::embedding(ctx_, table, ids, out);
  }
  Status matmul(const Tensor& x, const Tensor& w, Tensor& out, int64_t groups) override {
    return cpu::matmul(ctx_, x, w, out, groups);
  }
  Status rms_norm(const Tensor& x, const Tensor* weight, float eps, Tensor& out) override {
    return cpu::rms_norm(ctx_, x, weight, eps, out);
  }
  Status rope(Tensor& x, const Tensor& positions, const Tensor& inv_freq, RopeStyle style,
              float mscale, bool inverse) override {
    return cpu::rope(ctx_, x, positions, inv_freq, style, mscale, inverse);
  }
  Status attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_offsets,
                   const Tensor& key_ids, const Tensor* sinks, float scale, Tensor& out,
                   int64_t /*max_keys*/ = -1) override {
    return cpu::attention(ctx_, q, k, v, key_offsets, key_ids, sinks, scale, out);
  }
  Status softmax_pool(const Tensor& values, const Tensor& scores, Tensor& out) override {
    return cpu::softmax_pool(ctx_, values, scores, out);
  }
  Status indexer_scores(const Tensor& q, const Tensor& weights, const Tensor& keys,
                        const Tensor& visible, float weight_scale, float dot_scale,
                        Tensor& out, const Tensor* key_start = nullptr) override {
    return cpu::indexer_scores(ctx_, q, weights, keys, visible, weight_scale, dot_scale, out,
                               key_start);
  }
  Status topk(const Tensor& scores, int64_t k, Tensor& ids) override {
    return cpu::topk(ctx_, scores, k, ids);
  }
  Status sample(const Tensor& logits, std::span<const SampleRowParams> rows, Tensor& ids) override {
    return cpu::sample(logits, rows, ids);  // the host sampler's code (both modes)
  }
  Status moe_route(const Tensor& logits, const Tensor* bias, const Tensor* hash_ids,
                   const RouterParams& params, Tensor& ids, Tensor& weights) override {
    return cpu::moe_route(ctx_, logits, bias, hash_ids, params, ids, weights);
  }
  Status swiglu(const Tensor& gate_up, float limit, Tensor& out) override {
    return cpu::swiglu(ctx_, gate_up, limit, out);
  }
  Status gather_rows(const Tensor& src, const Tensor& ids, Tensor& out) override {
    return cpu::gather_rows(ctx_, src, ids, out);
  }
  Status scatter_add_rows(const Tensor& src, const Tensor& ids, const Tensor* weights,
                          Tensor& out) override {
    return cpu::scatter_add_rows(ctx_, src, ids, weights, out);
  }
  Status hc_coeffs(const Tensor& mix, const Tensor& base, const Tensor& scale,
                   const HcParams& params, Tensor& pre, Tensor* post, Tensor* comb) override {
    return cpu::hc_coeffs(ctx_, mix, base, scale, params, pre, post, comb);
  }
  Status hc_collapse(const Tensor& x, const Tensor& pre, Tensor& out) override {
    return cpu::hc_collapse(ctx_, x, pre, out);
  }
  Status hc_expand(const Tensor& x, const Tensor& y, const Tensor& post, const Tensor& comb,
                   Tensor& out) override {
    return cpu::hc_expand(ctx_, x, y, post, comb, out);
  }
  Status add(const Tensor& a, const Tensor& b, Tensor& out) override {
    return cpu::add(ctx_, a, b, out);
  }
  Status copy(const Tensor& src, Tensor& dst) override { return cpu::copy(ctx_, src, dst); }
  Status compressor_slots(const Tensor& kv, const Tensor& gate, const Tensor& ape,
                          const Tensor* overlap_kv, const Tensor* overlap_gate, int64_t m,
                          Tensor& values, Tensor& scores, Tensor* next_overlap_kv,
                          Tensor* next_overlap_gate) override {
    return cpu::compressor_slots(ctx_, kv, gate, ape, overlap_kv, overlap_gate, m, values, scores,
                                 next_overlap_kv, next_overlap_gate);
  }

 private:
  cpu::CpuContext ctx_;
  std::unique_ptr<ThreadPool> own_pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::kDequantize: return "dequantize";
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kMatmul: return "matmul";
    case OpKind::kRmsNorm: return "rms_norm";
    case OpKind::kRope: return "rope";
    case OpKind::kAttention: return "attention";
    case OpKind::kSoftmaxPool: return "softmax_pool";
    case OpKind::kIndexerScores: return "indexer_scores";
    case OpKind::kTopK: return "topk";
    case OpKind::kMoeRoute: return "moe_route";
    case OpKind::kSwiglu: return "swiglu";
    case OpKind::kHcCoeffs: return "hc_coeffs";
    case OpKind::kHcCollapse: return "hc_collapse";
    case OpKind::kHcExpand: return "hc_expand";
    case OpKind::kGatherRows: return "gather_rows";
    case OpKind::kScatterAddRows: return "scatter_add_rows";
    case OpKind::kAdd: return "add";
    case OpKind::kCopy: return "copy";
    case OpKind::kCompressorSlots: return "compressor_slots";
  }
  return "?";
}

}  // namespace deepinfer::backend
