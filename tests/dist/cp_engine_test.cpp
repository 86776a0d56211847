// Context parallelism in the engine (engine/context_parallel*.h), CPU, threads as ranks over
// dist::InProcessGroup (label model):
//   * two ranks whose configs differ (another step budget, so another first chunk): the per-forward
//     batch check turns the divergence into a FailedPrecondition naming it on both ranks — the
//     requests fail with that message, nothing hangs;
//   * Engine::create alone refuses context_parallel_size > 1 (the group is the launcher's); the
//     config checks (rank, size, data/expert parallel, threshold) name the field; a communicator
//     of another size is named;
//   * run_context_parallel_in_threads: the ranks' outputs equal each other and the plain engine's
//     (greedy, chunked prefill), and the split chunks are counted.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "cp_watchdog.h"
#include "deepinfer/engine.h"
#include "deepinfer/llm.h"
#include "dist/inprocess_comm.h"
#include "engine/context_parallel_run.h"

namespace deepinfer::engine {
namespace {

constexpr const char* kModel = "tests/data/models/deepseek-v4-tiny-stories";

EngineConfig base_config() {
  EngineConfig c;
  c.model = kModel;
  c.kv_cache_memory = int64_t{64} << 20;
  c.max_model_len = 512;
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 64;
  c.context_parallel_min_tokens = 16;
  c.context_parallel_block = 2;
  return c;
}

std::vector<std::vector<int32_t>> random_prompts(std::mt19937& rng, int n) {
  std::vector<std::vector<int32_t>> p(n);
  for (auto& ids : p) {
    ids.resize(30 + rng() % 150);
    for (auto& t : ids) t = static_cast<int32_t>(3 + rng() % 500);
  }
  return p;
}

RankEncoder encoder(const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
  return [&prompts, max_tokens](const Engine&, size_t i, std::vector<int32_t>* ids, SamplingParams* p,
                                std::string*) {
    *ids = prompts[i];
    p->temperature = 0;
    p->max_tokens = max_tokens;
    p->ignore_eos = true;
  };
}

TEST(CpEngine, ThreadsEqualThePlainEngineAndEachOther) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const auto prompts = random_prompts(rng, 4);
  EngineConfig plain_cfg = base_config();
  auto llm = LLM::create(plain_cfg);
  ASSERT_TRUE(llm.ok()) << llm.status().to_string();
  std::vector<SamplingParams> params(prompts.size());
  for (auto& p : params) p.temperature = 0, p.max_tokens = 6, p.ignore_eos = true;
  auto want = (*llm)->generate(prompts, params);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  for (int W : {2, 3}) {
    EngineConfig c = base_config();
    c.context_parallel_size = W;
    auto ranks = run_context_parallel_in_threads(c, prompts.size(), encoder(prompts, 6));
    ASSERT_TRUE(ranks.ok()) << ranks.status().to_string();
    ASSERT_EQ(ranks->size(), static_cast<size_t>(W));
    for (const RankResult& r : *ranks) {
      EXPECT_GT(r.stats.num_context_parallel_chunks, 3) << "rank " << r.rank;  // every prompt >= 1
      for (size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_EQ(r.outputs[i].outputs.size(), 1u);
        EXPECT_EQ(r.outputs[i].outputs[0].token_ids, (*want)[i].outputs[0].token_ids)
            << "W " << W << " rank " << r.rank << " prompt " << i << " (" << prompts[i].size() << " tokens)";
      }
    }
  }
}

TEST(CpEngine, DivergingRanksFailWithANamedErrorInsteadOfHanging) {
  std::mt19937 rng(std::random_device{}());
  const auto prompts = random_prompts(rng, 2);
  dist::InProcessGroup group(2);
  std::vector<StatusOr<RankResult>> res(2, Internal("not run"));
  dist::testing::RankWatchdog dog(2, std::chrono::seconds(100), "diverging CP ranks");
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto comm = group.communicator(r);
      EngineConfig c = base_config();
      c.context_parallel_size = 2;
      c.context_parallel_rank = r;
      if (r == 1) c.max_num_batched_tokens = 40;  // another first chunk than rank 0's
      ContextParallelOptions cp;
      cp.comm = comm->get();
      dog.stage(r, "run_context_parallel_rank");
      res[r] = run_context_parallel_rank(c, cp, prompts.size(), encoder(prompts, 3));
      if (!res[r].ok()) group.abort();
      dog.finish(r, res[r].status());
    });
  dog.wait();
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    // The first forward's requests fail with the divergence message; when a rank still has
    // requests after that, the next step's work-flag exchange fails the run on both ranks.
    std::string text = res[r].ok() ? "" : res[r].status().to_string();
    if (res[r].ok())
      for (const auto& o : res[r]->outputs) text += o.error + "\n";
    EXPECT_TRUE(text.find("the ranks' engines diverged at forward 0") != std::string::npos ||
                text.find("the ranks diverged at step") != std::string::npos)
        << "rank " << r << ": " << text;
  }
}

TEST(CpEngine, ConfigErrorsNameTheField) {
  EngineConfig c = base_config();
  c.context_parallel_size = 2;
  auto e = Engine::create(c);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kFailedPrecondition) << e.status().to_string();
  EXPECT_NE(e.status().message().find("launcher hands in"), std::string::npos) << e.status().to_string();
  auto expect_invalid = [](const EngineConfig& cfg, const std::string& text) {
    const Status st = cfg.validate();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find(text), std::string::npos) << st.to_string();
  };
  EngineConfig bad = c;
  bad.context_parallel_size = 0;
  expect_invalid(bad, "context_parallel_size must be >= 1, got 0");
  bad = c;
  bad.context_parallel_rank = 2;
  expect_invalid(bad, "context_parallel_rank must be in [0, context_parallel_size = 2), got 2");
  bad = c;
  bad.data_parallel_size = 2;
  expect_invalid(bad, "cannot be combined with data parallelism");
  bad = c;
  bad.enable_expert_parallel = true;
  expect_invalid(bad, "with enable_expert_parallel: not supported");
  bad = c;
  bad.context_parallel_min_tokens = 3;
  expect_invalid(bad, "context_parallel_min_tokens (3) must be >= context_parallel_block (2, >= 1) x "
                      "context_parallel_size (2)");
  // A communicator of another world size than the config's.
  dist::InProcessGroup group(3);
  auto comm = group.communicator(0);
  ContextParallelOptions cp;
  cp.comm = comm->get();
  auto r = run_context_parallel_rank(c, cp, 0, encoder({}, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the communicator is rank 0 of 3, the config rank 0 of 2"),
            std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace deepinfer::engine
