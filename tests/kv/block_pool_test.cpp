#include "kv/block_pool.h"

#include <gtest/gtest.h>

namespace deepinfer::kv {
namespace {

using Ids = std::vector<BlockId>;

TEST(BlockPool, AllocatesFromHeadFreesToTail) {
  BlockPool pool(6);
  EXPECT_EQ(pool.free_list(), (Ids{0, 1, 2, 3, 4, 5}));
  Ids a;
  ASSERT_TRUE(pool.allocate(3, &a));
  EXPECT_EQ(a, (Ids{0, 1, 2}));
  EXPECT_EQ(pool.num_free(), 3);
  pool.release(Ids{2, kNullBlock, 0});  // null entries are skipped; order kept
  EXPECT_EQ(pool.free_list(), (Ids{3, 4, 5, 2, 0}));
  Ids b;
  ASSERT_TRUE(pool.allocate(4, &b));
  EXPECT_EQ(b, (Ids{3, 4, 5, 2}));
  EXPECT_TRUE(pool.check_integrity().ok());
}

TEST(BlockPool, NoRoomIsANormalAnswer) {
  BlockPool pool(2);
  Ids a;
  ASSERT_TRUE(pool.allocate(1, &a));
  Ids b = {42};
  EXPECT_FALSE(pool.allocate(2, &b));
  EXPECT_EQ(b, (Ids{42}));  // unchanged
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_TRUE(pool.allocate(0, &b));
  EXPECT_TRUE(pool.check_integrity().ok());
}

TEST(BlockPool, RefCountsForSharing) {
  BlockPool pool(3);
  Ids a;
  ASSERT_TRUE(pool.allocate(2, &a));
  pool.retain(1);
  EXPECT_EQ(pool.ref_count(1), 2);
  pool.release(1);
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.free_list(), (Ids{2}));
  pool.release(1);
  EXPECT_EQ(pool.free_list(), (Ids{2, 1}));
  EXPECT_TRUE(pool.check_integrity().ok());
}

TEST(BlockPoolDeathTest, DoubleFreeIsAProgrammingError) {
  BlockPool pool(2);
  Ids a;
  ASSERT_TRUE(pool.allocate(1, &a));
  pool.release(0);
  EXPECT_DEATH(pool.release(0), "release of free/invalid block 0");
}

}  // namespace
}  // namespace deepinfer::kv
