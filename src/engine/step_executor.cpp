#include "engine/step_executor.h"

#include <chrono>
#include <exception>

#include "common/check.h"
#include "common/env.h"

namespace deepinfer::engine {

StepExecutor::StepExecutor(ModelRunner* runner, bool use_worker_thread, backend::Backend* backend)
    : runner_(runner), backend_(backend), threaded_(use_worker_thread) {
  DI_CHECK(runner != nullptr) << "StepExecutor needs a model runner";
  runner_->set_backend(backend);
  spin_ = use_worker_thread &&
          (env().spin_wait == 2 ||
           (env().spin_wait == 1 && backend != nullptr && !backend->host_memory()));
  if (use_worker_thread) worker_ = std::thread([this] { worker_loop(); });
}

StepExecutor::~StepExecutor() {
  while (in_flight()) (void)wait();
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      job_flag_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
    worker_.join();
  }
}

void StepExecutor::run_job(Job& job) {
  if (!job.releases.empty()) runner_->release(job.releases);
  // Exceptions never cross the engine loop: anything thrown becomes this step's error.
  try {
    job.pending.emplace(runner_->enqueue(
        job.step, job.sample_rows, job.fed_ids.defined() ? &job.fed_ids : nullptr, job.fed_rows));
  } catch (const std::exception& e) {
    job.pending.emplace(Internal(std::string("model forward threw: ") + e.what()));
  } catch (...) {
    job.pending.emplace(Internal("model forward threw an unknown exception"));
  }
}

template <typename Pred>
bool StepExecutor::spin_for(Pred pred) const {
  if (!spin_) return pred();
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int i = 0;; ++i) {
    if (pred()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return false;
  }
}

void StepExecutor::worker_loop() {
  // A failure here shows up as the failure of the first forward (the op reports it).
  if (backend_ != nullptr) (void)backend_->bind_thread();
  for (;;) {
    spin_for([this] { return job_flag_.load(std::memory_order_acquire); });  // then sleep
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return stop_ || todo_ != nullptr; });
    if (todo_ != nullptr) {
      Job* job = todo_;
      todo_ = nullptr;
      job_flag_.store(stop_, std::memory_order_relaxed);
      lock.unlock();
      run_job(*job);
      lock.lock();
      queued_seq_.store(job->seq, std::memory_order_release);
      lock.unlock();
      cv_.notify_all();
      continue;
    }
    if (stop_) return;
  }
}

void StepExecutor::submit(std::unique_ptr<Job> job) {
  job->seq = next_seq_++;
  job->releases = std::move(deferred_releases_);
  deferred_releases_.clear();
  Job* raw = job.get();
  queue_.push_back(std::move(job));
  if (!threaded_) {
    run_job(*raw);
    queued_seq_.store(raw->seq, std::memory_order_release);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    DI_CHECK(todo_ == nullptr) << "step " << raw->step.step << " submitted while another waits";
    todo_ = raw;
    job_flag_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void StepExecutor::wait_queued(const Job& job) {
  const auto queued = [&] { return queued_seq_.load(std::memory_order_acquire) >= job.seq; };
  if (spin_for(queued)) return;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, queued);
}

void StepExecutor::launch(SchedulerOutput step, std::vector<backend::SampleRowParams> sample_rows) {
  DI_CHECK(!in_flight()) << "launch() while step " << queue_.front()->step.step << " is in flight";
  auto job = std::make_unique<Job>();
  job->step = std::move(step);
  job->sample_rows = std::move(sample_rows);
  submit(std::move(job));
}

bool StepExecutor::can_feed() const {
  return threaded_ && queue_.size() == 1 && !queue_.front()->sample_rows.empty() &&
         runner_->can_feed();
}

bool StepExecutor::launch_fed(SchedulerOutput& step,
                              std::vector<backend::SampleRowParams> sample_rows,
                              std::vector<int32_t> fed_rows) {
  DI_CHECK(can_feed()) << "launch_fed() without a step to feed from";
  DI_CHECK(fed_rows.size() == step.chunks.size())
      << fed_rows.size() << " fed rows for " << step.chunks.size() << " chunks";
  const Job& prev = *queue_.back();
  wait_queued(prev);
  if (!prev.pending->ok() || !(*prev.pending)->device_ids.defined()) return false;
  auto job = std::make_unique<Job>();
  job->step = std::move(step);
  job->sample_rows = std::move(sample_rows);
  job->fed_ids = (*prev.pending)->device_ids;  // shares the storage: alive while the job is
  job->fed_rows = std::move(fed_rows);
  submit(std::move(job));
  return true;
}

StepResult StepExecutor::wait() {
  DI_CHECK(in_flight()) << "wait() with no step in flight";
  Job& job = *queue_.front();
  wait_queued(job);
  StepResult out{std::move(job.step), Internal("no result"), std::nullopt};
  StatusOr<RunnerOutput> r = Internal("no result");
  if (job.pending->ok()) {
    try {
      r = ModelRunner::finish(std::move(**job.pending));
    } catch (const std::exception& e) {
      r = Internal(std::string("model step result threw: ") + e.what());
    }
  } else {
    r = job.pending->status();
  }
  if (r.ok()) {
    out.logits = std::move(r->logits);
    out.sampled_ids = std::move(r->ids);
  } else {
    out.logits = r.status();
  }
  queue_.pop_front();
  if (queue_.empty() && !deferred_releases_.empty()) {  // the worker is idle
    runner_->release(deferred_releases_);
    deferred_releases_.clear();
  }
  return out;
}

void StepExecutor::release(const std::vector<std::string>& request_ids) {
  if (request_ids.empty()) return;
  if (in_flight()) {
    deferred_releases_.insert(deferred_releases_.end(), request_ids.begin(), request_ids.end());
  } else {
    runner_->release(request_ids);
  }
}

}  // namespace deepinfer::engine
