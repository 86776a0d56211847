// Drives a Scheduler with a fake model: the token sampled for a request at output position k is a
// pure function of (request id, k), so a preempted-and-recomputed request must end with exactly the
// tokens it would have produced alone. Invariants are checked after every schedule and update.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
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

// The token a request holds at `position` under the fake model (prompts are 100, 101, ...).
inline int32_t expected_token_at(const Request& r, int64_t position) {
  return position < r.num_prompt_tokens() ? 100 + static_cast<int32_t>(position)
                                          : fake_token(r.request_id, position - r.num_prompt_tokens());
}

struct Harness {
  Harness(SchedulerConfig cfg, std::unique_ptr<kv::KvCacheCoordinator> kv_in, bool async_in = false)
      : kv(std::move(kv_in)), scheduler(cfg, kv.get()), async(async_in) {}

  void check(const char* when, uint64_t step) {
    const Status s = scheduler.check_invariants();
    EXPECT_TRUE(s.ok()) << when << " " << step << ": " << s.to_string();
  }

  // Every chunk about to run carries exactly the fake model's tokens (no placeholder left).
  void check_tokens(const SchedulerOutput& out) {
    EXPECT_LE(out.total_num_scheduled_tokens, scheduler.config().max_num_batched_tokens);
    EXPECT_LE(static_cast<int>(out.chunks.size()), scheduler.config().max_num_seqs);
    for (const auto& c : out.chunks) {
      ASSERT_EQ(static_cast<int64_t>(c.token_ids.size()), c.num_tokens);
      const Request* r = scheduler.get_request(c.request_id);
      ASSERT_NE(r, nullptr) << c.request_id;
      for (int64_t j = 0; j < c.num_tokens; ++j) {
        ASSERT_EQ(c.token_ids[j], expected_token_at(*r, c.start_position + j))
            << c.request_id << " position " << c.start_position + j << " of step " << out.step;
      }
    }
  }

  // One step; returns the description of what was computed; finished requests go to `finished`.
  // Synchronous: schedule, run, update. Async (vLLM v1 style, one step in flight): the next step is
  // scheduled before this one's tokens are applied, then its placeholders are filled.
  std::string step() {
    if (!in_flight) {
      in_flight = scheduler.schedule();
      check("after schedule", in_flight->step);
      if (!async) check_tokens(*in_flight);
    }
    SchedulerOutput out = std::move(*in_flight);
    in_flight.reset();
    std::optional<SchedulerOutput> next;
    if (async) {
      next = scheduler.schedule();
      check("after scheduling ahead", next->step);
    }
    last = out;
    std::vector<int32_t> sampled;
    for (const auto& c : out.chunks) sampled.push_back(fake_token(c.request_id, c.num_output_tokens));
    if (before_update) before_update(out);
    for (auto& r : scheduler.update_from_output(out, sampled)) finished[r->request_id] = std::move(r);
    check("after update", out.step);
    if (next) {
      scheduler.fill_placeholders(&*next);
      check_tokens(*next);
      if (!next->empty()) in_flight = std::move(next);
    }
    return describe(out);
  }

  std::unique_ptr<kv::KvCacheCoordinator> kv;
  Scheduler scheduler;
  bool async = false;
  std::optional<SchedulerOutput> in_flight;  // async: the step whose forward "runs"
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
