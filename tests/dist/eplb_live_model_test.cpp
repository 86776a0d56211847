// Live EPLB through the whole DeepSeek-V4 model (label model): threads as ranks over
// dist::InProcessGroup, CPU backend, the tiny fixtures, W = 2 and 4. Every rank runs its own
// prompt (a hot token repeated, so the hash layer's load is skewed onto the hot token's experts,
// which the initial placement holds once each, on one GPU) for a prefill and greedy decode
// steps; at W = 4
// the last rank idles after its prefill (expert_parallel_idle_step). EplbController::after_step
// after every step, a small step_interval: the rebalance happens mid-run.
//   (a) a new placement was applied: it differs from the initial one and the hot expert has
//       replicas (it had one copy before);
//   (b) every rank's logits, before and after the rebalance, are bitwise equal to the plain
//       single-rank model on that rank's prompt (replicas hold the same weights; the CPU backend
//       is batch invariant);
//   (c) the recorder counts equal the hand count: the hash layer's picks are tid2eid[token] of
//       every token fed, every layer's row sums to top_k · tokens fed, and the last decision's
//       window is the sum over the ranks.
// Plus apply_expert_placement's errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <variant>
#include <random>

#include "backend/backend.h"
#include "dist/eplb_controller.h"
#include "ep_test_util.h"
#include "io/config.h"
#include "model/deepseek_v4/model.h"
#include "model/weight_loader.h"

namespace deepinfer::dist {
namespace {

using backend::Tensor;
using model::v4::DeepseekV4Model;

const char* kFixtures[] = {"tests/data/models/v4tiny_b", "tests/data/v4-fixtures/v4tiny_quant"};

using dist::testing::bitwise;

struct RankRun {
  std::vector<float> logits;   // every step's logits, appended
  std::vector<int32_t> fed;    // every token fed to the model
  int active_steps = 0;        // forwards (the rest idle)
  int applies = 0;             // apply_expert_placement calls
  ExpertPlacement initial, final_placement;
  std::vector<int64_t> load;   // recorder window load at the end [L, E]
  std::optional<EplbDecision> last;
  int64_t rebalances = 0;
};

class EplbLive : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = GetParam();
    if (!std::filesystem::exists(dir_ + "/config.json")) GTEST_SKIP() << dir_ << " is not in this checkout";
    auto cfg = io::load_model_config(dir_ + "/config.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    cfg_ = *cfg;
    be_ = backend::make_cpu_backend();
    auto m = DeepseekV4Model::load(dir_, cfg_, be_.get());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    plain_ = std::move(m).value();
    L_ = static_cast<int>(plain_->dims().L);
    E_ = static_cast<int>(plain_->dims().E);
    K_ = static_cast<int>(plain_->dims().k);
    V_ = static_cast<int>(plain_->dims().V);
    const auto& types = cfg_.deepseek_v4().mlp_layer_types;
    for (int l = 0; l < L_; ++l)
      if (types[l] == io::MlpType::kHashMoe) hash_layers_.push_back(l);
    ASSERT_FALSE(hash_layers_.empty()) << "the fixture needs a hash layer";
    auto loader = model::WeightLoader::open(dir_, cfg_, be_.get());
    ASSERT_TRUE(loader.ok()) << loader.status().to_string();
    for (int l : hash_layers_) {
      auto t = (*loader)->load_i32("layers." + std::to_string(l) + ".ffn.tid2eid", {V_, K_});
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      tid2eid_.emplace_back(t->data<int32_t>(), t->data<int32_t>() + t->numel());
    }
    seed_ = std::random_device{}();
    rng_.seed(seed_);
  }

  // A token whose experts in the first hash layer all have one copy, on one GPU, under
  // `initial`: that GPU takes every pick of the layer, so rebalancing must replicate them.
  // Searched from a random start.
  int32_t hot_token(const ExpertPlacement& initial) {
    const int h = hash_layers_[0], spr = initial.slots_per_gpu();
    const int32_t start = static_cast<int32_t>(rng_() % V_);
    for (int32_t i = 0; i < V_; ++i) {
      const int32_t t = (start + i) % V_;
      const int32_t* ex = tid2eid_[0].data() + static_cast<size_t>(t) * K_;
      bool ok = true;
      for (int j = 0; j < K_; ++j)
        ok = ok && initial.count_of(h, ex[j]) == 1 &&
             initial.slot_of(h, ex[j], 0) / spr == initial.slot_of(h, ex[0], 0) / spr;
      if (ok) return t;
    }
    return -1;
  }

