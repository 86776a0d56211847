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
//
// Handoffs (session 13): with a device backend (not host memory) and DEEPINFER_SPIN_WAIT=1 (the
// default), or any backend with =2, the engine thread waiting for a forward and the worker waiting
// for the next launch first poll an atomic for up to kSpinMicros before sleeping on the condition
// variable: the futex wake-ups of the two threads (several to tens of µs each) sat between every
// two decode steps, with the device idle. On the CPU backend (=1) the threads sleep at once (the
// cores run the forward).
#pragma once

#include <atomic>
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
  // Polls `flag` for up to kSpinMicros when spin_ (else returns at once); true once it is set.
  bool spin_for(const std::atomic<bool>& flag) const;
  static constexpr int kSpinMicros = 5000;
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
  bool spin_ = false;                 // poll before sleeping (device backends)
  std::atomic<bool> job_flag_{false};   // mirrors has_job_ || stop_ (set under mu_)
  std::atomic<bool> done_flag_{false};  // mirrors done_ (set under mu_)
  SchedulerOutput job_;
  std::vector<backend::SampleRowParams> job_sample_rows_;
  std::optional<StatusOr<RunnerOutput>> result_;
  std::thread worker_;
};

}  // namespace deepinfer::engine
