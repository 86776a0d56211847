// The expert-parallel MoE (dist::ExpertParallelMoe over the in-process communicator, threads as
// ranks, CPU backend) against the single-rank MoE (Backend::moe_experts) on the concatenation of
// every rank's tokens: bitwise equal rows, for world sizes 1, 2, 4, identity and EPLB placements
// (redundant experts), both replica choices, both CPU modes, ranks with zero tokens, repeated
// picks (hash routing). Plus argument errors.
#include "dist/expert_parallel_moe.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backend/backend.h"
#include "ep_test_util.h"

namespace deepinfer::dist {
namespace {

using backend::ExpertSet;
using backend::Tensor;
using backend::Weight;

struct Problem {
  int64_t E, H, I, K;
  float limit;
  ExpertSet experts;                       // all E experts
  std::vector<Tensor> x, ids, w;           // per rank: [T_r, H], [T_r, K], [T_r, K]
};

Tensor random_f32(std::mt19937& rng, backend::Shape shape, float scale) {
  std::normal_distribution<float> n(0.0f, scale);
  Tensor t = Tensor::empty(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(rng);
  return t;
}

Problem make_problem(std::mt19937& rng, int world_size, bool repeat_picks) {
  Problem p;
  p.E = 8;
  p.H = 24 + static_cast<int64_t>(rng() % 137);  // odd widths too
  p.I = 8 + static_cast<int64_t>(rng() % 9);
  p.K = 2 + static_cast<int64_t>(rng() % 2);
  p.limit = (rng() % 2) ? 0.5f : 0.0f;
  for (int64_t e = 0; e < p.E; ++e) {
    p.experts.gate_up.push_back(Weight::of(random_f32(rng, {2 * p.I, p.H}, 0.3f)));
    p.experts.down.push_back(Weight::of(random_f32(rng, {p.H, p.I}, 0.3f)));
  }
  for (int r = 0; r < world_size; ++r) {
    const int64_t T = (r == 1) ? 0 : 1 + static_cast<int64_t>(rng() % 40);  // rank 1 idle
    p.x.push_back(random_f32(rng, {T, p.H}, 1.0f));
    Tensor ids = Tensor::empty(DType::kI32, {T, p.K});
    Tensor w = Tensor::empty(DType::kF32, {T, p.K});
    std::uniform_real_distribution<float> u(0.05f, 1.0f);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int32_t> perm(p.E);
      for (int32_t e = 0; e < p.E; ++e) perm[e] = e;
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t k = 0; k < p.K; ++k) {
        ids.data<int32_t>()[t * p.K + k] = repeat_picks ? static_cast<int32_t>(rng() % p.E) : perm[k];
        w.data<float>()[t * p.K + k] = u(rng);
      }
    }
    p.ids.push_back(ids);
    p.w.push_back(w);
  }
  return p;
}

Tensor concat(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& t : parts) rows += t.dim(0);
  backend::Shape shape = parts[0].shape();
  shape[0] = rows;
  Tensor out = Tensor::empty(parts[0].dtype(), shape);
  size_t at = 0;
  for (const Tensor& t : parts) {
    std::memcpy(static_cast<char*>(out.raw()) + at, t.raw(), t.nbytes());
    at += t.nbytes();
  }
  return out;
}

ExpertSet local_set(const ExpertSet& all, const ExpertParallelContext& ctx) {
  ExpertSet s;
  for (int32_t e : ctx.local_experts(0)) {
    s.gate_up.push_back(all.gate_up[e]);
    s.down.push_back(all.down[e]);
  }
  return s;
}

// Runs the EP MoE on every rank and compares with the single-rank MoE, bit for bit.
void check_equal(const Problem& p, const ExpertPlacement& placement, ReplicaChoice choice,
                 bool reference, uint32_t seed) {
  const int W = placement.num_gpus;
  auto be = backend::make_cpu_backend({reference, 0});
  Tensor x = concat(p.x), ids = concat(p.ids), w = concat(p.w);
  Tensor want = Tensor::empty(DType::kF32, {x.dim(0), p.H});
  ASSERT_TRUE(be->moe_experts(x, ids, w, p.experts, p.limit, want).ok());

  std::vector<Tensor> got(W);
  auto st = testing::run_ranks(W, [&](int r, Communicator& comm) -> Status {
    auto rbe = backend::make_cpu_backend({reference, 0});
    ExpertParallelContext ctx{&comm, placement, choice};
    DI_RETURN_IF_ERROR(ctx.validate(1, static_cast<int>(p.E)));
    DI_ASSIGN_OR_RETURN(ExpertMap map, expert_map_for_layer(placement, 0));
    DI_ASSIGN_OR_RETURN(ExpertParallelMoe moe, ExpertParallelMoe::create(&comm, map, choice));
    ExpertSet local = local_set(p.experts, ctx);
    got[r] = Tensor::empty(DType::kF32, {p.x[r].dim(0), p.H});
    return moe.forward(*rbe, local, p.x[r], p.ids[r], p.w[r], p.limit, got[r]);
  });
  for (int r = 0; r < W; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string() << " seed " << seed;
  int64_t row = 0;
  for (int r = 0; r < W; ++r) {
    const int64_t T = p.x[r].dim(0);
    for (int64_t t = 0; t < T; ++t, ++row) {
      const float* a = got[r].data<float>() + t * p.H;
      const float* b = want.data<float>() + row * p.H;
      for (int64_t h = 0; h < p.H; ++h)
        ASSERT_EQ(std::memcmp(a + h, b + h, sizeof(float)), 0)
            << "world " << W << " rank " << r << " token " << t << " channel " << h << ": " << a[h]
            << " vs single-rank " << b[h] << " (seed " << seed << ", replicas "
            << placement.num_replicas << ")";
    }
  }
}

std::vector<int64_t> random_load(std::mt19937& rng, int E) {
  std::vector<int64_t> load(E);
  for (auto& l : load) l = static_cast<int64_t>(rng() % 1000) * ((rng() % 4) ? 1 : 20);
  return load;
}

TEST(ExpertParallelMoe, EqualsSingleRankBitwise) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int W : {1, 2, 4}) {
    for (bool reference : {false, true}) {
      for (bool repeat : {false, true}) {
        Problem p = make_problem(rng, W, repeat);
        auto identity = identity_placement(1, static_cast<int>(p.E), W);
        ASSERT_TRUE(identity.ok());
        EplbParams ep;
        ep.num_replicas = static_cast<int>(p.E) + 2 * W;  // two redundant slots per rank
        ep.num_gpus = W;
        ep.policy = EplbPolicy::kGlobal;
        auto eplb = rebalance_experts(random_load(rng, static_cast<int>(p.E)), 1, static_cast<int>(p.E), ep);
        ASSERT_TRUE(eplb.ok()) << eplb.status().to_string();
        for (ReplicaChoice c : {ReplicaChoice::kTokenModulo, ReplicaChoice::kPreferLocal}) {
          SCOPED_TRACE("world " + std::to_string(W) + (reference ? " reference" : " fast") +
                       (repeat ? " repeated picks" : ""));
          check_equal(p, *identity, c, reference, seed);
          check_equal(p, *eplb, c, reference, seed);
        }
      }
    }
  }
}

