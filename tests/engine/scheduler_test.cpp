#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include "sample/rng.h"
#include "scheduler_harness.h"

namespace deepinfer::engine {
namespace {

using testing::expected_tokens;
using testing::Harness;
using testing::make_kv;
using testing::make_request;
using Ids = std::vector<std::string>;
constexpr kv::BlockId kNull = kv::kNullBlock;

SchedulerConfig config(int64_t budget, int max_seqs, int64_t max_model_len = 64) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.max_model_len = max_model_len;
  return c;
}

void expect_all_free(const kv::KvCacheCoordinator& kv) {
  for (kv::StateKind k : kv::kAllStateKinds) EXPECT_EQ(kv.num_free_blocks(k), kv.num_blocks(k)) << kv::state_kind_name(k);
}

TEST(Scheduler, ChunkedPrefillWithinTokenBudget) {
  Harness h(config(8, 4), make_kv(100, 100, 10, 8));
  ASSERT_TRUE(h.scheduler.add_request(make_request("A", 10, 3)).ok());
  ASSERT_TRUE(h.scheduler.add_request(make_request("B", 3, 3)).ok());
  ASSERT_TRUE(h.scheduler.add_request(make_request("C", 5, 3)).ok());
  EXPECT_EQ(h.step(), "A:0+8");
  EXPECT_EQ(h.step(), "A:8+2s B:0+3s C:0+3");
  EXPECT_EQ(h.step(), "A:10+1s B:3+1s C:3+2s");
  EXPECT_EQ(h.step(), "A:11+1s B:4+1s C:5+1s");
  EXPECT_EQ(h.finished.size(), 2u);
  EXPECT_EQ(h.step(), "C:6+1s");
  EXPECT_EQ(h.last.finished_request_ids, (Ids{"A", "B"}));
  EXPECT_EQ(h.scheduler.schedule().finished_request_ids, (Ids{"C"}));
  for (const char* id : {"A", "B", "C"}) {
    const Request& r = *h.finished.at(id);
    EXPECT_EQ(r.status, RequestStatus::kFinishedLength) << id;
    EXPECT_EQ(r.output_token_ids, expected_tokens(id, 3)) << id;
  }
  expect_all_free(*h.kv);
}

TEST(Scheduler, FirstChunkCarriesPromptTokensAndTables) {
  Harness h(config(8, 4), make_kv(100, 100, 10, 8));
  ASSERT_TRUE(h.scheduler.add_request(make_request("A", 10, 3)).ok());
  SchedulerOutput out = h.scheduler.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  const ScheduledChunk& c = out.chunks[0];
  EXPECT_TRUE(c.is_first_chunk);
  EXPECT_FALSE(c.samples);
  EXPECT_EQ(c.token_ids, (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(c.block_tables[kv::StateKind::kWindow], (std::vector<kv::BlockId>{0, 1}));
  EXPECT_EQ(c.block_tables[kv::StateKind::kCsa], (std::vector<kv::BlockId>{0}));
  EXPECT_EQ(c.block_tables[kv::StateKind::kTail], (std::vector<kv::BlockId>{0}));
  EXPECT_EQ(out.total_num_scheduled_tokens, 8);
}

// CSA pool of 3 blocks (2 entries = 8 tokens each): two 8-token prompts decoding side by side both
// need a second block at 12 tokens (the third entry); the later one (B) is preempted, waits until A
// is done, and is then recomputed from scratch (prompt + its 4 outputs) in one chunk.
TEST(Scheduler, PreemptionByRecomputeWhenTheCacheIsFull) {
  Harness h(config(16, 4), make_kv(100, 3, 10, 8));
  ASSERT_TRUE(h.scheduler.add_request(make_request("A", 8, 20)).ok());
  ASSERT_TRUE(h.scheduler.add_request(make_request("B", 8, 20)).ok());
  EXPECT_EQ(h.step(), "A:0+8s B:0+8s");
  for (int k = 1; k <= 3; ++k) {
    const std::string p = std::to_string(7 + k);
    EXPECT_EQ(h.step(), "A:" + p + "+1s B:" + p + "+1s") << "step " << k;
  }
  EXPECT_EQ(h.kv->manager(kv::StateKind::kCsa)->pool().free_list(), (std::vector<kv::BlockId>{2}));
  EXPECT_EQ(h.step(), "A:11+1s | preempted B");
  EXPECT_EQ(h.scheduler.get_request("A")->status, RequestStatus::kRunning);
  EXPECT_EQ(h.kv->block_tables(0)[kv::StateKind::kCsa], (std::vector<kv::BlockId>{0, 2}));
  EXPECT_EQ(h.kv->manager(kv::StateKind::kCsa)->pool().free_list(), (std::vector<kv::BlockId>{1}));
  const Request* b = h.scheduler.get_request("B");
  EXPECT_EQ(b->status, RequestStatus::kPreempted);
  EXPECT_EQ(b->num_computed_tokens, 0);
  EXPECT_EQ(b->num_output_tokens(), 4);
  EXPECT_EQ(h.scheduler.waiting_ids(), (Ids{"B"}));
  // B (12 tokens = 2 CSA blocks) cannot come back while A holds 2 of the 3 blocks.
  for (int k = 5; k <= 19; ++k) EXPECT_EQ(h.step(), "A:" + std::to_string(7 + k) + "+1s") << "step " << k;
  ASSERT_EQ(h.finished.count("A"), 1u);
  EXPECT_EQ(h.step(), "B:0+12s");
  EXPECT_TRUE(h.last.chunks[0].is_first_chunk);
  for (int k = 21; k <= 35; ++k) EXPECT_EQ(h.step(), "B:" + std::to_string(k - 9) + "+1s") << "step " << k;
  ASSERT_EQ(h.finished.count("B"), 1u);
  EXPECT_EQ(h.finished["A"]->output_token_ids, expected_tokens("A", 20));
  EXPECT_EQ(h.finished["B"]->output_token_ids, expected_tokens("B", 20));
  EXPECT_EQ(h.finished["B"]->num_preemptions, 1);
  EXPECT_EQ(h.scheduler.num_preemptions(), 1u);
  EXPECT_FALSE(h.scheduler.has_unfinished_requests());
  expect_all_free(*h.kv);
}

TEST(Scheduler, PreemptedRequestsKeepFcfsOrderAtTheFront) {
  // CSA pool 4: three 8-token requests use 3 blocks; at 12 tokens A takes the last one, B has no
  // room and the last admitted (C) is preempted for it. C goes back in front of the newcomer D.
  Harness h(config(32, 4), make_kv(100, 4, 10, 8));
  for (const char* id : {"A", "B", "C"}) ASSERT_TRUE(h.scheduler.add_request(make_request(id, 8, 20)).ok());
  EXPECT_EQ(h.step(), "A:0+8s B:0+8s C:0+8s");
  for (int k = 1; k <= 3; ++k) h.step();
  ASSERT_TRUE(h.scheduler.add_request(make_request("D", 4, 2)).ok());
  EXPECT_EQ(h.step(), "A:11+1s B:11+1s | preempted C");
  EXPECT_EQ(h.scheduler.waiting_ids(), (Ids{"C", "D"}));
}

TEST(Scheduler, PriorityPolicyAdmitsAndPreemptsByPriority) {
  SchedulerConfig c = config(8, 2);
  c.policy = SchedulingPolicy::kPriority;
  Harness h(c, make_kv(100, 100, 10, 8));
  ASSERT_TRUE(h.scheduler.add_request(make_request("L", 4, 2, /*priority=*/5)).ok());
  ASSERT_TRUE(h.scheduler.add_request(make_request("H", 4, 2, 0)).ok());
  ASSERT_TRUE(h.scheduler.add_request(make_request("M", 4, 2, 1)).ok());
  EXPECT_EQ(h.step(), "H:0+4s M:0+4s");
  EXPECT_EQ(h.step(), "H:4+1s M:4+1s");
  EXPECT_EQ(h.step(), "L:0+4s");
  EXPECT_EQ(h.step(), "L:4+1s");

  // The low-priority request is the victim even though it runs first and was already scheduled in
  // this step: its share is taken back and given to the high-priority one.
  SchedulerConfig c2 = config(16, 4);
  c2.policy = SchedulingPolicy::kPriority;
  Harness p(c2, make_kv(100, 3, 10, 8));
  ASSERT_TRUE(p.scheduler.add_request(make_request("L", 8, 20, 5)).ok());
  EXPECT_EQ(p.step(), "L:0+8s");
  ASSERT_TRUE(p.scheduler.add_request(make_request("H", 8, 20, 0)).ok());
  EXPECT_EQ(p.step(), "L:8+1s H:0+8s");
  EXPECT_EQ(p.step(), "L:9+1s H:8+1s");
  EXPECT_EQ(p.step(), "L:10+1s H:9+1s");
  EXPECT_EQ(p.step(), "L:11+1s H:10+1s");  // L takes the last CSA block
  EXPECT_EQ(p.step(), "H:11+1s | preempted L");
  EXPECT_EQ(p.last.total_num_scheduled_tokens, 1);  // L's share was taken back
}

TEST(Scheduler, BadRequestsFailAloneWithClearErrors) {
  Harness h(config(16, 4, 64), make_kv(100, 8, 10, 8));
  ASSERT_TRUE(h.scheduler.add_request(make_request("ok", 5, 2)).ok());
  EXPECT_EQ(h.scheduler.add_request(make_request("long", 65, 2)).message(),
            "request 'long': the prompt has 65 tokens, more than max_model_len = 64");
  auto bad = make_request("bad", 5, 2);
  bad->params.temperature = -1;
  EXPECT_EQ(h.scheduler.add_request(std::move(bad)).message(),
            "request 'bad': SamplingParams.temperature must be a finite number >= 0 (0 = greedy), got -1");
  EXPECT_EQ(h.scheduler.add_request(make_request("empty", 0, 2)).message(),
            "request 'empty': the prompt is empty; at least one token is needed");
  EXPECT_EQ(h.scheduler.add_request(make_request("ok", 3, 2)).message(),
            "request 'ok': a request with this id is already queued or running");
  // Prompt == max_model_len: one token, then "length". 60-token prompt: stops at 64 tokens.
  ASSERT_TRUE(h.scheduler.add_request(make_request("full", 64, std::nullopt)).ok());
  ASSERT_TRUE(h.scheduler.add_request(make_request("edge", 60, std::nullopt)).ok());
  while (h.scheduler.has_unfinished_requests()) h.step();
  EXPECT_EQ(h.finished["ok"]->output_token_ids.size(), 2u);
  EXPECT_EQ(h.finished["full"]->output_token_ids.size(), 1u);
  EXPECT_EQ(h.finished["full"]->status, RequestStatus::kFinishedLength);
  EXPECT_EQ(h.finished["edge"]->output_token_ids.size(), 4u);
  EXPECT_EQ(h.finished["edge"]->status, RequestStatus::kFinishedLength);
  EXPECT_EQ(h.finished.size(), 3u);
  expect_all_free(*h.kv);

  // A cache too small for the request's longest possible length: 55 tokens = 13 CSA entries = 7 blocks.
  Harness small(config(16, 4, 64), make_kv(100, 4, 10, 8));
  EXPECT_EQ(small.scheduler.add_request(make_request("huge", 40, 16)).message(),
            "request 'huge': a sequence of 55 tokens needs 7 'csa' KV blocks but the whole pool has 4; raise the "
            "KV cache memory or lower max_model_len / max_tokens");
  EXPECT_TRUE(small.scheduler.add_request(make_request("fits", 20, 12)).ok());  // 31 tokens: 4 blocks
}

TEST(Scheduler, VocabularyChecks) {
  SchedulerConfig c = config(16, 4);
  c.vocab_size = 50;
  Harness h(c, make_kv(100, 8, 10, 8));
  auto r = make_request("v", 3, 2);
  r->prompt_token_ids = {1, 2, 50};
  EXPECT_EQ(h.scheduler.add_request(std::move(r)).message(),
            "request 'v': prompt token 2 is 50, outside the vocabulary [0, 50)");
  auto s = make_request("w", 3, 2);
  s->prompt_token_ids = {1, 2, 3};
  s->params.stop_token_ids = {77};
  EXPECT_EQ(h.scheduler.add_request(std::move(s)).message(),
            "request 'w': SamplingParams.stop_token_ids has token id 77, outside the vocabulary [0, 50)");
}

TEST(Scheduler, StopTokensAndExternalStops) {
  Harness h(config(16, 4), make_kv(100, 100, 10, 8));
  auto a = make_request("A", 4, 10);
  a->eos_token_id = testing::fake_token("A", 2);  // the third output is EOS
  ASSERT_TRUE(h.scheduler.add_request(std::move(a)).ok());
  auto b = make_request("B", 4, 10);
  b->params.stop_token_ids = {testing::fake_token("B", 1)};
  ASSERT_TRUE(h.scheduler.add_request(std::move(b)).ok());
  ASSERT_TRUE(h.scheduler.add_request(make_request("C", 4, 10)).ok());
  h.step();
  h.step();
  ASSERT_EQ(h.finished.count("B"), 1u);
  EXPECT_EQ(h.finished["B"]->status, RequestStatus::kFinishedStopped);
  EXPECT_EQ(h.finished["B"]->stop_token, testing::fake_token("B", 1));
  h.step();
  ASSERT_EQ(h.finished.count("A"), 1u);
  EXPECT_EQ(h.finished["A"]->output_token_ids, expected_tokens("A", 3));
  // A stop string found by the detokenizer ends C from outside.
  auto c = h.scheduler.finish_request("C", sample::FinishReason::kStop);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, RequestStatus::kFinishedStopped);
  EXPECT_EQ(h.scheduler.finish_request("C", sample::FinishReason::kStop), nullptr);
  EXPECT_EQ(h.scheduler.schedule().finished_request_ids, (Ids{"A", "C"}));
  expect_all_free(*h.kv);
}

TEST(Scheduler, AbortWhileWaitingRunningAndInFlight) {
  Harness h(config(8, 1), make_kv(100, 100, 10, 8));
  ASSERT_TRUE(h.scheduler.add_request(make_request("A", 4, 10)).ok());
  ASSERT_TRUE(h.scheduler.add_request(make_request("B", 4, 10)).ok());
  ASSERT_TRUE(h.scheduler.add_request(make_request("C", 4, 10)).ok());
  EXPECT_EQ(h.step(), "A:0+4s");
  auto b = h.scheduler.abort_request("B");  // waiting
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->status, RequestStatus::kFinishedAborted);
  h.before_update = [&](const SchedulerOutput&) { EXPECT_NE(h.scheduler.abort_request("A"), nullptr); };
  EXPECT_EQ(h.step(), "A:4+1s");  // aborted during the step: its result is dropped
  EXPECT_EQ(h.last.finished_request_ids, (Ids{"B"}));
  h.before_update = nullptr;
  EXPECT_EQ(h.step(), "C:0+4s");
  EXPECT_EQ(h.last.finished_request_ids, (Ids{"A"}));
  EXPECT_EQ(h.scheduler.abort_request("nope"), nullptr);
}

TEST(Scheduler, WithoutChunkedPrefillPromptsAreScheduledWhole) {
  SchedulerConfig c = config(12, 4, 12);
  c.enable_chunked_prefill = false;
  Harness h(c, make_kv(100, 100, 10, 8));
  ASSERT_TRUE(h.scheduler.add_request(make_request("A", 4, 5)).ok());
  ASSERT_TRUE(h.scheduler.add_request(make_request("B", 12, 1)).ok());
  EXPECT_EQ(h.step(), "A:0+4s");  // B (12) does not fit the 8 tokens left
  for (int k = 1; k <= 4; ++k) EXPECT_EQ(h.step(), "A:" + std::to_string(3 + k) + "+1s");
  EXPECT_EQ(h.step(), "B:0+12s");
  EXPECT_FALSE(h.scheduler.has_unfinished_requests());
  SchedulerConfig bad = c;
  bad.max_num_batched_tokens = 8;
  EXPECT_EQ(bad.validate().message(),
            "without chunked prefill, max_num_batched_tokens (8) must be >= max_model_len (12) or long prompts could "
            "never be scheduled");
}

TEST(Scheduler, MaxNumSeqsCap) {
  Harness h(config(64, 2), make_kv(100, 100, 10, 8));
  for (const char* id : {"A", "B", "C"}) ASSERT_TRUE(h.scheduler.add_request(make_request(id, 2, 2)).ok());
  EXPECT_EQ(h.step(), "A:0+2s B:0+2s");
  EXPECT_EQ(h.step(), "A:2+1s B:2+1s");
  EXPECT_EQ(h.step(), "C:0+2s");
}

TEST(Scheduler, SeedsAreTheRequestsOrDerivedFromTheEngineSeed) {
  SchedulerConfig c = config(64, 4);
  c.seed = 1234;
  Harness h(c, make_kv(100, 100, 10, 8));
  auto a = make_request("A", 2, 2);
  a->params.seed = 77;
  ASSERT_TRUE(h.scheduler.add_request(std::move(a)).ok());
  ASSERT_TRUE(h.scheduler.add_request(make_request("B", 2, 2)).ok());
  EXPECT_EQ(h.scheduler.get_request("A")->seed, 77u);
  EXPECT_EQ(h.scheduler.get_request("B")->seed, sample::derive_request_seed(1234, 1));
  const SchedulerOutput out = h.scheduler.schedule();
  EXPECT_EQ(out.chunks[0].seed, 77u);
  EXPECT_EQ(out.chunks[1].seed, sample::derive_request_seed(1234, 1));
}

TEST(Scheduler, DecodeFreesOutOfWindowBlocks) {
  // Window 8 (7 rows kept), 4-token blocks: after 20 computed tokens only positions 13..19 are
  // needed, i.e. blocks 3 and 4; blocks 0-2 went back to the pool (in position order).
  Harness h(config(16, 4), make_kv(20, 100, 10, 8));
  ASSERT_TRUE(h.scheduler.add_request(make_request("A", 16, 10)).ok());
  EXPECT_EQ(h.step(), "A:0+16s");
  EXPECT_EQ(h.kv->block_tables(0)[kv::StateKind::kWindow], (std::vector<kv::BlockId>{kNull, kNull, 2, 3}));
  for (int k = 0; k < 4; ++k) h.step();
  EXPECT_EQ(h.kv->block_tables(0)[kv::StateKind::kWindow], (std::vector<kv::BlockId>{kNull, kNull, kNull, 3, 4}));
  EXPECT_EQ(h.kv->manager(kv::StateKind::kWindow)->pool().free_list(),
            (std::vector<kv::BlockId>{5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 0, 1, 2}));
}

TEST(Request, SequencesOfOneRequest) {
  SamplingParams p;
  p.n = 3;
  p.seed = 5;
  auto rs = make_sequence_requests("x", {1, 2}, p, 7);
  ASSERT_EQ(rs.size(), 3u);
  EXPECT_EQ(rs[2]->request_id, "x#2");
  EXPECT_EQ(rs[2]->sequence_index, 2u);
  EXPECT_EQ(rs[1]->eos_token_id, 7);
  p.n = 1;
  EXPECT_EQ(make_sequence_requests("y", {1}, p)[0]->request_id, "y");
  Harness h(config(16, 4), make_kv(100, 100, 10, 8));
  for (auto& r : rs) ASSERT_TRUE(h.scheduler.add_request(std::move(r)).ok());
  const SchedulerOutput out = h.scheduler.schedule();
  ASSERT_EQ(out.chunks.size(), 3u);
  EXPECT_EQ(out.chunks[1].seed, 5u);
  EXPECT_EQ(out.chunks[1].sequence_index, 1u);
}

TEST(Scheduler, RequestNotReadyIsPassedOverUntilReady) {
  // B's grammar is "compiling": A and C run, B waits without holding anyone up, then joins.
  Harness h(config(64, 4), make_kv(100, 100, 10, 8));
  for (const char* id : {"A", "B", "C"}) ASSERT_TRUE(h.scheduler.add_request(make_request(id, 4, 2)).ok());
  ASSERT_TRUE(h.scheduler.set_ready("B", false));
  EXPECT_FALSE(h.scheduler.set_ready("nobody", true));
  EXPECT_EQ(h.step(), "A:0+4s C:0+4s");
  EXPECT_EQ(h.scheduler.waiting_ids(), (Ids{"B"}));
  ASSERT_TRUE(h.scheduler.set_ready("B", true));
  EXPECT_EQ(h.step(), "A:4+1s C:4+1s B:0+4s");
  EXPECT_EQ(h.step(), "B:4+1s");
  EXPECT_EQ(h.finished.size(), 3u);
  expect_all_free(*h.kv);
}

}  // namespace
}  // namespace deepinfer::engine
