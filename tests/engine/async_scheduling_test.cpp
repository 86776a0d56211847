// Async scheduling in the scheduler (vLLM v1 style): step N+1 is scheduled while step N is in
// flight, with a placeholder for each token step N samples; fill_placeholders puts the real tokens
// in and drops requests that finished meanwhile. Exact chunks, tokens and block accounting.
#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "engine/scheduler.h"
#include "scheduler_harness.h"

namespace deepinfer::engine {
namespace {

using testing::describe;
using testing::expected_tokens;
using testing::fake_token;
using testing::make_kv;
using testing::make_request;

SchedulerConfig config() {
  SchedulerConfig c;
  c.max_num_batched_tokens = 32;
  c.max_num_seqs = 4;
  c.max_model_len = 64;
  return c;
}

std::vector<int32_t> fake_tokens(const SchedulerOutput& out) {
  std::vector<int32_t> t;
  for (const auto& c : out.chunks) t.push_back(fake_token(c.request_id, c.num_output_tokens));
  return t;
}

void expect_all_free(const kv::KvCacheCoordinator& kv) {
  for (kv::StateKind k : kv::kAllStateKinds) EXPECT_EQ(kv.num_free_blocks(k), kv.num_blocks(k)) << kv::state_kind_name(k);
}

TEST(AsyncScheduling, PlaceholdersAreFilledAndFinishedRequestsDropped) {
  auto kv = make_kv(100, 100, 10, 8);
  Scheduler s(config(), kv.get());
  ASSERT_TRUE(s.add_request(make_request("A", 8, 3)).ok());
  auto b = make_request("B", 4, 10);
  b->eos_token_id = fake_token("B", 1);  // B stops at its second token
  ASSERT_TRUE(s.add_request(std::move(b)).ok());

  SchedulerOutput s0 = s.schedule();
  EXPECT_EQ(describe(s0), "A:0+8s B:0+4s");
  EXPECT_EQ(s.get_request("A")->num_computed_tokens, 8);  // counted when scheduled
  EXPECT_EQ(s.get_request("A")->num_output_placeholders, 1);
  ASSERT_TRUE(s.check_invariants().ok());

  // Step 1 is scheduled while step 0 runs: one position each, its token not known yet.
  SchedulerOutput s1 = s.schedule();
  EXPECT_EQ(describe(s1), "A:8+1s B:4+1s");
  EXPECT_EQ(s1.chunks[0].token_ids, std::vector<int32_t>{kPlaceholderToken});
  EXPECT_EQ(s1.chunks[0].num_output_tokens, 1);  // samples A's second output
  EXPECT_EQ(s.get_request("A")->num_output_placeholders, 2);
  ASSERT_TRUE(s.check_invariants().ok());

  EXPECT_TRUE(s.update_from_output(s0, fake_tokens(s0)).empty());
  s.fill_placeholders(&s1);
  EXPECT_EQ(s1.chunks[0].token_ids, std::vector<int32_t>{fake_token("A", 0)});
  EXPECT_EQ(s1.chunks[1].token_ids, std::vector<int32_t>{fake_token("B", 0)});
  EXPECT_EQ(s1.total_num_scheduled_tokens, 2);

  SchedulerOutput s2 = s.schedule();  // while step 1 runs
  EXPECT_EQ(describe(s2), "A:9+1s B:5+1s");
  auto finished = s.update_from_output(s1, fake_tokens(s1));
  ASSERT_EQ(finished.size(), 1u);  // B drew its EOS in step 1
  EXPECT_EQ(finished[0]->request_id, "B");
  EXPECT_EQ(finished[0]->output_token_ids, expected_tokens("B", 2));
  EXPECT_EQ(finished[0]->status, RequestStatus::kFinishedStopped);
  s.fill_placeholders(&s2);  // B's step-2 chunk is dropped; its slots are already free
  EXPECT_EQ(describe(s2), "A:9+1s");
  EXPECT_EQ(s2.total_num_scheduled_tokens, 1);
  ASSERT_TRUE(s.check_invariants().ok());

  // A's token of step 2 is its third and last (max_tokens 3): nothing more is scheduled for it.
  SchedulerOutput s3 = s.schedule();
  EXPECT_TRUE(s3.empty()) << describe(s3);
  finished = s.update_from_output(s2, fake_tokens(s2));
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0]->output_token_ids, expected_tokens("A", 3));
  EXPECT_EQ(finished[0]->status, RequestStatus::kFinishedLength);
  s.fill_placeholders(&s3);
  EXPECT_FALSE(s.has_unfinished_requests());
  expect_all_free(*kv);
}

TEST(AsyncScheduling, RequestPreemptedWhileItsTokenIsInFlightKeepsIt) {
  // CSA pool 4 (8 tokens a block): three 8-token prompts take 3 blocks; A reaches 16 tokens and
  // takes the fourth; B then finds no room and C, the last admitted, is preempted while its token
  // of the step in flight is still unknown. C keeps that token, is not readmitted before it is
  // known, and then recomputes prompt + outputs.
  auto kv = make_kv(100, 4, 10, 8);
  Scheduler s(config(), kv.get());
  for (const char* id : {"A", "B", "C"}) ASSERT_TRUE(s.add_request(make_request(id, 8, 12)).ok());
  std::optional<SchedulerOutput> in_flight = s.schedule();
  std::map<std::string, std::vector<int32_t>> done;
  bool saw_preemption_with_placeholder = false;
  for (int step = 0; step < 100 && (in_flight || s.has_unfinished_requests()); ++step) {
    if (!in_flight) in_flight = s.schedule();
    SchedulerOutput next = s.schedule();
    for (const auto& id : next.preempted_request_ids) {
      const Request* r = s.get_request(id);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(r->num_computed_tokens, 0);
      if (r->num_output_placeholders > 0) saw_preemption_with_placeholder = true;
    }
    ASSERT_TRUE(s.check_invariants().ok()) << s.check_invariants().to_string();
    for (auto& r : s.update_from_output(*in_flight, fake_tokens(*in_flight))) done[r->request_id] = r->output_token_ids;
    ASSERT_TRUE(s.check_invariants().ok()) << s.check_invariants().to_string();
    s.fill_placeholders(&next);
    for (const auto& c : next.chunks) {
      const Request* r = s.get_request(c.request_id);
      for (int64_t j = 0; j < c.num_tokens; ++j) {
        ASSERT_EQ(c.token_ids[j], testing::expected_token_at(*r, c.start_position + j)) << c.request_id;
      }
    }
    in_flight.reset();
    if (!next.empty()) in_flight = std::move(next);
  }
  EXPECT_TRUE(saw_preemption_with_placeholder);
  EXPECT_GT(s.num_preemptions(), 0u);
  ASSERT_EQ(done.size(), 3u);
  for (const char* id : {"A", "B", "C"}) EXPECT_EQ(done[id], expected_tokens(id, 12)) << id;
  expect_all_free(*kv);
}

}  // namespace
}  // namespace deepinfer::engine
