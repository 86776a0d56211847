#include "engine/step_executor.h"

#include <chrono>
#include <exception>

#include "common/check.h"
#include "common/env.h"

namespace deepinfer::engine {

StepExecutor::StepExecutor(ModelRunner* runner, bool use_worker_thread, backend::Backend* backend)
    : runner_(runner), backend_(backend) {
  DI_CHECK(runner != nullptr) << "StepExecutor needs a model runner";
  runner_->set_backend(backend);
  spin_ = use_worker_thread &&
          (env().spin_wait == 2 ||
           (env().spin_wait == 1 && backend != nullptr && !backend->host_memory()));
  if (use_worker_thread) worker_ = std::thread([this] { worker_loop(); });
}

StepExecutor::~StepExecutor() {
  if (in_flight_) wait();
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

void StepExecutor::run_job() {
  // Exceptions never cross the engine loop: anything thrown becomes this step's error.
  try {
    result_.emplace(runner_->execute(job_, job_sample_rows_));
  } catch (const std::exception& e) {
    result_.emplace(Internal(std::string("model forward threw: ") + e.what()));
  } catch (...) {
    result_.emplace(Internal("model forward threw an unknown exception"));
  }
}

bool StepExecutor::spin_for(const std::atomic<bool>& flag) const {
  if (!spin_) return flag.load(std::memory_order_acquire);
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int i = 0;; ++i) {
    if (flag.load(std::memory_order_acquire)) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return false;
  }
}

void StepExecutor::worker_loop() {
  // A failure here shows up as the failure of the first forward (the op reports it).
  if (backend_ != nullptr) (void)backend_->bind_thread();
  for (;;) {
    spin_for(job_flag_);  // then sleep if nothing came
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return stop_ || has_job_; });
    if (has_job_) {
      has_job_ = false;
      job_flag_.store(stop_, std::memory_order_relaxed);
      lock.unlock();
      run_job();
      lock.lock();
      done_ = true;
      done_flag_.store(true, std::memory_order_release);
      lock.unlock();
      cv_.notify_all();
      continue;
    }
    if (stop_) return;
  }
}

void StepExecutor::launch(SchedulerOutput step, std::vector<backend::SampleRowParams> sample_rows) {
  DI_CHECK(!in_flight_) << "launch() while step " << job_.step << " is in flight";
  if (!deferred_releases_.empty()) {
    runner_->release(deferred_releases_);
    deferred_releases_.clear();
  }
  in_flight_ = true;
  if (!worker_.joinable()) {
    job_ = std::move(step);
    job_sample_rows_ = std::move(sample_rows);
    run_job();
    done_ = true;
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(step);
    job_sample_rows_ = std::move(sample_rows);
    result_.reset();
    done_ = false;
    done_flag_.store(false, std::memory_order_relaxed);
    has_job_ = true;
    job_flag_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

StepResult StepExecutor::wait() {
  DI_CHECK(in_flight_) << "wait() with no step in flight";
  StepResult out{SchedulerOutput{}, Internal("no result"), std::nullopt};
  spin_for(done_flag_);  // then sleep if the forward is still running
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    done_ = false;
    done_flag_.store(false, std::memory_order_relaxed);
    out.step = std::move(job_);
    if (result_->ok()) {
      RunnerOutput& r = **result_;
      out.logits = std::move(r.logits);
      out.sampled_ids = std::move(r.ids);
    } else {
      out.logits = result_->status();
    }
    result_.reset();
  }
  in_flight_ = false;
  if (!deferred_releases_.empty()) {
    runner_->release(deferred_releases_);
    deferred_releases_.clear();
  }
  return out;
}

void StepExecutor::release(const std::vector<std::string>& request_ids) {
  if (request_ids.empty()) return;
  if (in_flight_) {
    deferred_releases_.insert(deferred_releases_.end(), request_ids.begin(), request_ids.end());
  } else {
    runner_->release(request_ids);
  }
}

}  // namespace deepinfer::engine
