// Loads DeepSeek-V4 weights by their canonical names (io/weight_registry.h maps DeepSeek's and
// HF's spellings, deepseek-v4.md §8.2–8.3), dequantized to F32; experts fused as [E, 2I, H].
#include <cstring>
#include <string>

#include "model/deepseek_v4/weights.h"

#include <map>

#include "dist/expert_parallel_moe.h"
#include "model/deepseek_v4/tensor_parallel_weights.h"
#include "model/placement.h"

namespace deepinfer::model::v4 {

Dims dims_from_config(const io::DeepseekV4Config& c) {
  Dims d{};
  d.H = c.hidden_size; d.V = c.vocab_size; d.L = c.num_hidden_layers;
  d.nH = c.num_attention_heads; d.D = c.head_dim; d.r = c.qk_rope_head_dim; d.Rq = c.q_lora_rank;
  d.G = c.o_groups; d.Ro = c.o_lora_rank; d.W = c.sliding_window; d.nI = c.index_n_heads;
  d.cI = c.index_head_dim; d.topk = c.index_topk; d.hc = c.hc_mult;
  d.sinkhorn_iters = c.hc_sinkhorn_iters; d.E = c.n_routed_experts; d.k = c.num_experts_per_tok;
  d.I = c.moe_intermediate_size;
  d.eps = static_cast<float>(c.rms_norm_eps); d.hc_eps = static_cast<float>(c.hc_eps);
  d.swiglu_limit = static_cast<float>(c.swiglu_limit);
  d.routed_scaling = static_cast<float>(c.routed_scaling_factor);
  return d;
}

namespace {

Tensor cat_rows(const Tensor& a, const Tensor& b) {  // [n1, K] ++ [n2, K], host F32
  Tensor out = Tensor::empty(DType::kF32, {a.dim(0) + b.dim(0), a.dim(1)});
  std::memcpy(out.data<float>(), a.data<float>(), a.nbytes());
  std::memcpy(out.data<float>() + a.numel(), b.data<float>(), b.nbytes());
  return out;
}

// Rows of the linear weights `first` ++ `second` (gate and up projections fused as [2I, H]). In
// the stored format when both share it and the scale blocks do not straddle the seam, else F32.
StatusOr<Weight> load_fused(WeightLoader& w, backend::Backend& be, const std::string& first,
                            const std::string& second, const backend::Shape& shape) {
  DI_ASSIGN_OR_RETURN(Weight a, w.load_linear(first, shape));
  DI_ASSIGN_OR_RETURN(Weight b, w.load_linear(second, shape));
  const bool same = a.w.dtype() == b.w.dtype() && a.scale.defined() == b.scale.defined() &&
                    a.block_rows == b.block_rows && a.block_cols == b.block_cols &&
                    (!a.scale.defined() || (a.scale.dtype() == b.scale.dtype() &&
                                            a.rows() % a.block_rows == 0));
  if (a.w.dtype() == DType::kF32 && !a.on_device() && same)
    return Weight::of(cat_rows(a.w, b.w));
  if (!same) {  // mixed formats: both as F32
    DI_ASSIGN_OR_RETURN(Tensor fa, w.load(first, shape));
    DI_ASSIGN_OR_RETURN(Tensor fb, w.load(second, shape));
    return Weight::of(cat_rows(fa, fb));
  }
  Weight out = a;
  DI_ASSIGN_OR_RETURN(out.w, be.alloc(a.w.dtype(), {a.w.dim(0) + b.w.dim(0), a.w.dim(1)}));
  Tensor top = out.w.rows(0, a.w.dim(0)), bottom = out.w.rows(a.w.dim(0), out.w.dim(0));
  DI_RETURN_IF_ERROR(be.copy(a.w, top));
  DI_RETURN_IF_ERROR(be.copy(b.w, bottom));
  if (a.scale.defined()) {
    DI_ASSIGN_OR_RETURN(out.scale, be.alloc(a.scale.dtype(), {a.scale.dim(0) + b.scale.dim(0),
                                                              a.scale.dim(1)}));
    Tensor st = out.scale.rows(0, a.scale.dim(0)), sb = out.scale.rows(a.scale.dim(0), out.scale.dim(0));
    DI_RETURN_IF_ERROR(be.copy(a.scale, st));
    DI_RETURN_IF_ERROR(be.copy(b.scale, sb));
  }
  return out;
}

// Canonical names: io/weight_registry.h.
Status load_hc(WeightLoader& w, const std::string& prefix, int64_t rows, int64_t cols, bool head,
               HcSiteWeights& out) {
  DI_ASSIGN_OR_RETURN(out.fn, w.load(prefix + "fn", {rows, cols}));
  DI_ASSIGN_OR_RETURN(out.base, w.load(prefix + "base", {rows}));
  DI_ASSIGN_OR_RETURN(out.scale, w.load(prefix + "scale", {head ? 1 : 3}));
  return OkStatus();
}

Status load_compressor(WeightLoader& w, const std::string& prefix, int64_t m, int64_t coff,
                       int64_t d, int64_t H, CompressorWeights& c) {
  c.m = m; c.coff = coff; c.d = d;
  DI_ASSIGN_OR_RETURN(c.wkv, w.load_linear(prefix + "wkv", {coff * d, H}));
  DI_ASSIGN_OR_RETURN(c.wgate, w.load_linear(prefix + "wgate", {coff * d, H}));
  DI_ASSIGN_OR_RETURN(c.ape, w.load(prefix + "ape", {m, coff * d}));
  DI_ASSIGN_OR_RETURN(c.norm, w.load(prefix + "norm", {d}));
  return OkStatus();
}

// Routed expert `e` of layer `layer`: gate_up [2I, H] (w1 rows, then w3 rows), down [H, I] (w2).
Status load_expert(const Dims& d, WeightLoader& w, backend::Backend& be, int64_t layer, int32_t e,
                   Weight& gate_up, Weight& down) {
  const std::string X = "layers." + std::to_string(layer) + ".ffn.experts." + std::to_string(e) + ".";
  DI_ASSIGN_OR_RETURN(gate_up, load_fused(w, be, X + "w1", X + "w3", {d.I, d.H}));
  DI_ASSIGN_OR_RETURN(down, w.load_linear(X + "w2", {d.H, d.I}));
  return OkStatus();
}

Status load_layer(const io::DeepseekV4Config& c, const Dims& d, WeightLoader& w,
                  backend::Backend& be, int64_t i, LayerWeights& lw,
                  const dist::ExpertParallelContext* ep, TensorParallelLoader* tp) {
  const std::string L = "layers." + std::to_string(i) + ".";
  const int64_t mix = (2 + d.hc) * d.hc;
  DI_RETURN_IF_ERROR(load_hc(w, L + "hc_attn.", mix, d.hc * d.H, false, lw.attn_hc));
  DI_RETURN_IF_ERROR(load_hc(w, L + "hc_ffn.", mix, d.hc * d.H, false, lw.ffn_hc));
  DI_ASSIGN_OR_RETURN(lw.attn_norm, w.load(L + "attn_norm", {d.H}));
  DI_ASSIGN_OR_RETURN(lw.ffn_norm, w.load(L + "ffn_norm", {d.H}));

  AttentionWeights& a = lw.attn;
  a.type = c.layer_types[i];
  const std::string A = L + "attn.";
  DI_ASSIGN_OR_RETURN(a.wq_a, w.load_linear(A + "wq_a", {d.Rq, d.H}));
  DI_ASSIGN_OR_RETURN(a.q_norm, w.load(A + "q_norm", {d.Rq}));
  DI_ASSIGN_OR_RETURN(a.wkv, w.load_linear(A + "wkv", {d.D, d.H}));
  DI_ASSIGN_OR_RETURN(a.kv_norm, w.load(A + "kv_norm", {d.D}));
  DI_ASSIGN_OR_RETURN(a.sinks, w.load(A + "sinks", {d.nH}));
  if (tp != nullptr) {  // tensor parallel: this rank's heads of wq_b, wo_a, wo_b and sinks
    DI_RETURN_IF_ERROR(tp->load_attention(d, A, a));
  } else {
    DI_ASSIGN_OR_RETURN(a.wq_b, w.load_linear(A + "wq_b", {d.nH * d.D, d.Rq}));
    DI_ASSIGN_OR_RETURN(a.wo_a, w.load_linear(A + "wo_a", {d.G * d.Ro, d.nH * d.D / d.G}));
    DI_ASSIGN_OR_RETURN(a.wo_b, w.load_linear(A + "wo_b", {d.H, d.G * d.Ro}));
  }
  if (a.type == io::AttentionType::kCompressedSparse || a.type == io::AttentionType::kHeavilyCompressed) {
    const bool csa = a.type == io::AttentionType::kCompressedSparse;
    const int64_t m = csa ? c.compress_rate_csa : c.compress_rate_hca;
    a.compressor = std::make_unique<CompressorWeights>();
    DI_RETURN_IF_ERROR(load_compressor(w, A + "compressor.", m, csa ? 2 : 1, d.D, d.H, *a.compressor));
    if (csa) {
      a.indexer = std::make_unique<IndexerWeights>();
      DI_RETURN_IF_ERROR(load_compressor(w, A + "indexer.compressor.", m, 2, d.cI, d.H, a.indexer->compressor));
      DI_ASSIGN_OR_RETURN(a.indexer->wq_b, w.load_linear(A + "indexer.wq_b", {d.nI * d.cI, d.Rq}));
      DI_ASSIGN_OR_RETURN(a.indexer->weights_proj, w.load_linear(A + "indexer.weights_proj", {d.nI, d.H}));
    }
  } else if (a.type != io::AttentionType::kSliding) {
    return Unimplemented(std::string("deepseek_v4: layer ") + std::to_string(i) + " has attention type " +
                         io::attention_type_name(a.type) + ", which this model does not implement");
  }

  MoeWeights& m = lw.moe;
  m.hash = c.mlp_layer_types[i] == io::MlpType::kHashMoe;
  const std::string F = L + "ffn.";
  DI_ASSIGN_OR_RETURN(m.gate, w.load_linear(F + "gate", {d.E, d.H}));
  if (m.hash) {
    DI_ASSIGN_OR_RETURN(m.tid2eid, w.load_i32(F + "tid2eid", {d.V, d.k}));
  } else {
    DI_ASSIGN_OR_RETURN(m.bias, w.load_optional(F + "gate_bias", {d.E}));
  }
  // Every expert, or (expert parallel) this rank's slots: local slot j holds logical expert
  // ep->local_experts(i)[j]; replicas of one expert share the loaded weight.
  std::vector<int32_t> experts(d.E);
  for (int64_t e = 0; e < d.E; ++e) experts[e] = static_cast<int32_t>(e);
  if (ep != nullptr) {
    if (ep->comm == nullptr || ep->placement.num_layers != d.L)
      return InvalidArgument("deepseek_v4: expert-parallel context without a communicator or "
                             "with a placement of another depth (validate it first)");
    experts = ep->local_experts(static_cast<int>(i));
  }
  m.experts.gate_up.resize(experts.size());
  m.experts.down.resize(experts.size());
  std::map<int32_t, size_t> first_slot;
  for (size_t j = 0; j < experts.size(); ++j) {
    if (auto it = first_slot.find(experts[j]); it != first_slot.end()) {
      m.experts.gate_up[j] = m.experts.gate_up[it->second];
      m.experts.down[j] = m.experts.down[it->second];
      continue;
    }
    first_slot[experts[j]] = j;
    if (tp != nullptr) {  // tensor parallel: this rank's share of the expert's width
      DI_RETURN_IF_ERROR(tp->load_mlp(d, F + "experts." + std::to_string(experts[j]) + ".",
                                      m.experts.gate_up[j], m.experts.down[j]));
      continue;
    }
    DI_RETURN_IF_ERROR(load_expert(d, w, be, i, experts[j], m.experts.gate_up[j], m.experts.down[j]));
  }
  if (tp != nullptr) {
    DI_RETURN_IF_ERROR(tp->load_mlp(d, F + "shared.", m.shared_gate_up, m.shared_down));
  } else {
    DI_ASSIGN_OR_RETURN(m.shared_gate_up, load_fused(w, be, F + "shared.w1", F + "shared.w3", {d.I, d.H}));
    DI_ASSIGN_OR_RETURN(m.shared_down, w.load_linear(F + "shared.w2", {d.H, d.I}));
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Weights>> load_weights(const io::DeepseekV4Config& c, const Dims& d,
                                                WeightLoader& w, backend::Backend& be,
                                                const dist::ExpertParallelContext* ep,
                                                TensorParallelLoader* tp) {
  auto out = std::make_unique<Weights>();
  DI_ASSIGN_OR_RETURN(out->embed, w.load("embed", {d.V, d.H}));
  DI_ASSIGN_OR_RETURN(out->head, w.load_linear("head", {d.V, d.H}));
  DI_ASSIGN_OR_RETURN(out->norm, w.load("norm", {d.H}));
  DI_RETURN_IF_ERROR(load_hc(w, "hc_head.", d.hc, d.hc * d.H, true, out->hc_head));
  out->layers.resize(d.L);
  for (int64_t i = 0; i < d.L; ++i) {
    Status st = load_layer(c, d, w, be, i, out->layers[i], ep, tp);
    if (!st.ok()) return st;
  }
  // Each rope kind rotates its own width (HF: int(head_dim · that kind's partial_rotary_factor),
  // deepseek-v4.md §1.3); the config validates it against head_dim and index_head_dim.
  auto width = [&](const io::RopeParams& p) { return p.rotary_dim > 0 ? p.rotary_dim : d.r; };
  DI_ASSIGN_OR_RETURN(out->rope_main, make_rope_table(c.rope_main, width(c.rope_main)));
  DI_ASSIGN_OR_RETURN(out->rope_compress, make_rope_table(c.rope_compress, width(c.rope_compress)));
  return out;
}

StatusOr<backend::ExpertSet> reload_expert_slots(const Dims& d, WeightLoader& loader,
                                                 backend::Backend& be, int64_t layer,
                                                 const std::vector<int32_t>& experts,
                                                 const backend::ExpertSet& current,
                                                 const std::vector<int32_t>& current_experts,
                                                 int* num_loaded) {
  if (static_cast<int64_t>(current_experts.size()) != current.num_experts())
    return InvalidArgument("reload_expert_slots: " + std::to_string(current_experts.size()) +
                           " current expert ids for " + std::to_string(current.num_experts()) + " slots");
  std::map<int32_t, size_t> held;  // logical expert -> a current slot holding it
  for (size_t j = 0; j < current_experts.size(); ++j) held.emplace(current_experts[j], j);
  std::map<int32_t, std::pair<Weight, Weight>> fresh;  // loaded (and placed) once per expert
  backend::ExpertSet out;
  out.gate_up.resize(experts.size());
  out.down.resize(experts.size());
  int loaded = 0;
  for (size_t j = 0; j < experts.size(); ++j) {
    const int32_t e = experts[j];
    if (e < 0 || e >= d.E)
      return OutOfRange("reload_expert_slots: layer " + std::to_string(layer) + " slot " +
                        std::to_string(j) + " names expert " + std::to_string(e) + " outside [0, " +
                        std::to_string(d.E) + ")");
    if (auto h = held.find(e); h != held.end()) {  // already in this rank's memory: share it
      out.gate_up[j] = current.gate_up[h->second];
      out.down[j] = current.down[h->second];
      continue;
    }
    auto f = fresh.find(e);
    if (f == fresh.end()) {
      std::pair<Weight, Weight> gd;
      DI_RETURN_IF_ERROR(load_expert(d, loader, be, layer, e, gd.first, gd.second));
      for (Weight* x : {&gd.first, &gd.second}) {
        DI_RETURN_IF_ERROR(place(be, x->w));
        DI_RETURN_IF_ERROR(place(be, x->scale));
      }
      ++loaded;
      f = fresh.emplace(e, std::move(gd)).first;
    }
    out.gate_up[j] = f->second.first;
    out.down[j] = f->second.second;
  }
  DI_RETURN_IF_ERROR(be.prepare_experts(out));
  if (num_loaded != nullptr) *num_loaded = loaded;
  return out;
}

Status place_weights(backend::Backend& be, Weights& w) {
  auto hc = [&](HcSiteWeights& h) -> Status {
    DI_RETURN_IF_ERROR(place(be, h.fn));
    DI_RETURN_IF_ERROR(place(be, h.base));
    return place(be, h.scale);
  };
  auto lin = [&](Weight& x) -> Status {
    DI_RETURN_IF_ERROR(place(be, x.w));
    return place(be, x.scale);
  };
  auto comp = [&](CompressorWeights& c) -> Status {
    for (Tensor* t : {&c.ape, &c.norm}) DI_RETURN_IF_ERROR(place(be, *t));
    DI_RETURN_IF_ERROR(lin(c.wkv));
    return lin(c.wgate);
  };
  for (Tensor* t : {&w.embed, &w.norm, &w.rope_main.inv_freq, &w.rope_compress.inv_freq})
    DI_RETURN_IF_ERROR(place(be, *t));
  DI_RETURN_IF_ERROR(lin(w.head));
  DI_RETURN_IF_ERROR(hc(w.hc_head));
  for (LayerWeights& l : w.layers) {
    DI_RETURN_IF_ERROR(hc(l.attn_hc));
    DI_RETURN_IF_ERROR(hc(l.ffn_hc));
    DI_RETURN_IF_ERROR(place(be, l.attn_norm));
    DI_RETURN_IF_ERROR(place(be, l.ffn_norm));
    AttentionWeights& a = l.attn;
    for (Tensor* t : {&a.q_norm, &a.kv_norm, &a.sinks}) DI_RETURN_IF_ERROR(place(be, *t));
    for (Weight* x : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b}) DI_RETURN_IF_ERROR(lin(*x));
    if (a.compressor) DI_RETURN_IF_ERROR(comp(*a.compressor));
    if (a.indexer) {
      DI_RETURN_IF_ERROR(comp(a.indexer->compressor));
      DI_RETURN_IF_ERROR(lin(a.indexer->wq_b));
      DI_RETURN_IF_ERROR(lin(a.indexer->weights_proj));
    }
    MoeWeights& m = l.moe;  // tid2eid stays on the host: hash ids are looked up there
    DI_RETURN_IF_ERROR(place(be, m.bias));
    for (Weight* x : {&m.gate, &m.shared_gate_up, &m.shared_down}) DI_RETURN_IF_ERROR(lin(*x));
    for (Weight& x : m.experts.gate_up) DI_RETURN_IF_ERROR(lin(x));
    for (Weight& x : m.experts.down) DI_RETURN_IF_ERROR(lin(x));
    DI_RETURN_IF_ERROR(be.prepare_experts(m.experts));
  }
  return OkStatus();
}

}  // namespace deepinfer::model::v4
