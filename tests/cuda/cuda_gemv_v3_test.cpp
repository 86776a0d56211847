// The session-8 dense decode GEMV (gemv_v3.cuh: weights through a TMA ring in shared memory, its
// own row-independent arithmetic). Checks, with fresh random inputs (seed printed):
//  - at the V4-Flash decode shapes (wq_a, wkv, wq_b, grouped wo_a, wo_b, shared expert, indexer
//    wq_b in FP8 with 128×128 ue8m0 / f32 scales; compressor / router gate in BF16; odd shapes
//    with partial blocks) for M = 1, 2, 4, 8: within the rigorous bound of a double reference,
//    within twice that bound of session 7's kernel (gemv_linear), every option variant (v1..v4, a)
//    bitwise equal, and every row of M = 8 bitwise equal to the same row at M = 1, 2, 4;
//  - the BF16 head (129280 × 4096) on sampled rows against double and s7;
//  - e4m3 NaN codes and NaN scales make exactly their rows NaN;
//  - a table of projections (gemv3_multi) bitwise equal to each projection alone;
//  - a PDL chain after a slow producer (inputs read only after the wait): bitwise = plain chain;
//  - CudaBackend::linear / linear_multi run this kernel when DEEPINFER_GEMV_KERNEL selects it.
// Bound (as cuda_gemv_test): |got − exact| ≤ (E + ceil(K / 32E) + 8)·2^-24·Σ|x·w| (E = 16 e4m3,
// 8 bf16): the kernel's longest rounding chain is E/2 + 2 + ceil(K / 32E) + 5 + 3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv.h"
#include "common/dtypes.h"
#include "common/env.h"
#include "device_pair.h"
#include "host_weights.h"
#include "memset_sync.h"
#include "pdl_producer.h"

