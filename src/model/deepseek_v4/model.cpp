#include "model/deepseek_v4/model.h"

#include <algorithm>
#include <cstring>

#include "common/env.h"
#include "common/logging.h"
#include "model/deepseek_v4/attention.h"
#include "model/deepseek_v4/hyper_connection.h"
#include "model/deepseek_v4/moe.h"
#include "model/deepseek_v4/tensor_parallel_weights.h"
#include "model/placement.h"

namespace deepinfer::model::v4 {

namespace {

// The scatter_ids pairs (row of the fed ids, place in the step's I32 inputs) of a fed step: each
// fed token of step row s into its hc stream-id rows s·hc … s·hc + hc − 1 (decode fusion; hc = 0:
// none) and into the tokens' row tokens_at + s.
void append_fed_pairs(const StepBatch& step, int64_t hc, int64_t tokens_at,
                      std::vector<int32_t>& pairs) {
  for (const auto& [row, s] : step.fed_pairs) {
    for (int64_t j = 0; j < hc; ++j)
      pairs.insert(pairs.end(), {row, static_cast<int32_t>(s * hc + j)});
    pairs.insert(pairs.end(), {row, static_cast<int32_t>(tokens_at + s)});
  }
}

}  // namespace

StatusOr<std::unique_ptr<DeepseekV4Model>> DeepseekV4Model::load(const std::string& dir,
                                                                 const io::ModelConfig& model_config,
                                                                 backend::Backend* backend) {
  return load(dir, model_config, backend, nullptr);
}

StatusOr<std::unique_ptr<DeepseekV4Model>> DeepseekV4Model::load(
    const std::string& dir, const io::ModelConfig& model_config, backend::Backend* backend,
    const dist::ExpertParallelContext* ep, const TensorParallelContext* tp) {
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
  m->local_ = m->dims_;
  std::unique_ptr<TensorParallelLoader> tp_loader;  // tensor parallel: reads this rank's shards
  if (tp != nullptr) {
    DI_ASSIGN_OR_RETURN(tp_loader, open_tensor_parallel(dir, model_config, backend, m->dims_,
                                                        ep != nullptr, *tp));
    m->tp_comm_ = tp->comm;
    m->local_ = tensor_parallel_local_dims(m->dims_, tp->comm->world_size());
  }
  if (ep != nullptr) {
    DI_RETURN_IF_ERROR(ep->validate(static_cast<int>(m->dims_.L), static_cast<int>(m->dims_.E)));
    for (int l = 0; l < m->dims_.L; ++l) {
      DI_ASSIGN_OR_RETURN(dist::ExpertMap map, dist::expert_map_for_layer(ep->placement, l));
      DI_ASSIGN_OR_RETURN(auto moe, dist::ExpertParallelMoe::create(ep->comm, std::move(map), ep->choice,
                                                                    ep->load_recorder, l));
      m->ep_layers_.push_back(std::move(moe));
    }
  }
  DI_ASSIGN_OR_RETURN(m->w_, load_weights(config, m->dims_, *loader, *backend, ep, tp_loader.get()));
  DI_RETURN_IF_ERROR(place_weights(*backend, *m->w_));
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
  return std::make_unique<ContiguousV4State>(sd, be_);
}

StatusOr<Tensor> DeepseekV4Model::forward(std::span<const SequenceInput> batch) {
  int64_t rows = 0;
  for (size_t b = 0; b < batch.size(); ++b) {
    const SequenceInput& in = batch[b];
    if (in.tokens.empty()) return InvalidArgument("deepseek_v4: sequence " + std::to_string(b) + " has no tokens");
    if (dynamic_cast<DeepseekV4State*>(in.state) == nullptr)
      return InvalidArgument("deepseek_v4: sequence " + std::to_string(b) +
                             " has no DeepSeek-V4 state (use new_sequence_state())");
    if (in.fed_ids != nullptr) {
      const Tensor& f = *in.fed_ids;
      if (f.dtype() != DType::kI32 || f.rank() != 1 || in.fed_row < 0 || in.fed_row >= f.dim(0))
        return InvalidArgument("deepseek_v4: sequence " + std::to_string(b) + " feeds row " +
                               std::to_string(in.fed_row) + " of " + f.describe() +
                               " (want an I32 [m] tensor and a row in [0, m))");
      if (f.on_device() == be_->host_memory())
        return InvalidArgument("deepseek_v4: sequence " + std::to_string(b) + "'s fed ids " +
                               f.describe() + " are not in the " + be_->name() +
                               " backend's memory");
      for (size_t c = 0; c < b; ++c)
        if (batch[c].fed_ids != nullptr && batch[c].fed_ids->raw() != f.raw())
          return InvalidArgument("deepseek_v4: sequences " + std::to_string(c) + " and " +
                                 std::to_string(b) + " feed from different tensors");
    }
    // A fed sequence's last token is a placeholder (its id is on the device).
    const size_t known = in.tokens.size() - (in.fed_ids != nullptr ? 1 : 0);
    for (size_t i = 0; i < known; ++i) {
      const int32_t t = in.tokens[i];
      if (t < 0 || t >= dims_.V)
        return OutOfRange("deepseek_v4: token id " + std::to_string(t) + " in sequence " +
                          std::to_string(b) + " is outside the vocabulary [0, " + std::to_string(dims_.V) + ")");
    }
    rows += in.all_logits ? static_cast<int64_t>(in.tokens.size()) : 1;
  }
  for (size_t b = 0; b < batch.size(); ++b)
    for (size_t c = 0; c < b; ++c)
      if (batch[b].state == batch[c].state)
        return InvalidArgument("deepseek_v4: sequences " + std::to_string(c) + " and " +
                               std::to_string(b) + " share one state");

  // Flatten the batch: every sequence's tokens back to back (step.h).
  backend::Backend& be = *be_;
  const Dims& d = dims_;
  StepBatch step;
  std::vector<int32_t> tokens, pos_host, logit_rows;
  for (const SequenceInput& in : batch) {
    SeqSlice sq;
    sq.begin = static_cast<int64_t>(tokens.size());
    sq.len = static_cast<int64_t>(in.tokens.size());
    sq.state = static_cast<DeepseekV4State*>(in.state);
    sq.past = sq.state->num_tokens();
    tokens.insert(tokens.end(), in.tokens.begin(), in.tokens.end());
    if (in.fed_ids != nullptr) {  // 0 on the host until the scatter on the device
      tokens.back() = 0;
      step.fed_ids = in.fed_ids;
      step.fed_pairs.emplace_back(static_cast<int32_t>(in.fed_row),
                                  static_cast<int32_t>(tokens.size() - 1));
    }
    for (int64_t s = 0; s < sq.len; ++s) pos_host.push_back(static_cast<int32_t>(sq.past + s));
    for (int64_t s = in.all_logits ? 0 : sq.len - 1; s < sq.len; ++s)
      logit_rows.push_back(static_cast<int32_t>(sq.begin + s));  // all rows, or the last one
    step.seqs.push_back(sq);
  }
  const int64_t S = static_cast<int64_t>(tokens.size());
  step.tokens = tokens;
  step.positions_host = pos_host;
  if (rows == S && S <= kMaxGraphBatch && be.supports_graphs() && ep_layers_.empty() &&
      tp_comm_ == nullptr && graph_failed_.count(S) == 0) {
    bool decode = true;  // one new token per sequence, last-row logits: a decode step
    for (const SeqSlice& sq : step.seqs) decode = decode && sq.len == 1;
    if (decode) return forward_graphed(step);
  }
  // embed_streams' inputs: with decode fusion each token hc times (one embedding call), else the
  // tokens and the copies that repeat each embedded row.
  const bool fuse = env().decode_fusion;
  std::vector<int32_t> copy_of(S * d.hc), stream_ids(S * d.hc);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < d.hc; ++j) {
      copy_of[s * d.hc + j] = static_cast<int32_t>(s);
      stream_ids[s * d.hc + j] = tokens[s];
    }
  // Fed tokens: one buffer [stream ids (decode fusion) | tokens], the fed ids scattered into
  // both places on the backend; the hash layers' ids looked up there from the tokens.
  const bool fed = step.fed_ids != nullptr;
  Tensor ids, fed_tokens;
  if (fed) {
    std::vector<int32_t> buf = fuse ? stream_ids : std::vector<int32_t>();
    const int64_t at = static_cast<int64_t>(buf.size());  // the tokens' place in buf
    buf.insert(buf.end(), tokens.begin(), tokens.end());
    std::vector<int32_t> pairs;
    append_fed_pairs(step, fuse ? d.hc : 0, at, pairs);
    DI_ASSIGN_OR_RETURN(Tensor all, to_backend_i32(be, buf, {static_cast<int64_t>(buf.size())}));
    const int64_t n = static_cast<int64_t>(pairs.size()) / 2;
    DI_ASSIGN_OR_RETURN(Tensor map, to_backend_i32(be, pairs, {n, 2}));
    DI_RETURN_IF_ERROR(be.scatter_ids(*step.fed_ids, map, all));
    ids = fuse ? all.rows(0, at) : all;
    fed_tokens = all.rows(at, at + S);
  } else {
    DI_ASSIGN_OR_RETURN(
        ids, fuse ? to_backend_i32(be, stream_ids, {S * d.hc}) : to_backend_i32(be, tokens, {S}));
  }
  DI_ASSIGN_OR_RETURN(step.positions, to_backend_i32(be, pos_host, {S}));
  Tensor copies;
  if (!fuse) {
    DI_ASSIGN_OR_RETURN(copies, to_backend_i32(be, copy_of, {S * d.hc}));
  }

