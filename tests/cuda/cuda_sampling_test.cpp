// Backend::sample on the GPU against the CPU backend's op (= the host sampler, bit for bit):
//   * greedy rows: the same id for every row (ties, −inf entries, all −inf rows, NaN, very negative
//     rows), at the real vocabulary (129,280) and odd sizes;
//   * random rows: the same token as the CPU for >= 99.9 % of rows (the rate is printed), tokens
//     always inside the CPU's kept set;
//   * the kept sets (temperature → min-p → top-k → top-p) equal to the CPU's, token for token;
//   * the drawn frequencies against the softmax of the kept logits (chi-square, small vocabulary);
//   * determinism, argument errors; the op's time at 64 × 129,280 is printed (not asserted).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/sampling.h"
#include "sample/sampler.h"

namespace deepinfer::cuda {
namespace {

using backend::SampleRowParams;
using backend::Tensor;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kVocab = 129280;  // DeepSeek-V4

class CudaSampling : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    auto b = CudaBackend::create();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    gpu_ = std::move(b).value();
    cpu_ = backend::make_cpu_backend();
  }

  Tensor upload(const std::vector<float>& x, int64_t S, int64_t V) {
    auto t = gpu_->empty(DType::kF32, {S, V});
    EXPECT_TRUE(t.ok());
    Tensor host = Tensor::borrow(x.data(), DType::kF32, {S, V});
    EXPECT_TRUE(gpu_->upload(host, *t).ok());
    return *t;
  }

  std::vector<int32_t> gpu_ids(const std::vector<float>& x, int64_t S, int64_t V,
                               const std::vector<SampleRowParams>& rows) {
    Tensor logits = upload(x, S, V);
    auto ids = gpu_->empty(DType::kI32, {S});
    EXPECT_TRUE(ids.ok());
    const Status st = gpu_->sample(logits, rows, *ids);
    EXPECT_TRUE(st.ok()) << st.to_string();
    std::vector<int32_t> out(static_cast<size_t>(S));
    Tensor host = Tensor::borrow(out.data(), DType::kI32, {S});
    EXPECT_TRUE(gpu_->download(*ids, host).ok());
    return out;
  }

  std::vector<int32_t> cpu_ids(const std::vector<float>& x, int64_t S, int64_t V,
                               const std::vector<SampleRowParams>& rows) {
    Tensor logits = Tensor::borrow(x.data(), DType::kF32, {S, V});
    std::vector<int32_t> out(static_cast<size_t>(S));
    Tensor ids = Tensor::borrow(out.data(), DType::kI32, {S});
    const Status st = cpu_->sample(logits, rows, ids);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return out;
  }