  void check_world(int W, ReplicaChoice choice) {
    SCOPED_TRACE("world " + std::to_string(W) + " seed " + std::to_string(seed_));
    EplbOptions opt;
    opt.num_redundant_experts = E_ % W == 0 ? W : W - E_ % W;
    opt.window_steps = 16;
    opt.step_interval = 2;
    opt.min_improvement = 0.0;
    const int steps = 6;  // a prefill, then 5 decode steps; evaluations after steps 2, 4, 6
    auto initial = initial_eplb_placement(opt, L_, E_, W);
    ASSERT_TRUE(initial.ok()) << initial.status().to_string();
    const int32_t hot = hot_token(*initial);
    ASSERT_GE(hot, 0) << "no token routes to single-copy experts of one GPU";
    std::vector<std::vector<int32_t>> prompts(W);
    std::vector<RankRun> runs(W);
    for (int r = 0; r < W; ++r) {
      // At least 12 hot picks per rank: more than the decode tokens (5 per rank, possibly all
      // on one expert) can put on any other expert, so the hot experts get the replicas.
      prompts[r].assign(12 + rng_() % 8, hot);
      prompts[r].push_back(static_cast<int32_t>(rng_() % V_));  // one other token
      runs[r].active_steps = (W == 4 && r == W - 1) ? 1 : steps;
    }
    auto st = testing::run_ranks(W, [&](int r, Communicator& comm) -> Status {
      RankRun& run = runs[r];
      auto be = backend::make_cpu_backend();
      DI_ASSIGN_OR_RETURN(auto ctl, EplbController::create(opt, &comm, L_, E_));
      run.initial = ctl->placement();
      ExpertParallelContext ctx{&comm, ctl->placement(), choice, ctl->recorder()};
      DI_ASSIGN_OR_RETURN(auto m, DeepseekV4Model::load(dir_, cfg_, be.get(), &ctx));
      ctl->set_apply([&](const ExpertPlacement& p) {
        ++run.applies;
        return m->apply_expert_placement(p, dir_, cfg_);
      });
      auto state = m->new_sequence_state();
      std::vector<int32_t> tokens = prompts[r];
      for (int step = 0; step < steps; ++step) {
        if (step < run.active_steps) {
          model::SequenceInput in{tokens, state.get(), /*all_logits=*/step == 0};
          DI_ASSIGN_OR_RETURN(Tensor logits, m->forward({&in, 1}));
          const float* l = logits.data<float>();
          run.logits.insert(run.logits.end(), l, l + logits.numel());
          run.fed.insert(run.fed.end(), tokens.begin(), tokens.end());
          const float* last = l + (logits.dim(0) - 1) * V_;
          tokens = {static_cast<int32_t>(std::max_element(last, last + V_) - last)};
        } else {
          DI_RETURN_IF_ERROR(m->expert_parallel_idle_step());
        }
        DI_RETURN_IF_ERROR(ctl->after_step());
      }
      run.final_placement = ctl->placement();
      run.load = ctl->recorder()->load();
      run.last = ctl->last_decision();
      run.rebalances = ctl->num_rebalances();
      return OkStatus();
    });
    for (int r = 0; r < W; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();

    int64_t all_tokens = 0;
    for (int r = 0; r < W; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const RankRun& run = runs[r];
      // (a) applied, the same placement on every rank, the hot expert replicated.
      EXPECT_GE(run.rebalances, 1);
      EXPECT_EQ(run.applies, run.rebalances);
      EXPECT_NE(run.final_placement.phy_to_log, run.initial.phy_to_log);
      EXPECT_EQ(run.final_placement.phy_to_log, runs[0].final_placement.phy_to_log);
      const int h = hash_layers_[0];
      const int32_t hot_expert = tid2eid_[0][static_cast<size_t>(hot) * K_];
      EXPECT_EQ(run.initial.phy_to_log, initial->phy_to_log);
      EXPECT_EQ(run.initial.count_of(h, hot_expert), 1);
      EXPECT_GT(run.final_placement.count_of(h, hot_expert), 1) << "hot expert " << hot_expert;
      // (b) bitwise the plain model, before and after the rebalance.
      auto want = testing::run_greedy(*plain_, prompts[r], run.active_steps - 1);
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      EXPECT_TRUE(bitwise(run.logits, *want));
      // (c) the recorder's counts: hash layers by hand, every layer's total.
      const int64_t fed = static_cast<int64_t>(run.fed.size());
      all_tokens += fed;
      for (size_t hi = 0; hi < hash_layers_.size(); ++hi) {
        std::vector<int64_t> want_row(E_, 0);
        for (int32_t t : run.fed)
          for (int j = 0; j < K_; ++j) ++want_row[tid2eid_[hi][static_cast<size_t>(t) * K_ + j]];
        const std::vector<int64_t> got_row(run.load.begin() + static_cast<size_t>(hash_layers_[hi]) * E_,
                                           run.load.begin() + static_cast<size_t>(hash_layers_[hi] + 1) * E_);
        EXPECT_EQ(got_row, want_row) << "hash layer " << hash_layers_[hi];
      }
      for (int l = 0; l < L_; ++l) {
        int64_t sum = 0;
        for (int e = 0; e < E_; ++e) sum += run.load[static_cast<size_t>(l) * E_ + e];
        EXPECT_EQ(sum, fed * K_) << "layer " << l;
      }
    }
    for (int r = 0; r < W; ++r) {
      ASSERT_TRUE(runs[r].last.has_value());
      EXPECT_EQ(runs[r].last->step, steps);
      EXPECT_EQ(runs[r].last->window_tokens, all_tokens * K_ * L_) << "rank " << r;
    }
  }

  std::string dir_;
  io::ModelConfig cfg_;
  std::unique_ptr<backend::Backend> be_;
  std::unique_ptr<DeepseekV4Model> plain_;
  int L_ = 0, E_ = 0, K_ = 0, V_ = 0;
  std::vector<int> hash_layers_;
  std::vector<std::vector<int32_t>> tid2eid_;  // per hash layer: [V, K]
  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

TEST_P(EplbLive, RebalanceMidRunTwoRanks) { check_world(2, ReplicaChoice::kTokenModulo); }

TEST_P(EplbLive, RebalanceMidRunFourRanksOneIdle) { check_world(4, ReplicaChoice::kPreferLocal); }

TEST_P(EplbLive, ApplyPlacementErrors) {
  auto id2 = identity_placement(L_, E_, 2);
  ASSERT_TRUE(id2.ok());
  EXPECT_EQ(plain_->apply_expert_placement(*id2, dir_, cfg_).code(), StatusCode::kFailedPrecondition);
  auto st = testing::run_ranks(1, [&](int, Communicator& comm) -> Status {
    DI_ASSIGN_OR_RETURN(ExpertPlacement id1, identity_placement(L_, E_, 1));
    ExpertParallelContext ctx{&comm, id1, ReplicaChoice::kTokenModulo};
    DI_ASSIGN_OR_RETURN(auto m, DeepseekV4Model::load(dir_, cfg_, be_.get(), &ctx));
    Status s = m->apply_expert_placement(*id2, dir_, cfg_);
    if (s.code() != StatusCode::kInvalidArgument || s.message().find("communicator has 1") == std::string::npos)
      return Internal("another world size: " + s.to_string());
    DI_ASSIGN_OR_RETURN(ExpertPlacement deeper, identity_placement(L_ + 1, E_, 1));
    s = m->apply_expert_placement(deeper, dir_, cfg_);
    if (s.code() != StatusCode::kInvalidArgument || s.message().find("layers") == std::string::npos)
      return Internal("another depth: " + s.to_string());
    io::ModelConfig other = cfg_;
    std::get<io::DeepseekV4Config>(other.arch).n_routed_experts += 1;
    s = m->apply_expert_placement(id1, dir_, other);
    if (s.code() != StatusCode::kInvalidArgument || s.message().find("config") == std::string::npos)
      return Internal("another config: " + s.to_string());
    return m->apply_expert_placement(id1, dir_, cfg_);  // the same placement: a no-op
  });
  EXPECT_TRUE(st[0].ok()) << st[0].to_string();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EplbLive, ::testing::ValuesIn(kFixtures));

}  // namespace
}  // namespace deepinfer::dist
