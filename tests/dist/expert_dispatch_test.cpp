// Dispatch/combine index arithmetic: a hand-computed 2-rank example and a full simulation
// (dispatch -> all-to-all -> grouped expert compute -> all-to-all -> combine) against a
// single-rank MoE, bit for bit, for world sizes 1..8.
#include "dist/expert_dispatch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#ifndef DISPATCH_TRIALS
#define DISPATCH_TRIALS 25
#endif
namespace deepinfer::dist {
namespace {

// 3 logical experts, 4 slots on 2 ranks (2 each): rank0 = {slot0: e0, slot1: e1},
// rank1 = {slot2: e2, slot3: e0 (second replica of e0)}.
ExpertMap two_rank_map() {
  ExpertMap m;
  m.num_logical = 3;
  m.num_slots = 4;
  m.world_size = 2;
  m.max_replicas = 2;
  m.log_to_phy = {0, 3, 1, -1, 2, -1};
  m.replica_count = {2, 1, 1};
  return m;
}

// Tokens t0: {e0, e2}, t1: {e1, e0}, t2: {e0, e1}; pair id = t*2 + k.
const std::vector<int32_t> kTopk = {0, 2, 1, 0, 0, 1};

TEST(ExpertDispatch, HandComputedTokenModulo) {
  // Source rank 0, token_offset 0. e0 replica = t % 2:
  //   id0 (t0,e0) -> slot0 | id1 (t0,e2) -> slot2 | id2 (t1,e1) -> slot1
  //   id3 (t1,e0) -> replica 1 = slot3 | id4 (t2,e0) -> slot0 | id5 (t2,e1) -> slot1
  // Per slot: s0 {0,4}, s1 {2,5}, s2 {1}, s3 {3} -> send order 0 4 2 5 | 1 3.
  auto plan = plan_dispatch(kTopk, 3, 2, two_rank_map(), 0, 0, ReplicaChoice::kTokenModulo);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->pair_slot, (std::vector<int32_t>{0, 2, 1, 3, 0, 1}));
  EXPECT_EQ(plan->send_counts, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(plan->send_offsets, (std::vector<int64_t>{0, 4, 6}));
  EXPECT_EQ(plan->send_expert_counts, (std::vector<int64_t>{2, 2, 1, 1}));
  EXPECT_EQ(plan->send_pairs, (std::vector<int32_t>{0, 4, 2, 5, 1, 3}));
  EXPECT_EQ(plan->pair_position, (std::vector<int64_t>{0, 4, 2, 5, 1, 3}));

  // Offset 1 flips the e0 replicas: id0 -> slot3, id3 -> slot0, id4 -> slot3.
  auto shifted = plan_dispatch(kTopk, 3, 2, two_rank_map(), 0, 1, ReplicaChoice::kTokenModulo);
  ASSERT_TRUE(shifted.ok());
  EXPECT_EQ(shifted->pair_slot, (std::vector<int32_t>{3, 2, 1, 0, 3, 1}));
  EXPECT_EQ(shifted->send_pairs, (std::vector<int32_t>{3, 2, 5, 1, 0, 4}));
}

TEST(ExpertDispatch, HandComputedPreferLocalAndReceive) {
  // Source rank 1 prefers its own e0 replica (slot3) for every e0 pair:
  //   slots 3 2 1 3 3 1 -> s1 {2,5}, s2 {1}, s3 {0,3,4}; send order 2 5 | 1 0 3 4.
  auto p1 = plan_dispatch(kTopk, 3, 2, two_rank_map(), 1, 3, ReplicaChoice::kPreferLocal);
  ASSERT_TRUE(p1.ok()) << p1.status().to_string();
  EXPECT_EQ(p1->pair_slot, (std::vector<int32_t>{3, 2, 1, 3, 3, 1}));
  EXPECT_EQ(p1->send_counts, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(p1->send_expert_counts, (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(p1->send_pairs, (std::vector<int32_t>{2, 5, 1, 0, 3, 4}));
  // Source rank 0 with kTokenModulo (as above) sends rank1 one row for slot2 and one for slot3.
  // Rank 1 receives src0: [j0: 1, j1: 1], src1: [j0: 1, j1: 3].
  //   recv rows: src0 j0 -> grouped 0, src0 j1 -> grouped 2, src1 j0 -> grouped 1, src1 j1 -> 3 4 5
  auto r1 = plan_receive({1, 1, 1, 3}, 2, 2);
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  EXPECT_EQ(r1->recv_counts, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(r1->recv_offsets, (std::vector<int64_t>{0, 2, 6}));
  EXPECT_EQ(r1->expert_offsets, (std::vector<int64_t>{0, 2, 6}));
  EXPECT_EQ(r1->recv_to_grouped, (std::vector<int64_t>{0, 2, 1, 3, 4, 5}));
  // Rank 0 receives src0: [2, 2], src1: [0, 2]: already grouped.
  auto r0 = plan_receive({2, 2, 0, 2}, 2, 2);
  ASSERT_TRUE(r0.ok());
  EXPECT_EQ(r0->expert_offsets, (std::vector<int64_t>{0, 2, 6}));
  EXPECT_EQ(r0->recv_to_grouped, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(ExpertDispatch, Errors) {
  const ExpertMap m = two_rank_map();
  auto bad_id = plan_dispatch({0, 3}, 1, 2, m, 0, 0, ReplicaChoice::kTokenModulo);
  ASSERT_FALSE(bad_id.ok());
  EXPECT_NE(bad_id.status().message().find("topk_ids[0][1] = 3"), std::string::npos) << bad_id.status().message();
  auto bad_size = plan_dispatch({0, 1, 2}, 2, 2, m, 0, 0, ReplicaChoice::kTokenModulo);
  ASSERT_FALSE(bad_size.ok());
  EXPECT_NE(bad_size.status().message().find("topk_ids has 3 entries"), std::string::npos);
  auto bad_rank = plan_dispatch({0, 1}, 1, 2, m, 2, 0, ReplicaChoice::kTokenModulo);
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_NE(bad_rank.status().message().find("source_rank 2"), std::string::npos);
  ExpertMap broken = m;
  broken.log_to_phy[0] = 7;
  auto bad_map = plan_dispatch({0, 1}, 1, 2, broken, 0, 0, ReplicaChoice::kTokenModulo);
  ASSERT_FALSE(bad_map.ok());
  EXPECT_NE(bad_map.status().message().find("log_to_phy[0][0] = 7"), std::string::npos);
  auto bad_recv = plan_receive({1, 2, 3}, 2, 2);
  ASSERT_FALSE(bad_recv.ok());
  EXPECT_NE(bad_recv.status().message().find("recv_expert_counts has 3 entries"), std::string::npos);
  auto plan = plan_dispatch({0, 1}, 1, 2, m, 0, 0, ReplicaChoice::kTokenModulo);
  ASSERT_TRUE(plan.ok());
  auto bad_combine = combine_rows(*plan, std::vector<float>(3), {0.5f, 0.5f}, 2);
  ASSERT_FALSE(bad_combine.ok());
  EXPECT_NE(bad_combine.status().message().find("combine input has 3 values"), std::string::npos);
}

// The "expert": a known function of (logical expert, token row), identical for every replica.
void expert_fn(int e, const float* x, float* y, int hidden) {
  for (int h = 0; h < hidden; ++h) y[h] = x[h] * (0.25f + 0.125f * e) + 0.0625f * (e + h);
}

struct RankInput {
  int num_tokens = 0;
  std::vector<float> x;        // [T, H]
  std::vector<int32_t> topk;   // [T, K]
  std::vector<float> weights;  // [T, K]
};

void simulate(std::mt19937_64& rng, int world, ReplicaChoice choice) {
  const int experts = std::uniform_int_distribution<int>(1, 12)(rng);
  const int top_k = std::uniform_int_distribution<int>(1, std::min(experts, 4))(rng);
  const int hidden = std::uniform_int_distribution<int>(1, 5)(rng);
  const int slots_per_rank = (experts + world - 1) / world + std::uniform_int_distribution<int>(0, 2)(rng);
  SCOPED_TRACE("world " + std::to_string(world) + " experts " + std::to_string(experts) + " top_k " +
               std::to_string(top_k) + " hidden " + std::to_string(hidden) + " slots/rank " +
               std::to_string(slots_per_rank));
  std::vector<int64_t> load(experts);
  for (auto& w : load) w = std::uniform_int_distribution<int64_t>(0, 1000)(rng);
  auto placement = rebalance_experts(load, 1, experts,
                                     {slots_per_rank * world, 1, 1, world, EplbPolicy::kGlobal});
  ASSERT_TRUE(placement.ok()) << placement.status().to_string();
  auto map = expert_map_for_layer(*placement, 0);
  ASSERT_TRUE(map.ok()) << map.status().to_string();

  std::uniform_real_distribution<float> val(-2.0f, 2.0f), wt(0.01f, 1.0f);
  std::vector<RankInput> in(world);
  std::vector<int64_t> token_offset(world, 0);
  for (int r = 0; r < world; ++r) {
    RankInput& ri = in[r];
    ri.num_tokens = std::uniform_int_distribution<int>(0, 9)(rng);  // a rank may have no tokens
    if (r > 0) token_offset[r] = token_offset[r - 1] + in[r - 1].num_tokens;
    for (int i = 0; i < ri.num_tokens * hidden; ++i) ri.x.push_back(val(rng));
    std::vector<int32_t> ids(experts);
    std::iota(ids.begin(), ids.end(), 0);
    for (int t = 0; t < ri.num_tokens; ++t) {
      std::shuffle(ids.begin(), ids.end(), rng);  // distinct experts per token, as top-k gives
      for (int k = 0; k < top_k; ++k) {
        ri.topk.push_back(ids[k]);
        ri.weights.push_back(wt(rng));
      }
    }
  }

  // 1. Plans and send buffers (values, plus a tag row = source rank * 1000 + pair id, exact in float).
  std::vector<DispatchPlan> plans;
  std::vector<std::vector<float>> send(world), send_tag(world);
  for (int r = 0; r < world; ++r) {
    auto plan = plan_dispatch(in[r].topk, in[r].num_tokens, top_k, *map, r, token_offset[r], choice);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    plans.push_back(*plan);
    send[r] = gather_send_rows(*plan, in[r].x, hidden);
    for (const int32_t pair : plan->send_pairs) send_tag[r].push_back(static_cast<float>(r * 1000 + pair));
  }
  // 2. Count exchange + dispatch all-to-all, 3. grouped compute, 4. back to receive order.
  std::vector<std::vector<float>> result_recv(world);
  std::vector<ReceiveLayout> layouts;
  for (int d = 0; d < world; ++d) {
    std::vector<int64_t> counts;
    std::vector<float> recv, recv_tag;
    for (int s = 0; s < world; ++s) {
      const auto& p = plans[s];
      counts.insert(counts.end(), p.send_expert_counts.begin() + d * slots_per_rank,
                    p.send_expert_counts.begin() + (d + 1) * slots_per_rank);
      recv.insert(recv.end(), send[s].begin() + p.send_offsets[d] * hidden,
                  send[s].begin() + p.send_offsets[d + 1] * hidden);
      recv_tag.insert(recv_tag.end(), send_tag[s].begin() + p.send_offsets[d],
                      send_tag[s].begin() + p.send_offsets[d + 1]);
    }
    auto layout = plan_receive(counts, world, slots_per_rank);
    ASSERT_TRUE(layout.ok()) << layout.status().to_string();
    const auto grouped = scatter_rows(recv, layout->recv_to_grouped, hidden);
    const auto grouped_tag = scatter_rows(recv_tag, layout->recv_to_grouped, 1);
    std::vector<float> y(grouped.size());
    for (int j = 0; j < slots_per_rank; ++j) {
      const int slot = d * slots_per_rank + j;
      const int e = placement->logical_of(0, slot);
      for (int64_t row = layout->expert_offsets[j]; row < layout->expert_offsets[j + 1]; ++row) {
        // The row really was routed to this slot (and grouped rows keep source order).
        const int tag = static_cast<int>(grouped_tag[row]);
        ASSERT_EQ(plans[tag / 1000].pair_slot[tag % 1000], slot);
        if (row > layout->expert_offsets[j]) {
          ASSERT_LT(grouped_tag[row - 1], grouped_tag[row]);
        }
        expert_fn(e, &grouped[row * hidden], &y[row * hidden], hidden);
      }
    }
    result_recv[d] = gather_rows(y, layout->recv_to_grouped, hidden);
    layouts.push_back(*layout);
  }
  // 5. Combine all-to-all (counts reversed) and the weighted sum; compare with one rank.
  for (int s = 0; s < world; ++s) {
    std::vector<float> back;
    for (int d = 0; d < world; ++d) {
      back.insert(back.end(), result_recv[d].begin() + layouts[d].recv_offsets[s] * hidden,
                  result_recv[d].begin() + layouts[d].recv_offsets[s + 1] * hidden);
    }
    auto out = combine_rows(plans[s], back, in[s].weights, hidden);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    std::vector<float> ref(static_cast<size_t>(in[s].num_tokens) * hidden, 0.0f), fy(hidden);
    for (int t = 0; t < in[s].num_tokens; ++t) {
      for (int k = 0; k < top_k; ++k) {
        expert_fn(in[s].topk[t * top_k + k], &in[s].x[t * hidden], fy.data(), hidden);
        for (int h = 0; h < hidden; ++h) ref[t * hidden + h] += in[s].weights[t * top_k + k] * fy[h];
      }
    }
    ASSERT_EQ(*out, ref) << "rank " << s;
  }
}

TEST(ExpertDispatch, SimulatedAllToAllMatchesSingleRank) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int world = 1; world <= 8; ++world) {
    for (int trial = 0; trial < DISPATCH_TRIALS; ++trial) {
      simulate(rng, world, trial % 2 == 0 ? ReplicaChoice::kTokenModulo : ReplicaChoice::kPreferLocal);
      if (HasFatalFailure()) return;
    }
  }
}

// World size 1 without redundancy: everything goes to rank 0 in (expert, token, k) order, and the
// receive side is the identity.
TEST(ExpertDispatch, WorldSizeOneIsIdentityPath) {
  auto placement = identity_placement(1, 4, 1);
  ASSERT_TRUE(placement.ok());
  auto map = expert_map_for_layer(*placement, 0);
  ASSERT_TRUE(map.ok());
  const std::vector<int32_t> ids = {3, 0, 1, 3};  // t0: e3 e0, t1: e1 e3
  auto plan = plan_dispatch(ids, 2, 2, *map, 0, 0, ReplicaChoice::kTokenModulo);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->pair_slot, ids);
  EXPECT_EQ(plan->send_counts, (std::vector<int64_t>{4}));
  EXPECT_EQ(plan->send_pairs, (std::vector<int32_t>{1, 2, 0, 3}));  // e0: id1, e1: id2, e3: id0 id3
  auto layout = plan_receive(plan->send_expert_counts, 1, 4);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->expert_offsets, (std::vector<int64_t>{0, 1, 2, 2, 4}));
  EXPECT_EQ(layout->recv_to_grouped, (std::vector<int64_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace deepinfer::dist
