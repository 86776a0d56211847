// Attention data parallelism in the engine (issue 9; engine/data_parallel*.h), ranks as threads of
// this process over dist::InProcessGroup on the CPU backend. Every rank has its own engine, batch
// and cache; prompt i runs on rank i % W. With expert parallelism the ranks load only their expert
// slots and step in lockstep (a rank with nothing to run takes idle steps), and since the CPU
// expert-parallel MoE is bitwise the plain MoE, greedy outputs must equal the single-rank engine's
// token for token:
//  * DP = 2 + EP on deepseek-v4-tiny-stories, uneven work (odd prompts stop early, so rank 1 runs
//    out first and idles), more requests per rank than max_num_seqs, split prefills;
//  * DP = 3 + EP on v4tiny_quant (FP8/FP4 experts, 6 experts: 2 slots per rank) with two prompts:
//    rank 2 has none and only idles;
//  * DP = 3 + EP on tiny-stories (8 experts over 3 ranks: 9 slots, one replicated expert);
//  * DP = 2 + EP with seeded sampling (per-request seeds): token-identical too;
//  * DP = 2 without EP: independent replicas, no lockstep;
//  * a rank failing stops the group with an error naming it (no hang); the engine's own checks;
//  * a RankResult survives its JSONL round trip (the launcher's child → parent channel).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "deepinfer/llm.h"
#include "engine/data_parallel.h"
#include "engine/data_parallel_run.h"
#include "workload.h"

namespace deepinfer {
namespace {

const char* kTinyV4 = "tests/data/models/deepseek-v4-tiny-stories";
const char* kQuant = "tests/data/v4-fixtures/v4tiny_quant";

using runtime_test::Workload;

EngineConfig config_of(const std::string& model) {
  EngineConfig cfg;
  cfg.model = model;
  cfg.kv_cache_memory = int64_t{32} << 20;
  cfg.max_num_seqs = 2;              // fewer than a rank's requests: they join and leave the batch
  cfg.max_model_len = 96;
  cfg.max_num_batched_tokens = 24;   // prompts longer than this are prefilled in chunks
  return cfg;
}

SamplingParams greedy(int, std::mt19937&) {
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  return p;
}

// The single-rank engine's output token ids per prompt.
std::vector<std::vector<int32_t>> single_rank(const EngineConfig& cfg, const Workload& w) {
  auto llm = LLM::create(cfg);
  EXPECT_TRUE(llm.ok()) << llm.status().to_string();
  if (!llm.ok()) return {};
  auto outs = (*llm)->generate(w.prompts, w.params);
  EXPECT_TRUE(outs.ok()) << outs.status().to_string();
  std::vector<std::vector<int32_t>> ids;
  for (const auto& o : *outs) {
    EXPECT_TRUE(o.error.empty()) << o.error;
    ids.push_back(o.outputs.at(0).token_ids);
  }
  return ids;
}

engine::RankEncoder encoder_of(const Workload& w) {
  return [&w](const Engine&, size_t i, std::vector<int32_t>* ids, SamplingParams* p, std::string*) {
    *ids = w.prompts[i];
    *p = w.params[i];
  };
}

// Runs `w` over `world` thread ranks; checks every prompt's tokens against the single-rank run and
// returns the ranks' results.
std::vector<engine::RankResult> expect_dp_equals_single(EngineConfig cfg, const Workload& w, int world,
                                                        bool expert_parallel) {
  const auto want = single_rank(cfg, w);
  cfg.data_parallel_size = world;
  cfg.enable_expert_parallel = expert_parallel;
  auto ranks = engine::run_ranks_in_threads(cfg, w.prompts.size(), encoder_of(w));
  EXPECT_TRUE(ranks.ok()) << ranks.status().to_string();
  if (!ranks.ok()) return {};
  EXPECT_EQ(ranks->size(), static_cast<size_t>(world));
  size_t seen = 0;
  for (const auto& rr : *ranks) {
    EXPECT_EQ(rr.indices, engine::rank_prompt_indices(w.prompts.size(), world, rr.rank));
    EXPECT_EQ(rr.outputs.size(), rr.indices.size());
    for (size_t j = 0; j < rr.indices.size() && j < rr.outputs.size(); ++j) {
      const size_t i = rr.indices[j];
      const auto& o = rr.outputs[j];
      EXPECT_TRUE(o.error.empty()) << "prompt " << i << ": " << o.error;
      EXPECT_EQ(o.outputs.size(), 1u);
      if (o.outputs.size() != 1) continue;
      EXPECT_EQ(o.outputs[0].token_ids.size(), static_cast<size_t>(*w.params[i].max_tokens)) << "prompt " << i;
      EXPECT_EQ(o.outputs[0].token_ids, want.at(i)) << "prompt " << i << " on rank " << rr.rank;
      ++seen;
    }
    if (expert_parallel) {
      // Lockstep: every rank took the same number of forward-or-idle passes.
      EXPECT_EQ(rr.stats.num_steps + rr.stats.num_idle_steps,
                ranks->front().stats.num_steps + ranks->front().stats.num_idle_steps) << "rank " << rr.rank;
    } else {
      EXPECT_EQ(rr.stats.num_idle_steps, 0) << "rank " << rr.rank;
    }
  }
  EXPECT_EQ(seen, w.prompts.size());
  return std::move(ranks).value();
}

TEST(DataParallelEngine, TwoRanksExpertParallelEqualSingleRank) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  Workload w = runtime_test::random_workload(512, 1, 7, 40, 6, 14, rng, greedy);
  for (size_t i = 1; i < w.prompts.size(); i += 2) w.params[i].max_tokens = 2;  // rank 1 runs out first
  const auto ranks = expect_dp_equals_single(config_of(kTinyV4), w, 2, true);
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].indices.size(), 4u);
  EXPECT_EQ(ranks[1].indices.size(), 3u);
  EXPECT_GT(ranks[1].stats.num_idle_steps, 0) << "rank 1 finished first and must idle in lockstep";
  EXPECT_GE(ranks[0].stats.num_steps, ranks[1].stats.num_steps);
}

