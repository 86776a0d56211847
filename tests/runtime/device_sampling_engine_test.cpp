// EngineConfig::device_sampling through the whole engine on the CPU (where Backend::sample is the
// host sampler's own code): the same tokens with it on and off, for greedy and seeded random
// requests of every filter, n > 1, async scheduling on and off, and steps that must fall back to
// the host path (penalties, logit_bias, logprobs, min_tokens) mixed into the batch. Also that the
// device path is really taken when it can be (EngineStats::num_device_sampled_steps) and never
// when a row needs the host sampler. And EngineConfig::device_token_feedback (session 14).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/logging.h"
#include "deepinfer/engine.h"
#include "deepinfer/llm.h"

namespace deepinfer {
namespace {

const bool kQuietLogs = (set_log_level(LogLevel::kWarning), true);

const char* kTinyV4 = "tests/data/models/deepseek-v4-tiny-stories";

struct EngineRun {
  std::vector<std::vector<std::vector<int32_t>>> tokens;  // [request][sequence] -> ids
  EngineStats stats;
};

EngineRun generate(bool device_sampling, bool async,
                   const std::vector<std::vector<int32_t>>& prompts,
                   const std::vector<SamplingParams>& params, bool feedback = true) {
  EngineConfig cfg;
  cfg.model = kTinyV4;
  cfg.kv_cache_memory = int64_t{64} << 20;
  cfg.max_num_seqs = 16;
  cfg.max_model_len = 128;
  cfg.max_num_batched_tokens = 256;
  cfg.async_scheduling = async;
  cfg.device_sampling = device_sampling;
  cfg.device_token_feedback = feedback;
  auto llm = LLM::create(cfg);
  EXPECT_TRUE(llm.ok()) << llm.status().to_string();
  EngineRun run;
  if (!llm.ok()) return run;
  auto outs = (*llm)->generate(prompts, params);
  EXPECT_TRUE(outs.ok()) << outs.status().to_string();
  if (!outs.ok()) return run;
  for (const auto& o : *outs) {
    EXPECT_TRUE(o.error.empty()) << o.error;
    std::vector<std::vector<int32_t>> seqs;
    for (const auto& c : o.outputs) seqs.push_back(c.token_ids);
    run.tokens.push_back(seqs);
  }
  run.stats = (*llm)->engine().stats();
  return run;
}

std::vector<std::vector<int32_t>> random_prompts(std::mt19937& rng, int n) {
  std::vector<std::vector<int32_t>> prompts;
  std::uniform_int_distribution<int> len(1, 24), tok(3, 500);  // vocabulary 512
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(len(rng)));
    for (auto& t : p) t = tok(rng);
    prompts.push_back(p);
  }
  return prompts;
}

// Plain rows only: every filter, greedy and random, seeded, n = 2 for some.
std::vector<SamplingParams> plain_params(std::mt19937& rng, int n) {
  std::vector<SamplingParams> out;
  for (int i = 0; i < n; ++i) {
    SamplingParams p;
    p.max_tokens = 6 + static_cast<int>(rng() % 10);
    p.seed = rng();
    switch (i % 6) {
      case 0: p.temperature = 0.f; break;
      case 1: p.temperature = 1.0f; break;
      case 2: p.temperature = 0.8f; p.top_p = 0.9f; break;
      case 3: p.temperature = 1.2f; p.top_k = 20; break;
      case 4: p.temperature = 0.7f; p.min_p = 0.05f; p.n = 2; break;
      default: p.temperature = 0.9f; p.top_k = 50; p.top_p = 0.8f; p.min_p = 0.02f; break;
    }
    if (i % 4 == 3) p.ignore_eos = true;
    out.push_back(p);
  }
  return out;
}

TEST(DeviceSampling, SameTokensOnAndOffWithPlainRows) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto prompts = random_prompts(rng, 14);
  const auto params = plain_params(rng, 14);
  for (bool async : {true, false}) {
    const EngineRun host = generate(false, async, prompts, params);
    const EngineRun device = generate(true, async, prompts, params);
    ASSERT_EQ(host.tokens.size(), prompts.size());
    EXPECT_EQ(device.tokens, host.tokens) << "async " << async;
    EXPECT_EQ(host.stats.num_device_sampled_steps, 0);
    // Every step had only plain rows: all of them were sampled by the backend.
    EXPECT_EQ(device.stats.num_device_sampled_steps, device.stats.num_steps) << "async " << async;
    EXPECT_GT(device.stats.num_steps, 0);
  }
}

