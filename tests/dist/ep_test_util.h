// Helpers of the expert-parallel tests: run one function per rank on its own thread, aborting
// the in-process group when a rank fails (so the others return instead of waiting).
#pragma once

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "dist/inprocess_comm.h"

namespace deepinfer::dist::testing {

// fn(rank, comm) on world_size threads; returns every rank's Status.
inline std::vector<Status> run_ranks(int world_size,
                                     const std::function<Status(int, Communicator&)>& fn) {
  InProcessGroup group(world_size);
  std::vector<Status> st(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r)
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      st[r] = comm.ok() ? fn(r, **comm) : comm.status();
      if (!st[r].ok()) group.abort();
    });
  for (auto& t : threads) t.join();
  return st;
}

}  // namespace deepinfer::dist::testing
