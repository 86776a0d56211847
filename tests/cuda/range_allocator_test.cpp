#include "backend/cuda/range_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace deepinfer::cuda {
namespace {

TEST(RangeAllocator, ExactOffsetsAndCoalescing) {
  RangeAllocator a(4096, 256);
  EXPECT_EQ(a.allocate(100), 0u);
  EXPECT_EQ(a.allocate(256), 256u);
  EXPECT_EQ(a.allocate(257), 512u);  // rounds to 512 bytes
  EXPECT_EQ(a.bytes_in_use(), 1024u);
  EXPECT_EQ(a.allocate(4096), std::nullopt);  // no room is a normal answer
  EXPECT_TRUE(a.free(256));
  EXPECT_FALSE(a.free(256));  // double free detected
  EXPECT_FALSE(a.free(12));   // never allocated
  EXPECT_EQ(a.allocate(200), 256u);  // first fit reuses the hole
  EXPECT_TRUE(a.free(0));
  EXPECT_TRUE(a.free(256));
  EXPECT_TRUE(a.free(512));
  EXPECT_TRUE(a.check_integrity());
  EXPECT_EQ(a.largest_free_range(), 4096u);  // everything coalesced back
  EXPECT_EQ(a.allocate(4096), 0u);
}

TEST(RangeAllocator, RandomizedIntegrity) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  RangeAllocator a(1 << 20, 128);
  std::vector<uint64_t> live;
  for (int step = 0; step < 20000; ++step) {
    if (!live.empty() && (rng() % 2 == 0)) {
      const size_t i = rng() % live.size();
      ASSERT_TRUE(a.free(live[i]));
      live[i] = live.back();
      live.pop_back();
    } else if (auto off = a.allocate(1 + rng() % 20000)) {
      ASSERT_EQ(*off % 128, 0u);
      live.push_back(*off);
    }
    if (step % 97 == 0) {
      ASSERT_TRUE(a.check_integrity()) << "step " << step;
    }
  }
  for (uint64_t o : live) ASSERT_TRUE(a.free(o));
  EXPECT_TRUE(a.check_integrity());
  EXPECT_EQ(a.bytes_in_use(), 0u);
  EXPECT_EQ(a.largest_free_range(), 1u << 20);
}

}  // namespace
}  // namespace deepinfer::cuda
