// A watchdog for tests that run ranks as threads over a transport that can hang (NCCL): instead of
// a test that prints nothing until ctest kills it, the process exits with a message naming every
// rank's last stage when the ranks are not all done within the limit, or when one rank failed
// and the others did not finish within `grace` after it (a failed rank leaves its peers waiting
// in their next collective forever; threads cannot be cancelled, so the process must go).
//
//   RankWatchdog dog(world, std::chrono::seconds(240), "v4tiny_b, batch-invariant");
//   // rank thread r:  dog.stage(r, "prefill_context_parallel"); ...; dog.finish(r, status);
//   dog.wait();   // returns when every rank finished; else prints and calls std::_Exit(3)
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace deepinfer::dist::testing {

class RankWatchdog {
 public:
  RankWatchdog(int ranks, std::chrono::seconds limit, std::string what,
               std::chrono::seconds grace = std::chrono::seconds(30))
      : limit_(limit), grace_(grace), what_(std::move(what)), stage_(ranks, "not started"),
        status_(ranks), finished_(ranks, false) {}

  // Rank r is now at `stage` (a string literal); printed at once, so a hang shows where.
  void stage(int r, const char* stage) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stage_[r] = stage;
    }
    std::fprintf(stderr, "[%s] rank %d: %s\n", what_.c_str(), r, stage);
  }

  void finish(int r, const Status& st) {
    std::lock_guard<std::mutex> lock(mu_);
    finished_[r] = true;
    status_[r] = st;
    stage_[r] = st.ok() ? "done" : "failed";
    if (!st.ok() && !first_failure_) first_failure_ = std::chrono::steady_clock::now();
    cv_.notify_all();
  }

  // Every rank finished: returns. Otherwise exits the process (code 3) after the message.
  void wait() {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      bool all = true;
      for (bool f : finished_) all = all && f;
      if (all) return;
      auto deadline = start + limit_;
      if (first_failure_ && *first_failure_ + grace_ < deadline) deadline = *first_failure_ + grace_;
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
    }
    std::fprintf(stderr, "\nWATCHDOG [%s]: the ranks did not all finish (%s); stopping the process "
                 "instead of hanging. Per rank:\n", what_.c_str(),
                 first_failure_ ? "a rank failed and its peers are stuck (in a collective?)"
                                : "time limit reached");
    for (size_t r = 0; r < stage_.size(); ++r)
      std::fprintf(stderr, "  rank %zu: %s%s%s\n", r, finished_[r] ? "finished, " : "still at ",
                   stage_[r], status_[r].ok() ? "" : (": " + status_[r].to_string()).c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(3);
  }

 private:
  std::chrono::seconds limit_, grace_;
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<const char*> stage_;
  std::vector<Status> status_;
  std::vector<bool> finished_;
  std::optional<std::chrono::steady_clock::time_point> first_failure_;
};

}  // namespace deepinfer::dist::testing
