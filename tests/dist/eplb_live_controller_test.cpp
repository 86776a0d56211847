// Live EPLB, the parts without a model (label unit):
//   * option errors name the option;
//   * the initial placement (identity without redundancy; hand-computed replicas on a uniform load);
//   * hottest_gpu_load and the decision rule against hand-computed values;
//   * EplbController over threads as ranks: the window load is summed over the ranks, evaluated
//     only every step_interval steps, applied only above min_improvement (a hand-computed
//     placement), not re-applied when nothing improves, and an error without an apply function;
//   * ExpertParallelMoe records every rank's router picks into its recorder (hand-counted).
#include "dist/eplb_controller.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/backend.h"
#include "dist/expert_parallel_moe.h"
#include "ep_test_util.h"

namespace deepinfer::dist {
namespace {

using backend::Tensor;
using backend::Weight;

::testing::AssertionResult invalid_naming(const Status& st, const std::string& what) {
  if (st.code() != StatusCode::kInvalidArgument)
    return ::testing::AssertionFailure() << "expected InvalidArgument, got " << st.to_string();
  if (st.message().find(what) == std::string::npos)
    return ::testing::AssertionFailure() << "'" << st.message() << "' does not name " << what;
  return ::testing::AssertionSuccess();
}

TEST(EplbLiveOptions, ErrorsNameTheOption) {
  auto check = [](EplbOptions o, int world, const std::string& what) {
    EXPECT_TRUE(invalid_naming(validate_eplb_options(o, 2, 8, world), what)) << what;
    EXPECT_TRUE(invalid_naming(initial_eplb_placement(o, 2, 8, world).status(), what)) << what;
  };
  EplbOptions o;
  o.num_redundant_experts = -1;
  check(o, 2, "num_redundant_experts");
  o.num_redundant_experts = 1;  // 9 slots over 2 ranks
  check(o, 2, "num_redundant_experts");
  check(o, 2, "multiple of the world size 2");
  o = EplbOptions{};
  o.window_steps = 0;
  check(o, 2, "window_steps");
  o = EplbOptions{};
  o.step_interval = 0;
  check(o, 2, "step_interval");
  for (double bad : {-0.1, 1.0, std::nan("")}) {
    o = EplbOptions{};
    o.min_improvement = bad;
    check(o, 2, "min_improvement");
  }
  o = EplbOptions{};
  o.num_nodes = 3;
  check(o, 2, "num_nodes");
  o.num_nodes = 0;
  check(o, 2, "num_nodes");
  o = EplbOptions{};
  o.num_groups = 3;
  check(o, 2, "num_groups");
  o = EplbOptions{};
  o.policy = EplbPolicy::kHierarchical;
  o.num_nodes = 2;  // one group cannot be split over two nodes
  check(o, 2, "num_groups");
  EXPECT_TRUE(validate_eplb_options(EplbOptions{}, 2, 8, 2).ok());

  EXPECT_TRUE(invalid_naming(EplbController::create(EplbOptions{}, nullptr, 2, 8).status(), "communicator"));
  InProcessGroup group(2);
  auto comm = group.communicator(0);
  ASSERT_TRUE(comm.ok());
  o = EplbOptions{};
  o.num_redundant_experts = 3;
  EXPECT_TRUE(invalid_naming(EplbController::create(o, comm->get(), 2, 8).status(), "num_redundant_experts"));
}

TEST(EplbLiveOptions, InitialPlacement) {
  EplbOptions o;
  auto id = initial_eplb_placement(o, 3, 8, 2);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto want = identity_placement(3, 8, 2);
  EXPECT_EQ(id->phy_to_log, want->phy_to_log);
  EXPECT_EQ(id->num_replicas, 8);

  // Uniform load: replication ties go to the lower expert, so experts 0 and 1 get the 2 extras.
  o.num_redundant_experts = 2;
  auto p = initial_eplb_placement(o, 3, 8, 2);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->num_replicas, 10);
  EXPECT_EQ(p->num_gpus, 2);
  for (int l = 0; l < 3; ++l)
    for (int e = 0; e < 8; ++e) EXPECT_EQ(p->count_of(l, e), e < 2 ? 2 : 1) << "layer " << l << " expert " << e;
}

// Two layers, 4 experts, 2 GPUs (identity: GPU 0 = experts 0, 1; GPU 1 = experts 2, 3).
TEST(EplbLiveDecision, HottestGpuLoadAndRule) {
  auto id = identity_placement(2, 4, 2);
  ASSERT_TRUE(id.ok());
  const std::vector<int64_t> load = {100, 90, 10, 10,   // layer 0: GPU loads 190, 20
                                     10, 10, 10, 30};   // layer 1: GPU loads 20, 40
  EXPECT_DOUBLE_EQ(hottest_gpu_load(*id, load), 190.0 + 40.0);

  EXPECT_TRUE(should_apply(190, 110, 0.4));    // 80/190 = 0.421
  EXPECT_FALSE(should_apply(190, 110, 0.43));
  EXPECT_TRUE(should_apply(100, 99, 0.0));
  EXPECT_FALSE(should_apply(100, 100, 0.0));   // a tie never moves weights
  EXPECT_FALSE(should_apply(100, 101, 0.0));
  EXPECT_FALSE(should_apply(0, 0, 0.0));
}

// Rank 0 routes 100 picks to expert 0 and 10 to expert 2, rank 1 90 to expert 1 and 10 to
// expert 3 (layer 0; layer 1 idle): the global load is [100, 90, 10, 10], GPU loads 190 / 20 on
// the identity placement. Balanced packing (hand): e0 → GPU 0, e1 → GPU 1, e2 → GPU 1 (90 < 100),
// e3 → GPU 0 (GPU 1 full): layer 0 becomes slots [e0, e3 | e1, e2], GPU loads 110 / 100.
void record_skew(int rank, ExpertLoadRecorder& rec) {
  std::vector<int32_t> ids;
  if (rank == 0) {
    ids.assign(100, 0);
    ids.insert(ids.end(), 10, 2);
  } else {
    ids.assign(90, 1);
    ids.insert(ids.end(), 10, 3);
  }
  ASSERT_TRUE(rec.record(0, ids).ok());
}

TEST(EplbLiveController, IntervalThresholdAndAllReduce) {
  for (double min_improvement : {0.4, 0.43}) {
    const bool expect_apply = min_improvement < 80.0 / 190.0;
    std::vector<std::vector<ExpertPlacement>> applied(2);
    std::vector<std::vector<EplbDecision>> decisions(2);
    auto st = testing::run_ranks(2, [&](int r, Communicator& comm) -> Status {
      EplbOptions o;
      o.window_steps = 10;
      o.step_interval = 3;
      o.min_improvement = min_improvement;
      DI_ASSIGN_OR_RETURN(auto ctl, EplbController::create(o, &comm, 2, 4));
      ctl->set_apply([&, r](const ExpertPlacement& p) {
        applied[r].push_back(p);
        return OkStatus();
      });
      record_skew(r, *ctl->recorder());
      for (int step = 1; step <= 6; ++step) {
        DI_RETURN_IF_ERROR(ctl->after_step());
        if (step % 3 != 0 && ctl->last_decision().has_value() &&
            ctl->last_decision()->step != step / 3 * 3)
          return Internal("a decision outside the interval at step " + std::to_string(step));
        if (step % 3 == 0) {
          if (!ctl->last_decision() || ctl->last_decision()->step != step)
            return Internal("no decision at step " + std::to_string(step));
          decisions[r].push_back(*ctl->last_decision());
        }
      }
      if (ctl->steps() != 6) return Internal("steps");
      if (ctl->num_rebalances() != static_cast<int64_t>(applied[r].size())) return Internal("count");
      if (!applied[r].empty() && ctl->placement().phy_to_log != applied[r].back().phy_to_log)
        return Internal("the controller did not adopt the applied placement");
      return OkStatus();
    });
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
    for (int r = 0; r < 2; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r) + " min_improvement " + std::to_string(min_improvement));
      ASSERT_EQ(decisions[r].size(), 2u);
      // Step 3: the window holds both ranks' picks.
      EXPECT_EQ(decisions[r][0].window_tokens, 210);
      EXPECT_DOUBLE_EQ(decisions[r][0].current_hottest, 190.0);
      EXPECT_DOUBLE_EQ(decisions[r][0].proposed_hottest, 110.0);
      EXPECT_EQ(decisions[r][0].applied, expect_apply);
      // Step 6: same window; after the move nothing improves, without it still not enough.
      EXPECT_EQ(decisions[r][1].window_tokens, 210);
      EXPECT_FALSE(decisions[r][1].applied);
      ASSERT_EQ(applied[r].size(), expect_apply ? 1u : 0u);
      if (expect_apply) {
        const std::vector<int32_t> layer0(applied[r][0].phy_to_log.begin(),
                                          applied[r][0].phy_to_log.begin() + 4);
        EXPECT_EQ(layer0, (std::vector<int32_t>{0, 3, 1, 2}));
        EXPECT_EQ(applied[r][0].phy_to_log, applied[0][0].phy_to_log);  // same on every rank
        EXPECT_DOUBLE_EQ(decisions[r][1].current_hottest, 110.0);
      }
    }
  }
}

