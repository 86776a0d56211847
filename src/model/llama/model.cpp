#include "model/llama/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/placement.h"
#include "model/weight_loader.h"

namespace deepinfer::model::llama {

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::load(const std::string& dir,
                                                       const io::ModelConfig& model_config,
                                                       backend::Backend* backend) {
  if (backend == nullptr) return InvalidArgument("llama: no backend");
  if (!model_config.is_llama())
    return InvalidArgument(dir + ": not a Llama config (" + model_config.architecture + ")");
  const io::LlamaConfig& c = model_config.llama();
  if (c.hidden_act != "silu") return Unimplemented("llama: hidden_act '" + c.hidden_act + "' (only silu)");
  if (c.attention_bias || c.mlp_bias) return Unimplemented("llama: attention/mlp biases are not supported");
  if (c.num_key_value_heads < 1 || c.num_attention_heads % c.num_key_value_heads != 0)
    return InvalidArgument("llama: num_attention_heads must be a multiple of num_key_value_heads");
  auto m = std::unique_ptr<LlamaModel>(new LlamaModel());
  m->c_ = c;
  m->be_ = backend;
  const int64_t H = c.hidden_size, V = c.vocab_size, hd = c.head_dim, nH = c.num_attention_heads,
                nKV = c.num_key_value_heads, I = c.intermediate_size;
  DI_ASSIGN_OR_RETURN(auto w, WeightLoader::open(dir, model_config, backend));
  DI_ASSIGN_OR_RETURN(m->embed_, w->load("embed", {V, H}));
  DI_ASSIGN_OR_RETURN(m->norm_, w->load("norm", {H}));
  if (c.tie_word_embeddings && !w->has("head")) {
    m->head_ = m->embed_;
  } else {
    DI_ASSIGN_OR_RETURN(m->head_, w->load("head", {V, H}));
  }
  m->layers_.resize(c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string L = "layers." + std::to_string(i) + ".";
    Layer& l = m->layers_[i];
    DI_ASSIGN_OR_RETURN(l.attn_norm, w->load(L + "attn_norm", {H}));
    DI_ASSIGN_OR_RETURN(l.wq, w->load(L + "attn.wq", {nH * hd, H}));
    DI_ASSIGN_OR_RETURN(l.wk, w->load(L + "attn.wk", {nKV * hd, H}));
    DI_ASSIGN_OR_RETURN(l.wv, w->load(L + "attn.wv", {nKV * hd, H}));
    DI_ASSIGN_OR_RETURN(l.wo, w->load(L + "attn.wo", {H, nH * hd}));
    DI_ASSIGN_OR_RETURN(l.ffn_norm, w->load(L + "ffn_norm", {H}));
    DI_ASSIGN_OR_RETURN(Tensor g, w->load(L + "ffn.w1", {I, H}));
    DI_ASSIGN_OR_RETURN(Tensor u, w->load(L + "ffn.w3", {I, H}));
    DI_ASSIGN_OR_RETURN(l.down, w->load(L + "ffn.w2", {H, I}));
    l.gate_up = Tensor::empty(DType::kF32, {2 * I, H});  // host; placed below
    std::memcpy(l.gate_up.data<float>(), g.data<float>(), g.nbytes());
    std::memcpy(l.gate_up.data<float>() + I * H, u.data<float>(), u.nbytes());
  }
  const int64_t r = c.rope.rotary_dim > 0 ? c.rope.rotary_dim : hd;
  DI_ASSIGN_OR_RETURN(m->rope_, make_rope_table(c.rope, r));
  const bool tied = m->head_.raw() == m->embed_.raw();
  for (Tensor* t : {&m->embed_, &m->norm_, &m->rope_.inv_freq}) DI_RETURN_IF_ERROR(place(*backend, *t));
  if (tied) m->head_ = m->embed_; else DI_RETURN_IF_ERROR(place(*backend, m->head_));
  for (Layer& l : m->layers_)
    for (Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_norm, &l.gate_up, &l.down})
      DI_RETURN_IF_ERROR(place(*backend, *t));
  m->info_.family = "llama";
  m->info_.vocab_size = V;
  m->info_.hidden_size = H;
  m->info_.num_layers = c.num_hidden_layers;
  m->info_.bos_token_id = c.bos_token_id.value_or(-1);
  m->info_.eos_token_ids = c.eos_token_ids;
  return m;
}