TEST(DataParallelEngine, TwoRanksSeededSamplingEqualsSingleRank) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Per-request seeds: a request's sampling stream is its own, whichever rank runs it.
  const Workload w = runtime_test::random_workload(512, 1, 5, 30, 3, 10, rng, [](int, std::mt19937& g) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_p = 0.9f;
    p.seed = g();
    p.ignore_eos = true;
    return p;
  });
  expect_dp_equals_single(config_of(kTinyV4), w, 2, true);
}

TEST(DataParallelEngine, ThreeRanksOneWithoutPromptsQuantFixture) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // v4tiny_quant: 6 experts (2 slots per rank), vocab 384, no tokenizer, no BOS.
  const Workload w = runtime_test::random_workload(384, -1, 2, 30, 4, 10, rng, greedy);
  const auto ranks = expect_dp_equals_single(config_of(kQuant), w, 3, true);
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_TRUE(ranks[2].indices.empty());
  EXPECT_EQ(ranks[2].stats.num_steps, 0);
  EXPECT_GT(ranks[2].stats.num_idle_steps, 0) << "the rank without prompts still takes part";
}

TEST(DataParallelEngine, ThreeRanksWithReplicatedExpertTinyStories) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // 8 experts over 3 ranks: 9 slots, one expert replicated (the hook's default placement).
  const Workload w = runtime_test::random_workload(512, 1, 5, 30, 3, 10, rng, greedy);
  expect_dp_equals_single(config_of(kTinyV4), w, 3, true);
}

// Live EPLB in the engine (--enable-eplb): prompts that repeat one token load that token's
// hash-routed experts, so the controller re-places experts mid-run (every 2 steps); replicas hold
// the same weights, so every prompt's tokens still equal the single-rank engine's.
TEST(DataParallelEngine, TwoRanksWithLiveEplbEqualSingleRank) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  Workload w = runtime_test::random_workload(512, 1, 6, 30, 6, 12, rng, greedy);
  const int32_t hot = static_cast<int32_t>(3 + rng() % 500);
  for (auto& p : w.prompts) std::fill(p.begin() + 1, p.end(), hot);
  const EngineConfig base = config_of(kTinyV4);
  const auto want = single_rank(base, w);
  EngineConfig cfg = base;
  cfg.data_parallel_size = 2;
  cfg.enable_expert_parallel = true;
  cfg.enable_eplb = true;
  cfg.num_redundant_experts = 2;  // 8 experts + 2 replicas = 5 slots per rank
  cfg.eplb_window_size = 4;
  cfg.eplb_step_interval = 2;
  auto ranks = engine::run_ranks_in_threads(cfg, w.prompts.size(), encoder_of(w));
  ASSERT_TRUE(ranks.ok()) << ranks.status().to_string();
  for (const auto& rr : *ranks) {
    for (size_t j = 0; j < rr.indices.size(); ++j)
      EXPECT_EQ(rr.outputs.at(j).outputs.at(0).token_ids, want.at(rr.indices[j]))
          << "prompt " << rr.indices[j] << " on rank " << rr.rank;
    EXPECT_GT(rr.stats.num_eplb_rebalances, 0) << "rank " << rr.rank << ": no placement was applied";
    EXPECT_EQ(rr.stats.num_eplb_rebalances, ranks->front().stats.num_eplb_rebalances);
  }
  EngineConfig bad = base;
  bad.enable_eplb = true;  // without expert parallelism
  EXPECT_FALSE(LLM::create(bad).ok());
}

TEST(DataParallelEngine, TwoIndependentReplicasWithoutExpertParallel) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const Workload w = runtime_test::random_workload(512, 1, 5, 30, 3, 10, rng, greedy);
  expect_dp_equals_single(config_of(kTinyV4), w, 2, false);
}

