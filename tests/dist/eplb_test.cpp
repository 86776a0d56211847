// EPLB: hand-computed placements, invariants on random loads, determinism, validation errors.
#include "dist/eplb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#ifndef EPLB_RANDOM_TRIALS
#define EPLB_RANDOM_TRIALS 300
#endif
namespace deepinfer::dist {
namespace {

// Global policy, 1 layer, 4 experts, loads [10, 40, 20, 30], 6 slots on 2 GPUs (3 each).
//  Replication (start: one replica each, slots 0..3 = experts 0..3):
//    slot 4: ratios 10,40,20,30 -> expert 1 (count 2, ratio 20), replica rank 1
//    slot 5: ratios 10,20,20,30 -> expert 3 (count 2, ratio 15), replica rank 1
//  Replica loads j0..j5 = e0:10, e1:20, e2:20, e3:15, e1':20, e3':15.
//  Packing (load desc, ties lower index): j1 j2 j4 j3 j5 j0
//    j1 -> gpu0 (0 vs 0: lower)   gpu0=20 rank0
//    j2 -> gpu1 (0 < 20)          gpu1=20 rank0
//    j4 -> gpu0 (20 vs 20: lower) gpu0=40 rank1
//    j3 -> gpu1 (20 < 40)         gpu1=35 rank1
//    j5 -> gpu1 (35 < 40)         gpu1=50 rank2 (full)
//    j0 -> gpu0 (only non-full)   gpu0=50 rank2
//  slot = gpu*3 + rank: j1->0 j4->1 j0->2 j2->3 j3->4 j5->5.
TEST(Eplb, HandComputedGlobal) {
  EplbParams p;
  p.num_replicas = 6;
  p.num_gpus = 2;
  p.policy = EplbPolicy::kGlobal;
  auto r = rebalance_experts({10, 40, 20, 30}, 1, 4, p);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->hierarchical);
  EXPECT_EQ(r->phy_to_log, (std::vector<int32_t>{1, 1, 0, 2, 3, 3}));
  EXPECT_EQ(r->phy_rank, (std::vector<int32_t>{0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(r->replica_count, (std::vector<int32_t>{1, 2, 1, 2}));
  EXPECT_EQ(r->max_replicas, 3);
  EXPECT_EQ(r->log_to_phy, (std::vector<int32_t>{2, -1, -1, 0, 1, -1, 3, -1, -1, 4, 5, -1}));
  EXPECT_EQ(gpu_loads(*r, {10, 40, 20, 30}), (std::vector<double>{50, 50}));
}

// Hierarchical, 1 layer, 8 experts in 4 groups of 2, 2 nodes x 2 GPUs, 12 slots (3 per GPU).
//  loads e0..e7 = 90 10 | 20 20 | 5 5 | 60 40  -> group loads g0=100 g1=40 g2=10 g3=100
//  Step 1 (groups -> nodes, 2 each; order g0 g3 g1 g2):
//    g0 -> n0 (tie) 100 rank0; g3 -> n1 100 rank0; g1 -> n0 (tie 100/100) 140 rank1; g2 -> n1 110 rank1
//    node0 experts (node-major): e0 e1 e2 e3;  node1: e6 e7 e4 e5
//  Step 2, node0 (6 slots), loads 90 10 20 20: +e0 (90 -> 45), +e0 (45 -> 30). counts 3 1 1 1
//    replicas j0..j5 = e0 e1 e2 e3 e0' e0'' with loads 30 10 20 20 30 30
//  Step 3, node0 GPUs (order j0 j4 j5 j2 j3 j1):
//    j0->g0 30 r0; j4->g1 30 r0; j5->g0 (tie) 60 r1; j2->g1 50 r1; j3->g1 70 r2 (full); j1->g0 70 r2
//    slots 0..5 = j0 j5 j1 | j4 j2 j3 = e0(r0) e0(r2) e1 | e0(r1) e2 e3
//  Step 2, node1, loads e6 60 e7 40 e4 5 e5 5: +e6 (60 -> 30), +e7 (40 -> 20). counts 2 2 1 1
//    replicas j0..j5 = e6 e7 e4 e5 e6' e7' with loads 30 20 5 5 30 20
//  Step 3, node1 GPUs (order j0 j4 j1 j5 j2 j3):
//    j0->g0 30 r0; j4->g1 30 r0; j1->g0 (tie) 50 r1; j5->g1 50 r1; j2->g0 (tie) 55 r2; j3->g1 55 r2
//    slots 6..11 = j0 j1 j2 | j4 j5 j3 = e6(r0) e7(r0) e4 | e6(r1) e7(r1) e5
//  GPU loads 70 70 55 55 (identity placement: 100 40 10 100).
TEST(Eplb, HandComputedHierarchical) {
  const std::vector<int64_t> load = {90, 10, 20, 20, 5, 5, 60, 40};
  EplbParams p;
  p.num_replicas = 12;
  p.num_groups = 4;
  p.num_nodes = 2;
  p.num_gpus = 4;
  auto r = rebalance_experts(load, 1, 8, p);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->hierarchical);
  EXPECT_EQ(r->phy_to_log, (std::vector<int32_t>{0, 0, 1, 0, 2, 3, 6, 7, 4, 6, 7, 5}));
  EXPECT_EQ(r->phy_rank, (std::vector<int32_t>{0, 2, 0, 1, 0, 0, 0, 0, 0, 1, 1, 0}));
  EXPECT_EQ(r->replica_count, (std::vector<int32_t>{3, 1, 1, 1, 1, 1, 2, 2}));
  ASSERT_EQ(r->max_replicas, 5);
  EXPECT_EQ(r->slot_of(0, 0, 0), 0);
  EXPECT_EQ(r->slot_of(0, 0, 1), 3);
  EXPECT_EQ(r->slot_of(0, 0, 2), 1);
  EXPECT_EQ(r->slot_of(0, 0, 3), -1);
  EXPECT_EQ(r->slot_of(0, 6, 1), 9);
  EXPECT_EQ(r->slot_of(0, 7, 1), 10);
  EXPECT_EQ(gpu_loads(*r, load), (std::vector<double>{70, 70, 55, 55}));
  auto before = identity_placement(1, 8, 4);
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(gpu_loads(*before, load), (std::vector<double>{100, 40, 10, 100}));
}

// kAuto falls back to the global policy when groups do not split over nodes; kHierarchical refuses.
TEST(Eplb, PolicySelection) {
  const std::vector<int64_t> load = {5, 1, 4, 2, 8, 3};
  EplbParams p;
  p.num_replicas = 8;
  p.num_groups = 3;
  p.num_nodes = 2;
  p.num_gpus = 2;
  auto automatic = rebalance_experts(load, 1, 6, p);
  ASSERT_TRUE(automatic.ok()) << automatic.status().to_string();
  EXPECT_FALSE(automatic->hierarchical);
  p.policy = EplbPolicy::kGlobal;
  auto global = rebalance_experts(load, 1, 6, p);
  ASSERT_TRUE(global.ok());
  EXPECT_EQ(global->phy_to_log, automatic->phy_to_log);
  p.policy = EplbPolicy::kHierarchical;
  auto hier = rebalance_experts(load, 1, 6, p);
  ASSERT_FALSE(hier.ok());
  EXPECT_NE(hier.status().message().find("num_groups"), std::string::npos) << hier.status().message();
}

TEST(Eplb, BalancedPackingOneItemPerPackKeepsOrder) {
  const Packing p = balanced_packing({1.0, 9.0, 5.0}, 3);
  EXPECT_EQ(p.pack, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p.rank_in_pack, (std::vector<int32_t>{0, 0, 0}));
}

TEST(Eplb, ReplicateExpertsExactRatios) {
  // 7/2 = 3.5 vs 10/3 = 3.33: expert 0 wins; then 7/3 = 2.33 vs 3.33: expert 1.
  const Replication r = replicate_experts({7, 10}, 6);
  // start 1,1: +1 (10) -> 1,2; ratios 7 vs 5 -> +0 -> 2,2; 3.5 vs 5 -> +1 -> 2,3; 3.5 vs 3.33 -> +0.
  EXPECT_EQ(r.phy_to_log, (std::vector<int32_t>{0, 1, 1, 0, 1, 0}));
  EXPECT_EQ(r.phy_rank, (std::vector<int32_t>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(r.replica_count, (std::vector<int32_t>{3, 3}));
}

// --- random inputs ---------------------------------------------------------------------------

struct Case {
  int layers, experts, groups, nodes, gpus, replicas;
};

Case random_case(std::mt19937_64& rng) {
  const int nodes = std::uniform_int_distribution<int>(1, 3)(rng);
  const int gpus = nodes * std::uniform_int_distribution<int>(1, 4)(rng);
  const int groups = nodes * std::uniform_int_distribution<int>(1, 3)(rng);
  // experts: a multiple of groups and of gpus (so the identity placement exists)
  const int base = std::lcm(groups, gpus);
  const int experts = base * std::uniform_int_distribution<int>(1, std::max(1, 48 / base))(rng);
  const int per_gpu = (experts + gpus - 1) / gpus + std::uniform_int_distribution<int>(1, 3)(rng);
  return {std::uniform_int_distribution<int>(1, 3)(rng), experts, groups, nodes, gpus, per_gpu * gpus};
}

std::vector<int64_t> skewed_loads(std::mt19937_64& rng, int n) {
  std::lognormal_distribution<double> d(5.0, 1.0);
  std::vector<int64_t> w(n);
  for (auto& x : w) x = 1 + static_cast<int64_t>(d(rng));
  return w;
}

void check_invariants(const ExpertPlacement& p, const Case& c, const std::vector<int64_t>& load) {
  const int slots_per_gpu = c.replicas / c.gpus;
  ASSERT_EQ(p.slots_per_gpu(), slots_per_gpu);
  for (int l = 0; l < c.layers; ++l) {
    std::vector<int> seen(c.experts, 0);
    for (int s = 0; s < c.replicas; ++s) {
      const int e = p.logical_of(l, s);
      ASSERT_GE(e, 0);
      ASSERT_LT(e, c.experts);
      ++seen[e];
      // log_to_phy is the inverse of (phy_to_log, phy_rank)
      ASSERT_EQ(p.slot_of(l, e, p.phy_rank[static_cast<size_t>(l) * c.replicas + s]), s);
    }
    for (int e = 0; e < c.experts; ++e) {
      ASSERT_GE(seen[e], 1) << "expert " << e << " has no replica";
      ASSERT_EQ(seen[e], p.count_of(l, e));
    }
    if (p.hierarchical) {  // every group on exactly one node, same number of groups per node
      const int group_size = c.experts / c.groups;
      const int slots_per_node = c.replicas / c.nodes;
      std::vector<int> node_of_group(c.groups, -1), groups_on_node(c.nodes, 0);
      for (int s = 0; s < c.replicas; ++s) {
        const int g = p.logical_of(l, s) / group_size, n = s / slots_per_node;
        if (node_of_group[g] < 0) {
          node_of_group[g] = n;
          ++groups_on_node[n];
        }
        ASSERT_EQ(node_of_group[g], n) << "group " << g << " split over nodes";
      }
      for (int n = 0; n < c.nodes; ++n) ASSERT_EQ(groups_on_node[n], c.groups / c.nodes);
    }
  }
}

TEST(Eplb, RandomInvariants) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < EPLB_RANDOM_TRIALS; ++trial) {
    const Case c = random_case(rng);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": layers " + std::to_string(c.layers) + " experts " +
                 std::to_string(c.experts) + " groups " + std::to_string(c.groups) + " nodes " +
                 std::to_string(c.nodes) + " gpus " + std::to_string(c.gpus) + " replicas " +
                 std::to_string(c.replicas));
    const auto load = skewed_loads(rng, c.layers * c.experts);
    for (const EplbPolicy policy : {EplbPolicy::kAuto, EplbPolicy::kGlobal}) {
      EplbParams p{c.replicas, c.groups, c.nodes, c.gpus, policy};
      auto r = rebalance_experts(load, c.layers, c.experts, p);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      ASSERT_EQ(r->hierarchical, policy == EplbPolicy::kAuto);
      check_invariants(*r, c, load);
      // Balancing helps where there is imbalance to remove: when the identity layout's hottest GPU
      // is >= 1.25x the mean, the global policy's hottest GPU is no hotter. This is not a theorem
      // (greedy packing is not optimal, and on an already near-balanced layout it loses by a few
      // percent in ~0.2% of random cases, all with before <= 1.15x mean over 300k trials), so the
      // check keeps to clear imbalance. The hierarchical policy is further bound by its node
      // constraint (load never crosses nodes), so it is checked structurally above.
      if (r->hierarchical) continue;
      auto before = identity_placement(c.layers, c.experts, c.gpus);
      ASSERT_TRUE(before.ok());
      const auto after_loads = gpu_loads(*r, load), before_loads = gpu_loads(*before, load);
      for (int l = 0; l < c.layers; ++l) {
        const auto a = after_loads.begin() + l * c.gpus, b = before_loads.begin() + l * c.gpus;
        const double mean = std::accumulate(b, b + c.gpus, 0.0) / c.gpus;
        const double max_before = *std::max_element(b, b + c.gpus);
        if (max_before < 1.25 * mean) continue;
        ASSERT_LE(*std::max_element(a, a + c.gpus), max_before * (1 + 1e-12)) << "layer " << l;
      }
    }
  }
}

// Near-uniform loads with redundancy: the hottest GPU ends within 10% of the mean.
TEST(Eplb, UniformishLoadsAreNearMean) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < EPLB_RANDOM_TRIALS / 6; ++trial) {
    const int gpus = 8, experts = 64, replicas = 80;
    std::vector<int64_t> load(experts);
    for (auto& w : load) w = std::uniform_int_distribution<int64_t>(900, 1100)(rng);
    EplbParams p{replicas, 8, 2, gpus, EplbPolicy::kAuto};
    auto r = rebalance_experts(load, 1, experts, p);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const auto loads = gpu_loads(*r, load);
    const double mean = std::accumulate(loads.begin(), loads.end(), 0.0) / gpus;
    EXPECT_LE(*std::max_element(loads.begin(), loads.end()), 1.10 * mean) << "trial " << trial;
  }
}

