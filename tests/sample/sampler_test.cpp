#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace deepinfer::sample {
namespace {

SampleRow row_of(const SamplingParams& p, std::span<const int32_t> output = {}, uint64_t seed = 0,
                 std::span<const int32_t> prompt = {}, int32_t eos = -1) {
  SampleRow r;
  r.params = &p;
  r.seed = seed;
  r.output_token_ids = output;
  r.prompt_token_ids = prompt;
  r.eos_token_id = eos;
  return r;
}

std::vector<float> logs(std::initializer_list<double> probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

TEST(Penalties, HandComputed) {
  // prompt {0}, output {1, 3, 3}; repetition 2 over {0,1,3}; frequency 0.5 and presence 0.25 over
  // the output counts {1: 1, 3: 2}.
  std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0}, output = {1, 3, 3};
  apply_penalties(l, p, prompt, output);
  EXPECT_EQ(l, (std::vector<float>{1.0f, -2.75f, 0.5f, 0.25f, -2.0f}));
}

TEST(Filters, MinPTopKTopPHandComputed) {
  std::vector<float> l = {1.0f, 0.0f, -3.0f};
  apply_min_p(l, 0.1f);  // ratios to the max: 1, e^-1 = 0.37, e^-4 = 0.018
  EXPECT_EQ(l, (std::vector<float>{1.0f, 0.0f, kNegInf}));

  std::vector<float> k = {1, 3, 3, 2};
  apply_top_k(k, 2);  // the 2nd largest is 3; ties at the boundary are kept
  EXPECT_EQ(k, (std::vector<float>{kNegInf, 3, 3, kNegInf}));
  k = {1, 3, 3, 2};
  apply_top_k(k, 3);
  EXPECT_EQ(k, (std::vector<float>{kNegInf, 3, 3, 2}));

  // probs 0.5 0.2 0.2 0.1: ranked 0, 1, 2 (tie -> lower id first), 3.
  auto kept = [](float top_p) {
    std::vector<float> v = logs({0.5, 0.2, 0.2, 0.1});
    apply_top_p(v, top_p);
    std::vector<int> ids;
    for (int i = 0; i < 4; ++i) if (v[i] != kNegInf) ids.push_back(i);
    return ids;
  };
  EXPECT_EQ(kept(0.45f), (std::vector<int>{0}));
  EXPECT_EQ(kept(0.55f), (std::vector<int>{0, 1}));
  EXPECT_EQ(kept(0.75f), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(kept(0.95f), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(kept(1.0f), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Greedy, ArgmaxTiesGoToLowestId) {
  SamplingParams p;
  p.temperature = 0;
  const std::vector<float> l = {1, 5, 5, 2};
  Sampler s;
  EXPECT_EQ(s.sample_row(l, row_of(p)).token, 1);
}

TEST(Greedy, PenaltiesBiasAndMinTokens) {
  SamplingParams p;
  p.temperature = 0;
  const std::vector<float> l = logs({0.1, 0.2, 0.3, 0.4});
  Sampler s;
  const std::vector<int32_t> none, one = {0}, two = {0, 0};
  EXPECT_EQ(s.sample_row(l, row_of(p, none, 0, {}, /*eos=*/3)).token, 3);
  p.min_tokens = 2;
  EXPECT_EQ(s.sample_row(l, row_of(p, one, 0, {}, 3)).token, 2);  // EOS suppressed
  EXPECT_EQ(s.sample_row(l, row_of(p, two, 0, {}, 3)).token, 3);  // min_tokens reached
  p.stop_token_ids = {2};
  EXPECT_EQ(s.sample_row(l, row_of(p, one, 0, {}, 3)).token, 1);  // stop ids suppressed too
  SamplingParams b;
  b.temperature = 0;
  b.logit_bias = {{0, 10.0f}};
  EXPECT_EQ(s.sample_row(l, row_of(b)).token, 0);
}

TEST(Logprobs, RawByDefault) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 2;
  p.presence_penalty = 2.0f;  // moves token 3 below token 2 for sampling, not for raw logprobs
  const std::vector<float> l = logs({0.1, 0.2, 0.3, 0.4});
  const std::vector<int32_t> out = {3};
  const SampledToken t = Sampler().sample_row(l, row_of(p, out));
  EXPECT_EQ(t.token, 2);
  ASSERT_TRUE(t.logprob.has_value());
  EXPECT_NEAR(*t.logprob, std::log(0.3), 1e-6);
  EXPECT_EQ(t.rank, 2);
  ASSERT_EQ(t.top_logprobs.size(), 2u);
  EXPECT_EQ(t.top_logprobs[0].token, 3);
  EXPECT_NEAR(t.top_logprobs[0].logprob, std::log(0.4), 1e-6);
  EXPECT_EQ(t.top_logprobs[1].token, 2);
  EXPECT_NEAR(t.top_logprobs[1].logprob, std::log(0.3), 1e-6);
}

TEST(Logprobs, ProcessedModeSeesFilters) {
  SamplingParams p;
  p.top_k = 2;
  p.logprobs = 3;
  const std::vector<float> l = logs({0.1, 0.2, 0.3, 0.4});
  const SampledToken t = Sampler({LogprobsMode::kProcessed}).sample_row(l, row_of(p, {}, 99));
  ASSERT_TRUE(t.token == 2 || t.token == 3);
  ASSERT_EQ(t.top_logprobs.size(), 3u);
  EXPECT_EQ(t.top_logprobs[0].token, 3);
  EXPECT_NEAR(t.top_logprobs[0].logprob, std::log(4.0 / 7), 1e-6);
  EXPECT_EQ(t.top_logprobs[1].token, 2);
  EXPECT_NEAR(t.top_logprobs[1].logprob, std::log(3.0 / 7), 1e-6);
  EXPECT_EQ(t.top_logprobs[2].token, 0);  // -inf ties: lowest id first
  EXPECT_EQ(t.top_logprobs[2].logprob, kNegInf);
}

TEST(Sampler, ShapeErrors) {
  SamplingParams p;
  std::vector<float> l(10, 0.0f);
  std::vector<SampleRow> rows = {row_of(p), row_of(p)};
  auto r = Sampler().sample(l, 4, rows);
  EXPECT_EQ(r.status().message(), "Sampler: logits has 10 values, expected [2 rows, 4 vocab]");
  rows[1].params = nullptr;
  EXPECT_EQ(Sampler().sample(std::span<const float>(l).first(8), 4, rows).status().message(),
            "Sampler: row 1 has no SamplingParams");
}

// Draws `n` tokens at output positions 0..n-1 (independent draws of the same distribution) and
// returns the counts per token.
std::vector<int> histogram(const std::vector<float>& logits, const SamplingParams& p, uint64_t seed, int n) {
  std::vector<int32_t> fake_output(static_cast<size_t>(n), 0);
  std::vector<int> counts(logits.size(), 0);
  Sampler s;
  for (int i = 0; i < n; ++i) {
    ++counts[static_cast<size_t>(
        s.sample_row(logits, row_of(p, std::span<const int32_t>(fake_output).first(static_cast<size_t>(i)), seed))
            .token)];
  }
  return counts;
}

// Pearson chi-square against `expected` probabilities; tokens with probability 0 must never occur.
double chi_square(const std::vector<int>& counts, const std::vector<double>& expected, int n) {
  double chi2 = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " should have been filtered out";
      continue;
    }
    const double e = expected[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

// Fixed seeds, so these are deterministic; the bounds are the 99.9% chi-square quantiles, i.e. a
// correct sampler passes them for all but ~1 in 1000 seeds, and a wrong one (e.g. off by a
// temperature, or not renormalised after filtering) fails by orders of magnitude.
TEST(SamplingDistribution, ChiSquare) {
  const std::vector<double> probs = {0.05, 0.1, 0.15, 0.2, 0.25, 0.25};
  std::vector<float> l;
  for (double q : probs) l.push_back(static_cast<float>(std::log(q)));
  const int n = 20000;
  struct Case { const char* name; SamplingParams p; std::vector<double> expected; double bound; };
  std::vector<Case> cases;
  { SamplingParams p; cases.push_back({"plain", p, probs, 20.52}); }
  {
    SamplingParams p; p.temperature = 0.5f;
    std::vector<double> e; double z = 0;
    for (double q : probs) { e.push_back(q * q); z += q * q; }
    for (double& x : e) x /= z;
    cases.push_back({"temperature 0.5", p, e, 20.52});
  }
  { SamplingParams p; p.top_k = 3; cases.push_back({"top_k 3", p, {0, 0, 0, 0.2 / 0.7, 0.25 / 0.7, 0.25 / 0.7}, 13.82}); }
  { SamplingParams p; p.top_p = 0.45f; cases.push_back({"top_p 0.45", p, {0, 0, 0, 0, 0.5, 0.5}, 10.83}); }
  { SamplingParams p; p.min_p = 0.7f; cases.push_back({"min_p 0.7", p, {0, 0, 0, 0.2 / 0.7, 0.25 / 0.7, 0.25 / 0.7}, 13.82}); }
  for (const Case& c : cases) {
    const auto counts = histogram(l, c.p, 20261129, n);
    const double chi2 = chi_square(counts, c.expected, n);
    EXPECT_LT(chi2, c.bound) << c.name;
    EXPECT_EQ(counts, histogram(l, c.p, 20261129, n)) << c.name << ": not deterministic";
  }
}

TEST(Determinism, SameSeedSameTokensWhateverTheBatch) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int vocab = 257, rows = 8;
  std::vector<float> logits(static_cast<size_t>(vocab * rows));
  for (float& v : logits) v = normal(gen);
  std::vector<SamplingParams> params(rows);
  std::vector<std::vector<int32_t>> outputs(rows);
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = 0.5f + 0.25f * r;
    params[r].top_k = (r % 3 == 0) ? 50 : 0;
    params[r].top_p = (r % 2 == 0) ? 0.9f : 1.0f;
    params[r].repetition_penalty = 1.1f;
    params[r].seed = gen();
    outputs[r].assign(static_cast<size_t>(gen() % 20), static_cast<int32_t>(gen() % vocab));
  }
  auto row = [&](int r) { return row_of(params[r], outputs[r], *params[r].seed); };
  auto row_logits = [&](int r) { return std::span<const float>(logits).subspan(static_cast<size_t>(r * vocab), vocab); };
  Sampler s;
  std::vector<SampleRow> all;
  for (int r = 0; r < rows; ++r) all.push_back(row(r));
  auto batched = s.sample(logits, vocab, all);
  ASSERT_TRUE(batched.ok());
  // Alone, and in reversed order with other rows around.
  std::vector<float> reversed;
  std::vector<SampleRow> rev_rows;
  for (int r = rows - 1; r >= 0; --r) {
    reversed.insert(reversed.end(), row_logits(r).begin(), row_logits(r).end());
    rev_rows.push_back(row(r));
  }
  auto rev = s.sample(reversed, vocab, rev_rows);
  ASSERT_TRUE(rev.ok());
  for (int r = 0; r < rows; ++r) {
    EXPECT_EQ(s.sample_row(row_logits(r), row(r)).token, (*batched)[r].token) << "row " << r;
    EXPECT_EQ((*rev)[rows - 1 - r].token, (*batched)[r].token) << "row " << r;
  }
}

TEST(Determinism, SequencesAndSeedsGiveDifferentStreams) {
  std::vector<float> l(64);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::sin(i * 0.7));
  SamplingParams p;
  std::vector<int32_t> out(100, 0);
  int same_seq = 0, same_seed = 0;
  Sampler s;
  for (size_t pos = 0; pos < 100; ++pos) {
    SampleRow a = row_of(p, std::span<const int32_t>(out).first(pos), 5);
    SampleRow b = a;
    b.sequence_index = 1;
    SampleRow c = a;
    c.seed = 6;
    const int32_t ta = s.sample_row(l, a).token;
    same_seq += ta == s.sample_row(l, b).token;
    same_seed += ta == s.sample_row(l, c).token;
  }
  // Independent draws over ~64 near-uniform tokens coincide ~1.6 times in 100.
  EXPECT_LT(same_seq, 15);
  EXPECT_LT(same_seed, 15);
}

}  // namespace
}  // namespace deepinfer::sample
