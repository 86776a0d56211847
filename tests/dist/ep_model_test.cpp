// The whole DeepSeek-V4 model with an expert-parallel context (in-process communicator, CPU
// backend) against the plain single-rank model, on the tiny fixtures:
//   * world size 1 (identity placement, and an EPLB placement with redundant slots on the one
//     rank): prefill (all logits) and decode logits bitwise equal to the plain model's;
//   * world sizes 2 and 4 (threads as ranks, attention data parallel: each rank its own random
//     prompt and state, own backend, only its expert slots loaded): every rank's logits bitwise
//     equal to the plain model run on that rank's prompt alone, identity and EPLB placements;
//   * a placement that does not fit the model is an error naming the mismatch.
// Bitwise holds because the CPU backend is batch invariant (a row's result never depends on the
// other rows of the call) and the EP combine is the single-rank combine (dist/expert_parallel_moe.h).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "backend/backend.h"
#include "dist/expert_parallel_moe.h"
#include "ep_test_util.h"
#include "io/config.h"
#include "model/deepseek_v4/model.h"

#ifndef DI_EP_MODEL_TEST_DEVICE
#define DI_EP_MODEL_TEST_DEVICE "cpu"
#endif

namespace deepinfer::dist {
namespace {

using backend::Tensor;
using model::v4::DeepseekV4Model;

const char* kFixtures[] = {"tests/data/models/v4tiny_b", "tests/data/v4-fixtures/v4tiny_quant"};

// Logits of prefill (all rows) then `decode` greedy single-token steps, concatenated [rows, V].
StatusOr<std::vector<float>> run(model::Model& m, const std::vector<int32_t>& prompt, int decode) {
  return dist::testing::run_greedy(m, prompt, decode);
}

using dist::testing::bitwise;

class EpModel : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(GetParam()) + "/config.json"))
      GTEST_SKIP() << GetParam() << " is not in this checkout";
    auto cfg = io::load_model_config(std::string(GetParam()) + "/config.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    cfg_ = *cfg;
    be_ = backend::make_cpu_backend();
    auto m = DeepseekV4Model::load(GetParam(), cfg_, be_.get());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    plain_ = std::move(m).value();
    L_ = static_cast<int>(plain_->dims().L);
    E_ = static_cast<int>(plain_->dims().E);
    V_ = static_cast<int>(plain_->dims().V);
    seed_ = std::random_device{}();
    rng_.seed(seed_);
  }

  std::vector<int32_t> random_prompt() {
    std::vector<int32_t> p(3 + rng_() % 14);
    for (auto& t : p) t = static_cast<int32_t>(rng_() % V_);
    return p;
  }

  ExpertPlacement eplb_placement(int world_size, int num_replicas) {
    std::vector<int64_t> load(static_cast<size_t>(L_) * E_);
    for (auto& l : load) l = static_cast<int64_t>(rng_() % 500) * ((rng_() % 3) ? 1 : 10);
    EplbParams p;
    p.num_replicas = num_replicas;
    p.num_gpus = world_size;
    p.policy = EplbPolicy::kGlobal;
    auto out = rebalance_experts(load, L_, E_, p);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    return *out;
  }

  // Every rank runs its own prompt through its own EP model; each must equal the plain model.
  void check_world(int world_size, const ExpertPlacement& placement) {
    std::vector<std::vector<int32_t>> prompts(world_size);
    std::vector<std::vector<float>> want(world_size), got(world_size);
    for (int r = 0; r < world_size; ++r) {
      prompts[r] = random_prompt();
      auto w = run(*plain_, prompts[r], 2);
      ASSERT_TRUE(w.ok()) << w.status().to_string();
      want[r] = *w;
    }
    auto st = testing::run_ranks(world_size, [&](int r, Communicator& comm) -> Status {
      auto be = backend::make_cpu_backend();
      ExpertParallelContext ctx{&comm, placement, ReplicaChoice::kTokenModulo};
      DI_ASSIGN_OR_RETURN(auto m, DeepseekV4Model::load(GetParam(), cfg_, be.get(), &ctx));
      DI_ASSIGN_OR_RETURN(got[r], run(*m, prompts[r], 2));
      return OkStatus();
    });
    for (int r = 0; r < world_size; ++r) {
      ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
      EXPECT_TRUE(bitwise(got[r], want[r]))
          << "world " << world_size << " rank " << r << " replicas " << placement.num_replicas
          << " seed " << seed_;
    }
  }

  io::ModelConfig cfg_;
  std::unique_ptr<backend::Backend> be_;
  std::unique_ptr<DeepseekV4Model> plain_;
  int L_ = 0, E_ = 0, V_ = 0;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

