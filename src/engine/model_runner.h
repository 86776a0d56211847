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

#include <atomic>
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

// A step queued on the backend (ModelRunner::enqueue) whose result is still on its way: the host
// logits (host sampler path, already final), or the ids sampled on the backend — in backend
// memory (`device_ids`, what the next step may be fed from) and being downloaded.
struct RunnerPending {
  RunnerOutput out;
  backend::Tensor device_ids;                      // [chunks] I32 when sampled on the backend
  std::unique_ptr<std::vector<int32_t>> host_ids;  // the download's destination
  std::unique_ptr<backend::Backend::PendingDownload> download;
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
  // execute() in two halves. enqueue queues the forward (and the sampling) and starts the ids'
  // download; finish waits for it. Fed tokens (docs/engine.md "Token ids on the device"):
  // fed_rows[i] >= 0 says chunk i's last token is a placeholder whose id is row fed_rows[i] of
  // `fed_ids` (the previous step's RunnerPending::device_ids). finish touches only `pending`
  // (it may run on another thread while the next enqueue runs).
  StatusOr<RunnerPending> enqueue(const SchedulerOutput& out,
                                  std::span<const backend::SampleRowParams> sample_rows = {},
                                  const backend::Tensor* fed_ids = nullptr,
                                  std::span<const int32_t> fed_rows = {});
  static StatusOr<RunnerOutput> finish(RunnerPending pending);
  // Whether enqueue can feed tokens: the model accepts them and the backend samples.
  bool can_feed() const;
  // Drops the state of these requests (preempted or finished).
  void release(const std::vector<std::string>& request_ids);
  size_t num_states() const { return states_.size(); }

 private:
  model::Model* model_;
  backend::Backend* backend_ = nullptr;
  // false once the backend answered Unimplemented (written by the worker, read by can_feed)
  std::atomic<bool> backend_samples_{true};
  std::unordered_map<std::string, std::unique_ptr<model::SequenceState>> states_;
};

}  // namespace deepinfer::engine
