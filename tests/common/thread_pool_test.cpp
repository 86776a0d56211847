#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <random>
#include <vector>

namespace deepinfer {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  std::mt19937 rng(std::random_device{}());
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int trial = 0; trial < 50; ++trial) {
      const int64_t n = std::uniform_int_distribution<int64_t>(0, 5000)(rng);
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        ASSERT_LE(b, e);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      }, 1 + trial % 7);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
    }
  }
}

TEST(ThreadPool, ChunkingIsDeterministic) {
  ThreadPool pool(4);
  auto bounds = [&] {
    std::vector<std::pair<int64_t, int64_t>> out(8, {-1, -1});
    std::mutex m;
    pool.parallel_for(1003, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> l(m);
      out[static_cast<size_t>(b * 4 / 1003)] = {b, e};
    });
    return out;
  };
  auto a = bounds();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(bounds(), a);
}

TEST(ThreadPool, ParallelSumMatchesSerial) {
  ThreadPool pool(3);
  std::vector<double> v(100001);
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<double> d(-1, 1);
  for (auto& x : v) x = d(rng);
  std::vector<double> partial(3, 0.0);
  pool.parallel_for(static_cast<int64_t>(v.size()), [&](int64_t b, int64_t e) {
    double s = 0;
    for (int64_t i = b; i < e; ++i) s += v[static_cast<size_t>(i)];
    partial[static_cast<size_t>(b == 0 ? 0 : (b < 50000 ? 1 : 2))] = s;
  });
  double serial = std::accumulate(v.begin(), v.end(), 0.0);
  EXPECT_NEAR(partial[0] + partial[1] + partial[2], serial, 1e-9);
}

}  // namespace
}  // namespace deepinfer