std::unique_ptr<SequenceState> LlamaModel::new_sequence_state() const {
  return std::make_unique<LlamaState>(c_.num_hidden_layers, c_.num_key_value_heads * c_.head_dim,
                                      be_);
}

Status LlamaState::reserve(int layer, int64_t rows) {
  const int64_t have = k_[layer].defined() ? k_[layer].dim(0) : 0;
  if (rows <= have) return OkStatus();
  const int64_t cap = std::max<int64_t>(rows, 2 * have);
  for (Tensor* t : {&k_[layer], &v_[layer]}) {
    DI_ASSIGN_OR_RETURN(Tensor bigger, be_->alloc(DType::kF32, {cap, kv_width_}));
    if (num_tokens_ > 0) {
      Tensor dst = bigger.rows(0, num_tokens_);
      DI_RETURN_IF_ERROR(be_->copy(t->rows(0, num_tokens_), dst));
    }
    *t = bigger;
  }
  return OkStatus();
}

StatusOr<Tensor> LlamaModel::forward(std::span<const SequenceInput> batch) {
  int64_t rows = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const SequenceInput& in = batch[b];
    if (in.tokens.empty()) return InvalidArgument("llama: sequence " + std::to_string(b) + " has no tokens");
    if (in.fed_ids != nullptr)
      return InvalidArgument(
          "llama: sequence " + std::to_string(b) +
          " has a fed token (ids on the device); this model takes host ids only");
    if (dynamic_cast<LlamaState*>(in.state) == nullptr)
      return InvalidArgument("llama: sequence " + std::to_string(b) + " has no Llama state");
    for (int32_t t : in.tokens)
      if (t < 0 || t >= c_.vocab_size)
        return OutOfRange("llama: token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                          std::to_string(c_.vocab_size) + ")");
    rows += in.all_logits ? static_cast<int64_t>(in.tokens.size()) : 1;
  }
  DI_ASSIGN_OR_RETURN(Tensor logits, be_->alloc(DType::kF32, {rows, c_.vocab_size}));
  int64_t row = 0;
  for (const SequenceInput& in : batch) {
    const int64_t n = in.all_logits ? static_cast<int64_t>(in.tokens.size()) : 1;
    Tensor out = logits.rows(row, row + n);
    DI_RETURN_IF_ERROR(forward_sequence(in, *static_cast<LlamaState*>(in.state), out));
    row += n;
  }
  if (logits_on_device_) return logits;  // the engine samples on the device
  return to_host(*be_, logits);
}