  // The device's kept set per row (kernels::sample_filter_mask), [S, V].
  std::vector<uint8_t> gpu_kept(const std::vector<float>& x, int64_t S, int64_t V,
                                const std::vector<SampleRowParams>& rows) {
    Tensor logits = upload(x, S, V);
    auto params = gpu_->empty(DType::kU8, {static_cast<int64_t>(rows.size() * sizeof(SampleRowParams))});
    EXPECT_TRUE(params.ok());
    EXPECT_EQ(cudaMemcpy(params->raw(), rows.data(), rows.size() * sizeof(SampleRowParams),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    auto kept = gpu_->empty(DType::kU8, {S * V});
    EXPECT_TRUE(kept.ok());
    kernels::sample_filter_mask(logits.data<float>(), S, V,
                                static_cast<const kernels::SampleRow*>(params->raw()),
                                kept->data<uint8_t>(), gpu_->stream());
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<uint8_t> out(static_cast<size_t>(S * V));
    Tensor host = Tensor::borrow(out.data(), DType::kU8, {S * V});
    EXPECT_TRUE(gpu_->download(*kept, host).ok());
    return out;
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<backend::Backend> cpu_;
};

// The host sampler's kept set for one row (its building blocks, in its order).
std::vector<uint8_t> cpu_kept_row(const float* row, int64_t V, const SampleRowParams& p) {
  std::vector<uint8_t> kept(static_cast<size_t>(V), 0);
  std::vector<float> l(row, row + V);
  if (p.temperature < SamplingParams::kGreedyEpsilon) {
    kept[static_cast<size_t>(sample::argmax_lowest_id(l))] = 1;
    return kept;
  }
  const float inv_t = 1.0f / p.temperature;
  for (float& v : l) v *= inv_t;
  sample::apply_min_p(l, p.min_p);
  sample::apply_top_k(l, p.top_k);
  sample::apply_top_p(l, p.top_p);
  for (int64_t t = 0; t < V; ++t) kept[static_cast<size_t>(t)] = l[static_cast<size_t>(t)] != -kInf;
  return kept;
}

std::vector<float> normal_logits(std::mt19937& rng, int64_t S, int64_t V, float scale) {
  std::vector<float> x(static_cast<size_t>(S * V));
  std::normal_distribution<float> nd(0.f, scale);
  for (float& v : x) v = nd(rng);
  return x;
}

SampleRowParams random_params(std::mt19937& rng, int64_t V) {
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::uniform_int_distribution<int> pick(0, 5);
  SampleRowParams p;
  p.temperature = 0.3f + 1.2f * u(rng);
  switch (pick(rng)) {
    case 0: break;                                                          // plain
    case 1: p.top_k = static_cast<int32_t>(1 + rng() % std::min<int64_t>(V, 2000)); break;
    case 2: p.top_p = 0.05f + 0.9f * u(rng); break;
    case 3: p.min_p = 0.3f * u(rng); break;
    case 4:
      p.top_k = static_cast<int32_t>(1 + rng() % std::min<int64_t>(V, 300));
      p.top_p = 0.5f + 0.5f * u(rng);
      p.min_p = 0.05f * u(rng);
      break;
    default: p.top_k = -1; p.top_p = 0.999f; break;
  }
  p.seed = (static_cast<uint64_t>(rng()) << 32) | rng();
  p.sequence_index = rng() % 3;
  p.output_position = rng() % 100000;
  return p;
}

TEST_F(CudaSampling, GreedyIsExact) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (int64_t V : {int64_t{1}, int64_t{3}, int64_t{1000}, int64_t{4097}, kVocab}) {
    const int64_t S = 41;
    std::vector<float> x = normal_logits(rng_, S, V, 4.f);
    for (int64_t s = 0; s < S; ++s) {
      float* r = x.data() + s * V;
      switch (s % 8) {
        case 1: for (int64_t t = 0; t < V; ++t) r[t] = std::round(r[t]); break;  // many ties
        case 2: for (int64_t t = 0; t < V; t += 2) r[t] = -kInf; break;
        case 3: std::fill(r, r + V, -kInf); break;                         // nothing finite: id 0
        case 4: for (int64_t t = 0; t < V; ++t) r[t] = std::round(r[t]) - 1000.f; break;  // all << 0
        case 5: std::fill(r, r + V, 2.5f); break;                          // all equal: id 0
        case 6: r[V / 2] = std::numeric_limits<float>::quiet_NaN(); break;  // NaN never wins
        case 7: r[0] = std::numeric_limits<float>::quiet_NaN(); break;      // host: id 0
        default: break;
      }
    }
    std::vector<SampleRowParams> rows(static_cast<size_t>(S));
    for (auto& p : rows) p.temperature = (rng_() % 2) ? 0.f : 5e-6f;
    const auto want = cpu_ids(x, S, V, rows);
    const auto got = gpu_ids(x, S, V, rows);
    for (int64_t s = 0; s < S; ++s)
      ASSERT_EQ(got[static_cast<size_t>(s)], want[static_cast<size_t>(s)]) << "V " << V << " row " << s;
  }
}

TEST_F(CudaSampling, RandomRowsAgreeWithTheHost) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  int64_t rows_total = 0, agree = 0;
  struct Shape { int64_t S, V, batches; };
  for (Shape sh : {Shape{256, kVocab, 8}, Shape{1000, 1000, 20}, Shape{300, 7, 10}}) {
    int64_t shape_agree = 0, shape_rows = 0;
    for (int64_t b = 0; b < sh.batches; ++b) {
      std::vector<float> x = normal_logits(rng_, sh.S, sh.V, 2.f + static_cast<float>(b % 3));
      std::vector<SampleRowParams> rows;
      for (int64_t s = 0; s < sh.S; ++s) rows.push_back(random_params(rng_, sh.V));
      const auto want = cpu_ids(x, sh.S, sh.V, rows);
      const auto got = gpu_ids(x, sh.S, sh.V, rows);
      for (int64_t s = 0; s < sh.S; ++s) {
        const auto i = static_cast<size_t>(s);
        ASSERT_GE(got[i], 0);
        ASSERT_LT(got[i], sh.V);
        // Whatever it draws is inside the host's kept set (every 8th row at the full vocabulary:
        // the host's top-p sorts the whole row).
        if (sh.V < 10000 || s % 8 == 0) {
          const auto kept = cpu_kept_row(x.data() + s * sh.V, sh.V, rows[i]);
          ASSERT_TRUE(kept[static_cast<size_t>(got[i])])
              << "V " << sh.V << " row " << s << " drew " << got[i];
        }
        shape_agree += got[i] == want[i];
      }
      shape_rows += sh.S;
    }
    std::printf("[ sampling ] V %lld: %lld / %lld random rows drew the host's token (%.4f %%)\n",
                static_cast<long long>(sh.V), static_cast<long long>(shape_agree),
                static_cast<long long>(shape_rows), 100.0 * shape_agree / shape_rows);
    agree += shape_agree;
    rows_total += shape_rows;
  }
  EXPECT_GE(static_cast<double>(agree), 0.999 * static_cast<double>(rows_total))
      << agree << " of " << rows_total << " rows agree";
}

TEST_F(CudaSampling, KeptSetsEqualTheHost) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (int64_t V : {int64_t{5000}, kVocab}) {
    const int64_t S = 96;
    // Well separated: distinct values on a 0.01 grid (a permutation), shifted per row; every
    // third row rounded to 0.5 instead (many ties at every boundary).
    std::vector<float> x(static_cast<size_t>(S * V));
    std::vector<int32_t> perm(static_cast<size_t>(V));
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t t = 0; t < V; ++t) perm[static_cast<size_t>(t)] = static_cast<int32_t>(t);
      std::shuffle(perm.begin(), perm.end(), rng_);
      const float spread = 0.5f + static_cast<float>(rng_() % 40) * 0.1f;  // sharper or flatter
      for (int64_t t = 0; t < V; ++t) {
        float v = static_cast<float>(perm[static_cast<size_t>(t)]) * spread * 10.f / static_cast<float>(V);
        if (s % 3 == 2) v = std::round(v * 2.f) / 2.f;
        x[static_cast<size_t>(s * V + t)] = v - 7.f;
      }
    }
    std::vector<SampleRowParams> rows;
    for (int64_t s = 0; s < S; ++s) {
      SampleRowParams p = random_params(rng_, V);
      if (s % 16 == 0) p.temperature = 0.f;  // greedy rows: the argmax alone
      if (s % 16 == 1) p.top_k = static_cast<int32_t>(V - 1);
      if (s % 16 == 2) p.top_k = 1;
      if (s % 16 == 3) p.top_p = 1e-7f;       // only the first-ranked token
      if (s % 16 == 4) p.min_p = 1.f;         // only the maximum (and its ties)
      rows.push_back(p);
    }
    const auto got = gpu_kept(x, S, V, rows);
    for (int64_t s = 0; s < S; ++s) {
      const auto& p = rows[static_cast<size_t>(s)];
      const auto want = cpu_kept_row(x.data() + s * V, V, p);
      int64_t n_want = 0, n_got = 0, first_diff = -1;
      for (int64_t t = 0; t < V; ++t) {
        const uint8_t g = got[static_cast<size_t>(s * V + t)], w = want[static_cast<size_t>(t)];
        n_want += w;
        n_got += g;
        if (g != w && first_diff < 0) first_diff = t;
      }
      EXPECT_EQ(first_diff, -1) << "V " << V << " row " << s << " (T " << p.temperature << " top_k "
                                << p.top_k << " top_p " << p.top_p << " min_p " << p.min_p
                                << "): kept " << n_got << " tokens, host " << n_want
                                << "; first difference at token " << first_diff;
    }
  }
}