TEST(DeviceSampling, RowsThatNeedTheHostSamplerKeepTheHostPath) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto prompts = random_prompts(rng, 8);
  auto params = plain_params(rng, 8);
  // One row of each kind the device op does not do, mixed into the plain ones.
  params[1].repetition_penalty = 1.3f;
  params[2].logit_bias[17] = 5.f;
  params[3].logprobs = 2;
  params[5].frequency_penalty = 0.5f;
  params[6].min_tokens = 4;  // host path for its first four tokens only
  params[6].ignore_eos = false;
  for (bool async : {true, false}) {
    const EngineRun host = generate(false, async, prompts, params);
    const EngineRun device = generate(true, async, prompts, params);
    EXPECT_EQ(device.tokens, host.tokens) << "async " << async;
    EXPECT_EQ(host.stats.num_device_sampled_steps, 0);
    // Steps with one of those rows in the batch went to the host sampler.
    EXPECT_LT(device.stats.num_device_sampled_steps, device.stats.num_steps);
  }
  // Only min_tokens: the device path once min_tokens are out.
  std::vector<SamplingParams> only(1, params[6]);
  only[0].max_tokens = 10;
  only[0].ignore_eos = true;
  const EngineRun one = generate(true, true, {prompts[0]}, only);
  const EngineRun one_host = generate(false, true, {prompts[0]}, only);
  EXPECT_EQ(one.tokens, one_host.tokens);
  // 10 steps (one prefill + 9 decodes, each sampling): the first 4 on the host.
  EXPECT_EQ(one.stats.num_device_sampled_steps, one.stats.num_steps - 4);
}

// EngineConfig::device_token_feedback (docs/engine.md "Token ids on the device"): a decode step
// queued before the previous step's ids reached the host, fed from them on the backend, gives the
// same tokens as waiting for them — plain rows, rows that need the host sampler mixed in (their
// steps and the steps after them are not fed), and requests stopped by a stop token while their
// next step was already queued (its token is dropped). Fed steps are counted: a lone request of
// max_tokens T runs T steps, T - 1 of them fed.
TEST(DeviceTokenFeedback, SameTokensFedOrNot) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto prompts = random_prompts(rng, 12);
  auto params = plain_params(rng, 12);
  const EngineRun off = generate(true, true, prompts, params, /*feedback=*/false);
  const EngineRun on = generate(true, true, prompts, params);
  ASSERT_EQ(off.tokens.size(), prompts.size());
  EXPECT_EQ(on.tokens, off.tokens);
  EXPECT_EQ(off.stats.num_fed_steps, 0);
  EXPECT_GT(on.stats.num_fed_steps, 0);
  EXPECT_LT(on.stats.num_fed_steps, on.stats.num_steps);

  params[2].repetition_penalty = 1.2f;  // host sampler: its steps feed nothing
  params[7].logprobs = 1;
  const EngineRun mixed_off = generate(true, true, prompts, params, false);
  const EngineRun mixed_on = generate(true, true, prompts, params);
  EXPECT_EQ(mixed_on.tokens, mixed_off.tokens);
  EXPECT_EQ(mixed_off.stats.num_fed_steps, 0);

  // Stop tokens: each greedy request stops at a token it is known to produce (its 2nd..6th).
  std::vector<SamplingParams> greedy(prompts.size());
  for (auto& p : greedy) {
    p.temperature = 0.f;
    p.max_tokens = 12;
    p.ignore_eos = true;
  }
  const EngineRun plain = generate(true, true, prompts, greedy, false);
  ASSERT_EQ(plain.tokens.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& out = plain.tokens[i][0];
    ASSERT_GE(out.size(), 6u);
    greedy[i].stop_token_ids = {out[1 + i % 5]};
  }
  const EngineRun stop_off = generate(true, true, prompts, greedy, false);
  const EngineRun stop_on = generate(true, true, prompts, greedy);
  EXPECT_EQ(stop_on.tokens, stop_off.tokens);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_LE(stop_on.tokens[i][0].size(), 1 + i % 5 + 1) << "request " << i << " did not stop";
  EXPECT_GT(stop_on.stats.num_fed_steps, 0);

  std::vector<SamplingParams> one(1);
  one[0].temperature = 0.f;
  one[0].max_tokens = 10;
  one[0].ignore_eos = true;
  const EngineRun lone = generate(true, true, {prompts[0]}, one);
  EXPECT_EQ(lone.stats.num_steps, 10);
  EXPECT_EQ(lone.stats.num_fed_steps, 9);
  const EngineRun lone_sync = generate(true, false, {prompts[0]}, one);  // no worker: never fed
  EXPECT_EQ(lone_sync.stats.num_fed_steps, 0);
  EXPECT_EQ(lone_sync.tokens, lone.tokens);
}

}  // namespace
}  // namespace deepinfer
