#include "engine/model_runner.h"

#include <algorithm>

namespace deepinfer::engine {

void ModelRunner::set_backend(backend::Backend* backend) {
  backend_ = backend;
  model_->set_logits_on_device(backend != nullptr);
}

StatusOr<RunnerOutput> ModelRunner::execute(const SchedulerOutput& out,
                                            std::span<const backend::SampleRowParams> sample_rows) {
  DI_ASSIGN_OR_RETURN(RunnerPending pending, enqueue(out, sample_rows));
  return finish(std::move(pending));
}

bool ModelRunner::can_feed() const {
  return backend_ != nullptr && backend_samples_ && model_->accepts_fed_tokens();
}

StatusOr<RunnerPending> ModelRunner::enqueue(const SchedulerOutput& out,
                                             std::span<const backend::SampleRowParams> sample_rows,
                                             const backend::Tensor* fed_ids,
                                             std::span<const int32_t> fed_rows) {
  if (!sample_rows.empty() && sample_rows.size() != out.chunks.size())
    return Internal("model runner: " + std::to_string(sample_rows.size()) + " sampling rows for " +
                    std::to_string(out.chunks.size()) + " chunks");
  if (fed_ids != nullptr && fed_rows.size() != out.chunks.size())
    return Internal("model runner: " + std::to_string(fed_rows.size()) + " fed rows for " +
                    std::to_string(out.chunks.size()) + " chunks");
  std::vector<model::SequenceInput> batch;
  batch.reserve(out.chunks.size());
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    const ScheduledChunk& chunk = out.chunks[i];
    auto& state = states_[chunk.request_id];
    if (chunk.is_first_chunk || !state) state = model_->new_sequence_state();
    if (state->num_tokens() != chunk.start_position) {
      return Internal("model runner: request '" + chunk.request_id + "' is at position " +
                      std::to_string(state->num_tokens()) + " but the chunk starts at " +
                      std::to_string(chunk.start_position));
    }
    model::SequenceInput in{chunk.token_ids, state.get(), /*all_logits=*/false};
    if (fed_ids != nullptr && fed_rows[i] >= 0) {
      in.fed_ids = fed_ids;
      in.fed_row = fed_rows[i];
    }
    batch.push_back(in);
  }
  DI_ASSIGN_OR_RETURN(backend::Tensor logits, model_->forward(batch));
  RunnerPending result;
  if (backend_ != nullptr && backend_samples_ && !sample_rows.empty()) {
    DI_ASSIGN_OR_RETURN(backend::Tensor ids, backend_->empty(DType::kI32, {logits.dim(0)}));
    const Status st = backend_->sample(logits, sample_rows, ids);
    if (st.ok()) {
      result.host_ids = std::make_unique<std::vector<int32_t>>(static_cast<size_t>(ids.numel()));
      backend::Tensor view =
          backend::Tensor::borrow(result.host_ids->data(), DType::kI32, {ids.numel()});
      DI_ASSIGN_OR_RETURN(result.download, backend_->download_async(ids, view));
      result.device_ids = std::move(ids);
      return result;
    }
    if (st.code() != StatusCode::kUnimplemented) return st;
    backend_samples_ = false;  // this backend has no sample op: the host sampler from now on
  }
  if (logits.on_device()) {
    backend::Tensor host = backend::Tensor::empty(logits.dtype(), logits.shape());
    DI_RETURN_IF_ERROR(backend_->download(logits, host));
    logits = std::move(host);
  }
  result.out.logits = std::move(logits);
  return result;
}

StatusOr<RunnerOutput> ModelRunner::finish(RunnerPending pending) {
  if (pending.download) {
    DI_RETURN_IF_ERROR(pending.download->wait());
    pending.out.ids = std::move(*pending.host_ids);
  }
  return std::move(pending.out);
}

void ModelRunner::release(const std::vector<std::string>& request_ids) {
  for (const auto& id : request_ids) states_.erase(id);
}

}  // namespace deepinfer::engine
