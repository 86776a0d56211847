// StepExecutor: runs the model forward of one step, on a dedicated worker thread (async
// scheduling) or inline (synchronous scheduling), so the engine thread can schedule step N+1 and
// build its inputs while step N's forward runs.
//
//   executor.launch(std::move(step_n));            // returns at once (worker thread)
//   SchedulerOutput next = scheduler.schedule();   // overlaps with the forward
//   StepResult done = executor.wait();             // step_n and its logits
//
// The worker queues a step's forward (and sampling) on the backend; wait() then waits for its
// result on the engine thread. Steps are queued in launch order, one at a time, so a sequence's
// model state is advanced by one forward at a time, in order. With token ids on the device
// (session 14, launch_fed) a second step is queued behind the first before the first's ids reach
// the host: the device runs the two back to back. The runner's per-sequence states belong to the
// worker while it queues: release() while steps are in flight is deferred and applied by the
// worker before it queues the next step (or at once when nothing is in flight).
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
#include <deque>
#include <memory>
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
  ~StepExecutor();  // waits for the steps in flight, then stops the worker
  StepExecutor(const StepExecutor&) = delete;
  StepExecutor& operator=(const StepExecutor&) = delete;

  // Requires !in_flight(). `sample_rows` ([step.chunks.size()] or empty): sample every row on
  // the backend right after the forward (ModelRunner::enqueue), on the same thread.
  void launch(SchedulerOutput step, std::vector<backend::SampleRowParams> sample_rows = {});
  // Token ids on the device (docs/engine.md): queues `step` behind the one step in flight (N)
  // before N's ids reach the host — chunk i's placeholder token is row fed_rows[i] (>= 0) of the
  // ids N sampled on the backend. Requires can_feed(). Waits until N is queued on the backend;
  // returns false (and launches nothing) when N's ids are not on the backend after all (its
  // forward failed, or the backend fell back to host sampling): launch after wait() instead.
  // `step` is moved from only when it was launched.
  bool launch_fed(SchedulerOutput& step, std::vector<backend::SampleRowParams> sample_rows,
                  std::vector<int32_t> fed_rows);
  // The newest step in flight (requires in_flight()); the worker may be reading it too.
  const SchedulerOutput& newest_step() const { return queue_.back()->step; }
  // One step in flight, launched with sample rows, on the worker thread, with a runner that
  // feeds (ModelRunner::can_feed).
  bool can_feed() const;
  bool in_flight() const { return !queue_.empty(); }
  int num_in_flight() const { return static_cast<int>(queue_.size()); }
  StepResult wait();  // the oldest step in flight; requires in_flight()
  // Drops the model state of these requests: now when idle, else before the next step is queued
  // on the backend (never under a step that is being queued).
  void release(const std::vector<std::string>& request_ids);

 private:
  // A launched step: the worker queues it (runner enqueue) and leaves `pending`; wait() finishes
  // it (the download of its ids) on the engine thread.
  struct Job {
    uint64_t seq = 0;
    SchedulerOutput step;
    std::vector<backend::SampleRowParams> sample_rows;
    backend::Tensor fed_ids;  // defined: fed from these (the previous step's ids)
    std::vector<int32_t> fed_rows;
    std::vector<std::string> releases;  // applied by the worker before queueing the step
    std::optional<StatusOr<RunnerPending>> pending;  // set by the worker
  };
  void submit(std::unique_ptr<Job> job);
  void worker_loop();
  void run_job(Job& job);
  void wait_queued(const Job& job);  // until the worker has queued `job` on the backend
  // Polls `flag` for up to kSpinMicros when spin_ (else returns at once); true once it holds.
  template <typename Pred>
  bool spin_for(Pred pred) const;
  static constexpr int kSpinMicros = 5000;

  ModelRunner* runner_;
  backend::Backend* backend_ = nullptr;
  bool threaded_ = false;
  std::deque<std::unique_ptr<Job>> queue_;  // engine thread: launched, not yet waited for
  uint64_t next_seq_ = 1;
  std::vector<std::string> deferred_releases_;

  std::mutex mu_;
  std::condition_variable cv_;
  Job* todo_ = nullptr;               // guarded by mu_: handed to the worker
  bool stop_ = false;                 // guarded by mu_
  bool spin_ = false;                 // poll before sleeping (device backends)
  std::atomic<bool> job_flag_{false};    // mirrors todo_ != nullptr || stop_ (set under mu_)
  std::atomic<uint64_t> queued_seq_{0};  // the last job the worker has queued (set under mu_)
  std::thread worker_;
};

}  // namespace deepinfer::engine
