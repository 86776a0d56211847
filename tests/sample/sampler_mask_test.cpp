// The sampler's allowed-token mask (structured outputs): disallowed tokens are never picked under
// any parameters; a single allowed token is always picked; a row without a mask (or with an
// all-ones mask) samples exactly as before; masked sampling draws from the renormalised
// distribution over the allowed tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "sample/sampler.h"

namespace deepinfer::sample {
namespace {

size_t words_for(int vocab) { return (static_cast<size_t>(vocab) + 31) / 32; }

bool allowed(const std::vector<uint32_t>& mask, int32_t t) {
  return (mask[t >> 5] >> (t & 31)) & 1u;
}

void set_bit(std::vector<uint32_t>& mask, int32_t t) { mask[t >> 5] |= 1u << (t & 31); }

// Random parameters covering every processing step (greedy included).
SamplingParams random_params(std::mt19937& gen, int vocab) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  SamplingParams p;
  const int kind = static_cast<int>(gen() % 4);
  p.temperature = kind == 0 ? 0.0f : 0.05f + 2.0f * u(gen);
  if (gen() % 2) p.top_k = 1 + static_cast<int>(gen() % 20);
  if (gen() % 2) p.top_p = 0.05f + 0.95f * u(gen);
  if (gen() % 2) p.min_p = u(gen);
  if (gen() % 2) p.repetition_penalty = 0.5f + 1.5f * u(gen);
  if (gen() % 2) p.presence_penalty = -2.0f + 4.0f * u(gen);
  if (gen() % 2) p.frequency_penalty = -2.0f + 4.0f * u(gen);
  for (int i = 0, n = static_cast<int>(gen() % 5); i < n; ++i) {
    p.logit_bias[static_cast<int32_t>(gen() % vocab)] = 100.0f * (2.0f * u(gen) - 1.0f);
  }
  if (gen() % 3 == 0) p.logprobs = static_cast<int>(gen() % 6);
  if (gen() % 4 == 0) p.min_tokens = 3;
  return p;
}

TEST(SamplerMask, MaskedRowsNeverPickADisallowedToken) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int iter = 0; iter < 300; ++iter) {
    const int vocab = 33 + static_cast<int>(gen() % 300);  // mostly not a multiple of 32
    const int rows = 1 + static_cast<int>(gen() % 4);
    const size_t W = words_for(vocab);
    std::vector<float> logits(static_cast<size_t>(vocab * rows));
    for (float& v : logits) v = normal(gen);
    std::vector<SamplingParams> params;
    std::vector<std::vector<uint32_t>> masks(rows, std::vector<uint32_t>(W, 0));
    std::vector<std::vector<int32_t>> outputs(rows);
    params.reserve(rows);
    for (int r = 0; r < rows; ++r) {
      params.push_back(random_params(gen, vocab));
      // Density from one token to almost all; padding bits past the vocab are set too (ignored).
      const double density = std::uniform_real_distribution<double>(0.0, 1.0)(gen);
      for (int t = 0; t < vocab; ++t) {
        if (std::bernoulli_distribution(density)(gen)) set_bit(masks[r], t);
      }
      const int used = vocab & 31;  // bits of the last word that are real tokens
      if (used != 0 && gen() % 2) masks[r][W - 1] |= ~0u << used;
      set_bit(masks[r], static_cast<int32_t>(gen() % vocab));  // at least one allowed
      // Disallowed tokens get the largest logits, so an unmasked sampler would pick them.
      for (int t = 0; t < vocab; ++t) {
        if (!allowed(masks[r], t)) logits[static_cast<size_t>(r * vocab + t)] += 20.0f;
      }
      outputs[r].assign(gen() % 6, static_cast<int32_t>(gen() % vocab));
    }
    std::vector<SampleRow> sample_rows(rows);
    for (int r = 0; r < rows; ++r) {
      sample_rows[r].params = &params[r];
      sample_rows[r].seed = gen();
      sample_rows[r].output_token_ids = outputs[r];
      sample_rows[r].eos_token_id = static_cast<int32_t>(gen() % vocab);
      sample_rows[r].allowed_token_mask = masks[r];
    }
    for (LogprobsMode mode : {LogprobsMode::kRaw, LogprobsMode::kProcessed}) {
      auto out = Sampler({mode}).sample(logits, vocab, sample_rows);
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      for (int r = 0; r < rows; ++r) {
        const SampledToken& s = (*out)[r];
        ASSERT_TRUE(s.token >= 0 && s.token < vocab) << "iter " << iter << " row " << r;
        EXPECT_TRUE(allowed(masks[r], s.token))
            << "iter " << iter << " row " << r << " picked disallowed token " << s.token
            << " (temperature " << params[r].temperature << ", top_k " << params[r].top_k << ")";
        if (!params[r].logprobs) continue;
        ASSERT_TRUE(s.logprob.has_value());
        const auto row_logits =
            std::span<const float>(logits).subspan(static_cast<size_t>(r * vocab), vocab);
        if (mode == LogprobsMode::kRaw) {
          // Raw: the model's logprob of the token, before the mask (vLLM's raw_logprobs).
          EXPECT_EQ(*s.logprob, log_softmax(row_logits)[s.token]);
        } else {
          for (const TokenLogprob& e : s.top_logprobs) {
            if (!allowed(masks[r], e.token)) {
              EXPECT_EQ(e.logprob, kNegInf) << "token " << e.token;
            }
          }
        }
      }
    }
  }
}