  Tensor streams;
  DI_RETURN_IF_ERROR(embed_streams(ids, copies, streams));
  LayerCarry prev;  // only the previous layer's pending MoE expand is kept
  for (int layer = 0; layer < d.L; ++layer) {
    LayerCarry c;
    Tensor hash;
    if (fed && w_->layers[layer].moe.hash) {
      DI_ASSIGN_OR_RETURN(hash, be.empty(DType::kI32, {S, d.k}));
      DI_RETURN_IF_ERROR(hash_ids_on_backend(layer, fed_tokens, hash));
    }
    DI_RETURN_IF_ERROR(
        decoder_layer(layer, streams, step, &prev, c, hash.defined() ? &hash : nullptr));
    prev = LayerCarry();
    prev.moe_expand = std::move(c.moe_expand);
  }
  for (const SeqSlice& sq : step.seqs) sq.state->advance(sq.len);

  DI_ASSIGN_OR_RETURN(Tensor picked, to_backend_i32(be, logit_rows, {rows}));
  Tensor logits;
  DI_RETURN_IF_ERROR(head_logits(streams, picked, &prev, logits));
  if (logits_on_device_) return logits;  // the engine samples on the device
  return to_host(be, logits);  // the sampler reads host logits
}

// streams [S, hc, H] = hc identical copies of Embed[ids]: ids [S] and copies [S·hc] = row s hc
// times (embedding, then gather_rows of the copies), or, with copies undefined (decode fusion),
// ids [S·hc] = each token hc times, embedded straight into the streams' rows (one call; the
// same bits: both are copies of table rows).
Status DeepseekV4Model::embed_streams(const Tensor& ids, const Tensor& copies, Tensor& streams) {
  backend::Backend& be = *be_;
  const Dims& d = dims_;
  if (!copies.defined()) {
    const int64_t S = ids.dim(0) / d.hc;
    DI_ASSIGN_OR_RETURN(streams, be.empty(DType::kF32, {S, d.hc, d.H}));
    Tensor stream_rows = streams.view({S * d.hc, d.H});
    return be.embedding(w_->embed, ids, stream_rows);
  }
  const int64_t S = ids.dim(0);
  DI_EMPTY(e, be, DType::kF32, {S, d.H});  // e = Embed[t]
  DI_RETURN_IF_ERROR(be.embedding(w_->embed, ids, e));
  DI_ASSIGN_OR_RETURN(streams, be.empty(DType::kF32, {S, d.hc, d.H}));
  Tensor stream_rows = streams.view({S * d.hc, d.H});
  return be.gather_rows(e, copies, stream_rows);
}

