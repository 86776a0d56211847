// Drives a Scheduler with a fake model: the token sampled for a request at output position k is a
// pure function of (request id, k), so a preempted-and-recomputed request must end with exactly the
// tokens it would have produced alone. Invariants are checked after every schedule and update.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "../kv/test_dims.h"

namespace deepinfer::engine::testing {

inline int32_t fake_token(const std::string& id, int64_t output_position) {
  uint64_t h = 1469598103934665603ull;
  for (char c : id) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(output_position)) * 1099511628211ull;
  h ^= h >> 29;
  return static_cast<int32_t>(10 + h % 1000);
}

inline std::unique_ptr<kv::KvCacheCoordinator> make_kv(int window, int csa, int hca, int tail) {
  kv::KvPoolSizes s;
  s[kv::StateKind::kWindow] = window;
  s[kv::StateKind::kCsa] = csa;
  s[kv::StateKind::kHca] = hca;
  s[kv::StateKind::kTail] = tail;
  return std::move(kv::KvCacheCoordinator::create(kv::testing::tiny_dims(), kv::testing::tiny_config(), s)).value();
}

inline std::unique_ptr<Request> make_request(const std::string& id, int prompt_len, std::optional<int> max_tokens,
                                             int priority = 0) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < prompt_len; ++i) prompt.push_back(100 + i);
  SamplingParams p;
  p.max_tokens = max_tokens;
  return std::make_unique<Request>(id, std::move(prompt), p, /*eos=*/-1, priority);
}

// "A:0+8 B:0+3s" — request:start+count, 's' when it samples, '*' when it is a first chunk.
inline std::string describe(const SchedulerOutput& out) {
  std::ostringstream os;
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    const auto& c = out.chunks[i];
    os << (i ? " " : "") << c.request_id << ":" << c.start_position << "+" << c.num_tokens << (c.samples ? "s" : "");
  }
  if (!out.preempted_request_ids.empty()) {
    os << " | preempted";
    for (const auto& id : out.preempted_request_ids) os << " " << id;
  }
  return os.str();
}

struct Harness {
  Harness(SchedulerConfig cfg, std::unique_ptr<kv::KvCacheCoordinator> kv_in)
      : kv(std::move(kv_in)), scheduler(cfg, kv.get()) {}

  // One step; returns the description of what was scheduled; finished requests go to `finished`.
  std::string step() {
    SchedulerOutput out = scheduler.schedule();
    last = out;
    const Status s1 = scheduler.check_invariants();
    EXPECT_TRUE(s1.ok()) << "after schedule " << out.step << ": " << s1.to_string();
    EXPECT_LE(out.total_num_scheduled_tokens, scheduler.config().max_num_batched_tokens);
    EXPECT_LE(static_cast<int>(out.chunks.size()), scheduler.config().max_num_seqs);
    std::vector<int32_t> sampled;
    for (const auto& c : out.chunks) {
      EXPECT_EQ(static_cast<int64_t>(c.token_ids.size()), c.num_tokens);
      sampled.push_back(fake_token(c.request_id, c.num_output_tokens));
    }
    if (before_update) before_update(out);
    for (auto& r : scheduler.update_from_output(out, sampled)) finished[r->request_id] = std::move(r);
    const Status s2 = scheduler.check_invariants();
    EXPECT_TRUE(s2.ok()) << "after update " << out.step << ": " << s2.to_string();
    return describe(out);
  }

  std::unique_ptr<kv::KvCacheCoordinator> kv;
  Scheduler scheduler;
  SchedulerOutput last;
  std::map<std::string, std::unique_ptr<Request>> finished;
  std::function<void(const SchedulerOutput&)> before_update;
};

inline std::vector<int32_t> expected_tokens(const std::string& id, int n) {
  std::vector<int32_t> out;
  for (int k = 0; k < n; ++k) out.push_back(fake_token(id, k));
  return out;
}

}  // namespace deepinfer::engine::testing
