// The collective call sequence of a context-parallel prefill (label model, CPU, threads as ranks
// over dist::InProcessGroup wrapped in a RecordingCommunicator, cp_recording_comm.h):
//   * on v4tiny_b and deepseek-v4-tiny-stories, W = 2 and 3, random prompts and blocks, all rows'
//     logits or the last row's (a rank without the last row still takes part with 0 rows), and
//     with an expert-parallel model over the same ranks (W = 2): every rank makes the same calls
//     in the same order, and at every all-to-all the rows rank r sends to rank d are what rank d
//     expects from r — what NCCL needs to neither hang nor corrupt. Without EP the count is exact:
//     1 (the input check) + per layer 1 (kv) + 2 (compressor, compressed layers) + 2 (indexer
//     compressor, CSA layers) + 1 (the logits).
//   * the checker itself flags a rank that skips a call and inconsistent row counts;
//   * the watchdog of the NCCL tests (cp_watchdog.h) ends the process, naming the stuck rank, when
//     a rank failed and its peer never finishes (death test).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "backend/backend.h"
#include "cp_recording_comm.h"
#include "cp_watchdog.h"
#include "dist/eplb.h"
#include "dist/expert_parallel_moe.h"
#include "ep_test_util.h"
#include "io/config.h"
#include "model/deepseek_v4/context_parallel.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::model::v4 {
namespace {

using dist::testing::CollectiveCall;
using dist::testing::RecordingCommunicator;

class CpCollectiveSequence : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(GetParam()) + "/config.json"))
      GTEST_SKIP() << GetParam() << " is not in this checkout";
    auto cfg = io::load_model_config(std::string(GetParam()) + "/config.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    cfg_ = *cfg;
    seed_ = std::random_device{}();
    rng_.seed(seed_);
  }

  // Records W ranks' calls for one CP prefill of a random prompt.
  void run(int W, bool all_logits, bool expert_parallel) {
    const auto& c = cfg_.deepseek_v4();
    const int64_t span = std::max<int64_t>(c.sliding_window, 2 * c.compress_rate_hca);
    std::vector<int32_t> prompt(span + 5 + rng_() % span);
    for (auto& t : prompt) t = static_cast<int32_t>(rng_() % c.vocab_size);
    const int64_t block = 1 + static_cast<int64_t>(rng_() % 7);
    std::vector<std::vector<CollectiveCall>> calls(W);
    auto st = dist::testing::run_ranks(W, [&](int r, dist::Communicator& inner) -> Status {
      RecordingCommunicator comm(&inner);
      auto be = backend::make_cpu_backend();
      dist::ExpertParallelContext ctx;
      std::unique_ptr<DeepseekV4Model> m;
      if (expert_parallel) {
        DI_ASSIGN_OR_RETURN(dist::ExpertPlacement placement,
                            dist::identity_placement(static_cast<int>(c.num_hidden_layers),
                                                     static_cast<int>(c.n_routed_experts), W));
        ctx = {&comm, placement, dist::ReplicaChoice::kTokenModulo};
        DI_ASSIGN_OR_RETURN(m, DeepseekV4Model::load(GetParam(), cfg_, be.get(), &ctx));
      } else {
        DI_ASSIGN_OR_RETURN(m, DeepseekV4Model::load(GetParam(), cfg_, be.get()));
      }
      comm.calls.clear();  // only the prefill's calls
      auto state = m->new_sequence_state();
      ContextParallelInput in{prompt, state.get(), all_logits, block};
      DI_RETURN_IF_ERROR(m->prefill_context_parallel(comm, in).status());
      calls[r] = comm.calls;
      return OkStatus();
    });
    const std::string what = std::string(GetParam()) + " W " + std::to_string(W) + " S " +
                             std::to_string(prompt.size()) + " block " + std::to_string(block) +
                             (all_logits ? " all rows" : " last row") +
                             (expert_parallel ? " expert parallel" : "") + " seed " +
                             std::to_string(seed_);
    for (int r = 0; r < W; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string() << " — " << what;
    EXPECT_EQ(dist::testing::check_collective_sequence(calls), "") << what;
    if (!expert_parallel) {
      size_t expected = 2;
      for (auto t : c.layer_types) {
        expected += 1;
        if (t != io::AttentionType::kSliding) expected += 2;
        if (t == io::AttentionType::kCompressedSparse) expected += 2;
      }
      EXPECT_EQ(calls[0].size(), expected) << what;
    }
    std::printf("%s: %zu collective calls per rank, one valid sequence\n", what.c_str(), calls[0].size());
  }

  io::ModelConfig cfg_;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

TEST_P(CpCollectiveSequence, SameCallsOnEveryRank) {
  run(2, /*all_logits=*/true, false);
  run(3, /*all_logits=*/false, false);
  if (cfg_.deepseek_v4().n_routed_experts % 2 == 0) run(2, /*all_logits=*/false, true);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CpCollectiveSequence,
                         ::testing::Values("tests/data/models/v4tiny_b",
                                           "tests/data/models/deepseek-v4-tiny-stories"));

TEST(CpCollectiveSequenceCheck, FlagsMismatches) {
  using dist::testing::check_collective_sequence;
  const CollectiveCall ex{CollectiveCall::kExchange, -1, 6, {}, {}};
  const CollectiveCall a0{CollectiveCall::kAllToAll, 0, 8, {3, 3}, {3, 2}};
  const CollectiveCall a1{CollectiveCall::kAllToAll, 0, 8, {2, 2}, {3, 2}};
  EXPECT_EQ(check_collective_sequence({{ex, a0}, {ex, a1}}), "");
  // rank 1 skips the all-to-all (e.g. a rank with no rows returning early)
  EXPECT_NE(check_collective_sequence({{ex, a0}, {ex}}).find("rank 1 made 1 collective calls"),
            std::string::npos);
  // rank 1 expects 1 row from rank 0, which sends 3
  CollectiveCall bad = a1;
  bad.recv_rows = {1, 2};
  EXPECT_NE(check_collective_sequence({{ex, a0}, {ex, bad}}).find("rank 0 sends 3 rows to rank 1, which expects 1"),
            std::string::npos);
  // another width (a gathered tensor of another shape)
  CollectiveCall wide = a1;
  wide.width = 16;
  EXPECT_NE(check_collective_sequence({{ex, a0}, {ex, wide}}).find("call 1"), std::string::npos);
  // the same calls in another order
  EXPECT_NE(check_collective_sequence({{ex, a0}, {a1, ex}}).find("call 0"), std::string::npos);
}

void watchdog_with_a_stuck_rank() {
  dist::testing::RankWatchdog dog(2, std::chrono::seconds(60), "stuck rank",
                                  /*grace=*/std::chrono::seconds(1));
  std::thread failing([&] {
    dog.stage(0, "prefill_context_parallel");
    dog.finish(0, InvalidArgument("op failed"));
  });
  std::thread stuck([&] { dog.stage(1, "waiting in a collective"); });  // never finishes
  failing.join();
  stuck.join();
  dog.wait();  // exits
}

TEST(CpWatchdogDeathTest, EndsTheProcessNamingTheStuckRank) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(watchdog_with_a_stuck_rank(), ::testing::ExitedWithCode(3),
              "rank 1: still at waiting in a collective");
}

}  // namespace
}  // namespace deepinfer::model::v4
