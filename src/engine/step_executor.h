// StepExecutor: runs the model forward of one step, on a dedicated worker thread (async
// scheduling) or inline (synchronous scheduling), so the engine thread can schedule step N+1 and
// build its inputs while step N's forward runs.
//
//   executor.launch(std::move(step_n));            // returns at once (worker thread)
//   SchedulerOutput next = scheduler.schedule();   // overlaps with the forward
//   StepResult done = executor.wait();             // step_n and its logits
//
// At most one forward is in flight, so a sequence's model state is never advanced by two forwards
// at once, and forwards run in launch order. The runner's per-sequence states belong to the
// worker while a forward runs: release() while busy is deferred until the forward is done (and
// always happens before the next launch).
#pragma once

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "engine/model_runner.h"
#include "engine/scheduler_output.h"

namespace deepinfer::engine {

struct StepResult {
  SchedulerOutput step;
  // [step.chunks.size(), V] host memory — or, when the step was sampled on the backend (launch
  // with sample rows), an undefined tensor and `sampled_ids` set. An error fails the step.
  StatusOr<backend::Tensor> logits;
  std::optional<std::vector<int32_t>> sampled_ids;  // [step.chunks.size()]
};

class StepExecutor {
 public:
  // `runner` must outlive the executor. `use_worker_thread` false: launch() runs the forward inline.
  // `backend` (optional, must outlive the executor) is bound to the worker thread before its
  // first forward (a CUDA backend selects its device there), and handed to the runner
  // (ModelRunner::set_backend: logits stay in backend memory; sampling there on request).
  StepExecutor(ModelRunner* runner, bool use_worker_thread, backend::Backend* backend = nullptr);
  ~StepExecutor();  // waits for a forward in flight, then stops the worker
  StepExecutor(const StepExecutor&) = delete;
  StepExecutor& operator=(const StepExecutor&) = delete;

  // Requires !in_flight(). `sample_rows` ([step.chunks.size()] or empty): sample every row on
  // the backend right after the forward (ModelRunner::execute), on the same thread.
  void launch(SchedulerOutput step, std::vector<backend::SampleRowParams> sample_rows = {});
  bool in_flight() const { return in_flight_; }
  StepResult wait();                  // requires in_flight()
  // Drops the model state of these requests: now when idle, else once the forward is done.
  void release(const std::vector<std::string>& request_ids);

 private:
  void worker_loop();
  void run_job();  // job_ -> result_

  ModelRunner* runner_;
  backend::Backend* backend_ = nullptr;
  bool in_flight_ = false;            // engine-thread view: launched and not yet waited for
  std::vector<std::string> deferred_releases_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool has_job_ = false;              // guarded by mu_
  bool done_ = false;                 // guarded by mu_
  bool stop_ = false;                 // guarded by mu_
  SchedulerOutput job_;
  std::vector<backend::SampleRowParams> job_sample_rows_;
  std::optional<StatusOr<RunnerOutput>> result_;
  std::thread worker_;
};

}  // namespace deepinfer::engine