// HyperHead, final norm and lm_head on the rows `picked` [rows] of streams: logits [rows, V].
// Both callers pick rows in order, so rows == S means every row (picked = 0 … S−1): with decode
// fusion the head then reads the streams themselves instead of a gathered copy, and the last
// layer's pending MoE expand (prev) runs inside the HyperHead's site (writing the streams too).
Status DeepseekV4Model::head_logits(Tensor& streams, const Tensor& picked, LayerCarry* prev,
                                    Tensor& logits) {
  backend::Backend& be = *be_;
  const Dims& d = dims_;
  const int64_t S = streams.dim(0), rows = picked.dim(0);
  DI_EMPTY(h, be, DType::kF32, {rows, d.H});
  DI_EMPTY(hn, be, DType::kF32, {rows, d.H});
  LayerCarry::PendingExpand* pe =
      prev != nullptr && prev->moe_expand.streams_a.defined() ? &prev->moe_expand : nullptr;
  if (pe != nullptr && rows == S) {
    DI_RETURN_IF_ERROR(hyper_head_expand_norm(be, d, w_->hc_head, pe->streams_a, pe->y,
                                              pe->routed.defined() ? &pe->routed : nullptr,
                                              pe->post, pe->comb, streams, h, w_->norm, hn));
    *pe = LayerCarry::PendingExpand();
  } else {
    if (pe != nullptr) DI_RETURN_IF_ERROR(apply_moe_expand(*prev, streams));
    Tensor tail = streams;
    if (rows != S || !env().decode_fusion) {
      DI_ASSIGN_OR_RETURN(tail, be.empty(DType::kF32, {rows, d.hc, d.H}));
      Tensor tail_rows = tail.view({rows, d.hc * d.H});
      DI_RETURN_IF_ERROR(be.gather_rows(streams.view({S, d.hc * d.H}), picked, tail_rows));
    }
    DI_RETURN_IF_ERROR(hyper_head_norm(be, d, w_->hc_head, tail, h, w_->norm, hn));
  }
  DI_ASSIGN_OR_RETURN(logits, be.empty(DType::kF32, {rows, d.V}));
  return be.linear(hn, w_->head, logits);
}

