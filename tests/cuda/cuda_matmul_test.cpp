// The batch-invariant fp32 GEMM (matmul.cu, CudaBackend::matmul under --batch-invariant) on the
// GPU: against a double reference with a rigorous per-element bound, and bitwise — every register
// blocking (config 0..3), the vector and scalar load paths, every M (a row alone, in windows of
// 3 … 2048 rows and inside the full batch) and the row-slabbed launches give a row the same bits.
//
// Error bound per element: the chunk of KC = matmul_chunk(K) columns is a fp32 fma chain of at
// most KC/32 terms per lane, then a 5-level add tree, then the C chunk partials are added in
// order: at most n = KC/32 + 5 + (C − 1) roundings, each ≤ 2^-24 relative, so
// |got − Σ x·w| ≤ 1.01 · n · 2^-24 · Σ |x·w| (first order; the 1.01 covers the n² term).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "device_pair.h"

namespace deepinfer::cuda {
namespace {

using backend::Shape;
using backend::Tensor;
using testing::on_device;
using testing::Pair;
using testing::to_host;

class CudaMatmulFixed : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    std::printf("seed %u\n", seed_);
    CudaBackendOptions bi;
    bi.batch_invariant = true;
    auto c = CudaBackend::create(bi);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    bi_ = std::move(c).value();
  }
  Tensor randn(Shape s, float scale = 1.f) {
    Tensor t = Tensor::empty(DType::kF32, std::move(s));
    std::normal_distribution<float> nd(0.f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng_);
    return t;
  }
  // out [M, G·N] on the device through CudaBackend::matmul (batch-invariant).
  Tensor bi_matmul(const Tensor& dx, const Tensor& dw, int64_t GN, int64_t G) {
    auto out = bi_->alloc(DType::kF32, {dx.dim(0), GN});
    EXPECT_TRUE(out.ok());
    const Status st = bi_->matmul(dx, dw, *out, G);
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(bi_->synchronize().ok());
    return to_host(*out);
  }
  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<CudaBackend> bi_;
};

