// A fixed-size thread pool with a blocking parallel_for, used by the CPU backend.
//
//   ThreadPool pool(4);
//   pool.parallel_for(n, [&](int64_t begin, int64_t end) { ... });  // returns when all done
//
// parallel_for splits [0, n) into contiguous chunks, at most one per thread; the calling thread
// runs a chunk too. Chunking depends only on (n, num_threads), never on timing, so results of
// per-chunk reductions are reproducible.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer {

class ThreadPool {
 public:
  // num_threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n). `min_chunk` avoids waking threads
  // for tiny loops. Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t min_chunk = 1);

  // The process-wide pool (size from DEEPINFER_NUM_THREADS, default all cores).
  static ThreadPool& global();

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::mutex call_mutex_;  // serializes parallel_for callers
};

}  // namespace deepinfer
