// ModelRunner: turns a SchedulerOutput into a model forward and returns one logits row per chunk.
// It owns the per-sequence model state of every running request: created on a request's first
// chunk (new or resumed after preemption), advanced by each chunk, dropped when the request is
// preempted or finishes.
//
// Today the state lives in the model's own contiguous per-sequence buffers; the KV coordinator's
// block tables account for the same memory (admission, preemption) but are not yet the storage
// the model reads. See docs/engine.md.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/scheduler_output.h"
#include "model/model.h"

namespace deepinfer::engine {

class ModelRunner {
 public:
  explicit ModelRunner(model::Model* model) : model_(model) {}

  // logits [out.chunks.size(), V]: row i is the logits after the last token of chunk i.
  StatusOr<backend::Tensor> execute(const SchedulerOutput& out);
  // Drops the state of these requests (preempted or finished).
  void release(const std::vector<std::string>& request_ids);
  size_t num_states() const { return states_.size(); }

 private:
  model::Model* model_;
  std::unordered_map<std::string, std::unique_ptr<model::SequenceState>> states_;
};

}  // namespace deepinfer::engine