namespace deepinfer::cuda {
namespace {

// Session 9: DEEPINFER_GEMV_KERNEL auto became skinny_mma (tc, its own tests); this file checks the
// GEMV dispatch, i.e. session 8's auto, now "b" (unless the variable is set).
const int kPinGemvKernel = (setenv("DEEPINFER_GEMV_KERNEL", "b", 0), 0);

using backend::Tensor;

using testing::HostW;

class CudaGemvV3 : public testing::SeededGpuTest {
 protected:
  HostW make(int fmt, int64_t N, int64_t K) { return testing::make_host_weight(fmt, N, K, mix_, rng_); }
  void upload(HostW& h) { testing::upload_host_weight(h); }
  std::vector<float> randn(int64_t n, float scale = 1.f) {
    std::vector<float> v(static_cast<size_t>(n));
    std::normal_distribution<float> nd(0.f, scale);
    for (float& f : v) f = nd(rng_);
    return v;
  }
  static DeviceBuffer dev(const std::vector<float>& v) { return testing::upload_floats(v); }
  static std::vector<float> host(const DeviceBuffer& b, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    EXPECT_EQ(cudaMemcpy(v.data(), b.data(), n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  // out [M, G·N] by the v3 kernel (o) or, with s7, by gemv_linear; NaN-filled first.
  std::vector<float> run(const HostW& h, const float* dx, int64_t M, int64_t G, bool s7,
                         const kernels::Gemv3Options& o = {}) {
    const int64_t N = h.N / G;
    DeviceBuffer out = std::move(DeviceBuffer::allocate(std::max<int64_t>(M * h.N, 4) * 4)).value();
    EXPECT_EQ(testing::memset_sync(out.data(), 0xFF, M * h.N * 4), cudaSuccess);
    if (s7) {
      kernels::gemv_linear(h.kfmt(), dx, h.dw.data(), h.scale(), h.f32(), M, N, h.K, G, h.br, h.bc,
                           static_cast<float*>(out.data()), nullptr);
    } else {
      EXPECT_TRUE(kernels::gemv3_linear(h.kfmt(), dx, h.dw.data(), h.scale(), h.f32(), M, N, h.K, G,
                                        h.br, h.bc, static_cast<float*>(out.data()), nullptr, false, o));
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    return host(out, M * h.N);
  }
  // Worst |got − exact| / (factor·u·Σ|x·w|) over rows `rows` of [M, G·N] (x [M, G·K] host).
  double worst(const HostW& h, const std::vector<float>& x, int64_t M, int64_t G,
               const std::vector<int64_t>& rows, const std::vector<float>& got, double factor,
               const std::vector<float>* other = nullptr) const {
    const int64_t N = h.N / G, K = h.K;
    const double E = h.fmt == 0 ? 8 : 16, u = std::ldexp(1.0, -24);
    const double nb = (E + std::ceil(double(K) / (32 * E)) + 8) * factor;
    double w = 0;
    std::vector<double> wr(static_cast<size_t>(K));
    for (int64_t n : rows) {
      for (int64_t k = 0; k < K; ++k) wr[k] = h.deq(n, k);
      for (int64_t m = 0; m < M; ++m) {
        const float* xr = x.data() + m * G * K + (n / N) * K;
        double s = 0, a = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = double(xr[k]) * wr[k];
          s += p;
          a += std::fabs(p);
        }
        const double g = got[m * h.N + n];
        const double want = other != nullptr ? double((*other)[m * h.N + n]) : s;
        const double q = std::fabs(g - want) / (nb * u * a + 1e-37);
        if (!(q <= w)) w = std::isnan(q) ? 1e30 : q;
      }
    }
    return w;
  }
  static std::vector<int64_t> sample_rows(int64_t R, int64_t most) {
    std::vector<int64_t> r;
    const int64_t step = std::max<int64_t>(1, R / most);
    for (int64_t n = 0; n < R; n += step) r.push_back(n);
    if (r.back() != R - 1) r.push_back(R - 1);
    return r;
  }
  static bool same(const std::vector<float>& a, const std::vector<float>& b, size_t n) {
    return a.size() >= n && b.size() >= n && std::memcmp(a.data(), b.data(), n * 4) == 0;
  }
};

struct Shape3 {
  const char* name;
  int fmt;
  int64_t N, K, G;
};

// DEEPINFER_GEMV_KERNEL v1 (= auto), v2 (two CTAs per SM), v3 (deep ring), v4 (integer e4m3
// decode), a (f16 bit-move decode): speed options, the same bits.
const kernels::Gemv3Options kVariants[] = {{0, 1, false}, {0, 2, false}, {0, 1, true}, {1, 1, false}, {2, 1, false}};
const char* kVariantNames[] = {"v1", "v2", "v3", "v4", "a"};
constexpr int kNumVariants = 5;

TEST_F(CudaGemvV3, MatchesDoubleAndS7AtV4ShapesAllVariantsRowIndependent) {
  const std::vector<Shape3> shapes = {
      {"wq_a", 1, 1024, 4096, 1},          {"wkv", 1, 512, 4096, 1},
      {"wq_b", 1, 32768, 1024, 1},         {"wo_a (8 groups)", 1, 8 * 1024, 4096, 8},
      {"wo_b", 1, 4096, 8192, 1},          {"shared gate_up", 1, 4096, 4096, 1},
      {"shared down", 1, 4096, 2048, 1},   {"indexer wq_b", 1, 8192, 1024, 1},
      {"wq_a f32 scales", 4, 1024, 4096, 1}, {"bf16 compressor wkv", 0, 1024, 4096, 1},
      {"bf16 router gate", 0, 256, 4096, 1}, {"fp8 odd 129x1056", 1, 129, 1056, 1},
      {"fp8 grouped 3x40x4096", 1, 120, 4096, 3}, {"fp8 f32 130x384", 4, 130, 384, 1},
      {"bf16 300x1056", 0, 300, 1056, 1},  {"bf16 33x200 (400-byte rows)", 0, 33, 200, 1},
      {"bf16 5x8192 (16 KB rows, 32 KB tiles)", 0, 5, 8192, 1},
  };
  for (const Shape3& sh : shapes) {
    HostW h = make(sh.fmt, sh.N, sh.K);
    const std::vector<float> x = randn(8 * sh.G * sh.K);
    DeviceBuffer dx = dev(x);
    const float* px = static_cast<const float*>(dx.data());
    const std::vector<int64_t> rows = sample_rows(sh.N, 1200);
    std::vector<float> full8;
    for (int64_t M : {8, 4, 2, 1}) {
      const std::string what = std::string(sh.name) + " M=" + std::to_string(M) + " seed " + std::to_string(seed_);
      ASSERT_GE(kernels::gemv3_passes(h.kfmt(), M, sh.K), 1) << what;
      const std::vector<float> got = run(h, px, M, sh.G, false);
      const std::vector<float> s7 = run(h, px, M, sh.G, true);
      EXPECT_LE(worst(h, x, M, sh.G, rows, got, 1.0), 1.0) << what << ": v3 vs double";
      EXPECT_LE(worst(h, x, M, sh.G, rows, got, 2.0, &s7), 1.0) << what << ": v3 vs s7";
      for (int v = 1; v < kNumVariants; ++v) {
        const std::vector<float> gv = run(h, px, M, sh.G, false, kVariants[v]);
        EXPECT_TRUE(same(gv, got, M * sh.N)) << what << ": " << kVariantNames[v] << " differs from v1";
      }
      if (M == 8) full8 = got;
      else EXPECT_TRUE(same(got, full8, M * sh.N)) << what << ": rows differ from the same rows at M = 8";
    }
    // One row alone, from the middle of x (another staging position), equals row 5 of M = 8.
    const std::vector<float> r5 = run(h, px + 5 * sh.G * sh.K, 1, sh.G, false);
    EXPECT_TRUE(std::memcmp(r5.data(), full8.data() + 5 * sh.N, sh.N * 4) == 0)
        << sh.name << ": x row 5 alone differs; seed " << seed_;
  }
}

TEST_F(CudaGemvV3, Bf16HeadOnSampledRows) {
  HostW h = make(0, 129280, 4096);
  const std::vector<float> x = randn(8 * 4096);
  DeviceBuffer dx = dev(x);
  const float* px = static_cast<const float*>(dx.data());
  const std::vector<int64_t> rows = sample_rows(h.N, 1000);
  for (int64_t M : {1, 2, 4, 8}) {
    const std::string what = "head M=" + std::to_string(M) + " seed " + std::to_string(seed_);
    const std::vector<float> got = run(h, px, M, 1, false);
    const std::vector<float> s7 = run(h, px, M, 1, true);
    EXPECT_LE(worst(h, x, M, 1, rows, got, 1.0), 1.0) << what << ": v3 vs double";
    EXPECT_LE(worst(h, x, M, 1, rows, got, 2.0, &s7), 1.0) << what << ": v3 vs s7";
    int64_t nonfinite = 0;
    for (float f : got) nonfinite += std::isfinite(f) ? 0 : 1;
    EXPECT_EQ(nonfinite, 0) << what;
  }
}

TEST_F(CudaGemvV3, NanCodesAndNanScalesMakeExactlyTheirRowsNan) {
  HostW h = make(1, 260, 4096);
  h.w[5 * 4096 + 17] = 0x7F;
  h.w[9 * 4096 + 4095] = 0xFF;
  h.s8[1 * h.scols() + 2] = 0xFF;  // rows 128..255
  upload(h);
  const std::vector<float> x = randn(3 * 4096);
  DeviceBuffer dx = dev(x);
  for (int v : {0, 3, 4}) {
    const std::vector<float> got = run(h, static_cast<const float*>(dx.data()), 3, 1, false, kVariants[v]);
    for (int64_t m = 0; m < 3; ++m)
      for (int64_t n = 0; n < 260; ++n) {
        const bool want_nan = n == 5 || n == 9 || (n >= 128 && n < 256);
        EXPECT_EQ(std::isnan(got[m * 260 + n]), want_nan)
            << kVariantNames[v] << " m " << m << " n " << n << " = " << got[m * 260 + n];
      }
  }
}

TEST_F(CudaGemvV3, TableOfProjectionsEqualsEachAloneBitwise) {
  struct Set { int fmt; int64_t K; std::vector<int64_t> N; };
  const std::vector<Set> sets = {
      {1, 4096, {1024, 512}},                         // attention: wq_a + wkv
      {0, 4096, {1024, 1024, 256, 256}},              // CSA compressors + the indexer's
      {1, 1056, {1, 3, 129, 257, 64, 130, 5, 300}},   // odd N, partial blocks
      {4, 384, {130, 7, 256}},                        // f32 scales
  };
  for (const Set& st : sets) {
    std::vector<HostW> hs;
    for (int64_t N : st.N) hs.push_back(make(st.fmt, N, st.K));
    const std::vector<float> x = randn(8 * st.K);
    DeviceBuffer dx = dev(x);
    const float* px = static_cast<const float*>(dx.data());
    for (int64_t M : {1, 2, 3, 8}) {
      std::vector<DeviceBuffer> outs;
      std::vector<kernels::GemvProjection> pr;
      for (const HostW& h : hs) {
        outs.push_back(std::move(DeviceBuffer::allocate(std::max<int64_t>(M * h.N, 4) * 4)).value());
        ASSERT_EQ(testing::memset_sync(outs.back().data(), 0xFF, M * h.N * 4), cudaSuccess);
        pr.push_back({h.dw.data(), h.scale(), static_cast<float*>(outs.back().data()), h.N});
      }
      ASSERT_TRUE(kernels::gemv3_multi(hs[0].kfmt(), px, pr.data(), static_cast<int>(pr.size()), hs[0].f32(), M,
                                       st.K, 128, 128, nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (size_t j = 0; j < hs.size(); ++j) {
        const std::vector<float> want = run(hs[j], px, M, 1, false);
        EXPECT_TRUE(same(host(outs[j], M * hs[j].N), want, M * hs[j].N))
            << "fmt " << st.fmt << " K " << st.K << " projection " << j << " M " << M << " seed " << seed_;
      }
    }
  }
}

TEST_F(CudaGemvV3, RefusesLayoutsItDoesNotImplement) {
  EXPECT_TRUE(kernels::gemv3_supported(1, 4096, true, 128));
  EXPECT_TRUE(kernels::gemv3_supported(0, 4096, false, 1));
  EXPECT_TRUE(kernels::gemv3_supported(0, 8192, false, 1));
  EXPECT_FALSE(kernels::gemv3_supported(2, 4096, true, 32));    // fp4: s7
  EXPECT_FALSE(kernels::gemv3_supported(3, 4096, false, 1));    // f32
  EXPECT_FALSE(kernels::gemv3_supported(1, 4096, false, 128));  // unscaled e4m3
  EXPECT_FALSE(kernels::gemv3_supported(0, 4096, true, 128));   // scaled bf16
  EXPECT_FALSE(kernels::gemv3_supported(1, 200, true, 128));    // rows not 16-byte multiples
  EXPECT_FALSE(kernels::gemv3_supported(0, 16384, false, 1));   // 32 KB rows
  EXPECT_FALSE(kernels::gemv3_supported(1, 4096, true, 48));    // chunks straddle blocks
  EXPECT_EQ(kernels::gemv3_passes(1, 0, 4096), 0);
  EXPECT_EQ(kernels::gemv3_passes(1, 9, 4096), 0);
  EXPECT_EQ(kernels::gemv3_passes(1, 8, 4096), 1);
  EXPECT_EQ(kernels::gemv3_passes(1, 8, 8192), 2);
  HostW h = make(1, 64, 256);
  DeviceBuffer dx = dev(randn(256));
  DeviceBuffer out = std::move(DeviceBuffer::allocate(64 * 9 * 4)).value();
  const float* px = static_cast<const float*>(dx.data());
  float* po = static_cast<float*>(out.data());
  EXPECT_FALSE(kernels::gemv3_linear(1, px, h.dw.data(), h.scale(), false, 1, 7, 256, 9, 128, 128, po, nullptr));
  EXPECT_FALSE(kernels::gemv3_linear(1, px, static_cast<const uint8_t*>(h.dw.data()) + 1, h.scale(), false, 1,
                                     32, 256, 1, 128, 128, po, nullptr));
  EXPECT_FALSE(kernels::gemv3_linear(1, px, h.dw.data(), nullptr, false, 1, 64, 256, 1, 128, 128, po, nullptr));
  EXPECT_FALSE(kernels::gemv3_linear(1, px, h.dw.data(), h.scale(), false, 9, 64, 256, 1, 128, 128, po, nullptr));
  kernels::Gemv3Options o;
  EXPECT_TRUE(kernels::gemv3_options_for("auto", &o));
  EXPECT_TRUE(o.auto_pick);
  EXPECT_TRUE(kernels::gemv3_dispatch_takes(o, 1, 32768, 1024, 1));    // wq_b
  EXPECT_TRUE(kernels::gemv3_dispatch_takes(o, 1, 1024, 4096, 1));     // wq_a
  EXPECT_FALSE(kernels::gemv3_dispatch_takes(o, 1, 4096, 8192, 1));    // wo_b: s7 measured faster
  EXPECT_FALSE(kernels::gemv3_dispatch_takes(o, 0, 129280, 4096, 1));  // the BF16 head
  EXPECT_FALSE(kernels::gemv3_dispatch_takes(o, 1, 8192, 4096, 8));    // grouped wo_a
  EXPECT_TRUE(kernels::gemv3_options_for("v2", &o));
  EXPECT_EQ(o.ctas_per_sm, 2);
  EXPECT_FALSE(kernels::gemv3_options_for("s7", &o));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(CudaGemvV3, PdlChainAfterASlowProducerEqualsThePlainChain) {
  // wq_a + wkv (one gemv3_multi) → wq_b → wo_a (8 groups) → wo_b, FP8 with 128×128 scales, after
  // a producer that lets the chain start at once, spins 50 µs, then writes x and poisons q.
  const int64_t H = 4096, QL = 1024, KV = 512, HD = 64 * 512, OG = 8, OL = 1024;
  HostW wq_a = make(1, QL, H), wkv = make(1, KV, H), wq_b = make(1, HD, QL);
  HostW wo_a = make(1, OG * OL, HD / OG), wo_b = make(1, H, OG * OL);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const int64_t kMaxM = 8;
  auto buf = [](int64_t n) { return std::move(DeviceBuffer::allocate(n * 4)).value(); };
  DeviceBuffer x = buf(kMaxM * H), q = buf(kMaxM * QL), kv = buf(kMaxM * KV), hb = buf(kMaxM * HD);
  DeviceBuffer o = buf(kMaxM * OG * OL), y = buf(kMaxM * H);
  struct B { DeviceBuffer* b; int64_t per_row; };
  const B outs[] = {{&q, QL}, {&kv, KV}, {&hb, HD}, {&o, OG * OL}, {&y, H}};
  auto f = [](DeviceBuffer& b) { return static_cast<float*>(b.data()); };
  for (int64_t M : {1, 2, 8}) {
    const std::vector<float> xh = randn(M * H);
    DeviceBuffer src = dev(xh);
    auto chain = [&](bool pdl, int variant) {
      const kernels::Gemv3Options& op = kVariants[variant];
      ASSERT_EQ(cudaMemsetAsync(x.data(), 0xFF, M * H * 4, s), cudaSuccess);
      for (const B& b : outs) ASSERT_EQ(cudaMemsetAsync(b.b->data(), 0xFF, M * b.per_row * 4, s), cudaSuccess);
      testing::slow_producer(f(x), static_cast<const float*>(src.data()), M * H, f(q), M * QL, 50000, 4, s);
      const kernels::GemvProjection pr[2] = {{wq_a.dw.data(), wq_a.scale(), f(q), QL},
                                             {wkv.dw.data(), wkv.scale(), f(kv), KV}};
      ASSERT_TRUE(kernels::gemv3_multi(1, f(x), pr, 2, false, M, H, 128, 128, s, pdl, op));
      ASSERT_TRUE(kernels::gemv3_linear(1, f(q), wq_b.dw.data(), wq_b.scale(), false, M, HD, QL, 1, 128, 128,
                                        f(hb), s, pdl, op));
      ASSERT_TRUE(kernels::gemv3_linear(1, f(hb), wo_a.dw.data(), wo_a.scale(), false, M, OL, HD / OG, OG, 128,
                                        128, f(o), s, pdl, op));
      ASSERT_TRUE(kernels::gemv3_linear(1, f(o), wo_b.dw.data(), wo_b.scale(), false, M, H, OG * OL, 1, 128, 128,
                                        f(y), s, pdl, op));
    };
    auto read_all = [&]() {
      std::vector<std::vector<float>> r;
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
      for (const B& b : outs) r.push_back(host(*b.b, M * b.per_row));
      return r;
    };
    chain(false, 0);
    const std::vector<std::vector<float>> want = read_all();
    const std::string tag = " M=" + std::to_string(M) + " seed " + std::to_string(seed_);
    EXPECT_LE(worst(wq_a, xh, M, 1, sample_rows(QL, 256), want[0], 1.0), 1.0) << "wq_a" << tag;
    EXPECT_LE(worst(wkv, xh, M, 1, sample_rows(KV, 256), want[1], 1.0), 1.0) << "wkv" << tag;
    EXPECT_LE(worst(wq_b, want[0], M, 1, sample_rows(HD, 256), want[2], 1.0), 1.0) << "wq_b" << tag;
    EXPECT_LE(worst(wo_a, want[2], M, OG, sample_rows(OG * OL, 256), want[3], 1.0), 1.0) << "wo_a" << tag;
    EXPECT_LE(worst(wo_b, want[3], M, 1, sample_rows(H, 256), want[4], 1.0), 1.0) << "wo_b" << tag;
    const char* names[] = {"q (wq_a)", "kv (wkv)", "h (wq_b)", "o (wo_a)", "y (wo_b)"};
    int bad = 0;
    const int reps = M == 1 ? 40 : 16;
    for (int rep = 0; rep < reps && bad < 3; ++rep) {
      const int variant = rep % kNumVariants;
      chain(true, variant);
      const std::vector<std::vector<float>> got = read_all();
      for (size_t i = 0; i < got.size(); ++i)
        if (std::memcmp(got[i].data(), want[i].data(), got[i].size() * 4) != 0 && bad++ < 3)
          ADD_FAILURE() << names[i] << " differs from the plain chain at rep " << rep << " ("
                        << kVariantNames[variant] << ")" << tag;
    }
  }
  cudaStreamDestroy(s);
}

TEST_F(CudaGemvV3, BackendDispatchRunsTheSelectedKernel) {
  // CudaBackend::linear at M ≤ 8 runs v3 when DEEPINFER_GEMV_KERNEL selects it (auto, v1..v4),
  // else session 7's gemv_linear; linear_multi has linear's bits either way.
  kernels::Gemv3Options o;
  const bool v3 = kernels::gemv3_options_for(env().gemv_kernel.c_str(), &o);
  HostW a = make(1, 1024, 4096), b = make(1, 512, 4096), c = make(0, 256, 4096);
  auto weight = [](const HostW& h) {
    backend::Weight w;
    w.w = Tensor::borrow(const_cast<void*>(h.dw.data()), h.fmt == 0 ? DType::kBF16 : DType::kF8E4M3, {h.N, h.K});
    if (h.fmt != 0) {
      w.scale = Tensor::borrow(const_cast<void*>(h.ds.data()), DType::kF8E8M0,
                               {(h.N + 127) / 128, h.scols()});
      w.block_rows = w.block_cols = 128;
    }
    return w;
  };
  const backend::Weight wa = weight(a), wb = weight(b), wc = weight(c);
  const std::vector<float> x = randn(8 * 4096);
  DeviceBuffer dx = dev(x);
  for (int64_t M : {1, 2, 8}) {
    const Tensor xt = Tensor::borrow(dx.data(), DType::kF32, {M, 4096});
    std::vector<Tensor> single, multi;
    for (const backend::Weight* w : {&wa, &wb, &wc}) {
      single.push_back(std::move(gpu_->alloc(DType::kF32, {M, w->rows()})).value());
      multi.push_back(std::move(gpu_->alloc(DType::kF32, {M, w->rows()})).value());
      ASSERT_TRUE(gpu_->linear(xt, *w, single.back(), 1).ok());
    }
    const backend::Weight* ws[3] = {&wa, &wb, &wc};
    Tensor* os[3] = {&multi[0], &multi[1], &multi[2]};
    ASSERT_TRUE(gpu_->linear_multi(xt, ws, os).ok());
    ASSERT_TRUE(gpu_->synchronize().ok());
    const HostW* hs[3] = {&a, &b, &c};
    for (int j = 0; j < 3; ++j) {
      const bool takes = v3 && kernels::gemv3_dispatch_takes(o, hs[j]->kfmt(), hs[j]->N, hs[j]->K, 1);
      const std::vector<float> want = run(*hs[j], static_cast<const float*>(dx.data()), M, 1, !takes, o);
      const Tensor got = testing::to_host(single[j]), gm = testing::to_host(multi[j]);
      EXPECT_EQ(0, std::memcmp(got.raw(), want.data(), M * hs[j]->N * 4))
          << "linear " << j << " M " << M << " (DEEPINFER_GEMV_KERNEL=" << env().gemv_kernel << ")";
      EXPECT_EQ(0, std::memcmp(gm.raw(), want.data(), M * hs[j]->N * 4)) << "linear_multi " << j << " M " << M;
    }
  }
}

}  // namespace
}  // namespace deepinfer::cuda