// A device buffer holding `h` at a float offset `shift` (shift 1: a pointer 4 bytes past a
// 16-byte boundary, which sends the kernel down its scalar path).
struct Shifted {
  DeviceBuffer buf;
  float* ptr = nullptr;
};
Shifted upload_shifted(const Tensor& h, int shift) {
  Shifted s{std::move(DeviceBuffer::allocate(h.nbytes() + 64)).value(), nullptr};
  s.ptr = static_cast<float*>(s.buf.data()) + shift;
  EXPECT_EQ(cudaMemcpy(s.ptr, h.raw(), h.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  return s;
}

std::vector<float> run_kernel(const float* dx, const float* dw, int64_t M, int64_t N, int64_t K,
                              int64_t G, int config) {
  auto out = DeviceBuffer::allocate(std::max<int64_t>(16, M * G * N * 4));
  EXPECT_TRUE(out.ok());
  kernels::matmul_fixed(dx, dw, M, N, K, G, static_cast<float*>(out->data()), nullptr, config);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> h(M * G * N);
  EXPECT_EQ(cudaMemcpy(h.data(), out->data(), h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST_F(CudaMatmulFixed, MatchesDoubleWithinTheRoundingBound) {
  struct Case { int64_t M, G, N, K; };
  // V4's hyper-connection mixing (N = 24 and 4, K = 4·4096) at decode and prefill sizes; a
  // partial last chunk (K = 1000), a scalar-path K (1001), K < one lane step (3), grouped, K = 0.
  const std::vector<Case> cases = {{1, 1, 24, 16384}, {16, 1, 24, 16384}, {300, 1, 4, 16384},
                                   {7, 1, 37, 1000},  {5, 1, 9, 1001},    {33, 1, 5, 3},
                                   {9, 3, 20, 520},   {4, 1, 6, 0}};
  for (const Case& c : cases) {
    const int64_t GN = c.G * c.N;
    Tensor x = randn({c.M, c.G * c.K}), w = randn({GN, c.K}, 0.05f);
    auto dx = on_device(x), dw = on_device(w);
    const int64_t KC = kernels::matmul_chunk(c.K);
    const int64_t C = std::max<int64_t>(1, (c.K + KC - 1) / KC);
    const double n = double(KC / 32 + 5 + (C - 1));
    for (int config = -1; config <= 3; ++config) {
      std::vector<float> got = run_kernel(dx.dev.data<float>(), dw.dev.data<float>(), c.M, c.N,
                                          c.K, c.G, config);
      double worst = 0;
      for (int64_t m = 0; m < c.M; ++m)
        for (int64_t r = 0; r < GN; ++r) {
          const float* xr = x.data<float>() + m * c.G * c.K + (r / c.N) * c.K;
          const float* wr = w.data<float>() + r * c.K;
          double s = 0, a = 0;
          for (int64_t k = 0; k < c.K; ++k) {
            s += double(xr[k]) * wr[k];
            a += std::fabs(double(xr[k]) * wr[k]);
          }
          const double e = std::fabs(double(got[m * GN + r]) - s);
          const double bound = 1.01 * n * std::ldexp(a, -24) + 1e-38;
          ASSERT_LE(e, bound) << "M=" << c.M << " G=" << c.G << " N=" << c.N << " K=" << c.K
                              << " config " << config << " at (" << m << ", " << r << "): got "
                              << got[m * GN + r] << " want " << s << " seed " << seed_;
          worst = std::max(worst, e / std::max(bound, 1e-30));
        }
      if (config == -1)
        std::printf("M=%lld G=%lld N=%lld K=%lld: worst error %.3f of the bound\n",
                    static_cast<long long>(c.M), static_cast<long long>(c.G),
                    static_cast<long long>(c.N), static_cast<long long>(c.K), worst);
    }
  }
}

TEST_F(CudaMatmulFixed, EveryConfigAndLoadPathGivesTheSameBits) {
  // Register blockings 0..3 and the scalar path (x or w 4 bytes off a 16-byte boundary) against
  // the auto-picked vector path; rows past M / columns past N of a block must not leak in.
  struct Case { int64_t M, G, N, K; };
  for (const Case& c : std::vector<Case>{{1, 1, 24, 16384}, {19, 1, 24, 16384}, {13, 2, 11, 1536},
                                         {70, 1, 4, 4096}}) {
    const int64_t GN = c.G * c.N;
    Tensor x = randn({c.M, c.G * c.K}), w = randn({GN, c.K}, 0.05f);
    auto dx = on_device(x), dw = on_device(w);
    const std::vector<float> ref = run_kernel(dx.dev.data<float>(), dw.dev.data<float>(), c.M,
                                              c.N, c.K, c.G, -1);
    const std::string shape = "M=" + std::to_string(c.M) + " G=" + std::to_string(c.G) +
                              " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K);
    for (int config = 0; config <= 3; ++config) {
      const auto got = run_kernel(dx.dev.data<float>(), dw.dev.data<float>(), c.M, c.N, c.K, c.G, config);
      EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), ref.size() * 4)) << shape << " config " << config;
    }
    Shifted sx = upload_shifted(x, 1), sw = upload_shifted(w, 3);
    for (int config = 0; config <= 3; ++config) {
      const auto gx = run_kernel(sx.ptr, dw.dev.data<float>(), c.M, c.N, c.K, c.G, config);
      EXPECT_EQ(0, std::memcmp(gx.data(), ref.data(), ref.size() * 4)) << shape << " scalar x, config " << config;
      const auto gw = run_kernel(dx.dev.data<float>(), sw.ptr, c.M, c.N, c.K, c.G, config);
      EXPECT_EQ(0, std::memcmp(gw.data(), ref.data(), ref.size() * 4)) << shape << " scalar w, config " << config;
    }
  }
}

TEST_F(CudaMatmulFixed, BatchInvariantRowsAreBitwiseIndependentOfTheBatch) {
  // Through CudaBackend::matmul: the rows of a 2100-row product, recomputed in windows of
  // M = 1, 3, 16, 64, 300, 2048 rows (other configs, other rows beside them), bit for bit.
  struct Case { int64_t G, N, K; };
  for (const Case& c : std::vector<Case>{{1, 24, 16384}, {1, 4, 16384}, {2, 13, 1001}}) {
    const int64_t GN = c.G * c.N, rows = 2100;
    Tensor x = randn({rows, c.G * c.K}), w = randn({GN, c.K}, 0.05f);
    auto dx = on_device(x), dw = on_device(w);
    const Tensor full = bi_matmul(dx.dev, dw.dev, GN, c.G);
    for (auto [b, M] : {std::pair<int64_t, int64_t>{0, 1}, {1, 1}, {2099, 1}, {7, 3}, {37, 16},
                        {100, 64}, {11, 300}, {51, 2048}}) {
      const Tensor got = bi_matmul(dx.dev.rows(b, b + M), dw.dev, GN, c.G);
      EXPECT_EQ(0, std::memcmp(got.data<float>(), full.data<float>() + b * GN, M * GN * 4))
          << "G=" << c.G << " N=" << c.N << " K=" << c.K << ": rows [" << b << ", " << b + M
          << ") differ from the same rows of M = " << rows;
    }
  }
}

TEST_F(CudaMatmulFixed, ManyRowsSpanSeveralLaunches) {
  // More m blocks than grid.y allows (65535 · RM rows per launch for config 0 / 1).
  const int64_t M = 140000, N = 3, K = 8;
  Tensor x = randn({M, K}), w = randn({N, K});
  auto dx = on_device(x), dw = on_device(w);
  const auto ref = run_kernel(dx.dev.data<float>(), dw.dev.data<float>(), M, N, K, 1, 3);
  for (int config : {0, 1}) {
    const auto got = run_kernel(dx.dev.data<float>(), dw.dev.data<float>(), M, N, K, 1, config);
    EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), ref.size() * 4)) << "config " << config;
  }
  // And the values: K = 8 sums are one lane's 4-term chain + another's, within the bound.
  for (int64_t m = 0; m < M; m += 997)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, a = 0;
      for (int64_t k = 0; k < K; ++k) {
        s += double(x.data<float>()[m * K + k]) * w.data<float>()[n * K + k];
        a += std::fabs(double(x.data<float>()[m * K + k]) * w.data<float>()[n * K + k]);
      }
      ASSERT_LE(std::fabs(ref[m * N + n] - s), 1.01 * 21 * std::ldexp(a, -24) + 1e-38) << m << "," << n;
    }
}

}  // namespace
}  // namespace deepinfer::cuda