TEST(DataParallelEngine, AFailingRankStopsTheGroupAndIsNamed) {
  std::mt19937 rng(7);
  const Workload w = runtime_test::random_workload(512, 1, 4, 10, 2, 4, rng, greedy);
  EngineConfig cfg = config_of(kTinyV4);
  cfg.data_parallel_size = 2;
  cfg.enable_expert_parallel = true;
  // Rank 1 fails after loading (its peer is already waiting in the first lockstep exchange).
  engine::RankEncoder enc = [&w](const Engine& e, size_t i, std::vector<int32_t>* ids, SamplingParams* p,
                                 std::string*) {
    if (e.config().data_parallel_rank == 1) throw std::runtime_error("injected failure");
    *ids = w.prompts[i];
    *p = w.params[i];
  };
  auto ranks = engine::run_ranks_in_threads(cfg, w.prompts.size(), enc);
  ASSERT_FALSE(ranks.ok());
  const std::string msg = ranks.status().to_string();
  EXPECT_NE(msg.find("data parallel rank 1 of 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("injected failure"), std::string::npos) << msg;
}

TEST(DataParallelEngine, EngineChecksItsRankConfig) {
  EngineConfig cfg = config_of(kTinyV4);
  cfg.data_parallel_size = 2;
  cfg.data_parallel_rank = 2;
  EXPECT_EQ(cfg.validate().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cfg.validate().message().find("data_parallel_rank"), std::string::npos);
  cfg.data_parallel_rank = 0;
  cfg.data_parallel_size = 0;
  EXPECT_NE(cfg.validate().message().find("data_parallel_size must be >= 1"), std::string::npos);
  // A rank of an expert-parallel group needs the group's communicator: Engine::create has none.
  cfg.data_parallel_size = 2;
  cfg.enable_expert_parallel = true;
  auto e = Engine::create(cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kFailedPrecondition) << e.status().to_string();
  EXPECT_NE(e.status().message().find("communicator"), std::string::npos) << e.status().to_string();
  // A communicator of another size is refused naming both.
  dist::InProcessGroup group(3);
  auto comm = group.communicator(1);
  ASSERT_TRUE(comm.ok());
  engine::ExpertParallelOptions ep;
  ep.comm = comm->get();
  cfg.data_parallel_rank = 1;
  e = engine::create_engine_rank(cfg, ep);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("rank 1 of 3"), std::string::npos) << e.status().to_string();
  // Without expert parallelism a rank is a plain replica: it loads, with no lockstep.
  cfg.enable_expert_parallel = false;
  e = Engine::create(cfg);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_FALSE(engine::DataParallelStepper(e->get()).lockstep());
}

TEST(DataParallelEngine, RankResultJsonlRoundTrip) {
  engine::RankResult r;
  r.rank = 1;
  r.indices = {1, 3};
  r.prompt_tokens = {5, 0};
  r.model_dir = "m";
  r.load_s = 0.5;
  r.start_time = 10.25;
  r.end_time = 12.5;
  r.stats.num_steps = 7;
  r.stats.num_idle_steps = 3;
  r.stats.num_eplb_rebalances = 2;
  r.stats.num_generated_tokens = 9;
  r.stats.kv_summary = "window 4 blocks";
  RequestOutput a;
  a.request_id = "dp1-0";
  a.finished = true;
  CompletionOutput c;
  c.text = "h\xc3\xa9llo \"q\"\n";
  c.token_ids = {4, 8, 15};
  c.finish_reason = "stop";
  c.stop_reason = "15";
  c.logprobs.push_back({8, -0.25f, 1, {{8, -0.25f}, {3, -2.5f}}});
  a.outputs.push_back(c);
  a.metrics = {1.5, 2.0, 3.25, 2};
  RequestOutput b;
  b.request_id = "dp1-1";
  b.error = "bad prompt";
  b.outputs.push_back(CompletionOutput{});
  b.outputs[0].finish_reason = "error";
  r.outputs = {a, b};
  auto back = engine::rank_result_from_jsonl(engine::rank_result_to_jsonl(r));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->rank, 1);
  EXPECT_EQ(back->indices, r.indices);
  EXPECT_EQ(back->prompt_tokens, r.prompt_tokens);
  EXPECT_EQ(back->stats.num_steps, 7);
  EXPECT_EQ(back->stats.num_idle_steps, 3);
  EXPECT_EQ(back->stats.num_eplb_rebalances, 2);
  EXPECT_EQ(back->stats.kv_summary, "window 4 blocks");
  EXPECT_DOUBLE_EQ(back->end_time, 12.5);
  ASSERT_EQ(back->outputs.size(), 2u);
  const auto& o = back->outputs[0].outputs.at(0);
  EXPECT_EQ(o.text, c.text);
  EXPECT_EQ(o.token_ids, c.token_ids);
  EXPECT_EQ(o.stop_reason, c.stop_reason);
  ASSERT_EQ(o.logprobs.size(), 1u);
  EXPECT_EQ(o.logprobs[0].top_logprobs, c.logprobs[0].top_logprobs);
  EXPECT_DOUBLE_EQ(back->outputs[0].metrics.finished_time, 3.25);
  EXPECT_EQ(back->outputs[1].error, "bad prompt");
  EXPECT_EQ(back->outputs[1].outputs.at(0).finish_reason, "error");
  // A child that died before its summary line is an error, not a partial result.
  EXPECT_FALSE(engine::rank_result_from_jsonl("{\"index\": 1}\n").ok());
}

}  // namespace
}  // namespace deepinfer
