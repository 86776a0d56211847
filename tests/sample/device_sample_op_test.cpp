// Backend::sample on the CPU backends (fast and reference): exactly the host sampler's token for
// random logits and parameters (ties, −inf entries, all −inf rows, every filter), the plain-row
// rule the engine uses to choose the op, and errors that name the bad argument.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "sample/sampler.h"

namespace deepinfer {
namespace {

using backend::SampleRowParams;
using backend::Tensor;

constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t fresh_seed() {
  static const uint32_t seed = std::random_device{}();
  return seed;
}

// Random logits with the awkward cases mixed in: quantized values (many ties), −inf entries, and
// rows that are entirely −inf.
std::vector<float> random_logits(std::mt19937& rng, int64_t S, int64_t V) {
  std::vector<float> x(static_cast<size_t>(S * V));
  std::normal_distribution<float> normal(0.f, 3.f);
  std::uniform_int_distribution<int> kind(0, 9);
  for (int64_t s = 0; s < S; ++s) {
    const int k = kind(rng);
    for (int64_t t = 0; t < V; ++t) {
      float v = normal(rng);
      if (k == 1) v = std::round(v);                 // ties everywhere
      if (k == 2 && t % 3 == 0) v = -kInf;           // masked entries
      if (k == 3) v = -kInf;                         // nothing finite
      if (k == 4) v = std::round(v * 4.f) / 4.f - 20.f;  // ties, all far below zero
      x[static_cast<size_t>(s * V + t)] = v;
    }
  }
  return x;
}

SampleRowParams random_params(std::mt19937& rng, int64_t V) {
  SampleRowParams p;
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::uniform_int_distribution<int> coin(0, 3);
  p.temperature = coin(rng) == 0 ? 0.f : 0.05f + 2.f * u(rng);
  const int k = coin(rng);
  p.top_k = k == 0 ? 0 : k == 1 ? -1 : static_cast<int32_t>(1 + rng() % static_cast<uint32_t>(V + 3));
  p.top_p = coin(rng) <= 1 ? 1.f : std::max(1e-3f, u(rng));
  p.min_p = coin(rng) <= 1 ? 0.f : u(rng) * 0.5f;
  p.seed = (static_cast<uint64_t>(rng()) << 32) | rng();
  p.sequence_index = rng() % 4;
  p.output_position = rng() % 5000;
  return p;
}

// The host sampler's answer for one row (Sampler::sample_row, the engine's host path).
int32_t host_token(std::span<const float> row, const SampleRowParams& p) {
  SamplingParams params;
  params.temperature = p.temperature;
  params.top_k = p.top_k;
  params.top_p = p.top_p;
  params.min_p = p.min_p;
  const std::vector<int32_t> outputs(p.output_position, 7);  // only its size matters here
  sample::SampleRow r{&params, p.seed, p.sequence_index, {}, outputs, -1, {}};
  return sample::Sampler().sample_row(row, r).token;
}

class CpuSampleOp : public ::testing::TestWithParam<bool> {
 protected:
  std::unique_ptr<backend::Backend> be =
      backend::make_cpu_backend({/*reference=*/GetParam(), /*num_threads=*/0});
};

TEST_P(CpuSampleOp, EqualsTheHostSamplerExactly) {
  std::mt19937 rng(fresh_seed());
  SCOPED_TRACE("seed " + std::to_string(fresh_seed()));
  int64_t greedy = 0, random = 0;
  for (int64_t V : {1, 2, 7, 64, 1000, 4099}) {
    const int64_t S = 24;
    std::vector<float> x = random_logits(rng, S, V);
    std::vector<SampleRowParams> rows;
    for (int64_t s = 0; s < S; ++s) rows.push_back(random_params(rng, V));
    Tensor logits = Tensor::from_f32({S, V}, x);
    Tensor ids = Tensor::empty(DType::kI32, {S});
    ASSERT_TRUE(be->sample(logits, rows, ids).ok());
    for (int64_t s = 0; s < S; ++s) {
      const auto& p = rows[static_cast<size_t>(s)];
      const int32_t want = host_token({x.data() + s * V, static_cast<size_t>(V)}, p);
      ASSERT_EQ(ids.data<int32_t>()[s], want)
          << "V " << V << " row " << s << " T " << p.temperature << " top_k " << p.top_k
          << " top_p " << p.top_p << " min_p " << p.min_p;
      ASSERT_GE(want, 0);
      ASSERT_LT(want, V);
      (p.temperature < SamplingParams::kGreedyEpsilon ? greedy : random) += 1;
    }
  }
  EXPECT_GT(greedy, 10);
  EXPECT_GT(random, 50);
}

TEST_P(CpuSampleOp, GreedyTiesAndNegativeInfinity) {
  // Ties go to the lowest id; an all −inf row gives id 0 (greedy and random alike, as the host).
  Tensor logits = Tensor::from_f32({3, 5}, {1.f, 3.f, 2.f, 3.f, 3.f,             //
                                            -kInf, -kInf, -kInf, -kInf, -kInf,  //
                                            -kInf, -kInf, 0.5f, -kInf, -kInf});
  std::vector<SampleRowParams> rows(3);
  rows[0].temperature = 0.f;
  rows[1].temperature = 0.7f;
  rows[2].temperature = 1.3f;  // the only finite token must be drawn
  Tensor ids = Tensor::empty(DType::kI32, {3});
  ASSERT_TRUE(be->sample(logits, rows, ids).ok());
  EXPECT_EQ(ids.data<int32_t>()[0], 1);
  EXPECT_EQ(ids.data<int32_t>()[1], 0);
  EXPECT_EQ(ids.data<int32_t>()[2], 2);
}

TEST_P(CpuSampleOp, BadArgumentsAreNamed) {
  Tensor logits = Tensor::from_f32({4, 3}, std::vector<float>(12, 0.25f));
  Tensor ids = Tensor::empty(DType::kI32, {4});
  auto expect_error = [&](std::vector<SampleRowParams> rows, const std::string& what) {
    const Status st = be->sample(logits, rows, ids);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case { const char* field; SampleRowParams p; };
  std::vector<Case> cases;
  SampleRowParams p;
  p.temperature = -1.f; cases.push_back({"row 2 temperature", p});
  p = {}; p.temperature = nan; cases.push_back({"row 2 temperature", p});
  p = {}; p.top_k = -2; cases.push_back({"row 2 top_k", p});
  p = {}; p.top_p = 0.f; cases.push_back({"row 2 top_p", p});
  p = {}; p.top_p = 1.5f; cases.push_back({"row 2 top_p", p});
  p = {}; p.min_p = -0.1f; cases.push_back({"row 2 min_p", p});
  p = {}; p.min_p = 2.f; cases.push_back({"row 2 min_p", p});
  for (const Case& c : cases) {
    std::vector<SampleRowParams> rows(4);
    rows[2] = c.p;
    expect_error(rows, c.field);
  }
  expect_error(std::vector<SampleRowParams>(3), "3 row parameters");
  Tensor wrong_ids = Tensor::empty(DType::kF32, {4});
  std::vector<SampleRowParams> rows(4);
  EXPECT_EQ(be->sample(logits, rows, wrong_ids).code(), StatusCode::kInvalidArgument);
  Tensor short_ids = Tensor::empty(DType::kI32, {3});
  EXPECT_NE(be->sample(logits, rows, short_ids).message().find("ids"), std::string::npos);
  Tensor flat = Tensor::from_f32({12}, std::vector<float>(12, 0.f));
  EXPECT_NE(be->sample(flat, rows, ids).message().find("logits"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(FastAndReference, CpuSampleOp, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "reference" : "fast"; });

TEST(PlainRow, OnlyTheCommonCase) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  EXPECT_TRUE(sample::is_plain_row(p, 0));
  auto with = [&](auto change) {
    SamplingParams q = p;
    change(q);
    return sample::is_plain_row(q, 3);
  };
  EXPECT_FALSE(with([](SamplingParams& q) { q.logit_bias[5] = 1.f; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.repetition_penalty = 1.1f; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.frequency_penalty = 0.5f; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.presence_penalty = -0.5f; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.logprobs = 0; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.structured_outputs = StructuredOutputsParams{}; }));
  EXPECT_FALSE(with([](SamplingParams& q) { q.min_tokens = 4; }));   // 3 outputs so far
  EXPECT_TRUE(with([](SamplingParams& q) { q.min_tokens = 3; }));    // reached
  EXPECT_TRUE(with([](SamplingParams& q) { q.stop_token_ids = {1}; q.n = 2; }));
}

}  // namespace
}  // namespace deepinfer
