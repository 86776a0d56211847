// DeepseekV4Model::prefill_context_parallel (declared in model.h, documented in
// context_parallel.h): the decoder-layer loop of DeepseekV4Model::forward for one sequence, on
// this rank's rows only, with the attention of context_parallel_attention.h.
#include "model/deepseek_v4/context_parallel.h"

#include <string>
#include <vector>

#include "model/deepseek_v4/context_parallel_attention.h"
#include "model/deepseek_v4/context_parallel_split.h"
#include "model/deepseek_v4/hyper_connection.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/moe.h"
#include "model/placement.h"

namespace deepinfer::model::v4 {

namespace {

// FNV-1a over the token ids: ranks compare prompts without sending them.
int64_t fingerprint(std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) {
    h ^= static_cast<uint32_t>(t);
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 1);
}

// The local checks of forward() for one sequence (no collective: the caller exchanges the result
// so that every rank fails together instead of leaving its peers waiting in a collective).
Status check_local(const ContextParallelInput& in, const Dims& d, dist::Communicator& comm) {
  if (in.tokens.empty()) return InvalidArgument("context parallel: the prompt has no tokens");
  if (dynamic_cast<DeepseekV4State*>(in.state) == nullptr)
    return InvalidArgument("context parallel: the state is not a DeepSeek-V4 state (use new_sequence_state())");
  if (in.block < 1)
    return InvalidArgument("context parallel: block must be >= 1 row, got " + std::to_string(in.block));
  for (size_t i = 0; i < in.tokens.size(); ++i)
    if (in.tokens[i] < 0 || in.tokens[i] >= d.V)
      return OutOfRange("context parallel: token id " + std::to_string(in.tokens[i]) + " at row " +
                        std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(d.V) + ")");
  if (comm.rank() < 0 || comm.rank() >= comm.world_size())
    return InvalidArgument("context parallel: communicator rank " + std::to_string(comm.rank()) +
                           " outside its world of " + std::to_string(comm.world_size()));
  return OkStatus();
}

// Every rank's view of the call agrees (same prompt, past, block, logits request), and no rank
// failed its local checks. Collective.
Status check_group(const ContextParallelInput& in, const Status& local, dist::Communicator& comm) {
  constexpr int64_t kFields = 6;
  const char* names[kFields] = {"local checks", "prompt length", "tokens already in the state",
                                "prompt tokens", "block", "all_logits"};
  const int64_t past = local.ok() ? in.state->num_tokens() : -1;
  const std::vector<int64_t> mine = {local.ok() ? 1 : 0, static_cast<int64_t>(in.tokens.size()), past,
                                     fingerprint(in.tokens), in.block, in.all_logits ? 1 : 0};
  const int W = comm.world_size();
  std::vector<int64_t> send;
  for (int r = 0; r < W; ++r) send.insert(send.end(), mine.begin(), mine.end());
  DI_ASSIGN_OR_RETURN(std::vector<int64_t> all, comm.exchange_counts(send, kFields));
  DI_RETURN_IF_ERROR(local);
  for (int r = 0; r < W; ++r) {
    if (all[r * kFields] == 0)
      return InvalidArgument("context parallel: rank " + std::to_string(r) + " rejected its input");
    for (int64_t f = 1; f < kFields; ++f)
      if (all[r * kFields + f] != mine[f])
        return InvalidArgument(std::string("context parallel: rank ") + std::to_string(r) +
                               " differs from rank " + std::to_string(comm.rank()) + " in " + names[f] +
                               " (" + std::to_string(all[r * kFields + f]) + " vs " +
                               std::to_string(mine[f]) + ")");
  }
  return OkStatus();
}

}  // namespace

