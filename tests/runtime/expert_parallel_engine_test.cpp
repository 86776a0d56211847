// EngineConfig.enable_expert_parallel at world size 1 (issue 9): the engine loads DeepSeek-V4 with
// a one-rank in-process communicator and the identity placement, so every MoE layer's routed
// experts run through dist::ExpertParallelMoe (dispatch → all-to-all → local experts → back →
// combine). On the CPU that path is bitwise the plain MoE, so through the whole engine:
//  * greedy generation of a batch (text prompts and random token-id prompts, mixed lengths, more
//    requests than max_num_seqs, async scheduling) is token-identical to the same engine config
//    without the flag, on the trained deepseek-v4-tiny-stories and on the v4tiny_quant fixture
//    (FP8 / FP4 experts);
//  * seeded sampling (temperature 0.8, top_p 0.9) is token-identical too (the logits are bitwise
//    equal, not only their argmax);
//  * the engine says it took the path (its create log names the in-process communicator), and the
//    hook itself builds a world-size-1 context with the identity placement;
//  * a Llama model with the flag is InvalidArgument naming the architecture.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/logging.h"
#include "backend/make_backend.h"
#include "deepinfer/llm.h"
#include "engine/expert_parallel_hook.h"
#include "io/config.h"
#include "tokenizer/tokenizer.h"
#include "workload.h"

namespace deepinfer {
namespace {

const char* kTinyV4 = "tests/data/models/deepseek-v4-tiny-stories";
const char* kQuant = "tests/data/v4-fixtures/v4tiny_quant";
const char* kStories260K = "tests/data/models/stories260K/hf";

EngineConfig config_of(const std::string& model, bool expert_parallel) {
  EngineConfig cfg;
  cfg.model = model;
  cfg.kv_cache_memory = int64_t{64} << 20;
  cfg.max_num_seqs = 6;  // fewer than the requests: requests join and leave the running batch
  cfg.max_model_len = 128;
  cfg.max_num_batched_tokens = 96;  // a step cannot hold every prompt: prefills may be split
  cfg.enable_expert_parallel = expert_parallel;
  return cfg;
}

using runtime_test::Workload;

// `n` requests with 4..max_out output tokens; sampling params from `sampling(rng)`.
template <typename Sampling>
Workload random_workload(int64_t vocab, int32_t bos, int n, int max_prompt, int max_out,
                         std::mt19937& rng, Sampling sampling) {
  return runtime_test::random_workload(vocab, bos, n, max_prompt, 4, max_out, rng,
                                       [&](int, std::mt19937& g) { return sampling(g); });
}

SamplingParams greedy(std::mt19937&) {
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  return p;
}

SamplingParams seeded(std::mt19937& rng) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.seed = rng();
  p.ignore_eos = true;
  return p;
}

// Runs `w` through one engine; the output token ids per request, in order.
std::vector<std::vector<int32_t>> run(const EngineConfig& cfg, const Workload& w, std::string* create_log) {
  testing::internal::CaptureStderr();
  const LogLevel level = log_level();
  set_log_level(LogLevel::kInfo);  // the create log line says which MoE path the engine took
  auto llm = LLM::create(cfg);
  set_log_level(level);
  *create_log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(llm.ok()) << llm.status().to_string();
  if (!llm.ok()) return {};
  auto outs = (*llm)->generate(w.prompts, w.params);
  EXPECT_TRUE(outs.ok()) << outs.status().to_string();
  if (!outs.ok()) return {};
  const Status inv = (*llm)->engine().check_invariants();
  EXPECT_TRUE(inv.ok()) << inv.to_string();
  std::vector<std::vector<int32_t>> ids;
  for (const auto& o : *outs) {
    EXPECT_TRUE(o.error.empty()) << o.request_id << ": " << o.error;
    EXPECT_EQ(o.outputs.size(), 1u);
    ids.push_back(o.outputs.empty() ? std::vector<int32_t>{} : o.outputs[0].token_ids);
  }
  return ids;
}

void expect_same_with_and_without_ep(const std::string& model, const Workload& w) {
  std::string plain_log, ep_log;
  const auto plain = run(config_of(model, false), w, &plain_log);
  const auto ep = run(config_of(model, true), w, &ep_log);
  EXPECT_EQ(plain_log.find("expert parallel"), std::string::npos) << plain_log;
  EXPECT_NE(ep_log.find("expert parallel (world size 1, in-process)"), std::string::npos) << ep_log;
  ASSERT_EQ(plain.size(), w.prompts.size());
  ASSERT_EQ(ep.size(), w.prompts.size());
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    EXPECT_EQ(plain[i].size(), static_cast<size_t>(*w.params[i].max_tokens)) << "request " << i;
    EXPECT_EQ(ep[i], plain[i]) << "request " << i;
  }
}