TEST_P(EpModel, WorldSizeOneEqualsPlainModel) {
  auto identity = identity_placement(L_, E_, 1);
  ASSERT_TRUE(identity.ok());
  check_world(1, *identity);
  check_world(1, eplb_placement(1, E_ + 3));  // three redundant slots on the one rank
}

TEST_P(EpModel, ThreadsAsRanksEqualPlainModel) {
  for (int W : {2, 4}) {
    if (E_ % W != 0) continue;
    auto identity = identity_placement(L_, E_, W);
    ASSERT_TRUE(identity.ok());
    check_world(W, *identity);
    check_world(W, eplb_placement(W, E_ + W));  // one redundant slot per rank
  }
}

TEST_P(EpModel, IdleRanksKeepTheLockstep) {
  // World 3 on an EPLB placement: rank 0 runs a prompt and two decode steps, rank 1 only the
  // first step (then idles), rank 2 idles throughout; rank 0 and 1 equal the plain model.
  const int W = 3;  // 8 experts: 9 slots, at least one redundant
  ExpertPlacement placement = eplb_placement(W, (E_ + 1 + W - 1) / W * W);
  std::vector<int32_t> p0 = random_prompt(), p1 = random_prompt();
  auto want0 = run(*plain_, p0, 2);
  auto want1 = run(*plain_, p1, 0);
  ASSERT_TRUE(want0.ok() && want1.ok());
  std::vector<std::vector<float>> got(W);
  auto st = testing::run_ranks(W, [&](int r, Communicator& comm) -> Status {
    auto be = backend::make_cpu_backend();
    ExpertParallelContext ctx{&comm, placement, ReplicaChoice::kPreferLocal};
    DI_ASSIGN_OR_RETURN(auto m, DeepseekV4Model::load(GetParam(), cfg_, be.get(), &ctx));
    if (r == 0) {
      DI_ASSIGN_OR_RETURN(got[0], run(*m, p0, 2));
    } else if (r == 1) {
      DI_ASSIGN_OR_RETURN(got[1], run(*m, p1, 0));
      for (int i = 0; i < 2; ++i) DI_RETURN_IF_ERROR(m->expert_parallel_idle_step());
    } else {
      for (int i = 0; i < 3; ++i) DI_RETURN_IF_ERROR(m->expert_parallel_idle_step());
    }
    return OkStatus();
  });
  for (int r = 0; r < W; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
  EXPECT_TRUE(bitwise(got[0], *want0)) << "seed " << seed_;
  EXPECT_TRUE(bitwise(got[1], *want1)) << "seed " << seed_;
  EXPECT_EQ(plain_->expert_parallel_idle_step().code(), StatusCode::kFailedPrecondition);
}

TEST_P(EpModel, PlacementMismatchIsAnError) {
  auto st = testing::run_ranks(2, [&](int, Communicator& comm) -> Status {
    auto wrong_layers = identity_placement(L_ + 1, E_, 2);
    ExpertParallelContext ctx{&comm, *wrong_layers, ReplicaChoice::kTokenModulo};
    auto m = DeepseekV4Model::load(GetParam(), cfg_, be_.get(), &ctx);
    if (m.ok()) return Internal("loaded with a placement of the wrong depth");
    if (m.status().message().find("layers") == std::string::npos) return m.status();
    auto wrong_world = identity_placement(L_, E_, 1);
    ExpertParallelContext ctx1{&comm, *wrong_world, ReplicaChoice::kTokenModulo};
    auto m1 = DeepseekV4Model::load(GetParam(), cfg_, be_.get(), &ctx1);
    if (m1.ok()) return Internal("loaded with a placement for another world size");
    if (m1.status().message().find("communicator has 2") == std::string::npos) return m1.status();
    return OkStatus();
  });
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.to_string();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EpModel, ::testing::ValuesIn(kFixtures));

}  // namespace
}  // namespace deepinfer::dist