StatusOr<ContextParallelResult> DeepseekV4Model::prefill_context_parallel(
    dist::Communicator& comm, const ContextParallelInput& in) {
  backend::Backend& be = *be_;
  const Dims& d = dims_;
  DI_RETURN_IF_ERROR(check_group(in, check_local(in, d, comm), comm));
  const int64_t S = static_cast<int64_t>(in.tokens.size());
  DI_ASSIGN_OR_RETURN(ContextParallelSplit split,
                      plan_context_parallel_split(S, comm.world_size(), in.block));
  const int rank = comm.rank();
  const std::vector<int32_t>& mine = split.rows[rank];
  const int64_t n = static_cast<int64_t>(mine.size());

  auto* state = static_cast<DeepseekV4State*>(in.state);
  ContextParallelStep step;
  step.comm = &comm;
  step.split = &split;
  DI_ASSIGN_OR_RETURN(const RowGatherIndex gather_index, make_row_gather_index(be, split, rank));
  step.gather_index = &gather_index;
  step.state = state;
  step.past = state->num_tokens();
  std::vector<int32_t> tokens(n), pos_host(n), copy_of(n * d.hc);
  for (int64_t i = 0; i < n; ++i) {
    tokens[i] = in.tokens[mine[i]];
    pos_host[i] = static_cast<int32_t>(step.past + mine[i]);
    for (int64_t j = 0; j < d.hc; ++j) copy_of[i * d.hc + j] = static_cast<int32_t>(i);
  }
  DI_ASSIGN_OR_RETURN(Tensor ids, to_backend_i32(be, tokens, {n}));
  DI_ASSIGN_OR_RETURN(step.positions, to_backend_i32(be, pos_host, {n}));
  DI_ASSIGN_OR_RETURN(Tensor copies, to_backend_i32(be, copy_of, {n * d.hc}));
  step.positions_host = pos_host;

  DI_EMPTY(e, be, DType::kF32, {n, d.H});
  DI_RETURN_IF_ERROR(be.embedding(w_->embed, ids, e));
  DI_EMPTY(streams, be, DType::kF32, {n, d.hc, d.H});  // this rank's rows only
  Tensor stream_rows = streams.view({n * d.hc, d.H});
  DI_RETURN_IF_ERROR(be.gather_rows(e, copies, stream_rows));

  // The decoder layers of decoder_layer() (model.cpp), on this rank's rows.
  auto site = [&](const HcSiteWeights& hc, const Tensor& norm, const Tensor& x_in, Tensor& out,
                  const auto& block) -> Status {
    DI_EMPTY(post, be, DType::kF32, {n, d.hc});
    DI_EMPTY(comb, be, DType::kF32, {n, d.hc, d.hc});
    DI_EMPTY(x, be, DType::kF32, {n, d.H});
    DI_RETURN_IF_ERROR(hc_map(be, d, hc, x_in, post, comb, x));
    DI_EMPTY(xn, be, DType::kF32, {n, d.H});
    DI_RETURN_IF_ERROR(be.rms_norm(x, &norm, d.eps, xn));
    DI_EMPTY(y, be, DType::kF32, {n, d.H});
    DI_RETURN_IF_ERROR(block(xn, y));
    return hc_expand(be, x_in, y, post, comb, out);
  };
  DI_EMPTY(streams_a, be, DType::kF32, {n, d.hc, d.H});
  for (int layer = 0; layer < d.L; ++layer) {
    const LayerWeights& lw = w_->layers[layer];
    const RopeTable& rope =
        lw.attn.type == io::AttentionType::kSliding ? w_->rope_main : w_->rope_compress;
    DI_RETURN_IF_ERROR(site(lw.attn_hc, lw.attn_norm, streams, streams_a,
                            [&](const Tensor& x, Tensor& y) {
                              return attention_forward_context_parallel(be, d, lw.attn, rope, x,
                                                                        step, layer, y);
                            }));
    DI_RETURN_IF_ERROR(site(lw.ffn_hc, lw.ffn_norm, streams_a, streams,
                            [&](const Tensor& x, Tensor& y) {
                              return moe_forward(be, d, config_.scoring_func, lw.moe, x, tokens, y,
                                                 ep_layers_.empty() ? nullptr : &ep_layers_[layer]);
                            }));
  }
  state->advance(S);

  // Logits of this rank's rows that need them, then all-gathered in prompt order.
  ContextParallelSplit out_split;  // the logit rows: all of them, or the last one on its owner
  std::vector<int32_t> picked;     // this rank's rows (indices into `mine`) that need logits
  if (in.all_logits) {
    out_split = split;
    for (int64_t i = 0; i < n; ++i) picked.push_back(static_cast<int32_t>(i));
  } else {
    out_split.world_size = comm.world_size();
    out_split.num_tokens = 1;
    out_split.block = 1;
    out_split.rows.resize(comm.world_size());
    out_split.rank_offset.assign(comm.world_size() + 1, 0);
    for (int r = 0; r < comm.world_size(); ++r) {
      const bool owner = !split.rows[r].empty() && split.rows[r].back() == S - 1;
      if (owner) out_split.rows[r] = {0};
      out_split.rank_offset[r + 1] = out_split.rank_offset[r] + (owner ? 1 : 0);
    }
    out_split.gather_order = {0};
    if (!mine.empty() && mine.back() == S - 1) picked.push_back(static_cast<int32_t>(n - 1));
  }
  const int64_t rows = static_cast<int64_t>(picked.size());
  DI_EMPTY(logits_mine, be, DType::kF32, {rows, d.V});
  if (rows > 0) {
    DI_ASSIGN_OR_RETURN(Tensor picked_t, to_backend_i32(be, picked, {rows}));
    DI_EMPTY(tail, be, DType::kF32, {rows, d.hc, d.H});
    Tensor tail_rows = tail.view({rows, d.hc * d.H});
    DI_RETURN_IF_ERROR(be.gather_rows(streams.view({n, d.hc * d.H}), picked_t, tail_rows));
    DI_EMPTY(h, be, DType::kF32, {rows, d.H});
    DI_RETURN_IF_ERROR(hyper_head(be, d, w_->hc_head, tail, h));
    DI_EMPTY(hn, be, DType::kF32, {rows, d.H});
    DI_RETURN_IF_ERROR(be.rms_norm(h, &w_->norm, d.eps, hn));
    DI_RETURN_IF_ERROR(be.linear(hn, w_->head, logits_mine));
  }
  DI_EMPTY(logits, be, DType::kF32, {out_split.num_tokens, d.V});
  DI_RETURN_IF_ERROR(all_gather_rows(comm, be, out_split, logits_mine, logits));
  ContextParallelResult result;
  DI_ASSIGN_OR_RETURN(result.logits, to_host(be, logits));
  result.own_tokens = n;
  result.attention_pairs = step.attention_pairs;
  result.indexer_pairs = step.indexer_pairs;
  return result;
}

}  // namespace deepinfer::model::v4
