// Batched == alone through the whole engine, under a KV budget tight enough that requests are
// preempted and recomputed, with async scheduling on and off:
//  * greedy, >= 32 concurrent requests of mixed prompt and output lengths, on every V4 fixture
//    (random tiny checkpoints without a tokenizer: token-id prompts), the trained
//    deepseek-v4-tiny-stories and stories260K;
//  * seeded sampling (temperature 0.8, top_p 0.9, one seed per request) on deepseek-v4-tiny-stories.
// Every batched run must report preemptions (EngineStats.num_preemptions > 0).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/logging.h"
#include "deepinfer/llm.h"
#include "workload.h"

namespace deepinfer {
namespace {

// The engine logs its pool plan at info level on every create; the budget search makes dozens.
const bool kQuietLogs = (set_log_level(LogLevel::kWarning), true);

const char* kTinyV4 = "tests/data/models/deepseek-v4-tiny-stories";
const char* kStories260K = "tests/data/models/stories260K/hf";

constexpr int64_t kMaxModelLen = 96;

EngineConfig base_config(const std::string& model, bool async) {
  EngineConfig cfg;
  cfg.model = model;
  cfg.kv_cache_memory = int64_t{64} << 20;
  cfg.max_num_seqs = 64;
  cfg.max_model_len = kMaxModelLen;
  cfg.max_num_batched_tokens = 512;
  cfg.async_scheduling = async;
  return cfg;
}

std::unique_ptr<LLM> make_llm(const EngineConfig& cfg) {
  auto llm = LLM::create(cfg);
  return llm.ok() ? std::move(llm).value() : nullptr;
}

// The smallest KV budget the engine accepts for max_model_len kMaxModelLen (binary search over
// create()), with small blocks so decoding keeps asking for more: far too small for 36 requests
// to hold their state at once.
int64_t tight_budget(const std::string& model) {
  EngineConfig cfg = base_config(model, false);
  cfg.max_num_seqs = 32;
  cfg.block_size = 8;
  cfg.compressed_entries_per_block = 2;
  int64_t lo = 1 << 10, hi = int64_t{1} << 28;  // create(lo) fails, create(hi) succeeds
  while (hi - lo > 512) {
    const int64_t mid = lo + (hi - lo) / 2;
    cfg.kv_cache_memory = mid;
    (LLM::create(cfg).ok() ? hi : lo) = mid;
  }
  return hi;
}

std::unique_ptr<LLM> make_tight(const std::string& model, int64_t budget, bool async) {
  EngineConfig cfg = base_config(model, async);
  cfg.max_num_seqs = 32;
  cfg.block_size = 8;
  cfg.compressed_entries_per_block = 2;
  cfg.kv_cache_memory = budget;
  return make_llm(cfg);
}

using runtime_test::Workload;

// `n` requests with 2..max_out output tokens (runtime_test::random_workload).
template <typename MakeParams>
Workload make_workload(int64_t vocab, int32_t bos, int n, int max_prompt, int max_out, std::mt19937& rng,
                       MakeParams make_params) {
  return runtime_test::random_workload(vocab, bos, n, max_prompt, 2, max_out, rng, make_params);
}

std::vector<std::vector<int32_t>> tokens_of(const std::vector<RequestOutput>& outs) {
  std::vector<std::vector<int32_t>> t;
  for (const auto& o : outs) {
    EXPECT_TRUE(o.error.empty()) << o.request_id << ": " << o.error;
    EXPECT_EQ(o.outputs.size(), 1u);
    t.push_back(o.outputs.empty() ? std::vector<int32_t>{} : o.outputs[0].token_ids);
  }
  return t;
}

// Each request alone (synchronous scheduling, roomy cache) is the reference; the whole batch under
// the tight budget must give exactly the same tokens with async scheduling on and off, and must
// have preempted.
void check_batched_equals_alone(const std::string& model, const Workload& w) {
  auto alone_llm = make_llm(base_config(model, /*async=*/false));
  ASSERT_TRUE(alone_llm) << model;
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    auto o = alone_llm->generate(std::vector<std::vector<int32_t>>{w.prompts[i]}, w.params[i]);
    ASSERT_TRUE(o.ok()) << o.status().to_string();
    alone.push_back(tokens_of(*o)[0]);
  }
  const int64_t budget = tight_budget(model);
  for (bool async : {true, false}) {
    SCOPED_TRACE(async ? "async scheduling" : "synchronous scheduling");
    auto batched = make_tight(model, budget, async);
    ASSERT_TRUE(batched);
    Status invariants = OkStatus();  // checked after every step
    auto outs = batched->generate(w.prompts, w.params, [&](size_t, size_t) {
      if (invariants.ok()) invariants = batched->engine().check_invariants();
    });
    ASSERT_TRUE(outs.ok()) << outs.status().to_string();
    EXPECT_TRUE(invariants.ok()) << invariants.to_string();
    const Status at_end = batched->engine().check_invariants();
    EXPECT_TRUE(at_end.ok()) << at_end.to_string();
    const auto got = tokens_of(*outs);
    for (size_t i = 0; i < w.prompts.size(); ++i) EXPECT_EQ(got[i], alone[i]) << "request " << i;
    EXPECT_GT(batched->engine().stats().num_preemptions, 0)
        << "the budget (" << budget << " bytes) was meant to force preemption";
  }
}

SamplingParams greedy_params(int, std::mt19937&) {
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  return p;
}

void check_greedy(const std::string& model, int num_requests, int max_prompt, int max_out) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(model + ", random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto probe = make_llm(base_config(model, false));
  ASSERT_TRUE(probe) << model;
  const int64_t vocab = probe->engine().vocab_size();
  const int32_t bos = probe->engine().tokenizer() ? 1 : -1;  // BOS of both trained tiny models
  probe.reset();
  check_batched_equals_alone(model, make_workload(vocab, bos, num_requests, max_prompt, max_out, rng, greedy_params));
}

TEST(BatchEquivalence, GreedyV4TinyB) { check_greedy("tests/data/models/v4tiny_b", 36, 60, 16); }
TEST(BatchEquivalence, GreedyV4TinyYarn) { check_greedy("tests/data/v4-fixtures/v4tiny_yarn", 36, 60, 16); }
TEST(BatchEquivalence, GreedyV4TinyQuant) { check_greedy("tests/data/v4-fixtures/v4tiny_quant", 36, 60, 16); }
TEST(BatchEquivalence, GreedyV4TinyVariant) { check_greedy("tests/data/v4-fixtures/v4tiny_variant", 36, 60, 16); }
TEST(BatchEquivalence, GreedyTinyStories) { check_greedy(kTinyV4, 36, 48, 16); }
TEST(BatchEquivalence, GreedyStories260K) { check_greedy(kStories260K, 36, 48, 16); }

// Seeded sampling: each request's tokens depend only on its own seed, alone or batched, async or
// not. Half the requests may stop at EOS (their slot in the step scheduled ahead is dropped).
TEST(BatchEquivalence, SeededSamplingTinyStories) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto w = make_workload(512, 1, 36, 48, 16, rng, [](int i, std::mt19937& g) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_p = 0.9f;
    p.seed = g();
    p.ignore_eos = i % 2 == 0;
    return p;
  });
  check_batched_equals_alone(kTinyV4, w);
}

}  // namespace
}  // namespace deepinfer