// Decode steps as CUDA graphs (docs/cuda.md "CUDA graphs for decode"). A step of S sequences
// with one token each is L + 1 segments of row-wise work (embedding + layer 0's first part; layer
// l's last part + layer l+1's first part; the last layer's last part + the head) with each
// layer's attention core between them (per-sequence state and host-built key lists: run as
// always). The first step of a batch size captures the segments (and runs them); later steps of
// that size upload tokens, positions and hash-layer expert ids into the set's fixed tensors and
// replay. The tensors a segment makes live in the set's graph memory at fixed addresses, so the
// cores and later segments read them across steps; o (the attention output) is a fixed tensor of
// the set that every core writes. Every op and argument is the eager step's, so the bits are the
// same. A capture that fails (an op needed the host) leaves the step to finish eagerly and that
// size eager from then on.
StatusOr<Tensor> DeepseekV4Model::forward_graphed(StepBatch& step) {
  backend::Backend& be = *be_;
  const Dims& d = dims_;
  const int64_t S = static_cast<int64_t>(step.seqs.size());
  GraphSet* g = nullptr;
  for (auto& set : graph_sets_)
    if (set->S == S) g = set.get();
  if (g == nullptr) {
    if (graph_sets_.size() >= kMaxGraphSets) {  // the least recently used size goes
      DI_RETURN_IF_ERROR(be.synchronize());  // none of its replays still running
      auto lru = std::min_element(graph_sets_.begin(), graph_sets_.end(),
                                  [](const auto& a, const auto& b) { return a->last_used < b->last_used; });
      graph_sets_.erase(lru);
    }
    auto set = std::make_unique<GraphSet>();
    set->S = S;
    // With decode fusion ids holds each token hc times, there are no copies (embed_streams), and
    // ids, positions and the hash layers' ids are views of one buffer (one upload per step).
    const bool fuse = env().decode_fusion;
    int64_t n_hash = 0;
    for (int l = 0; l < d.L; ++l) n_hash += w_->layers[l].moe.hash ? S * d.k : 0;
    if (fuse) {
      DI_ASSIGN_OR_RETURN(set->inputs,
                          be.empty(DType::kI32, {S * d.hc + 2 * S + n_hash + 2 * S * (d.hc + 1)}));
      set->ids = set->inputs.rows(0, S * d.hc);
      set->positions = set->inputs.rows(S * d.hc, S * d.hc + S);
      set->tokens = set->inputs.rows(S * d.hc + S, S * d.hc + 2 * S);
    } else {
      DI_ASSIGN_OR_RETURN(set->ids, be.empty(DType::kI32, {S}));
      DI_ASSIGN_OR_RETURN(set->positions, be.empty(DType::kI32, {S}));
    }
    std::vector<int32_t> copy_of(S * d.hc), rows(S);
    for (int64_t s = 0; s < S; ++s) {
      rows[s] = static_cast<int32_t>(s);
      for (int64_t j = 0; j < d.hc; ++j) copy_of[s * d.hc + j] = static_cast<int32_t>(s);
    }
    if (!env().decode_fusion) {
      DI_ASSIGN_OR_RETURN(set->copies, to_backend_i32(be, copy_of, {S * d.hc}));
    }
    DI_ASSIGN_OR_RETURN(set->picked, to_backend_i32(be, rows, {S}));
    DI_ASSIGN_OR_RETURN(set->o, be.alloc(DType::kF32, {S, local_.nH, local_.D}));
    set->hash_ids.resize(d.L);
    int64_t at = S * d.hc + 2 * S;  // the hash ids' place in `inputs`
    for (int l = 0; l < d.L; ++l)
      if (w_->layers[l].moe.hash && fuse) {
        set->hash_ids[l] = set->inputs.rows(at, at + S * d.k).view({S, d.k});
        at += S * d.k;
      } else if (w_->layers[l].moe.hash) {
        DI_ASSIGN_OR_RETURN(set->hash_ids[l], be.empty(DType::kI32, {S, d.k}));
      }
    set->carry.resize(d.L);
    set->graphs.resize(d.L + 1);
    graph_sets_.push_back(std::move(set));
    g = graph_sets_.back().get();
  }
  g->last_used = ++graph_clock_;

  // This step's inputs into the set's fixed tensors: with decode fusion one upload of
  // [each token hc times | positions | hash ids of each hash layer], else one upload each.
  // A fed step (tokens on the device): the host's rows of the fed tokens hold 0 until the
  // scatter; the hash layers' ids are looked up on the device from the tokens afterwards (the
  // same integers the host would have found), so the replays read exactly an unfed step's inputs.
  const bool fed = step.fed_ids != nullptr;
  if (g->inputs.defined()) {
    std::vector<int32_t> in;
    in.reserve(g->inputs.numel());
    for (int64_t i = 0; i < S * d.hc; ++i) in.push_back(step.tokens[i / d.hc]);
    in.insert(in.end(), step.positions_host.begin(), step.positions_host.end());
    in.insert(in.end(), step.tokens.begin(), step.tokens.end());
    for (int l = 0; l < d.L; ++l)
      if (g->hash_ids[l].defined()) {
        std::vector<int32_t> h;
        if (fed)
          h.assign(S * d.k, 0);
        else
          DI_RETURN_IF_ERROR(moe_hash_ids(d, w_->layers[l].moe, step.tokens, h));
        in.insert(in.end(), h.begin(), h.end());
      }
    const int64_t map_at = static_cast<int64_t>(in.size());
    append_fed_pairs(step, d.hc, S * d.hc + S, in);  // after the stream ids and positions
    const int64_t n_pairs = (static_cast<int64_t>(in.size()) - map_at) / 2;
    if (static_cast<int64_t>(in.size()) > g->inputs.numel())
      return Internal("deepseek_v4: decode inputs of " + std::to_string(in.size()) +
                      " ids for a buffer of " + std::to_string(g->inputs.numel()));
    in.resize(g->inputs.numel(), 0);
    DI_RETURN_IF_ERROR(
        be.upload(Tensor::borrow(in.data(), DType::kI32, {g->inputs.numel()}), g->inputs));
    if (fed) {
      Tensor map = g->inputs.rows(map_at, map_at + 2 * n_pairs).view({n_pairs, 2});
      DI_RETURN_IF_ERROR(be.scatter_ids(*step.fed_ids, map, g->inputs));
      for (int l = 0; l < d.L; ++l)
        if (g->hash_ids[l].defined())
          DI_RETURN_IF_ERROR(hash_ids_on_backend(l, g->tokens, g->hash_ids[l]));
    }
  } else {
    DI_RETURN_IF_ERROR(be.upload(Tensor::borrow(step.tokens.data(), DType::kI32, {S}), g->ids));
    DI_RETURN_IF_ERROR(
        be.upload(Tensor::borrow(step.positions_host.data(), DType::kI32, {S}), g->positions));
    if (fed) {
      std::vector<int32_t> pairs;
      append_fed_pairs(step, 0, 0, pairs);  // g->ids holds the tokens
      DI_ASSIGN_OR_RETURN(Tensor map,
                          to_backend_i32(be, pairs, {static_cast<int64_t>(pairs.size()) / 2, 2}));
      DI_RETURN_IF_ERROR(be.scatter_ids(*step.fed_ids, map, g->ids));
    }
    for (int l = 0; l < d.L; ++l)
      if (g->hash_ids[l].defined()) {
        if (fed) {
          DI_RETURN_IF_ERROR(hash_ids_on_backend(l, g->ids, g->hash_ids[l]));
          continue;
        }
        std::vector<int32_t> h;
        DI_RETURN_IF_ERROR(moe_hash_ids(d, w_->layers[l].moe, step.tokens, h));
        DI_RETURN_IF_ERROR(
            be.upload(Tensor::borrow(h.data(), DType::kI32, {S, d.k}), g->hash_ids[l]));
      }
  }
  step.positions = g->positions;

  // Segment j: replayed when captured; else captured (sharing segment 0's graph memory) and run,
  // or — once a capture failed in this step — run eagerly.
  const bool capture = !g->captured;
  bool capturing_ok = capture;
  if (!capture) ++graph_replays_;
  auto segment = [&](int j, const auto& body) -> Status {
    if (!capture) return be.replay(*g->graphs[j]);
    if (capturing_ok) {
      Status st = be.begin_capture(j == 0 ? nullptr : g->graphs[0].get());
      if (st.ok()) {
        st = body();
        auto graph = be.end_capture();
        if (st.ok() && graph.ok()) {
          g->graphs[j] = *std::move(graph);
          return be.replay(*g->graphs[j]);
        }
        if (st.ok()) st = graph.status();
      }
      capturing_ok = false;
      log_warning("deepseek_v4: decode steps of " + std::to_string(S) +
                  " sequences run without CUDA graphs: " + st.message());
    }
    return body();
  };
  DI_RETURN_IF_ERROR(segment(0, [&]() -> Status {
    DI_RETURN_IF_ERROR(embed_streams(g->ids, g->copies, g->streams));
    return layer_first(0, g->streams, g->positions, nullptr, g->carry[0]);
  }));
  for (int layer = 0; layer < d.L; ++layer) {
    DI_RETURN_IF_ERROR(layer_core(layer, step, g->carry[layer], g->o));
    DI_RETURN_IF_ERROR(segment(layer + 1, [&]() -> Status {
      const Tensor* hash = g->hash_ids[layer].defined() ? &g->hash_ids[layer] : nullptr;
      DI_RETURN_IF_ERROR(layer_last(layer, g->streams, g->positions, step.tokens, hash,
                                    g->carry[layer], g->o));
      return layer + 1 < d.L ? layer_first(layer + 1, g->streams, g->positions, &g->carry[layer],
                                           g->carry[layer + 1])
                             : head_logits(g->streams, g->picked, &g->carry[layer], g->logits);
    }));
  }
  for (const SeqSlice& sq : step.seqs) sq.state->advance(sq.len);
  Tensor logits = g->logits;
  if (capture && capturing_ok) {
    g->captured = true;
  } else if (capture) {  // this size runs eagerly from now on
    graph_failed_.insert(S);
    DI_RETURN_IF_ERROR(be.synchronize());  // the segments it did capture have run
    graph_sets_.erase(std::find_if(graph_sets_.begin(), graph_sets_.end(),
                                   [&](const auto& set) { return set.get() == g; }));
  }
  if (logits_on_device_) return logits;
  return to_host(be, logits);
}