TEST(EplbLiveController, WindowForgetsAndMissingApplyIsAnError) {
  auto st = testing::run_ranks(2, [&](int r, Communicator& comm) -> Status {
    EplbOptions o;
    o.window_steps = 2;
    o.step_interval = 1;
    o.min_improvement = 0.0;
    DI_ASSIGN_OR_RETURN(auto ctl, EplbController::create(o, &comm, 2, 4));
    int calls = 0;
    ctl->set_apply([&](const ExpertPlacement&) { return ++calls, OkStatus(); });
    // The skew is recorded in step 1, so the rebalance at step 1 applies; after step 3 the
    // window (2 steps) holds steps 2 and 3 only: nothing observed, nothing moves.
    record_skew(r, *ctl->recorder());
    DI_RETURN_IF_ERROR(ctl->after_step());
    if (calls != 1) return Internal("step 1 should apply");
    DI_RETURN_IF_ERROR(ctl->after_step());
    DI_RETURN_IF_ERROR(ctl->after_step());
    if (ctl->last_decision()->window_tokens != 0 || calls != 1)
      return Internal("the window did not forget step 1");
    // A fresh controller without an apply function: the due placement is an error.
    DI_ASSIGN_OR_RETURN(auto bare, EplbController::create(o, &comm, 2, 4));
    record_skew(r, *bare->recorder());
    Status s = bare->after_step();
    if (s.code() != StatusCode::kFailedPrecondition || s.message().find("set_apply") == std::string::npos)
      return Internal("expected FailedPrecondition naming set_apply, got " + s.to_string());
    return OkStatus();
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
}

// The recording hook: each rank's ExpertParallelMoe::forward records its own router picks for
// its layer index (rank 1 idle: nothing), on an EPLB placement with replicas.
TEST(EplbLiveRecording, ExpertParallelMoeRecordsRouterPicks) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int W = 2, E = 8, K = 2, layer = 1, L = 3;
  const int64_t H = 16, I = 8;
  std::normal_distribution<float> n(0.0f, 0.3f);
  auto random = [&](backend::Shape s) {
    Tensor t = Tensor::empty(DType::kF32, std::move(s));
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(rng);
    return t;
  };
  backend::ExpertSet all;
  for (int e = 0; e < E; ++e) {
    all.gate_up.push_back(Weight::of(random({2 * I, H})));
    all.down.push_back(Weight::of(random({H, I})));
  }
  std::vector<int64_t> skew(static_cast<size_t>(L) * E, 1);
  skew[static_cast<size_t>(layer) * E + 5] = 50;
  EplbParams params;
  params.num_replicas = E + W;
  params.num_gpus = W;
  auto placement = rebalance_experts(skew, L, E, params);
  ASSERT_TRUE(placement.ok());
  std::vector<std::vector<int32_t>> ids(W);
  ids[0].resize(static_cast<size_t>(7 + rng() % 20) * K);
  for (auto& v : ids[0]) v = static_cast<int32_t>(rng() % E);  // repeats allowed (hash routing)
  std::vector<std::vector<int64_t>> got(W);
  auto st = testing::run_ranks(W, [&](int r, Communicator& comm) -> Status {
    auto be = backend::make_cpu_backend();
    DI_ASSIGN_OR_RETURN(auto rec, ExpertLoadRecorder::create(L, E, 4));
    ExpertParallelContext ctx{&comm, *placement, ReplicaChoice::kTokenModulo, &rec};
    DI_ASSIGN_OR_RETURN(ExpertMap map, expert_map_for_layer(*placement, layer));
    DI_ASSIGN_OR_RETURN(ExpertParallelMoe moe,
                        ExpertParallelMoe::create(&comm, map, ctx.choice, ctx.load_recorder, layer));
    backend::ExpertSet local;
    for (int32_t e : ctx.local_experts(layer)) {
      local.gate_up.push_back(all.gate_up[e]);
      local.down.push_back(all.down[e]);
    }
    if (moe.local_experts() != ctx.local_experts(layer)) return Internal("local_experts differ");
    const int64_t T = static_cast<int64_t>(ids[r].size()) / K;
    Tensor x = random({T, H});
    Tensor idt = Tensor::empty(DType::kI32, {T, K});
    Tensor w = Tensor::empty(DType::kF32, {T, K});
    for (int64_t i = 0; i < T * K; ++i) {
      idt.data<int32_t>()[i] = ids[r][i];
      w.data<float>()[i] = 0.5f;
    }
    Tensor out = Tensor::empty(DType::kF32, {T, H});
    DI_RETURN_IF_ERROR(moe.forward(*be, local, x, idt, w, 0.0f, out));
    rec.end_step();
    got[r] = rec.load();
    return OkStatus();
  });
  for (int r = 0; r < W; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
  for (int r = 0; r < W; ++r) {
    std::vector<int64_t> want(static_cast<size_t>(L) * E, 0);
    for (int32_t e : ids[r]) ++want[static_cast<size_t>(layer) * E + e];
    EXPECT_EQ(got[r], want) << "rank " << r << " seed " << seed;
  }
}

}  // namespace
}  // namespace deepinfer::dist