TEST(Eplb, Deterministic) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const Case c = random_case(rng);
    auto load = skewed_loads(rng, c.layers * c.experts);
    for (auto& w : load) w = w / 40 * 40;  // many ties: the tie rules decide
    EplbParams p{c.replicas, c.groups, c.nodes, c.gpus, EplbPolicy::kAuto};
    auto a = rebalance_experts(load, c.layers, c.experts, p);
    auto b = rebalance_experts(load, c.layers, c.experts, p);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->phy_to_log, b->phy_to_log);
    EXPECT_EQ(a->phy_rank, b->phy_rank);
    EXPECT_EQ(a->log_to_phy, b->log_to_phy);
    EXPECT_EQ(a->replica_count, b->replica_count);
  }
}

void expect_invalid(const std::vector<int64_t>& load, int layers, int experts, EplbParams p,
                    const std::string& names) {
  auto r = rebalance_experts(load, layers, experts, p);
  ASSERT_FALSE(r.ok()) << "expected an error naming " << names;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(names), std::string::npos) << r.status().message();
}

TEST(Eplb, ValidationErrorsNameTheArgument) {
  const std::vector<int64_t> load = {1, 2, 3, 4};
  expect_invalid(load, 1, 4, {6, 1, 1, 4, EplbPolicy::kAuto}, "num_replicas (6) must be divisible by num_gpus (4)");
  expect_invalid(load, 1, 4, {2, 1, 1, 2, EplbPolicy::kAuto}, "num_replicas (2) must be >= num_logical_experts (4)");
  expect_invalid({1, -2, 3, 4}, 1, 4, {4, 1, 1, 2, EplbPolicy::kAuto}, "load[0][1] is negative");
  expect_invalid({1, 2, 3}, 1, 4, {4, 1, 1, 2, EplbPolicy::kAuto}, "load has 3 entries");
  expect_invalid(load, 1, 4, {4, 1, 2, 3, EplbPolicy::kAuto}, "num_replicas (4) must be divisible by num_gpus (3)");
  expect_invalid(load, 1, 4, {6, 2, 2, 3, EplbPolicy::kAuto}, "num_gpus (3) must be divisible by num_nodes (2)");
  expect_invalid(load, 1, 4, {4, 3, 1, 2, EplbPolicy::kAuto}, "num_logical_experts (4) must be divisible by num_groups (3)");
  expect_invalid(load, 1, 4, {4, 0, 1, 2, EplbPolicy::kAuto}, "num_groups must be >= 1");
  expect_invalid(load, 1, 4, {4, 1, 1, 0, EplbPolicy::kAuto}, "num_gpus must be >= 1");
  expect_invalid(load, 0, 4, {4, 1, 1, 2, EplbPolicy::kAuto}, "num_layers must be >= 1");
  expect_invalid({int64_t{1} << 53, 1, 0, 0}, 1, 4, {4, 1, 1, 2, EplbPolicy::kAuto}, "sum past 2^53");
  EXPECT_FALSE(identity_placement(1, 6, 4).ok());
}

}  // namespace
}  // namespace deepinfer::dist
