// ModelRunner: turns a SchedulerOutput into a model forward and returns one logits row per chunk,
// or, when the engine asks for it (docs/engine.md "Sampling on the device"), one sampled token
// per chunk drawn by the backend where the logits are (only the ids leave a GPU).
// It owns the per-sequence model state of every running request: created on a request's first
// chunk (new or resumed after preemption), advanced by each chunk, dropped when the request is
// preempted or finishes.
//
// Today the state lives in the model's own contiguous per-sequence buffers; the KV coordinator's
// block tables account for the same memory (admission, preemption) but are not yet the storage
// the model reads. See docs/engine.md.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "engine/scheduler_output.h"
#include "model/model.h"

namespace deepinfer::engine {

struct RunnerOutput {
  backend::Tensor logits;                    // [chunks, V] host memory; undefined when `ids` is set
  std::optional<std::vector<int32_t>> ids;   // [chunks] sampled on the backend
};

class ModelRunner {
 public:
  explicit ModelRunner(model::Model* model) : model_(model) {}

  // The backend the model runs on (not owned). With one, the model leaves its logits in backend
  // memory and the runner samples there or downloads them itself; without, logits come from the
  // model in host memory and execute() never samples.
  void set_backend(backend::Backend* backend);

  // Row i belongs to chunk i. `sample_rows` empty: logits [out.chunks.size(), V] (host). Else
  // [out.chunks.size()] parameters: every row is sampled by Backend::sample and only the ids are
  // returned — unless the backend has no sample op (Unimplemented), then the logits as without.
  StatusOr<RunnerOutput> execute(const SchedulerOutput& out,
                                 std::span<const backend::SampleRowParams> sample_rows = {});
  // Drops the state of these requests (preempted or finished).
  void release(const std::vector<std::string>& request_ids);
  size_t num_states() const { return states_.size(); }

 private:
  model::Model* model_;
  backend::Backend* backend_ = nullptr;
  bool backend_samples_ = true;  // false once the backend answered Unimplemented
  std::unordered_map<std::string, std::unique_ptr<model::SequenceState>> states_;
};

}  // namespace deepinfer::engine