Status DeepseekV4Model::expert_parallel_idle_step() {
  if (ep_layers_.empty())
    return FailedPrecondition("deepseek_v4: expert_parallel_idle_step without an expert-parallel context");
  backend::Backend& be = *be_;
  const Dims& d = dims_;
  DI_ALLOC(x, be, DType::kF32, {0, d.H});
  DI_ALLOC(ids, be, DType::kI32, {0, d.k});
  DI_ALLOC(w, be, DType::kF32, {0, d.k});
  DI_ALLOC(out, be, DType::kF32, {0, d.H});
  for (int layer = 0; layer < d.L; ++layer)
    DI_RETURN_IF_ERROR(ep_layers_[layer].forward(be, w_->layers[layer].moe.experts, x, ids, w,
                                                 d.swiglu_limit, out));
  return OkStatus();
}

Status DeepseekV4Model::apply_expert_placement(const dist::ExpertPlacement& placement,
                                               const std::string& dir,
                                               const io::ModelConfig& model_config) {
  if (ep_layers_.empty())
    return FailedPrecondition("deepseek_v4: apply_expert_placement without an expert-parallel context");
  if (!model_config.is_deepseek_v4() ||
      model_config.deepseek_v4().num_hidden_layers != dims_.L ||
      model_config.deepseek_v4().n_routed_experts != dims_.E)
    return InvalidArgument("deepseek_v4: apply_expert_placement: the config of " + dir +
                           " is not the one this model was loaded with");
  const dist::ExpertParallelContext ctx{ep_layers_[0].comm(), placement, ep_layers_[0].choice()};
  DI_RETURN_IF_ERROR(ctx.validate(static_cast<int>(dims_.L), static_cast<int>(dims_.E)));
  std::unique_ptr<WeightLoader> loader;  // opened when a layer first needs to read experts
  for (int l = 0; l < dims_.L; ++l) {
    DI_ASSIGN_OR_RETURN(dist::ExpertMap map, dist::expert_map_for_layer(placement, l));
    DI_ASSIGN_OR_RETURN(dist::ExpertParallelMoe moe, ep_layers_[l].with_map(std::move(map)));
    const std::vector<int32_t> want = ctx.local_experts(l), have = ep_layers_[l].local_experts();
    if (want != have) {
      if (!loader) {
        DI_ASSIGN_OR_RETURN(loader, WeightLoader::open(dir, model_config, be_));
      }
      backend::ExpertSet& experts = w_->layers[l].moe.experts;
      DI_ASSIGN_OR_RETURN(backend::ExpertSet next,
                          reload_expert_slots(dims_, *loader, *be_, l, want, experts, have));
      experts = std::move(next);  // the old slots' weights are freed here (unless shared)
    }
    ep_layers_[l] = std::move(moe);
  }
  return OkStatus();
}

