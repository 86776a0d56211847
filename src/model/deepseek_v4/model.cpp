#include "model/deepseek_v4/model.h"

#include <cstring>

#include "model/deepseek_v4/attention.h"
#include "model/deepseek_v4/hyper_connection.h"
#include "model/deepseek_v4/moe.h"

namespace deepinfer::model::v4 {

StatusOr<std::unique_ptr<DeepseekV4Model>> DeepseekV4Model::load(const std::string& dir,
                                                                 const io::ModelConfig& model_config,
                                                                 backend::Backend* backend) {
  if (!model_config.is_deepseek_v4())
    return InvalidArgument(dir + ": not a DeepSeek-V4 config (" + model_config.architecture + ")");
  const io::DeepseekV4Config& config = model_config.deepseek_v4();
  if (backend == nullptr) return InvalidArgument("deepseek_v4: no backend");
  for (backend::OpKind op : {backend::OpKind::kMatmul, backend::OpKind::kAttention,
                             backend::OpKind::kSoftmaxPool, backend::OpKind::kIndexerScores,
                             backend::OpKind::kTopK, backend::OpKind::kMoeRoute,
                             backend::OpKind::kHcCoeffs, backend::OpKind::kRope})
    if (!backend->supports_op(op, DType::kF32))
      return Unimplemented(std::string("deepseek_v4: backend ") + backend->name() +
                           " does not support op " + backend::op_name(op));
  auto m = std::unique_ptr<DeepseekV4Model>(new DeepseekV4Model());
  m->config_ = config;
  m->dims_ = dims_from_config(config);
  m->be_ = backend;
  if (config.num_key_value_heads != 1)
    return InvalidArgument("deepseek_v4: num_key_value_heads must be 1, got " +
                           std::to_string(config.num_key_value_heads));
  if (m->dims_.nH % m->dims_.G != 0)
    return InvalidArgument("deepseek_v4: num_attention_heads must be a multiple of o_groups");
  DI_ASSIGN_OR_RETURN(auto loader, WeightLoader::open(dir, model_config, backend));
  DI_ASSIGN_OR_RETURN(m->w_, load_weights(config, m->dims_, *loader));
  m->info_.family = "deepseek_v4";
  m->info_.vocab_size = config.vocab_size;
  m->info_.hidden_size = config.hidden_size;
  m->info_.num_layers = config.num_hidden_layers;
  m->info_.bos_token_id = config.bos_token_id;
  m->info_.eos_token_ids = config.eos_token_ids;
  return m;
}

std::unique_ptr<SequenceState> DeepseekV4Model::new_sequence_state() const {
  StateDims sd;
  sd.num_layers = dims_.L;
  sd.window = dims_.W;
  sd.head_dim = dims_.D;
  sd.index_head_dim = dims_.cI;
  return std::make_unique<ContiguousV4State>(sd);
}

StatusOr<Tensor> DeepseekV4Model::forward(std::span<const SequenceInput> batch) {
  int64_t rows = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const SequenceInput& in = batch[b];
    if (in.tokens.empty()) return InvalidArgument("deepseek_v4: sequence " + std::to_string(b) + " has no tokens");
    if (dynamic_cast<DeepseekV4State*>(in.state) == nullptr)
      return InvalidArgument("deepseek_v4: sequence " + std::to_string(b) +
                             " has no DeepSeek-V4 state (use new_sequence_state())");
    for (int32_t t : in.tokens)
      if (t < 0 || t >= dims_.V)
        return OutOfRange("deepseek_v4: token id " + std::to_string(t) + " in sequence " +
                          std::to_string(b) + " is outside the vocabulary [0, " + std::to_string(dims_.V) + ")");
    rows += in.all_logits ? static_cast<int64_t>(in.tokens.size()) : 1;
  }
  Tensor logits = Tensor::empty(DType::kF32, {rows, dims_.V});
  int64_t row = 0;
  for (const SequenceInput& in : batch) {
    const int64_t n = in.all_logits ? static_cast<int64_t>(in.tokens.size()) : 1;
    Tensor out = logits.rows(row, row + n);
    DI_RETURN_IF_ERROR(forward_sequence(in, *static_cast<DeepseekV4State*>(in.state), out));
    row += n;
  }
  return logits;
}

