#include "engine/model_runner.h"

#include <algorithm>

namespace deepinfer::engine {

void ModelRunner::set_backend(backend::Backend* backend) {
  backend_ = backend;
  model_->set_logits_on_device(backend != nullptr);
}

StatusOr<RunnerOutput> ModelRunner::execute(const SchedulerOutput& out,
                                            std::span<const backend::SampleRowParams> sample_rows) {
  if (!sample_rows.empty() && sample_rows.size() != out.chunks.size())
    return Internal("model runner: " + std::to_string(sample_rows.size()) + " sampling rows for " +
                    std::to_string(out.chunks.size()) + " chunks");
  std::vector<model::SequenceInput> batch;
  batch.reserve(out.chunks.size());
  for (const ScheduledChunk& chunk : out.chunks) {
    auto& state = states_[chunk.request_id];
    if (chunk.is_first_chunk || !state) state = model_->new_sequence_state();
    if (state->num_tokens() != chunk.start_position) {
      return Internal("model runner: request '" + chunk.request_id + "' is at position " +
                      std::to_string(state->num_tokens()) + " but the chunk starts at " +
                      std::to_string(chunk.start_position));
    }
    batch.push_back({chunk.token_ids, state.get(), /*all_logits=*/false});
  }
  DI_ASSIGN_OR_RETURN(backend::Tensor logits, model_->forward(batch));
  RunnerOutput result;
  if (backend_ != nullptr && backend_samples_ && !sample_rows.empty()) {
    DI_ASSIGN_OR_RETURN(backend::Tensor ids, backend_->empty(DType::kI32, {logits.dim(0)}));
    const Status st = backend_->sample(logits, sample_rows, ids);
    if (st.ok()) {
      std::vector<int32_t> host(static_cast<size_t>(ids.numel()));
      if (ids.on_device()) {
        backend::Tensor view = backend::Tensor::borrow(host.data(), DType::kI32, {ids.numel()});
        DI_RETURN_IF_ERROR(backend_->download(ids, view));
      } else {
        std::copy(ids.data<int32_t>(), ids.data<int32_t>() + ids.numel(), host.begin());
      }
      result.ids = std::move(host);
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
  result.logits = std::move(logits);
  return result;
}

void ModelRunner::release(const std::vector<std::string>& request_ids) {
  for (const auto& id : request_ids) states_.erase(id);
}

}  // namespace deepinfer::engine