TEST(ExpertParallelMoe, HierarchicalPlacementWithReplicasOnTwoNodes) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  Problem p = make_problem(rng, 4, false);
  EplbParams ep;
  ep.num_replicas = 12;
  ep.num_groups = 4;
  ep.num_nodes = 2;
  ep.num_gpus = 4;
  ep.policy = EplbPolicy::kHierarchical;
  auto placement = rebalance_experts(random_load(rng, 8), 1, 8, ep);
  ASSERT_TRUE(placement.ok()) << placement.status().to_string();
  int replicated = 0;
  for (int e = 0; e < 8; ++e) replicated += placement->count_of(0, e) > 1;
  EXPECT_GT(replicated, 0);
  check_equal(p, *placement, ReplicaChoice::kTokenModulo, false, seed);
}

TEST(ExpertParallelMoe, Errors) {
  std::mt19937 rng(7);
  Problem p = make_problem(rng, 2, false);
  auto placement = identity_placement(1, 8, 2);
  ASSERT_TRUE(placement.ok());
  // Wrong number of local experts, and an expert id outside the map: every rank reports an
  // error (the failing rank its own, its peer the abort).
  auto st = testing::run_ranks(2, [&](int r, Communicator& comm) -> Status {
    auto be = backend::make_cpu_backend();
    DI_ASSIGN_OR_RETURN(ExpertMap map, expert_map_for_layer(*placement, 0));
    DI_ASSIGN_OR_RETURN(ExpertParallelMoe moe, ExpertParallelMoe::create(&comm, map, ReplicaChoice::kTokenModulo));
    ExpertSet local = p.experts;  // all 8, but the map gives each rank 4 slots
    Tensor out = Tensor::empty(DType::kF32, {p.x[r].dim(0), p.H});
    return moe.forward(*be, local, p.x[r], p.ids[r], p.w[r], p.limit, out);
  });
  for (int r = 0; r < 2; ++r) EXPECT_FALSE(st[r].ok());
  EXPECT_NE(st[0].message().find("holds 8 experts"), std::string::npos) << st[0].to_string();

  auto bad_map = identity_placement(1, 8, 4);
  ASSERT_TRUE(bad_map.ok());
  auto one = testing::run_ranks(2, [&](int, Communicator& comm) -> Status {
    DI_ASSIGN_OR_RETURN(ExpertMap map, expert_map_for_layer(*bad_map, 0));
    return ExpertParallelMoe::create(&comm, map, ReplicaChoice::kTokenModulo).status();
  });
  EXPECT_EQ(one[0].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(one[0].message().find("4 ranks"), std::string::npos) << one[0].to_string();

  auto ids_bad = testing::run_ranks(1, [&](int, Communicator& comm) -> Status {
    auto be = backend::make_cpu_backend();
    auto pl = identity_placement(1, 8, 1);
    DI_ASSIGN_OR_RETURN(ExpertMap map, expert_map_for_layer(*pl, 0));
    DI_ASSIGN_OR_RETURN(ExpertParallelMoe moe, ExpertParallelMoe::create(&comm, map, ReplicaChoice::kTokenModulo));
    Tensor x = random_f32(rng, {2, p.H}, 1.0f);
    Tensor ids = Tensor::from_i32({2, 1}, {3, 9});
    Tensor w = Tensor::from_f32({2, 1}, {1.0f, 1.0f});
    Tensor out = Tensor::empty(DType::kF32, {2, p.H});
    return moe.forward(*be, p.experts, x, ids, w, p.limit, out);
  });
  EXPECT_EQ(ids_bad[0].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ids_bad[0].message().find("= 9 outside"), std::string::npos) << ids_bad[0].to_string();

  ExpertParallelContext ctx;
  EXPECT_FALSE(ctx.validate(1, 8).ok());
}

}  // namespace
}  // namespace deepinfer::dist
