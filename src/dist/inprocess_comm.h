// Threads as ranks over host memory: a test double of the NCCL transport for the CPU backend.
//
//   InProcessGroup group(world_size);
//   // thread r:
//   auto comm = group.communicator(r);   // then the same collective calls on every thread
//
// Each collective is two rendezvous of all ranks: post (each rank publishes pointers to its
// buffers), then read (each rank copies what it needs from the others' buffers), then done (no
// rank leaves, and frees its buffers, while another is still reading them). Ranks read peers in
// rank order; all_reduce_sum adds in rank order (((x0 + x1) + x2) …), so every rank gets the same
// bits. A rank that fails outside a collective calls abort() so the others return kCancelled
// instead of waiting forever. Mismatched calls (different collectives, row counts that do not
// match what the peer sends) return InvalidArgument on the rank that notices.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "dist/communicator.h"

namespace deepinfer::dist {

class InProcessGroup {
 public:
  explicit InProcessGroup(int world_size);
  int world_size() const { return world_size_; }
  // The communicator of `rank` (0 <= rank < world_size); it borrows the group, which must outlive it.
  StatusOr<std::unique_ptr<Communicator>> communicator(int rank);
  // Wakes every rank waiting in (or later entering) a collective with kCancelled.
  void abort();

  // --- used by the communicators ---
  enum class Op { kNone, kAllToAll, kAllReduce, kExchange };
  struct Post {
    Op op = Op::kNone;
    const void* data = nullptr;          // send buffer (host)
    int64_t row_bytes = 0;               // all-to-all: bytes per row
    std::vector<int64_t> offsets;        // all-to-all: [world_size + 1] row offsets per peer
    int64_t count = 0;                   // all-reduce: elements; exchange: block size n
    int dtype = 0;                       // all-reduce: DType as int
  };
  std::vector<Post>& posts() { return posts_; }
  // Waits until every rank arrived; kCancelled after abort().
  Status rendezvous();

 private:
  const int world_size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::vector<Post> posts_;
};

}  // namespace deepinfer::dist