Status DeepseekV4Model::forward_sequence(const SequenceInput& in, DeepseekV4State& state,
                                         Tensor& logits) {
  backend::Backend& be = *be_;
  const Dims& d = dims_;
  const int64_t S = static_cast<int64_t>(in.tokens.size());
  const int64_t P = state.num_tokens();
  Tensor ids = Tensor::from_i32({S}, std::vector<int32_t>(in.tokens.begin(), in.tokens.end()));
  Tensor positions = Tensor::empty(DType::kI32, {S});
  for (int64_t s = 0; s < S; ++s) positions.data<int32_t>()[s] = static_cast<int32_t>(P + s);

  Tensor e = Tensor::empty(DType::kF32, {S, d.H});  // e = Embed[t]
  DI_RETURN_IF_ERROR(be.embedding(w_->embed, ids, e));
  Tensor streams = Tensor::empty(DType::kF32, {S, d.hc, d.H});  // hc identical copies
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < d.hc; ++j) {
      Tensor dst = streams.view({S * d.hc, d.H}).rows(s * d.hc + j, s * d.hc + j + 1);
      DI_RETURN_IF_ERROR(be.copy(e.rows(s, s + 1), dst));
    }
  for (int layer = 0; layer < d.L; ++layer)
    DI_RETURN_IF_ERROR(decoder_layer(layer, streams, ids, positions, state));
  state.advance(S);

  const int64_t first = logits.dim(0) == S ? 0 : S - 1;  // all rows, or the last one
  const int64_t n = S - first;
  Tensor tail = streams.rows(first, S);                    // [n, hc, H]
  Tensor h = Tensor::empty(DType::kF32, {n, d.H});
  DI_RETURN_IF_ERROR(hyper_head(be, d, w_->hc_head, tail, h));
  Tensor hn = Tensor::empty(DType::kF32, {n, d.H});
  DI_RETURN_IF_ERROR(be.rms_norm(h, &w_->norm, d.eps, hn));
  return be.matmul(hn, w_->head, logits);
}

Status DeepseekV4Model::decoder_layer(int layer, Tensor& streams, const Tensor& token_ids,
                                      const Tensor& positions, DeepseekV4State& state) {
  backend::Backend& be = *be_;
  const Dims& d = dims_;
  const LayerWeights& lw = w_->layers[layer];
  const int64_t S = streams.dim(0);
  const RopeTable& rope =
      lw.attn.type == io::AttentionType::kSliding ? w_->rope_main : w_->rope_compress;

  // Attention site.
  Tensor post_a = Tensor::empty(DType::kF32, {S, d.hc});
  Tensor comb_a = Tensor::empty(DType::kF32, {S, d.hc, d.hc});
  Tensor x_a = Tensor::empty(DType::kF32, {S, d.H});
  DI_RETURN_IF_ERROR(hc_map(be, d, lw.attn_hc, streams, post_a, comb_a, x_a));
  Tensor attn_in = Tensor::empty(DType::kF32, {S, d.H});
  DI_RETURN_IF_ERROR(be.rms_norm(x_a, &lw.attn_norm, d.eps, attn_in));
  Tensor y_a = Tensor::empty(DType::kF32, {S, d.H});
  DI_RETURN_IF_ERROR(attention_forward(be, d, lw.attn, rope, attn_in, positions, state, layer, y_a));
  Tensor streams_a = Tensor::empty(DType::kF32, {S, d.hc, d.H});
  DI_RETURN_IF_ERROR(hc_expand(be, streams, y_a, post_a, comb_a, streams_a));

  // MoE site.
  Tensor post_f = Tensor::empty(DType::kF32, {S, d.hc});
  Tensor comb_f = Tensor::empty(DType::kF32, {S, d.hc, d.hc});
  Tensor x_f = Tensor::empty(DType::kF32, {S, d.H});
  DI_RETURN_IF_ERROR(hc_map(be, d, lw.ffn_hc, streams_a, post_f, comb_f, x_f));
  Tensor ffn_in = Tensor::empty(DType::kF32, {S, d.H});
  DI_RETURN_IF_ERROR(be.rms_norm(x_f, &lw.ffn_norm, d.eps, ffn_in));
  Tensor y_f = Tensor::empty(DType::kF32, {S, d.H});
  DI_RETURN_IF_ERROR(moe_forward(be, d, config_.scoring_func, lw.moe, ffn_in, token_ids, y_f));
  return hc_expand(be, streams_a, y_f, post_f, comb_f, streams);
}

}  // namespace deepinfer::model::v4