TEST(ExpertParallelEngine, TinyStoriesGreedyEqualsPlain) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Random id prompts (BOS = 1, vocab 512) plus text prompts through the tokenizer.
  Workload w = random_workload(512, 1, 10, 70, 24, rng, greedy);
  EngineConfig cfg = config_of(kTinyV4, false);
  auto llm = LLM::create(cfg);
  ASSERT_TRUE(llm.ok()) << llm.status().to_string();
  ASSERT_NE((*llm)->engine().tokenizer(), nullptr);
  for (const char* text : {"Once upon a time", "Lily and Ben went to the park", "The little dog"}) {
    auto ids = (*llm)->engine().tokenizer()->encode(text, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    w.prompts.push_back(*ids);
    SamplingParams p = greedy(rng);
    p.max_tokens = 20;
    w.params.push_back(p);
  }
  llm->reset();
  expect_same_with_and_without_ep(kTinyV4, w);
}

TEST(ExpertParallelEngine, TinyStoriesSeededSamplingEqualsPlain) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  expect_same_with_and_without_ep(kTinyV4, random_workload(512, 1, 8, 40, 16, rng, seeded));
}

TEST(ExpertParallelEngine, QuantFixtureGreedyEqualsPlain) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // v4tiny_quant: FP8 / FP4 experts, vocab 384, no tokenizer (token-id prompts, no BOS).
  expect_same_with_and_without_ep(kQuant, random_workload(384, -1, 10, 70, 16, rng, greedy));
}

TEST(ExpertParallelEngine, HookBuildsOneRankIdentityContext) {
  auto cfg = io::load_model_config(std::string(kTinyV4) + "/config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto be = backend::make_backend("cpu");
  ASSERT_TRUE(be.ok()) << be.status().to_string();
  auto ep = engine::load_model_expert_parallel(kTinyV4, *cfg, "cpu", be->get());
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  ASSERT_TRUE(ep->runtime && ep->model);
  const auto& rt = *ep->runtime;
  ASSERT_NE(rt.comm, nullptr);
  EXPECT_EQ(rt.context.comm, rt.comm.get());
  EXPECT_EQ(rt.comm->world_size(), 1);
  EXPECT_EQ(rt.comm->rank(), 0);
  EXPECT_STREQ(rt.comm->name(), "in-process");
  const auto& c = cfg->deepseek_v4();
  EXPECT_EQ(rt.context.placement.num_gpus, 1);
  EXPECT_EQ(rt.context.placement.num_layers, c.num_hidden_layers);
  EXPECT_EQ(rt.context.placement.num_replicas, c.n_routed_experts);  // no redundant slots
  for (int l = 0; l < rt.context.placement.num_layers; ++l) {
    const auto local = rt.context.local_experts(l);
    ASSERT_EQ(local.size(), static_cast<size_t>(c.n_routed_experts));
    for (size_t e = 0; e < local.size(); ++e) EXPECT_EQ(local[e], static_cast<int32_t>(e)) << "layer " << l;
  }
  EXPECT_EQ(ep->model->info().family, "deepseek_v4");
}

TEST(ExpertParallelEngine, LlamaIsAClearError) {
  auto llm = LLM::create(config_of(kStories260K, true));
  ASSERT_FALSE(llm.ok());
  EXPECT_EQ(llm.status().code(), StatusCode::kInvalidArgument) << llm.status().to_string();
  const std::string msg = llm.status().message();
  EXPECT_NE(msg.find("enable_expert_parallel"), std::string::npos) << msg;
  EXPECT_NE(msg.find("LlamaForCausalLM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("DeepSeek-V4"), std::string::npos) << msg;
  // Without the flag the same model loads.
  EXPECT_TRUE(LLM::create(config_of(kStories260K, false)).ok());
}

}  // namespace
}  // namespace deepinfer