// Frequencies of many draws (one row per output position) against the softmax of the host's
// kept logits, chi-square at p ≈ 1e-6 (Wilson–Hilferty); never a token outside the kept set.
TEST_F(CudaSampling, DrawsFollowTheKeptSoftmax) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const int64_t V = 12, N = 40000;
  std::vector<float> base = normal_logits(rng_, 1, V, 1.5f);
  struct Case { const char* name; float T; int top_k; float top_p; float min_p; };
  for (Case c : {Case{"plain", 1.f, 0, 1.f, 0.f}, Case{"temperature 0.6", 0.6f, 0, 1.f, 0.f},
                 Case{"top_k 4", 1.f, 4, 1.f, 0.f}, Case{"top_p 0.7", 1.f, 0, 0.7f, 0.f},
                 Case{"min_p 0.15", 1.3f, 0, 1.f, 0.15f}, Case{"all", 0.9f, 6, 0.9f, 0.05f}}) {
    std::vector<float> x;
    for (int64_t i = 0; i < N; ++i) x.insert(x.end(), base.begin(), base.end());
    std::vector<SampleRowParams> rows(static_cast<size_t>(N));
    const uint64_t seed = (static_cast<uint64_t>(rng_()) << 32) | rng_();
    for (int64_t i = 0; i < N; ++i) {
      rows[static_cast<size_t>(i)] = {c.T, c.top_k, c.top_p, c.min_p, seed, 0,
                                      static_cast<uint32_t>(i)};
    }
    const auto got = gpu_ids(x, N, V, rows);
    // Expected: softmax over the host's processed row.
    std::vector<float> l(base);
    for (float& v : l) v *= 1.0f / c.T;
    sample::apply_min_p(l, c.min_p);
    sample::apply_top_k(l, c.top_k);
    sample::apply_top_p(l, c.top_p);
    const std::vector<float> lp = sample::log_softmax(l);
    std::vector<int64_t> count(static_cast<size_t>(V), 0);
    for (int32_t t : got) ++count[static_cast<size_t>(t)];
    double chi2 = 0;
    int df = -1;
    for (int64_t t = 0; t < V; ++t) {
      const double e = N * std::exp(static_cast<double>(lp[static_cast<size_t>(t)]));
      if (lp[static_cast<size_t>(t)] == -kInf) {
        EXPECT_EQ(count[static_cast<size_t>(t)], 0) << c.name << ": token " << t << " is filtered out";
        continue;
      }
      const double d = static_cast<double>(count[static_cast<size_t>(t)]) - e;
      chi2 += d * d / e;
      ++df;
    }
    if (df < 1) continue;  // one token kept: nothing to test beyond the zero counts
    const double z = 4.75, k = df;  // one-sided 1e-6
    const double crit = k * std::pow(1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k)), 3.0);
    EXPECT_LT(chi2, crit) << c.name << ": chi-square " << chi2 << " with " << df << " dof";
    std::printf("[ sampling ] %s: chi-square %.2f (%d dof, bound %.1f)\n", c.name, chi2, df, crit);
  }
}

