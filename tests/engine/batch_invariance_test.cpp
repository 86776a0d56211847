// Scheduler + Sampler end to end over a fake model whose logits are a pure function of the sequence
// so far: 32 mixed requests (greedy, seeded temperature / top-k / top-p / penalties) batched under a
// cache tight enough to preempt must produce exactly the tokens each request produces alone.
// This is the tensor-free half of "batched == alone"; the model half is the batch-invariant forward.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>

#include "engine/scheduler.h"
#include "sample/sampler.h"
#include "scheduler_harness.h"

namespace deepinfer::engine {
namespace {

constexpr int kVocab = 64;

// Logits for the next token of a sequence: hash of (all tokens so far) -> pseudo-normal values.
std::vector<float> fake_logits(const Request& r) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t p = 0; p < r.num_tokens(); ++p) h = (h ^ static_cast<uint64_t>(r.token_at(p))) * 1099511628211ull;
  std::mt19937_64 g(h);
  std::normal_distribution<float> n(0.0f, 2.0f);
  std::vector<float> l(kVocab);
  for (float& v : l) v = n(g);
  return l;
}

struct Spec {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams params;
};

std::vector<int32_t> sample_step(const Scheduler& s, const SchedulerOutput& so, const sample::Sampler& sampler) {
  std::vector<int32_t> tokens(so.chunks.size(), -1);
  for (size_t i = 0; i < so.chunks.size(); ++i) {
    const ScheduledChunk& ch = so.chunks[i];
    if (!ch.samples) continue;
    const Request* r = s.get_request(ch.request_id);
    if (r == nullptr) continue;
    sample::SampleRow row;
    row.params = &r->params;
    row.seed = ch.seed;
    row.sequence_index = ch.sequence_index;
    row.prompt_token_ids = r->prompt_token_ids;
    row.output_token_ids = r->output_token_ids;
    EXPECT_EQ(static_cast<int64_t>(r->output_token_ids.size()), ch.num_output_tokens);
    tokens[i] = sampler.sample_row(fake_logits(*r), row).token;
  }
  return tokens;
}

// async: each step is scheduled while the previous one is "in flight" (placeholders, then
// fill_placeholders), as the engine does with async scheduling.
std::map<std::string, std::vector<int32_t>> run(const std::vector<Spec>& specs, int csa_blocks, uint64_t* preemptions,
                                                bool async = false) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 32;
  c.max_num_seqs = 32;
  c.max_model_len = 64;
  c.vocab_size = kVocab;
  auto kv = testing::make_kv(32 * 4 + 8, csa_blocks, 64, 32);
  Scheduler s(c, kv.get());
  for (const Spec& spec : specs) {
    EXPECT_TRUE(s.add_request(std::make_unique<Request>(spec.id, spec.prompt, spec.params)).ok()) << spec.id;
  }
  sample::Sampler sampler;
  std::map<std::string, std::vector<int32_t>> out;
  std::optional<SchedulerOutput> in_flight;
  while (s.has_unfinished_requests()) {
    if (!in_flight) in_flight = s.schedule();
    std::optional<SchedulerOutput> next;
    if (async) next = s.schedule();
    const std::vector<int32_t> tokens = sample_step(s, *in_flight, sampler);
    for (auto& r : s.update_from_output(*in_flight, tokens)) out[r->request_id] = r->output_token_ids;
    in_flight.reset();
    if (next) {
      s.fill_placeholders(&*next);
      if (!next->empty()) in_flight = std::move(next);
    }
    const Status inv = s.check_invariants();
    EXPECT_TRUE(inv.ok()) << inv.to_string();
    if (::testing::Test::HasFailure()) break;
  }
  *preemptions = s.num_preemptions();
  return out;
}

constexpr int kCsaBlocks = 32;

TEST(BatchInvariance, SeededAndGreedyRequestsGiveTheSameTokensAloneAndBatched) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::vector<Spec> specs;
  for (int i = 0; i < 32; ++i) {
    Spec s;
    s.id = "q";
    s.id += std::to_string(i);
    const int len = 1 + static_cast<int>(gen() % 40);
    for (int k = 0; k < len; ++k) s.prompt.push_back(static_cast<int32_t>(gen() % kVocab));
    s.params.max_tokens = 4 + static_cast<int>(gen() % 20);
    switch (i % 4) {
      case 0: s.params.temperature = 0; break;
      case 1: s.params.temperature = 0.8f; s.params.top_p = 0.9f; break;
      case 2: s.params.top_k = 5; s.params.repetition_penalty = 1.3f; break;
      case 3: s.params.min_p = 0.05f; s.params.presence_penalty = 0.5f; s.params.frequency_penalty = 0.3f; break;
    }
    s.params.seed = gen();
    specs.push_back(s);
  }
  uint64_t batched_preemptions = 0, alone_preemptions = 0;
  // kCsaBlocks CSA blocks (8 entries each) for 32 requests of up to 63 tokens: the batched runs
  // must preempt. With 40 blocks 5 of 3,000 random draws did not (seed 4022465536 among them, a
  // failed CI run); with 32 none of the same 3,000 did. One request alone never needs more than 2.
  const auto batched = run(specs, kCsaBlocks, &batched_preemptions);
  EXPECT_GT(batched_preemptions, 0u);
  ASSERT_EQ(batched.size(), specs.size());
  // Async scheduling (placeholders for the tokens in flight) changes nothing either.
  uint64_t async_preemptions = 0;
  const auto batched_async = run(specs, kCsaBlocks, &async_preemptions, /*async=*/true);
  EXPECT_GT(async_preemptions, 0u);
  ASSERT_EQ(batched_async.size(), specs.size());
  for (const Spec& s : specs) {
    const auto alone = run({s}, kCsaBlocks, &alone_preemptions);
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_EQ(batched.at(s.id), alone.at(s.id)) << s.id;
    EXPECT_EQ(batched_async.at(s.id), alone.at(s.id)) << s.id << " (async)";
    EXPECT_EQ(alone_preemptions, 0u);
    const auto alone_async = run({s}, kCsaBlocks, &alone_preemptions, /*async=*/true);
    EXPECT_EQ(alone_async.at(s.id), alone.at(s.id)) << s.id << " (alone, async)";
  }
}

}  // namespace
}  // namespace deepinfer::engine
