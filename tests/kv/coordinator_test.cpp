#include "kv/coordinator.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "test_dims.h"

namespace deepinfer::kv {
namespace {

using Ids = std::vector<BlockId>;
using testing::tiny_config;
using testing::tiny_dims;

std::unique_ptr<KvCacheCoordinator> make(int window, int csa, int hca, int tail, KvCacheConfig cfg = tiny_config(),
                                         KvModelDims dims = tiny_dims()) {
  KvPoolSizes s;
  s[StateKind::kWindow] = window;
  s[StateKind::kCsa] = csa;
  s[StateKind::kHca] = hca;
  s[StateKind::kTail] = tail;
  auto c = KvCacheCoordinator::create(dims, cfg, s);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return std::move(c).value();
}

TEST(KvSpec, BytesPerBlock) {
  const auto d = tiny_dims();
  const auto c = tiny_config();
  EXPECT_EQ(bytes_per_block(d, c, StateKind::kWindow), 4 * 4 * 8 * 2);    // B x layers x D x bf16
  EXPECT_EQ(bytes_per_block(d, c, StateKind::kCsa), 2 * 1 * (8 + 4) * 2);  // E x csa x (D + cI) x bf16
  EXPECT_EQ(bytes_per_block(d, c, StateKind::kHca), 2 * 1 * 8 * 2);
  // CSA: 3x(16+16) + 4x(8+8) + 3x(8+8) + 4x(4+4) = 240 values; HCA: 15x(8+8) = 240; fp32.
  EXPECT_EQ(bytes_per_block(d, c, StateKind::kTail), (240 + 240) * 4);
  // V4-Flash numbers of deepseek-v4.md §6.2: 12.8 K values per CSA layer, 130 K per HCA layer.
  KvModelDims flash;
  flash.num_layers = 43; flash.head_dim = 512; flash.sliding_window = 128; flash.num_csa_layers = 21;
  flash.num_hca_layers = 20; flash.index_head_dim = 128; flash.state_bytes_per_value = 1;
  EXPECT_EQ(bytes_per_block(flash, KvCacheConfig{}, StateKind::kTail), 21 * 12800 + 20 * 130048);
  // Growing part: 6880 B per token in bf16 (CSA entries + indexer keys + HCA entries).
  flash.state_bytes_per_value = 4;
  KvCacheConfig one;
  one.csa_entries_per_block = 1;
  one.hca_entries_per_block = 1;
  EXPECT_EQ(bytes_per_block(flash, one, StateKind::kCsa) * 128 / 4 + bytes_per_block(flash, one, StateKind::kHca),
            6880 * 128);
}

TEST(Coordinator, GrowsTablesPerKindAndFreesOutOfWindowBlocks) {
  auto kv = make(10, 8, 4, 2);
  const RequestKey a = 1;
  // Prefill 10 tokens: window ceil(10/4) = 3 blocks; CSA floor(10/4) = 2 entries = 1 block;
  // HCA 0 entries; one tail slot.
  ASSERT_TRUE(kv->allocate_slots(a, 0, 10));
  KvBlockTables t = kv->block_tables(a);
  EXPECT_EQ(t[StateKind::kWindow], (Ids{0, 1, 2}));
  EXPECT_EQ(t[StateKind::kCsa], (Ids{0}));
  EXPECT_EQ(t[StateKind::kHca], (Ids{}));
  EXPECT_EQ(t[StateKind::kTail], (Ids{0}));
  // 10 computed: the next token needs positions >= 3, so block 0 (positions 0-3) is still live.
  kv->free_skipped_blocks(a, 10);
  EXPECT_EQ(kv->block_tables(a)[StateKind::kWindow], (Ids{0, 1, 2}));
  // Decode to 15 computed: first needed position 8 -> blocks 0 and 1 are dead, freed in order.
  ASSERT_TRUE(kv->allocate_slots(a, 10, 5));
  kv->free_skipped_blocks(a, 15);
  EXPECT_EQ(kv->block_tables(a)[StateKind::kWindow], (Ids{kNullBlock, kNullBlock, 2, 3}));
  EXPECT_EQ(kv->manager(StateKind::kWindow)->pool().free_list(), (Ids{4, 5, 6, 7, 8, 9, 0, 1}));
  // 2 more tokens (total 17): window entries 4 (needs 5 -> one new block: 4); CSA 4 entries = 2
  // blocks; HCA 1 entry = 1 block.
  ASSERT_TRUE(kv->allocate_slots(a, 15, 2));
  t = kv->block_tables(a);
  EXPECT_EQ(t[StateKind::kWindow], (Ids{kNullBlock, kNullBlock, 2, 3, 4}));
  EXPECT_EQ(t[StateKind::kCsa], (Ids{0, 1}));
  EXPECT_EQ(t[StateKind::kHca], (Ids{0}));
  EXPECT_EQ(kv->num_free_blocks(StateKind::kWindow), 7);
  EXPECT_TRUE(kv->check_integrity().ok());
  // Free: last table entry first.
  kv->free(a);
  EXPECT_EQ(kv->manager(StateKind::kWindow)->pool().free_list(), (Ids{5, 6, 7, 8, 9, 0, 1, 4, 3, 2}));
  EXPECT_EQ(kv->manager(StateKind::kCsa)->pool().free_list(), (Ids{2, 3, 4, 5, 6, 7, 1, 0}));
  EXPECT_TRUE(kv->check_integrity().ok());
}

TEST(Coordinator, RetentionMarginKeepsExtraRows) {
  KvCacheConfig cfg = tiny_config();
  cfg.window_retention_tokens = 4;  // keep W-1+4 = 11 rows
  auto kv = make(10, 8, 4, 2, cfg);
  ASSERT_TRUE(kv->allocate_slots(7, 0, 15));
  kv->free_skipped_blocks(7, 15);  // first needed = 4: only block 0 is dead
  EXPECT_EQ(kv->block_tables(7)[StateKind::kWindow], (Ids{kNullBlock, 1, 2, 3}));
  kv->free_skipped_blocks(7, 20);  // first needed = 9: blocks 0, 1 dead (block 2 = positions 8-11 live)
  EXPECT_EQ(kv->block_tables(7)[StateKind::kWindow], (Ids{kNullBlock, kNullBlock, 2, 3}));
}

TEST(Coordinator, AllOrNothingAcrossKinds) {
  auto kv = make(10, 1, 4, 2);
  ASSERT_TRUE(kv->allocate_slots(1, 0, 8));  // CSA: 2 entries, its only block
  // Request 2 fits the window pool but CSA has no block left.
  EXPECT_FALSE(kv->allocate_slots(2, 0, 8));
  EXPECT_EQ(kv->block_tables(2), KvBlockTables{});
  EXPECT_EQ(kv->num_free_blocks(StateKind::kWindow), 8);
  EXPECT_EQ(kv->num_free_blocks(StateKind::kTail), 1);
  // Fewer than 4 tokens need no CSA entry, so that works.
  ASSERT_TRUE(kv->allocate_slots(2, 0, 3));
  EXPECT_EQ(kv->block_tables(2)[StateKind::kWindow], (Ids{2}));
  EXPECT_TRUE(kv->check_integrity().ok());
}

TEST(Coordinator, FullAttentionModelHasOnlyWindowKindAndNeverFrees) {
  KvModelDims d;
  d.num_layers = 2;
  d.head_dim = 8;
  d.sliding_window = 0;
  KvPoolSizes s;
  s[StateKind::kWindow] = 8;
  auto kv = std::move(KvCacheCoordinator::create(d, tiny_config(), s)).value();
  EXPECT_TRUE(kv->has_kind(StateKind::kWindow));
  EXPECT_FALSE(kv->has_kind(StateKind::kCsa));
  EXPECT_FALSE(kv->has_kind(StateKind::kTail));
  ASSERT_TRUE(kv->allocate_slots(3, 0, 30));
  kv->free_skipped_blocks(3, 30);
  EXPECT_EQ(kv->block_tables(3)[StateKind::kWindow], (Ids{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_FALSE(kv->allocate_slots(3, 30, 3));
  EXPECT_EQ(kv->usage_summary(), "window 0/8 free");
}

TEST(Coordinator, CanEverFitAndCreateErrors) {
  auto kv = make(10, 8, 4, 2);
  EXPECT_TRUE(kv->check_can_ever_fit(64, 16).ok());
  // 200 tokens need floor(200/4) = 50 entries = 25 CSA blocks; the pool has 8.
  EXPECT_EQ(kv->check_can_ever_fit(200, 16).message(),
            "a sequence of 200 tokens needs 25 'csa' KV blocks but the whole pool has 8; raise the KV cache memory "
            "or lower max_model_len / max_tokens");
  // Window peak is bounded by the window: 7 kept + 32 chunk -> ceil(39/4)+1 = 11 > 10.
  EXPECT_EQ(kv->check_can_ever_fit(60, 32).code(), StatusCode::kResourceExhausted);
  KvPoolSizes s;
  s[StateKind::kWindow] = 4;
  s[StateKind::kCsa] = 4;
  s[StateKind::kHca] = 0;
  s[StateKind::kTail] = 1;
  EXPECT_EQ(KvCacheCoordinator::create(tiny_dims(), tiny_config(), s).status().message(),
            "KV pool for kind 'hca' needs at least one block, got 0");
  KvModelDims bad = tiny_dims();
  bad.num_csa_layers = 4;
  EXPECT_EQ(KvCacheCoordinator::create(bad, tiny_config(), s).status().message(),
            "KvModelDims: num_csa_layers (4) + num_hca_layers (1) must be in [0, num_layers = 4]");
}

TEST(Coordinator, SlotMappings) {
  const Ids window = {kNullBlock, 5, 2};
  EXPECT_EQ(window_slot(window, 4, 4), 20);
  EXPECT_EQ(window_slot(window, 4, 11), 11);
  EXPECT_EQ(entry_slot(Ids{3, 0}, 2, 1), 7);
  EXPECT_EQ(entry_slot(Ids{3, 0}, 2, 2), 0);
}

// Random allocations, step-ends and frees over a small pool; integrity after every operation, and
// an empty cache at the end.
TEST(Coordinator, RandomOperationsKeepIntegrity) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  auto kv = make(24, 10, 3, 4);
  std::map<RequestKey, int64_t> computed;
  RequestKey next = 0;
  for (int op = 0; op < 4000; ++op) {
    const int r = static_cast<int>(gen() % 10);
    if (r < 3 && computed.size() < 4) {
      const int64_t n = 1 + gen() % 20;
      if (kv->allocate_slots(next, 0, n)) {
        computed[next] = n;
        kv->free_skipped_blocks(next, n);
      } else {
        kv->free(next);
      }
      ++next;
    } else if (r < 8 && !computed.empty()) {
      auto it = std::next(computed.begin(), static_cast<long>(gen() % computed.size()));
      const int64_t n = 1 + gen() % 6;
      if (kv->allocate_slots(it->first, it->second, n)) {
        it->second += n;
        kv->free_skipped_blocks(it->first, it->second);
      }
    } else if (!computed.empty()) {
      auto it = std::next(computed.begin(), static_cast<long>(gen() % computed.size()));
      kv->free(it->first);
      computed.erase(it);
    }
    const Status s = kv->check_integrity();
    ASSERT_TRUE(s.ok()) << "op " << op << ": " << s.to_string();
    for (const auto& [key, n] : computed) {  // live window blocks never exceed the bound
      int live = 0;
      const KvBlockTables tables = kv->block_tables(key);
      for (BlockId b : tables[StateKind::kWindow]) live += b != kNullBlock;
      ASSERT_LE(live, (7 + 3) / 4 + 1) << "request " << key;  // ceil(7/4) + 1
    }
  }
  for (const auto& [key, n] : computed) kv->free(key);
  for (StateKind k : kAllStateKinds) EXPECT_EQ(kv->num_free_blocks(k), kv->num_blocks(k)) << state_kind_name(k);
  EXPECT_TRUE(kv->check_integrity().ok());
}

}  // namespace
}  // namespace deepinfer::kv
