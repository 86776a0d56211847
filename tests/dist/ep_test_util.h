// Helpers of the expert-parallel tests: run one function per rank on its own thread, aborting
// the in-process group when a rank fails (so the others return instead of waiting).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "dist/inprocess_comm.h"
#include "model/model.h"

namespace deepinfer::dist::testing {

// a[0..n) and b[0..n) equal bit for bit; the first differing element on failure.
inline ::testing::AssertionResult bitwise(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  return bitwise(a.data(), b.data(), a.size());
}

// Worst row of ‖got − want‖₂ / ‖want‖₂ over [rows, V] logits.
inline double worst_row_error(const std::vector<float>& got, const std::vector<float>& want,
                              int64_t V) {
  double worst = 0;
  for (size_t r = 0; r * V < want.size(); ++r) {
    double err = 0, ref = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double a = got[r * V + v], b = want[r * V + v];
      err += (a - b) * (a - b);
      ref += b * b;
    }
    worst = std::max(worst, std::sqrt(err) / std::max(std::sqrt(ref), 1e-30));
  }
  return worst;
}

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

// One sequence through `m`: the prefill (logits of every row) and `decode` greedy steps, all
// logits appended in order. The decode tokens are the greedy picks (appended to `picked` when
// given), or `forced`'s when given, so a bounded comparison never diverges on a flipped argmax.
inline StatusOr<std::vector<float>> run_greedy(model::Model& m, const std::vector<int32_t>& prompt,
                                               int decode, std::vector<int32_t>* picked = nullptr,
                                               const std::vector<int32_t>* forced = nullptr) {
  auto state = m.new_sequence_state();
  std::vector<float> out;
  std::vector<int32_t> tokens = prompt;
  for (int step = 0; step <= decode; ++step) {
    model::SequenceInput in{tokens, state.get(), /*all_logits=*/step == 0};
    DI_ASSIGN_OR_RETURN(backend::Tensor logits, m.forward({&in, 1}));
    const float* l = logits.data<float>();
    out.insert(out.end(), l, l + logits.numel());
    const int64_t V = logits.dim(1);
    const float* last = l + (logits.dim(0) - 1) * V;
    tokens = {static_cast<int32_t>(std::max_element(last, last + V) - last)};
    if (forced != nullptr) tokens = {(*forced)[step]};
    if (picked != nullptr) picked->push_back(tokens[0]);
  }
  return out;
}

}  // namespace deepinfer::dist::testing
