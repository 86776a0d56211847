// The context-parallel split (model/deepseek_v4/context_parallel_split.h), pure arithmetic, and
// its row all-gather over the in-process communicator:
//   * every row is owned by exactly one rank, ascending per rank, serpentine block order, token
//     counts within one block of each other, gather_order the inverse of the rank-major order;
//   * the stated balance bound on random non-decreasing per-row costs: max − min of the per-rank
//     sums ≤ 3·block·c(last row);
//   * bad arguments are InvalidArgument naming what is wrong;
//   * all_gather_rows gives every rank the rows in chunk order, bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "backend/backend.h"
#include "ep_test_util.h"
#include "model/deepseek_v4/context_parallel_split.h"

namespace deepinfer::model::v4 {
namespace {

TEST(CpSplit, EveryRowOnceSerpentineAndBalanced) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 400; ++trial) {
    const int W = 1 + static_cast<int>(rng() % 8);
    const int64_t block = 1 + static_cast<int64_t>(rng() % 9);
    const int64_t S = W * block + static_cast<int64_t>(rng() % 700);
    auto sp = plan_context_parallel_split(S, W, block);
    ASSERT_TRUE(sp.ok()) << sp.status().to_string() << " seed " << seed;
    std::vector<int> owner(S, -1);
    size_t most = 0, least = S;
    for (int r = 0; r < W; ++r) {
      const auto& rows = sp->rows[r];
      ASSERT_FALSE(rows.empty()) << "rank " << r << " seed " << seed;
      most = std::max(most, rows.size());
      least = std::min(least, rows.size());
      for (size_t i = 0; i < rows.size(); ++i) {
        ASSERT_EQ(owner[rows[i]], -1) << "row " << rows[i] << " twice, seed " << seed;
        owner[rows[i]] = r;
        if (i > 0) {
          ASSERT_LT(rows[i - 1], rows[i]);
        }
        EXPECT_EQ(sp->gather_order[rows[i]], sp->rank_offset[r] + static_cast<int64_t>(i));
      }
    }
    EXPECT_EQ(sp->rank_offset[W], S);
    EXPECT_LE(static_cast<int64_t>(most - least), block) << "seed " << seed;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t q = (s / block) % (2 * W);
      ASSERT_EQ(owner[s], q < W ? q : 2 * W - 1 - q) << "row " << s << " seed " << seed;
    }
    // Balance bound on a random non-decreasing cost (as attention keys per query are).
    std::vector<int64_t> cost(S);
    int64_t c = static_cast<int64_t>(rng() % 5);
    for (auto& x : cost) x = (c += static_cast<int64_t>(rng() % 4 == 0 ? rng() % 7 : 0));
    std::vector<int64_t> work(W, 0);
    for (int64_t s = 0; s < S; ++s) work[owner[s]] += cost[s];
    const auto [lo, hi] = std::minmax_element(work.begin(), work.end());
    EXPECT_LE(*hi - *lo, 3 * block * cost[S - 1])
        << "S " << S << " W " << W << " block " << block << " seed " << seed;
  }
}

TEST(CpSplit, BadArgumentsAreNamed) {
  auto few = plan_context_parallel_split(3, 4, 1);
  ASSERT_EQ(few.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(few.status().message().find("fewer than the world size 4"), std::string::npos)
      << few.status().to_string();
  EXPECT_EQ(plan_context_parallel_split(8, 3, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(plan_context_parallel_split(10, 3, 4).ok());  // 3 blocks, the last one short
  EXPECT_TRUE(plan_context_parallel_split(9, 3, 3).ok());
  auto zero_block = plan_context_parallel_split(10, 2, 0);
  EXPECT_NE(zero_block.status().message().find("block"), std::string::npos);
  auto empty = plan_context_parallel_split(0, 2, 1);
  EXPECT_NE(empty.status().message().find("no tokens"), std::string::npos);
  auto no_ranks = plan_context_parallel_split(10, 0, 1);
  EXPECT_NE(no_ranks.status().message().find("world size"), std::string::npos);
}

TEST(CpSplit, AllGatherRowsInChunkOrder) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int W : {1, 2, 3, 4}) {
    const int64_t block = 1 + rng() % 4, S = W * block + rng() % 50, width = 1 + rng() % 7;
    auto sp = plan_context_parallel_split(S, W, block);
    ASSERT_TRUE(sp.ok());
    std::vector<float> want(S * width);
    for (auto& v : want) v = std::uniform_real_distribution<float>(-3, 3)(rng);
    std::vector<std::vector<float>> got(W);
    auto st = dist::testing::run_ranks(W, [&](int r, dist::Communicator& comm) -> Status {
      auto be = backend::make_cpu_backend();
      const auto& rows = sp->rows[r];
      const int64_t n = static_cast<int64_t>(rows.size());
      backend::Tensor mine = backend::Tensor::empty(DType::kF32, {n, width});
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(mine.data<float>() + i * width, want.data() + rows[i] * width, width * sizeof(float));
      backend::Tensor full = backend::Tensor::empty(DType::kF32, {S, width});
      DI_RETURN_IF_ERROR(all_gather_rows(comm, *be, *sp, mine, full));
      got[r].assign(full.data<float>(), full.data<float>() + S * width);
      backend::Tensor wrong = backend::Tensor::empty(DType::kF32, {n + 1, width});
      if (all_gather_rows(comm, *be, *sp, wrong, full).code() != StatusCode::kInvalidArgument)
        return Internal("a wrong row count was accepted");
      return OkStatus();
    });
    for (int r = 0; r < W; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r].to_string();
      EXPECT_EQ(std::memcmp(got[r].data(), want.data(), want.size() * sizeof(float)), 0)
          << "W " << W << " rank " << r << " seed " << seed;
    }
  }
}

}  // namespace
}  // namespace deepinfer::model::v4
