#include "kv/pool_sizing.h"

#include <gtest/gtest.h>

#include "test_dims.h"

namespace deepinfer::kv {
namespace {

using testing::tiny_config;
using testing::tiny_dims;

// Block bytes of the tiny model: window 256, CSA 48, HCA 32, tail 1920.
// max_num_seqs 2, max_num_batched_tokens 16, max_model_len 64:
//   fixed: tail 2 x 1920 = 3840; window 2 x (ceil(7/4) + 2) + ceil(16/4) = 12 blocks = 3072.
//   one 64-token sequence: CSA 16 entries = 8 blocks (384 B), HCA 4 entries = 2 blocks (64 B).
TEST(PoolSizing, FixedKindsFirstThenProportionalSplit) {
  KvBudget b{/*budget_bytes=*/6912 + 3 * 448 + 100, /*max_model_len=*/64, /*max_num_seqs=*/2,
             /*max_num_batched_tokens=*/16};
  auto plan = plan_kv_pools(tiny_dims(), tiny_config(), b);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->sizes[StateKind::kTail], 2);
  EXPECT_EQ(plan->sizes[StateKind::kWindow], 12);
  EXPECT_EQ(plan->sizes[StateKind::kCsa], 25);  // floor(8 x 1444 / 448)
  EXPECT_EQ(plan->sizes[StateKind::kHca], 6);   // floor(2 x 1444 / 448)
  EXPECT_EQ(plan->total_bytes, 3840 + 3072 + 25 * 48 + 6 * 32);
  EXPECT_LE(plan->total_bytes, b.budget_bytes);
  EXPECT_EQ(plan->summary(), "window 12 x 256 B, csa 25 x 48 B, hca 6 x 32 B, tail 2 x 1920 B = 8304 B");
  // The plan really holds a max_model_len sequence.
  auto kv = std::move(KvCacheCoordinator::create(tiny_dims(), tiny_config(), plan->sizes)).value();
  EXPECT_TRUE(kv->check_can_ever_fit(64, 16).ok());
}

TEST(PoolSizing, TooSmallBudgetSaysWhatIsNeeded) {
  KvBudget b{7000, 64, 2, 16};
  EXPECT_EQ(plan_kv_pools(tiny_dims(), tiny_config(), b).status().message(),
            "KV cache budget of 7000 bytes is too small: 2 sequences (max_num_seqs) need 6912 bytes of fixed state "
            "(window rows and compressor tails) and one sequence of max_model_len 64 needs 448 bytes of compressed "
            "entries, 7360 in all; raise the KV cache memory, or lower max_num_seqs or max_model_len");
  b.max_num_seqs = 0;
  EXPECT_EQ(plan_kv_pools(tiny_dims(), tiny_config(), b).status().message(), "max_num_seqs must be > 0, got 0");
}

TEST(PoolSizing, FullAttentionWindowGrowsWithContext) {
  KvModelDims d;
  d.num_layers = 2;
  d.head_dim = 8;
  d.sliding_window = 0;  // 128 B per 4-token block; a 64-token sequence needs 16 blocks
  auto plan = plan_kv_pools(d, tiny_config(), KvBudget{10000, 64, 4, 16});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->sizes[StateKind::kWindow], 78);  // floor(10000 / 128)
  EXPECT_EQ(plan->sizes[StateKind::kTail], 0);
  EXPECT_EQ(plan->summary(), "window 78 x 128 B = 9984 B");
}

}  // namespace
}  // namespace deepinfer::kv