TEST_F(CudaSampling, DeterministicAndErrors) {
  const int64_t S = 64, V = kVocab;
  std::vector<float> x = normal_logits(rng_, S, V, 3.f);
  std::vector<SampleRowParams> rows;
  for (int64_t s = 0; s < S; ++s) rows.push_back(random_params(rng_, V));
  const auto a = gpu_ids(x, S, V, rows);
  const auto b = gpu_ids(x, S, V, rows);
  EXPECT_EQ(a, b);

  // Time of the op at the engine's concurrency 64 (printed, not asserted).
  Tensor logits = upload(x, S, V);
  auto ids = gpu_->empty(DType::kI32, {S});
  ASSERT_TRUE(ids.ok());
  struct Mode { const char* name; int32_t top_k; float top_p; float temperature; };
  for (Mode mode : {Mode{"greedy", 0, 1.f, 0.f}, Mode{"plain T=1", 0, 1.f, 1.f},
                    Mode{"top_k 50 + top_p 0.9", 50, 0.9f, 1.f}, Mode{"top_p 0.9", 0, 0.9f, 1.f}}) {
    std::vector<SampleRowParams> r(static_cast<size_t>(S));
    for (int64_t s = 0; s < S; ++s) {
      auto& p = r[static_cast<size_t>(s)];
      p.seed = 1000 + static_cast<uint64_t>(s);
      p.top_k = mode.top_k;
      p.top_p = mode.top_p;
      p.temperature = mode.temperature;
    }
    ASSERT_TRUE(gpu_->sample(logits, r, *ids).ok());  // warm-up
    ASSERT_TRUE(gpu_->synchronize().ok());
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0, gpu_->stream());
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(gpu_->sample(logits, r, *ids).ok());
    cudaEventRecord(e1, gpu_->stream());
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    std::printf("[ sampling ] %lld x %lld, %s: %.1f us per call\n", static_cast<long long>(S),
                static_cast<long long>(V), mode.name, 100.0 * ms);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }

  std::vector<SampleRowParams> bad = rows;
  bad[5].top_p = 0.f;
  Status st = gpu_->sample(logits, bad, *ids);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("row 5 top_p"), std::string::npos) << st.message();
  bad = rows;
  bad[7].temperature = -0.5f;
  st = gpu_->sample(logits, bad, *ids);
  EXPECT_NE(st.message().find("row 7 temperature"), std::string::npos) << st.message();
  bad.resize(3);
  st = gpu_->sample(logits, bad, *ids);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu_->synchronize().ok());
}

}  // namespace
}  // namespace deepinfer::cuda