// A decoder layer in three parts (decode graphs replay the first and last as captured work):
// layer_first: the attention site's collapse and its RMSNorm (hc_map_norm: one backend call) and
// the attention projections; layer_core: the per-sequence attention (state, key lists) into o [S,
// nH, D]; layer_last: the attention output projection, the MoE site (whose collapse applies the
// attention site's expand, hc_expand_pre) and the MoE site's expand into `streams`.
Status DeepseekV4Model::layer_first(int layer, Tensor& streams, const Tensor& positions,
                                    LayerCarry* prev, LayerCarry& c) {
  backend::Backend& be = *be_;
  const Dims& d = dims_;
  const LayerWeights& lw = w_->layers[layer];
  const int64_t S = streams.dim(0);
  DI_ASSIGN_OR_RETURN(c.post, be.empty(DType::kF32, {S, d.hc}));
  DI_ASSIGN_OR_RETURN(c.comb, be.empty(DType::kF32, {S, d.hc, d.hc}));
  DI_EMPTY(x, be, DType::kF32, {S, d.H});
  DI_ASSIGN_OR_RETURN(c.xn, be.empty(DType::kF32, {S, d.H}));
  if (prev != nullptr && prev->moe_expand.streams_a.defined()) {
    // The previous layer's MoE expand inside this site's first kernel (writes the streams).
    LayerCarry::PendingExpand& pe = prev->moe_expand;
    DI_RETURN_IF_ERROR(hc_expand_map_norm(be, d, lw.attn_hc, pe.streams_a, pe.y,
                                          pe.routed.defined() ? &pe.routed : nullptr, pe.post,
                                          pe.comb, streams, c.post, c.comb, x, lw.attn_norm, c.xn));
    pe = LayerCarry::PendingExpand();
  } else {
    DI_RETURN_IF_ERROR(
        hc_map_norm(be, d, lw.attn_hc, streams, c.post, c.comb, x, lw.attn_norm, c.xn));
  }
  return attention_project(be, local_, lw.attn, rope_of(layer), c.xn, positions, c.proj);
}

