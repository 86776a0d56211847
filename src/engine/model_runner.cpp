#include "engine/model_runner.h"

namespace deepinfer::engine {

StatusOr<backend::Tensor> ModelRunner::execute(const SchedulerOutput& out) {
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
  return model_->forward(batch);
}

void ModelRunner::release(const std::vector<std::string>& request_ids) {
  for (const auto& id : request_ids) states_.erase(id);
}

}  // namespace deepinfer::engine