TEST(SamplerMask, AllButOneMaskedPicksTheOne) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int iter = 0; iter < 300; ++iter) {
    const int vocab = 2 + static_cast<int>(gen() % 200);
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& v : logits) v = normal(gen);
    const auto only = static_cast<int32_t>(gen() % vocab);
    // The allowed token has the lowest logit; sometimes even -inf (all allowed tokens dead), and
    // min_tokens may suppress it as the EOS: the fallback must still be the allowed token.
    logits[only] = (iter % 5 == 0) ? kNegInf : -50.0f;
    SamplingParams p = random_params(gen, vocab);
    p.top_k = 1;  // the top-1 unmasked token is some other one
    std::vector<uint32_t> mask(words_for(vocab), 0);
    set_bit(mask, only);
    SampleRow row;
    row.params = &p;
    row.seed = gen();
    row.eos_token_id = (iter % 7 == 0) ? only : -1;
    row.allowed_token_mask = mask;
    const std::vector<SampleRow> rows = {row};
    auto out = Sampler().sample(logits, vocab, rows);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ((*out)[0].token, only) << "iter " << iter << " vocab " << vocab;
  }
}

// Without a mask, and with an all-ones mask, every field of the result is bit-identical (the
// unmasked path is the pre-mask code; an all-allowed mask changes nothing).
TEST(SamplerMask, UnmaskedPathIsUnchanged) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int iter = 0; iter < 200; ++iter) {
    const int vocab = 1 + static_cast<int>(gen() % 300);
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& v : logits) v = normal(gen);
    SamplingParams p = random_params(gen, vocab);
    p.logprobs = 5;
    std::vector<int32_t> output(gen() % 6, static_cast<int32_t>(gen() % vocab));
    SampleRow plain;
    plain.params = &p;
    plain.seed = gen();
    plain.output_token_ids = output;
    std::vector<uint32_t> ones(words_for(vocab), ~0u);
    SampleRow masked = plain;
    masked.allowed_token_mask = ones;
    for (LogprobsMode mode : {LogprobsMode::kRaw, LogprobsMode::kProcessed}) {
      const SampledToken a = Sampler({mode}).sample_row(logits, plain);
      const SampledToken b = Sampler({mode}).sample_row(logits, masked);
      EXPECT_EQ(a.token, b.token) << "iter " << iter;
      EXPECT_EQ(a.logprob, b.logprob);
      EXPECT_EQ(a.rank, b.rank);
      EXPECT_EQ(a.top_logprobs, b.top_logprobs);
    }
  }
}

// Masked sampling draws from softmax over the allowed tokens. Fixed seed: the bound is the 99.9%
// chi-square quantile with 3 degrees of freedom.
TEST(SamplerMask, DistributionIsRenormalisedOverAllowedTokens) {
  const std::vector<double> probs = {0.05, 0.1, 0.15, 0.2, 0.25, 0.25};
  std::vector<float> l;
  for (double q : probs) l.push_back(static_cast<float>(std::log(q)));
  const std::vector<uint32_t> mask = {0b101011u};  // tokens 0, 1, 3, 5
  const double z = 0.05 + 0.1 + 0.2 + 0.25;
  const std::vector<double> expected = {0.05 / z, 0.1 / z, 0, 0.2 / z, 0, 0.25 / z};
  SamplingParams p;
  const int n = 20000;
  std::vector<int32_t> fake_output(n, 0);
  std::vector<int> counts(l.size(), 0);
  for (int i = 0; i < n; ++i) {
    SampleRow row;
    row.params = &p;
    row.seed = 20261129;
    row.output_token_ids = std::span<const int32_t>(fake_output).first(static_cast<size_t>(i));
    row.allowed_token_mask = mask;
    ++counts[static_cast<size_t>(Sampler().sample_row(l, row).token)];
  }
  double chi2 = 0;
  for (size_t t = 0; t < l.size(); ++t) {
    if (expected[t] == 0) {
      EXPECT_EQ(counts[t], 0) << "masked token " << t << " was sampled";
      continue;
    }
    const double e = expected[t] * n;
    chi2 += (counts[t] - e) * (counts[t] - e) / e;
  }
  EXPECT_LT(chi2, 16.27);
}

TEST(SamplerMask, BadMasksAreRefused) {
  SamplingParams p;
  std::vector<float> l(70, 0.5f);
  std::vector<uint32_t> short_mask(2, ~0u);
  SampleRow row;
  row.params = &p;
  row.allowed_token_mask = short_mask;
  std::vector<SampleRow> rows = {row};
  EXPECT_EQ(Sampler().sample(l, 70, rows).status().message(),
            "Sampler: row 0 allowed_token_mask has 2 words, expected ceil(70 / 32) = 3");
  std::vector<uint32_t> none = {0u, 0u, ~0u << 6};  // only padding bits (>= 70) set
  rows[0].allowed_token_mask = none;
  EXPECT_EQ(Sampler().sample(l, 70, rows).status().message(),
            "Sampler: row 0 allowed_token_mask allows no token below vocab_size 70");
}

}  // namespace
}  // namespace deepinfer::sample