Status LlamaModel::forward_sequence(const SequenceInput& in, LlamaState& st, Tensor& logits) {
  backend::Backend& be = *be_;
  const int64_t S = static_cast<int64_t>(in.tokens.size()), P = st.num_tokens();
  const int64_t H = c_.hidden_size, hd = c_.head_dim, nH = c_.num_attention_heads,
                nKV = c_.num_key_value_heads, I = c_.intermediate_size, kvw = nKV * hd;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  std::vector<int32_t> pos(S);
  for (int64_t s = 0; s < S; ++s) pos[s] = static_cast<int32_t>(P + s);
  DI_ASSIGN_OR_RETURN(Tensor ids, to_backend_i32(be, in.tokens, {S}));
  DI_ASSIGN_OR_RETURN(Tensor positions, to_backend_i32(be, pos, {S}));
  // Causal key lists: query s sees positions 0 .. P+s.
  std::vector<int32_t> offsets(S + 1, 0), key_ids;
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t j = 0; j <= P + s; ++j) key_ids.push_back(static_cast<int32_t>(j));
    offsets[s + 1] = static_cast<int32_t>(key_ids.size());
  }
  DI_ASSIGN_OR_RETURN(Tensor key_offsets, to_backend_i32(be, offsets, {S + 1}));
  DI_ASSIGN_OR_RETURN(Tensor key_list,
                      to_backend_i32(be, key_ids, {static_cast<int64_t>(key_ids.size())}));

  DI_ALLOC(x, be, DType::kF32, {S, H});  // residual stream
  DI_RETURN_IF_ERROR(be.embedding(embed_, ids, x));
  DI_ALLOC(h, be, DType::kF32, {S, H});
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& l = layers_[li];
    DI_RETURN_IF_ERROR(be.rms_norm(x, &l.attn_norm, eps, h));
    DI_ALLOC(q, be, DType::kF32, {S, nH, hd});
    DI_ALLOC(k, be, DType::kF32, {S, nKV, hd});
    DI_ALLOC(v, be, DType::kF32, {S, nKV, hd});
    Tensor q2 = q.view({S, nH * hd});
    DI_RETURN_IF_ERROR(be.matmul(h, l.wq, q2));
    Tensor k2 = k.view({S, kvw}), v2 = v.view({S, kvw});
    DI_RETURN_IF_ERROR(be.matmul(h, l.wk, k2));
    DI_RETURN_IF_ERROR(be.matmul(h, l.wv, v2));
    DI_RETURN_IF_ERROR(be.rope(q, positions, rope_.inv_freq, backend::RopeStyle::kHalfLeading, rope_.mscale, false));
    DI_RETURN_IF_ERROR(be.rope(k, positions, rope_.inv_freq, backend::RopeStyle::kHalfLeading, rope_.mscale, false));
    DI_RETURN_IF_ERROR(st.reserve(static_cast<int>(li), P + S));
    Tensor K = st.keys(static_cast<int>(li)).rows(0, P + S);
    Tensor Vv = st.values(static_cast<int>(li)).rows(0, P + S);
    Tensor k_new = K.rows(P, P + S), v_new = Vv.rows(P, P + S);
    DI_RETURN_IF_ERROR(be.copy(k2, k_new));
    DI_RETURN_IF_ERROR(be.copy(v2, v_new));
    Tensor Kt = K.view({P + S, nKV, hd});
    Tensor Vt = Vv.view({P + S, nKV, hd});
    DI_ALLOC(o, be, DType::kF32, {S, nH, hd});
    DI_RETURN_IF_ERROR(be.attention(q, Kt, Vt, key_offsets, key_list, nullptr,
                                    1.0f / std::sqrt(static_cast<float>(hd)), o));
    DI_ALLOC(attn_out, be, DType::kF32, {S, H});
    DI_RETURN_IF_ERROR(be.matmul(o.view({S, nH * hd}), l.wo, attn_out));
    DI_RETURN_IF_ERROR(be.add(x, attn_out, x));
    DI_RETURN_IF_ERROR(be.rms_norm(x, &l.ffn_norm, eps, h));
    DI_ALLOC(gu, be, DType::kF32, {S, 2 * I});
    DI_RETURN_IF_ERROR(be.matmul(h, l.gate_up, gu));
    DI_ALLOC(act, be, DType::kF32, {S, I});
    DI_RETURN_IF_ERROR(be.swiglu(gu, 0.f, act));
    DI_ALLOC(mlp_out, be, DType::kF32, {S, H});
    DI_RETURN_IF_ERROR(be.matmul(act, l.down, mlp_out));
    DI_RETURN_IF_ERROR(be.add(x, mlp_out, x));
  }
  st.advance(S);
  const int64_t first = logits.dim(0) == S ? 0 : S - 1;
  DI_ALLOC(hn, be, DType::kF32, {S - first, H});
  DI_RETURN_IF_ERROR(be.rms_norm(x.rows(first, S), &norm_, eps, hn));
  return be.matmul(hn, head_, logits);
}

}  // namespace deepinfer::model::llama