Status DeepseekV4Model::layer_core(int layer, const StepBatch& step, LayerCarry& c, Tensor& o) {
  return attention_core(*be_, local_, w_->layers[layer].attn, rope_of(layer), c.xn, step, layer,
                        c.proj, o);
}

Status DeepseekV4Model::layer_last(int layer, Tensor& streams, const Tensor& positions,
                                   std::span<const int32_t> tokens, const Tensor* hash_ids,
                                   LayerCarry& c, Tensor& o) {
  backend::Backend& be = *be_;
  const Dims& d = dims_;
  const LayerWeights& lw = w_->layers[layer];
  const int64_t S = streams.dim(0);
  DI_EMPTY(y_attn, be, DType::kF32, {S, d.H});
  DI_RETURN_IF_ERROR(attention_output(be, local_, lw.attn, rope_of(layer), positions, o, y_attn));
  DI_RETURN_IF_ERROR(tensor_parallel_reduce(y_attn));  // tensor parallel: sum heads
  // The MoE site: expanded [S, hc, H] = HC_expand(streams, attention), then HC_map(expanded).
  DI_EMPTY(post, be, DType::kF32, {S, d.hc});
  DI_EMPTY(comb, be, DType::kF32, {S, d.hc, d.hc});
  DI_EMPTY(x, be, DType::kF32, {S, d.H});
  DI_EMPTY(streams_a, be, DType::kF32, {S, d.hc, d.H});  // streams after the attention site
  DI_EMPTY(xn, be, DType::kF32, {S, d.H});
  DI_RETURN_IF_ERROR(hc_expand_map_norm(be, d, lw.ffn_hc, streams, y_attn, nullptr, c.post, c.comb,
                                        streams_a, post, comb, x, lw.ffn_norm, xn));
  DI_EMPTY(y, be, DType::kF32, {S, d.H});
  // Decode fusion: the MoE's routed sum stays apart from the shared expert's y (the expand adds
  // them; not under tensor parallel, which reduces their sum) and the expand is left pending for
  // the next site (LayerCarry::moe_expand).
  const bool fuse = env().decode_fusion;
  Tensor routed;
  DI_RETURN_IF_ERROR(moe_forward(be, local_, config_.scoring_func, lw.moe, xn, tokens, y,
                                 ep_layers_.empty() ? nullptr : &ep_layers_[layer], hash_ids,
                                 fuse && tp_comm_ == nullptr ? &routed : nullptr));
  DI_RETURN_IF_ERROR(tensor_parallel_reduce(y));  // tensor parallel: sum the MLP shards
  c.moe_expand = LayerCarry::PendingExpand{streams_a, y, routed, post, comb};
  if (fuse) return OkStatus();
  return apply_moe_expand(c, streams);
}

