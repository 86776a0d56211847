// Randomized soak: random arrivals, lengths, priorities, stop tokens and aborts over a small cache,
// for thousands of steps. After every schedule and update: scheduler invariants + cache integrity.
// At the end: every request finished exactly once, outputs are exactly the fake model's tokens
// (so preemption-by-recompute lost or duplicated nothing), and no block leaked.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "engine/scheduler.h"
#include "scheduler_harness.h"

namespace deepinfer::engine {
namespace {

using testing::fake_token;
using testing::Harness;
using testing::make_kv;

std::string rid(uint64_t i) {
  std::string s = "r";
  s += std::to_string(i);
  return s;
}

void soak(SchedulingPolicy policy, bool chunked, unsigned seed, int num_requests, bool async = false) {
  SCOPED_TRACE("random seed " + std::to_string(seed) + (chunked ? " chunked" : " whole prompts") +
               (async ? " async" : ""));
  std::mt19937 gen(seed);
  SchedulerConfig c;
  c.max_model_len = 48;
  c.max_num_batched_tokens = chunked ? 24 : 48;
  c.max_num_seqs = 6;
  c.enable_chunked_prefill = chunked;
  c.policy = policy;
  // Window: 6 x (ceil(7/4)+2) + ceil(48/4) = 36 blocks never run out; CSA (8 tokens/block) is tight.
  Harness h(c, make_kv(36, 14, 6, 6), async);
  std::set<std::string> added, aborted;
  int next = 0, steps = 0;
  while ((next < num_requests || h.scheduler.has_unfinished_requests()) && steps < 200000) {
    // Arrivals: bursts of up to 3.
    if (next < num_requests && gen() % 3 == 0) {
      for (int k = static_cast<int>(gen() % 3); k >= 0 && next < num_requests; --k, ++next) {
        const std::string id = rid(next);
        auto r = testing::make_request(id, 1 + static_cast<int>(gen() % 40), 1 + static_cast<int>(gen() % 24),
                                       static_cast<int>(gen() % 4));
        if (gen() % 4 == 0) r->eos_token_id = fake_token(id, static_cast<int64_t>(gen() % 12));
        ASSERT_TRUE(h.scheduler.add_request(std::move(r)).ok()) << id;
        added.insert(id);
      }
    }
    // Aborts, sometimes while the step is in flight.
    const bool abort_in_flight = gen() % 20 == 0;
    if (gen() % 15 == 0 && next > 0) {
      const std::string id = rid(gen() % next);
      if (auto r = h.scheduler.abort_request(id)) aborted.insert(id);
    }
    std::string in_flight_victim;
    if (abort_in_flight && next > 0) in_flight_victim = rid(gen() % next);
    h.before_update = [&](const SchedulerOutput&) {
      if (!in_flight_victim.empty() && h.scheduler.abort_request(in_flight_victim)) aborted.insert(in_flight_victim);
    };
    h.step();
    if (::testing::Test::HasFailure()) return;
    ++steps;
  }
  ASSERT_FALSE(h.scheduler.has_unfinished_requests()) << "not done after " << steps << " steps";
  EXPECT_EQ(h.finished.size() + aborted.size(), added.size());
  for (const auto& [id, r] : h.finished) {
    EXPECT_EQ(aborted.count(id), 0u) << id;
    const int64_t n = r->num_output_tokens();
    ASSERT_GE(n, 1) << id;
    EXPECT_EQ(r->output_token_ids, testing::expected_tokens(id, static_cast<int>(n))) << id;
    EXPECT_LE(n, *r->params.max_tokens) << id;
    EXPECT_LE(r->num_tokens(), c.max_model_len + 1) << id;
    if (r->status == RequestStatus::kFinishedStopped) {
      EXPECT_EQ(r->output_token_ids.back(), r->eos_token_id) << id;
    }
    if (r->status == RequestStatus::kFinishedLength) {
      EXPECT_TRUE(n == *r->params.max_tokens || r->num_tokens() >= c.max_model_len) << id;
    }
  }
  for (kv::StateKind k : kv::kAllStateKinds) EXPECT_EQ(h.kv->num_free_blocks(k), h.kv->num_blocks(k)) << "leak";
  EXPECT_TRUE(h.kv->check_integrity().ok());
  EXPECT_GT(h.scheduler.num_preemptions(), 0u) << "the pool was meant to be tight enough to preempt";
}

TEST(SchedulerStress, FcfsChunked) { soak(SchedulingPolicy::kFcfs, true, std::random_device{}(), 2000); }
TEST(SchedulerStress, PriorityChunked) { soak(SchedulingPolicy::kPriority, true, std::random_device{}(), 1000); }
TEST(SchedulerStress, FcfsWholePrompts) { soak(SchedulingPolicy::kFcfs, false, std::random_device{}(), 1000); }
// Async scheduling: each step is scheduled while the previous one is in flight (placeholders for
// its tokens), with aborts landing between the two; same guarantees.
TEST(SchedulerStress, FcfsChunkedAsync) { soak(SchedulingPolicy::kFcfs, true, std::random_device{}(), 2000, true); }
TEST(SchedulerStress, PriorityChunkedAsync) { soak(SchedulingPolicy::kPriority, true, std::random_device{}(), 1000, true); }
TEST(SchedulerStress, FcfsWholePromptsAsync) { soak(SchedulingPolicy::kFcfs, false, std::random_device{}(), 1000, true); }

}  // namespace
}  // namespace deepinfer::engine
