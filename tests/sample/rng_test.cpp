#include "sample/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

namespace deepinfer::sample {
namespace {

// Known-answer vectors of Random123 (kat_vectors, "philox4x32 10" lines):
// counter[4] key[2] -> output[4].
TEST(Philox, KnownAnswerVectors) {
  struct Kat { PhiloxCounter ctr; PhiloxKey key; PhiloxCounter expected; };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) EXPECT_EQ(philox4x32_10(k.ctr, k.key), k.expected);
}

TEST(TokenUniform, OpenIntervalAndPure) {
  for (uint32_t t = 0; t < 2000; ++t) {
    const double u = token_uniform(42, 0, 7, t);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
    ASSERT_EQ(u, token_uniform(42, 0, 7, t));  // a pure function of its key and counter
  }
}

TEST(TokenUniform, EveryKeyComponentChangesTheDraw) {
  const double base = token_uniform(1, 0, 0, 10);
  EXPECT_NE(base, token_uniform(2, 0, 0, 10));
  EXPECT_NE(base, token_uniform(1, 1, 0, 10));
  EXPECT_NE(base, token_uniform(1, 0, 1, 10));
  EXPECT_NE(base, token_uniform(1, 0, 0, 11));
  EXPECT_NE(token_uniform(1ull << 40, 0, 0, 10), token_uniform(0, 0, 0, 10));  // high seed bits matter
}

// Mean and variance of 100k uniforms are those of U(0,1) within 5 standard errors; deterministic.
TEST(TokenUniform, MomentsOfUniform) {
  const int n = 100000;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = token_uniform(12345, 0, static_cast<uint32_t>(i / 1000), static_cast<uint32_t>(i % 1000));
    sum += u;
    sum2 += u * u;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(var, 1.0 / 12, 0.002);
}

TEST(DeriveRequestSeed, DistinctAndDeterministic) {
  std::set<uint64_t> seeds;
  for (uint64_t i = 0; i < 1000; ++i) seeds.insert(derive_request_seed(0, i));
  EXPECT_EQ(seeds.size(), 1000u);
  EXPECT_EQ(derive_request_seed(7, 3), derive_request_seed(7, 3));
  EXPECT_NE(derive_request_seed(7, 3), derive_request_seed(8, 3));
}

}  // namespace
}  // namespace deepinfer::sample