Status DeepseekV4Model::apply_moe_expand(LayerCarry& prev, Tensor& streams) {
  LayerCarry::PendingExpand pe = std::move(prev.moe_expand);
  prev.moe_expand = LayerCarry::PendingExpand();
  if (pe.routed.defined())
    return be_->hc_expand_sum(pe.streams_a, pe.y, pe.routed, pe.post, pe.comb, streams);
  return hc_expand(*be_, pe.streams_a, pe.y, pe.post, pe.comb, streams);
}

Status DeepseekV4Model::decoder_layer(int layer, Tensor& streams, const StepBatch& step,
                                      LayerCarry* prev, LayerCarry& c, const Tensor* hash_ids) {
  DI_RETURN_IF_ERROR(layer_first(layer, streams, step.positions, prev, c));
  DI_EMPTY(o, *be_, DType::kF32, {streams.dim(0), local_.nH, local_.D});
  DI_RETURN_IF_ERROR(layer_core(layer, step, c, o));
  return layer_last(layer, streams, step.positions, step.tokens, hash_ids, c, o);
}

Status DeepseekV4Model::hash_ids_on_backend(int layer, const Tensor& tokens, Tensor& hash_ids) {
  if (tid2eid_on_backend_.empty()) tid2eid_on_backend_.resize(dims_.L);
  Tensor& table = tid2eid_on_backend_[layer];
  if (!table.defined()) {
    const Tensor& host = w_->layers[layer].moe.tid2eid;
    if (be_->host_memory()) {
      table = host;
    } else {
      DI_ASSIGN_OR_RETURN(table, to_backend(*be_, host));
    }
  }
  return be_->gather_ids(table, tokens, hash_ids);
}

const RopeTable& DeepseekV4Model::rope_of(int layer) const {
  return w_->layers[layer].attn.type == io::AttentionType::kSliding ? w_->rope_main
                                                                     : w_->rope_compress;
}

}  // namespace deepinfer::model::v4
