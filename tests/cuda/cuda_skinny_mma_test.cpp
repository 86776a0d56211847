// Session 9: skinny_mma (skinny_mma.cuh — the small-M dense product on tensor cores, weight rows
// as the MMA's A operand, x as three 16-bit planes). Checks, with fresh random inputs (seed
// printed):
//  - at the V4-Flash decode shapes (wq_a, wkv, wq_b, wo_b, shared expert gate_up / down, indexer
//    wq_b, FP8 with 128×128 ue8m0 or f32 scales; compressor wkv and router gate in BF16; odd
//    shapes with partial m16 tiles) for M = 16, 9, 8, 3, 2, 1: within a rigorous bound of a double
//    reference (relative to Σ|x·w|) and within the sum of both bounds of the GEMV (gemv_linear);
//    every row of an M-row call bitwise equal to the same row of the 16-row call (row 0 at M = 1
//    included), and x row 5 alone bitwise equal to row 5 of the 16-row call;
//  - two runs bitwise equal (determinism), variants tc1..tc3 (speed choices) bitwise equal to tc;
//    the bench-only cluster split (k split up to 64 over a cluster of CTAs) within the bound and
//    deterministic;
//  - skinny_takes, the dispatch's pick for tc (and tc1 taking everything);
//  - the BF16 head (129280 × 4096) at M = 1, 9, 16 on sampled rows;
//  - an e4m3 NaN code makes exactly its weight row NaN (every token), the rest unchanged;
//  - a table of projections (one x split kernel, one product launch) bitwise equal to each alone
//    (at M = 1 "alone" is the fused split: every CTA splits x into shared memory — the same bits);
//  - layouts it does not implement are refused;
//  - CudaBackend::linear and linear_multi with DEEPINFER_GEMV_KERNEL=tc (set by this binary before
//    the environment is first read): the products skinny_takes bitwise equal to the kernel called
//    directly, the others to the GEMV (M <= 8), linear_multi = linear everywhere.
//  - grouped products (session 15, skinny_grouped_linear; CudaSkinnyGrouped below).
// Bound: |got − exact| ≤ (2·steps + S + 8)·2^-24·Σ|x·w|, steps = the longest chain of f32 sums of
// an element (e4m3: 8 k-steps of a block + K/128 block fma's; bf16: K/16 k-steps), S the k-slices.
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
#include "backend/cuda/skinny_mma.h"
#include "common/dtypes.h"
#include "common/env.h"
#include "device_pair.h"
#include "host_weights.h"
#include "memset_sync.h"

namespace deepinfer::cuda {
namespace {

// Before main (and so before the first env()): the backend test below needs the tc selector.
const int kSetSelector = [] {
  setenv("DEEPINFER_GEMV_KERNEL", "tc", 1);
  return 0;
}();

using backend::Tensor;

using testing::HostW;

kernels::SkinnyOptions variant(int v) {
  kernels::SkinnyOptions o;
  o.variant = v;
  return o;
}

class CudaSkinnyMma : public testing::SeededGpuTest {
 protected:
  HostW make(int fmt, int64_t N, int64_t K) { return testing::make_host_weight(fmt, N, K, mix_, rng_); }
  static void upload(HostW& h) { testing::upload_host_weight(h); }
  // Normal entries with a few rows of other magnitudes (the per-row power-of-two factor).
  std::vector<float> make_x(int64_t M, int64_t K) { return testing::mixed_rows(M, K, rng_); }
  static DeviceBuffer dev(const std::vector<float>& v) { return testing::upload_floats(v); }
  static std::vector<float> host(const DeviceBuffer& b, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    EXPECT_EQ(cudaMemcpy(v.data(), b.data(), n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  // out [M, N] by skinny_linear (NaN-filled first).
  std::vector<float> run(const HostW& h, const float* dx, int64_t M, const kernels::SkinnyOptions& o = {},
                         bool pdl = true) {
    DeviceBuffer out = std::move(DeviceBuffer::allocate(std::max<int64_t>(M * h.N, 4) * 4)).value();
    DeviceBuffer ws = std::move(DeviceBuffer::allocate(kernels::skinny_workspace_bytes(M, h.K))).value();
    EXPECT_EQ(testing::memset_sync(out.data(), 0xFF, M * h.N * 4), cudaSuccess);
    EXPECT_TRUE(kernels::skinny_linear(h.kfmt(), dx, h.dw.data(), h.scale(), h.f32(), M, h.N, h.K, h.br,
                                       h.fmt == 0 ? 1 : h.bc, static_cast<float*>(out.data()), ws.data(),
                                       nullptr, pdl, o));
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    return host(out, M * h.N);
  }
  // out [M, N] by the GEMV (gemv_linear, row-independent; run on ≤ 8 rows at a time).
  std::vector<float> run_gemv(const HostW& h, const float* dx, int64_t M) {
    DeviceBuffer out = std::move(DeviceBuffer::allocate(std::max<int64_t>(M * h.N, 4) * 4)).value();
    for (int64_t r0 = 0; r0 < M; r0 += 8) {
      const int64_t rows = std::min<int64_t>(8, M - r0);
      kernels::gemv_linear(h.kfmt(), dx + r0 * h.K, h.dw.data(), h.scale(), h.f32(), rows, h.N, h.K, 1,
                           h.br, h.fmt == 0 ? 1 : h.bc, static_cast<float*>(out.data()) + r0 * h.N, nullptr);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    return host(out, M * h.N);
  }
  // Exact sums and Σ|x·w| of rows `rows` for the first M rows of x (double), [rows][M].
  struct Ref {
    std::vector<int64_t> rows;
    std::vector<double> exact, mag;
    int64_t M = 0;
  };
  static Ref reference(const HostW& h, const std::vector<float>& x, int64_t M, std::vector<int64_t> rows) {
    Ref r;
    r.rows = std::move(rows);
    r.M = M;
    std::vector<double> wr(static_cast<size_t>(h.K));
    for (int64_t n : r.rows) {
      for (int64_t k = 0; k < h.K; ++k) wr[k] = h.deq(n, k);
      for (int64_t m = 0; m < M; ++m) {
        double s = 0, a = 0;
        for (int64_t k = 0; k < h.K; ++k) {
          const double p = double(x[m * h.K + k]) * wr[k];
          s += p;
          a += std::fabs(p);
        }
        r.exact.push_back(s);
        r.mag.push_back(a);
      }
    }
    return r;
  }
  // Bound factors (units of 2^-24·Σ|x·w|): skinny_mma's and the GEMV's (cuda_gemv_test's).
  static double skinny_factor(const HostW& h, const kernels::SkinnyOptions& o) {
    const double steps = h.fmt == 0 ? double(h.K) / 16 : 8 + double(h.K) / 128;
    return 2 * steps + kernels::skinny_split(h.kfmt(), h.N, h.K, o) + 8;
  }
  static double gemv_factor(const HostW& h) {
    const double E = h.fmt == 0 ? 8 : 16;
    return E + std::ceil(double(h.K) / (32 * E)) + 8;
  }
  // Worst |got − want| / (factor·2^-24·Σ|x·w|) over the reference's rows, tokens < M; want = the
  // exact sum, or `other`'s element.
  static double worst(const HostW& h, const Ref& r, int64_t M, const std::vector<float>& got, double factor,
                      const std::vector<float>* other = nullptr) {
    const double u = std::ldexp(1.0, -24);
    double w = 0;
    for (size_t i = 0; i < r.rows.size(); ++i) {
      const int64_t n = r.rows[i];
      for (int64_t m = 0; m < M; ++m) {
        const double g = got[m * h.N + n];
        const double want = other != nullptr ? double((*other)[m * h.N + n]) : r.exact[i * r.M + m];
        const double q = std::fabs(g - want) / (factor * u * r.mag[i * r.M + m] + 1e-300);
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
  static bool same(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * 4) == 0; }
};

struct Shape {
  const char* name;
  int fmt;
  int64_t N, K;
};

const std::vector<Shape>& v4_shapes() {
  static const std::vector<Shape> s = {
      {"wq_a", 1, 1024, 4096},          {"wkv", 1, 512, 4096},
      {"wq_b", 1, 32768, 1024},         {"wo_b", 1, 4096, 8192},
      {"shared gate_up", 1, 4096, 4096}, {"shared down", 1, 4096, 2048},
      {"indexer wq_b", 1, 8192, 1024},  {"wq_a f32 scales", 4, 1024, 4096},
      {"wq_b f32 scales", 4, 32768, 1024}, {"bf16 compressor wkv", 0, 1024, 4096},
      {"bf16 indexer compressor", 0, 256, 4096}, {"bf16 router gate", 0, 256, 4096},
      {"fp8 odd 129x1152", 1, 129, 1152}, {"fp8 f32 200x384", 4, 200, 384},
      {"bf16 odd 33x192", 0, 33, 192},  {"bf16 300x1088", 0, 300, 1088},
  };
  return s;
}

TEST_F(CudaSkinnyMma, MatchesDoubleAndGemvAtV4ShapesRowIndependent) {
  for (const Shape& sh : v4_shapes()) {
    HostW h = make(sh.fmt, sh.N, sh.K);
    const std::vector<float> x = make_x(16, sh.K);
    DeviceBuffer dx = dev(x);
    const float* px = static_cast<const float*>(dx.data());
    const Ref ref = reference(h, x, 16, sample_rows(sh.N, 300));
    const double fs = skinny_factor(h, {}), fg = gemv_factor(h);
    std::vector<float> full;
    for (int64_t M : {16, 9, 8, 3, 2, 1}) {
      const std::string what = std::string(sh.name) + " M=" + std::to_string(M) + " seed " + std::to_string(seed_);
      const std::vector<float> got = run(h, px, M);
      const double e = worst(h, ref, M, got, fs);
      EXPECT_LE(e, 1.0) << what << ": skinny vs double";
      if (M == 16 || M == 1) std::printf("%s: worst error %.3g of the bound\n", what.c_str(), e);
      const std::vector<float> old = run_gemv(h, px, M);
      EXPECT_LE(worst(h, ref, M, got, fs + fg, &old), 1.0) << what << ": skinny vs gemv";
      if (M == 16) full = got;
      else EXPECT_TRUE(same(got.data(), full.data(), M * sh.N)) << what << ": rows differ from the same rows at M = 16";
    }
    const std::vector<float> r5 = run(h, px + 5 * sh.K, 1);
    EXPECT_TRUE(same(r5.data(), full.data() + 5 * sh.N, sh.N)) << sh.name << ": x row 5 alone differs; seed " << seed_;
  }
}

TEST_F(CudaSkinnyMma, DeterministicAndVariants) {
  for (const Shape& sh : v4_shapes()) {
    HostW h = make(sh.fmt, sh.N, sh.K);
    const std::vector<float> x = make_x(16, sh.K);
    DeviceBuffer dx = dev(x);
    const float* px = static_cast<const float*>(dx.data());
    const Ref ref = reference(h, x, 16, sample_rows(sh.N, 100));
    for (int64_t M : {16, 3, 1}) {
      const std::string what = std::string(sh.name) + " M=" + std::to_string(M) + " seed " + std::to_string(seed_);
      const std::vector<float> a = run(h, px, M), b = run(h, px, M);
      EXPECT_TRUE(same(a.data(), b.data(), M * sh.N)) << what << ": two runs differ";
      const std::vector<float> nopdl = run(h, px, M, {}, false), v2 = run(h, px, M, variant(2));
      EXPECT_TRUE(same(a.data(), nopdl.data(), M * sh.N)) << what << ": without PDL differs";
      EXPECT_TRUE(same(a.data(), v2.data(), M * sh.N)) << what << ": tc2 differs from tc";
      {  // the bench-only cluster split (max_split 64): within the bound, deterministic
        kernels::SkinnyOptions oc;
        oc.max_split = 64;
        const std::vector<float> c1 = run(h, px, M, oc), c2 = run(h, px, M, oc);
        EXPECT_LE(worst(h, ref, M, c1, skinny_factor(h, oc)), 1.0) << what << ": cluster split vs double";
        EXPECT_TRUE(same(c1.data(), c2.data(), M * sh.N)) << what << ": cluster split, two runs differ";
      }
      for (int v : {1, 3}) {  // speed variants: tc's split, so tc's bits
        const std::vector<float> g = run(h, px, M, variant(v));
        EXPECT_LE(worst(h, ref, M, g, skinny_factor(h, variant(v))), 1.0) << what << ": tc" << v << " vs double";
        if (kernels::skinny_split(h.kfmt(), h.N, h.K, variant(v)) == kernels::skinny_split(h.kfmt(), h.N, h.K, {})) {
          EXPECT_TRUE(same(a.data(), g.data(), M * sh.N)) << what << ": tc" << v << " (same split) differs from tc";
        }
      }
    }
  }
}

TEST_F(CudaSkinnyMma, Bf16HeadOnSampledRows) {
  HostW h = make(0, 129280, 4096);
  const std::vector<float> x = make_x(16, 4096);
  DeviceBuffer dx = dev(x);
  const float* px = static_cast<const float*>(dx.data());
  const Ref ref = reference(h, x, 16, sample_rows(h.N, 400));
  std::vector<float> full;
  for (int64_t M : {16, 9, 1}) {
    const std::string what = "head M=" + std::to_string(M) + " seed " + std::to_string(seed_);
    const std::vector<float> got = run(h, px, M);
    const double e = worst(h, ref, M, got, skinny_factor(h, {}));
    EXPECT_LE(e, 1.0) << what << ": vs double";
    std::printf("%s: worst error %.3g of the bound\n", what.c_str(), e);
    const std::vector<float> old = run_gemv(h, px, M);
    EXPECT_LE(worst(h, ref, M, got, skinny_factor(h, {}) + gemv_factor(h), &old), 1.0) << what << ": vs gemv";
    if (M == 16) full = got;
    else EXPECT_TRUE(same(got.data(), full.data(), M * h.N)) << what << ": rows differ from M = 16";
  }
}

TEST_F(CudaSkinnyMma, NanCodeMakesExactlyItsRowNan) {
  HostW h = make(1, 1024, 4096);
  const std::vector<float> x = make_x(16, 4096);
  DeviceBuffer dx = dev(x);
  const float* px = static_cast<const float*>(dx.data());
  const std::vector<float> clean = run(h, px, 16);
  h.w[5 * h.K + 1000] = 0x7F;  // e4m3 NaN in row 5
  upload(h);
  const std::vector<float> got = run(h, px, 16);
  for (int64_t m = 0; m < 16; ++m)
    for (int64_t n = 0; n < h.N; ++n) {
      if (n == 5) {
        EXPECT_TRUE(std::isnan(got[m * h.N + n])) << "token " << m;
      } else {
        ASSERT_EQ(std::memcmp(&got[m * h.N + n], &clean[m * h.N + n], 4), 0) << "token " << m << " row " << n;
      }
    }
}

TEST_F(CudaSkinnyMma, TableOfProjectionsEqualsEachAlone) {
  // wq_a + wkv (the same split family), and the bf16 compressor pair.
  for (int fmt : {1, 0}) {
    std::vector<HostW> hs;
    if (fmt == 1) {
      hs.push_back(make(1, 1024, 4096));
      hs.push_back(make(1, 512, 4096));
    } else {
      hs.push_back(make(0, 1024, 4096));
      hs.push_back(make(0, 1024, 4096));
    }
    const std::vector<float> x = make_x(16, 4096);
    DeviceBuffer dx = dev(x);
    const float* px = static_cast<const float*>(dx.data());
    for (int64_t M : {1, 16}) {
      std::vector<kernels::SkinnyProjection> pr;
      std::vector<DeviceBuffer> outs;
      for (const HostW& h : hs) {
        ASSERT_EQ(kernels::skinny_cluster_size(fmt, h.N, h.K, {}), kernels::skinny_cluster_size(fmt, hs[0].N, h.K, {}));
        outs.push_back(std::move(DeviceBuffer::allocate(M * h.N * 4)).value());
        pr.push_back({h.dw.data(), h.scale(), static_cast<float*>(outs.back().data()), h.N});
      }
      DeviceBuffer ws = std::move(DeviceBuffer::allocate(kernels::skinny_workspace_bytes(M, 4096))).value();
      kernels::skinny_split_x(fmt, px, M, 4096, ws.data(), nullptr, true);
      ASSERT_TRUE(kernels::skinny_product(fmt, pr.data(), static_cast<int>(pr.size()), false, M, 4096, 128,
                                          ws.data(), nullptr, true, {}));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (size_t j = 0; j < hs.size(); ++j) {
        const std::vector<float> alone = run(hs[j], px, M);
        const std::vector<float> fused = host(outs[j], M * hs[j].N);
        EXPECT_TRUE(same(alone.data(), fused.data(), M * hs[j].N)) << "fmt " << fmt << " proj " << j << " M " << M;
      }
    }
  }
}

TEST_F(CudaSkinnyMma, RefusesLayoutsItDoesNotImplement) {
  DeviceBuffer b = std::move(DeviceBuffer::allocate(1 << 20)).value();
  const uint8_t* p = static_cast<const uint8_t*>(b.data());
  EXPECT_TRUE(kernels::skinny_supported(1, p, 1024, 4096, true, 128, 128));
  EXPECT_TRUE(kernels::skinny_supported(0, p, 256, 4096, false, 1, 1));
  EXPECT_FALSE(kernels::skinny_supported(1, p, 1024, 4000, true, 128, 128));  // K % 128
  EXPECT_FALSE(kernels::skinny_supported(1, p, 1024, 4096, true, 128, 64));   // block columns
  EXPECT_FALSE(kernels::skinny_supported(1, p, 1024, 4096, true, 8, 128));    // block rows
  EXPECT_FALSE(kernels::skinny_supported(1, p, 1024, 4096, false, 128, 128)); // unscaled e4m3
  EXPECT_FALSE(kernels::skinny_supported(0, p, 256, 4000, false, 1, 1));      // K % 64
  EXPECT_FALSE(kernels::skinny_supported(0, p + 8, 256, 4096, false, 1, 1));  // misaligned
  EXPECT_FALSE(kernels::skinny_supported(2, p, 256, 4096, true, 1, 32));      // FP4
  kernels::SkinnyOptions o;
  EXPECT_TRUE(kernels::skinny_options_for("tc3", &o));
  EXPECT_EQ(o.variant, 3);
  EXPECT_FALSE(kernels::skinny_options_for("v1", &o));
  EXPECT_TRUE(kernels::skinny_options_for("auto", &o));  // session 9's default: auto = tc
  EXPECT_EQ(o.variant, 0);
  EXPECT_FALSE(kernels::skinny_options_for("b", &o));     // session 8's auto
  // M out of 1..16: nothing launched.
  EXPECT_FALSE(kernels::skinny_linear(1, reinterpret_cast<const float*>(p), p, p, false, 17, 1024, 4096, 128, 128,
                                      reinterpret_cast<float*>(b.data()), b.data(), nullptr, false, {}));
}

TEST_F(CudaSkinnyMma, TakesTheMeasuredShapes) {
  const kernels::SkinnyOptions tc;
  // M <= 8 only; e4m3 >= 8 MiB at every M; smaller e4m3 from M = 3; bf16 >= 8 MiB at M 3..8.
  EXPECT_TRUE(kernels::skinny_takes(1, 32768, 1024, 1, tc));   // wq_b
  EXPECT_TRUE(kernels::skinny_takes(1, 4096, 2048, 1, tc));    // shared down, 8 MiB
  EXPECT_TRUE(kernels::skinny_takes(1, 4096, 8192, 8, tc));    // wo_b
  EXPECT_FALSE(kernels::skinny_takes(1, 4096, 8192, 9, tc));   // linear_tc_wa's range
  EXPECT_FALSE(kernels::skinny_takes(1, 1024, 4096, 2, tc));   // wq_a at M = 2
  EXPECT_TRUE(kernels::skinny_takes(1, 1024, 4096, 3, tc));
  EXPECT_FALSE(kernels::skinny_takes(1, 512, 4096, 16, tc));   // wkv at M = 16
  EXPECT_TRUE(kernels::skinny_takes(1, 512, 4096, 16, variant(1)));
  EXPECT_FALSE(kernels::skinny_takes(0, 129280, 4096, 1, tc)); // head at M = 1
  EXPECT_TRUE(kernels::skinny_takes(0, 129280, 4096, 8, tc));
  EXPECT_FALSE(kernels::skinny_takes(0, 129280, 4096, 9, tc));
  EXPECT_FALSE(kernels::skinny_takes(0, 256, 4096, 8, tc));    // router gate, 2 MiB
  EXPECT_FALSE(kernels::skinny_takes(1, 32768, 1024, 17, tc));
  EXPECT_TRUE(kernels::skinny_takes(0, 256, 4096, 1, variant(1)));  // tc1: everything
}

TEST_F(CudaSkinnyMma, BackendLinearAndLinearMultiRunIt) {
  ASSERT_EQ(env().gemv_kernel, "tc");
  kernels::SkinnyOptions tc;
  ASSERT_TRUE(kernels::skinny_options_for("tc", &tc));
  // 4 MiB e4m3 (taken at M 3..8), 8 MiB e4m3 (M <= 8), 8 MiB bf16 (M 3..8), 1 MiB e4m3 f32 scales.
  HostW a = make(1, 1024, 4096), b = make(1, 2048, 4096), c = make(0, 1024, 4096), d = make(4, 256, 4096);
  auto weight = [](const HostW& h) {
    backend::Weight w;
    w.w = Tensor::borrow(const_cast<void*>(h.dw.data()), h.fmt == 0 ? DType::kBF16 : DType::kF8E4M3, {h.N, h.K});
    if (h.fmt != 0) {
      w.scale = Tensor::borrow(const_cast<void*>(h.ds.data()), h.fmt == 4 ? DType::kF32 : DType::kF8E8M0,
                               {(h.N + 127) / 128, h.scols()});
      w.block_rows = w.block_cols = 128;
    }
    return w;
  };
  const backend::Weight wa = weight(a), wb = weight(b), wc = weight(c), wd = weight(d);
  const std::vector<float> x = make_x(16, 4096);
  DeviceBuffer dx = dev(x);
  int taken = 0;
  for (int64_t M : {1, 2, 3, 8, 9, 16}) {
    const Tensor xt = Tensor::borrow(dx.data(), DType::kF32, {M, 4096});
    std::vector<Tensor> single, multi;
    const backend::Weight* ws[4] = {&wa, &wb, &wc, &wd};
    for (const backend::Weight* w : ws) {
      single.push_back(std::move(gpu_->alloc(DType::kF32, {M, w->rows()})).value());
      multi.push_back(std::move(gpu_->alloc(DType::kF32, {M, w->rows()})).value());
      ASSERT_TRUE(gpu_->linear(xt, *w, single.back(), 1).ok());
    }
    Tensor* os[4] = {&multi[0], &multi[1], &multi[2], &multi[3]};
    ASSERT_TRUE(gpu_->linear_multi(xt, ws, os).ok());
    ASSERT_TRUE(gpu_->synchronize().ok());
    const HostW* hs[4] = {&a, &b, &c, &d};
    for (int j = 0; j < 4; ++j) {
      const Tensor got = testing::to_host(single[j]), gm = testing::to_host(multi[j]);
      const float* g = static_cast<const float*>(got.raw());
      EXPECT_TRUE(same(static_cast<const float*>(gm.raw()), g, M * hs[j]->N)) << "linear_multi != linear, " << j << " M " << M;
      if (kernels::skinny_takes(hs[j]->kfmt(), hs[j]->N, hs[j]->K, M, tc)) {
        ++taken;
        const std::vector<float> want = run(*hs[j], static_cast<const float*>(dx.data()), M);
        EXPECT_TRUE(same(g, want.data(), M * hs[j]->N)) << "linear " << j << " M " << M << ": not skinny's bits";
      } else if (M <= 8) {
        const Ref ref = reference(*hs[j], x, M, sample_rows(hs[j]->N, 50));
        std::vector<float> gv(g, g + M * hs[j]->N);
        EXPECT_LE(worst(*hs[j], ref, M, gv, gemv_factor(*hs[j])), 1.0) << "linear " << j << " M " << M << " (GEMV)";
      }
    }
  }
  EXPECT_GE(taken, 10);
}

// Session 15: grouped products (skinny_grouped_linear; V4's wo_a is 8 groups of 1024 × 4096
// e4m3): group j of out = x's columns [j·K, j·K + K) times weight rows [j·N, j·N + N). Within the
// bound of a double reference at M = 8, 3, 2, 1; rows of an M-row call bitwise the rows of the
// 8-row call (M ≤ 2 is the fused split, M ≥ 3 the split kernel: the same bits); x row 5 alone
// bitwise row 5; two runs, no PDL and tc3 bitwise equal; CudaBackend::linear with groups runs it
// (bitwise) where skinny_takes takes the whole weight, and stays within the GEMV's bound elsewhere.
struct GroupedShape {
  const char* name;
  int fmt;
  int64_t G, N, K;
};

class CudaSkinnyGrouped : public CudaSkinnyMma {
 protected:
  std::vector<float> run_grouped(const HostW& h, const GroupedShape& g, const float* dx, int64_t M,
                                 const kernels::SkinnyOptions& o = {}, bool pdl = true) {
    DeviceBuffer out = std::move(DeviceBuffer::allocate(M * h.N * 4)).value();
    const size_t wsb = kernels::skinny_grouped_workspace_bytes(h.kfmt(), g.G, g.N, M, g.K, o);
    DeviceBuffer ws = std::move(DeviceBuffer::allocate(std::max<size_t>(wsb, 16))).value();
    EXPECT_EQ(testing::memset_sync(out.data(), 0xFF, M * h.N * 4), cudaSuccess);
    EXPECT_TRUE(kernels::skinny_grouped_linear(h.kfmt(), dx, h.dw.data(), h.scale(), h.f32(), M,
                                               g.G, g.N, g.K, h.br, h.fmt == 0 ? 1 : h.bc,
                                               static_cast<float*>(out.data()),
                                               wsb > 0 ? ws.data() : nullptr, nullptr, pdl, o));
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    return host(out, M * h.N);
  }
  // Worst |got − exact| / (factor·2^-24·Σ|x·w|) over sampled outputs of every group, tokens < M;
  // x [rows][G·K].
  static double worst_grouped(const HostW& h, const GroupedShape& g, const std::vector<float>& x,
                              int64_t M, const std::vector<float>& got, double factor) {
    const double u = std::ldexp(1.0, -24);
    double w = 0;
    for (int64_t n : sample_rows(h.N, 200)) {
      const int64_t j = n / g.N;
      for (int64_t m = 0; m < M; ++m) {
        double s = 0, a = 0;
        for (int64_t k = 0; k < g.K; ++k) {
          const double p = double(x[m * g.G * g.K + j * g.K + k]) * h.deq(n, k);
          s += p;
          a += std::fabs(p);
        }
        const double q = std::fabs(double(got[m * h.N + n]) - s) / (factor * u * a + 1e-300);
        if (!(q <= w)) w = std::isnan(q) ? 1e30 : q;
      }
    }
    return w;
  }
  static const std::vector<GroupedShape>& shapes() {
    static const std::vector<GroupedShape> s = {
        {"wo_a 8x1024x4096", 1, 8, 1024, 4096},
        {"f32 scales 4x256x512", 4, 4, 256, 512},
        {"bf16 3x40x192", 0, 3, 40, 192},
        {"e4m3 2x128x128", 1, 2, 128, 128},
    };
    return s;
  }
};

TEST_F(CudaSkinnyGrouped, MatchesDoubleRowIndependentDeterministic) {
  for (const GroupedShape& g : shapes()) {
    HostW h = make(g.fmt, g.G * g.N, g.K);
    ASSERT_TRUE(kernels::skinny_grouped_supported(h.kfmt(), h.dw.data(), g.G, g.N, g.K, g.fmt != 0,
                                                  h.br, g.fmt == 0 ? 1 : h.bc))
        << g.name;
    const std::vector<float> x =
        make_x(8 * g.G, g.K);  // [8][G·K]: rows of other magnitudes per group
    DeviceBuffer dx = dev(x);
    const float* px = static_cast<const float*>(dx.data());
    const double steps = g.fmt == 0 ? double(g.K) / 16 : 8 + double(g.K) / 128;
    const double factor = 2 * steps + kernels::skinny_split(h.kfmt(), g.G * g.N, g.K, {}) + 8;
    std::vector<float> full;
    for (int64_t M : {8, 3, 2, 1}) {
      const std::string what =
          std::string(g.name) + " M=" + std::to_string(M) + " seed " + std::to_string(seed_);
      const std::vector<float> got = run_grouped(h, g, px, M);
      const double e = worst_grouped(h, g, x, M, got, factor);
      EXPECT_LE(e, 1.0) << what << ": vs double";
      if (M == 8 || M == 1) std::printf("%s: worst error %.3g of the bound\n", what.c_str(), e);
      if (M == 8)
        full = got;
      else
        EXPECT_TRUE(same(got.data(), full.data(), M * h.N))
            << what << ": rows differ from the 8-row call";
      const std::vector<float> again = run_grouped(h, g, px, M),
                               nopdl = run_grouped(h, g, px, M, {}, false),
                               tc3 = run_grouped(h, g, px, M, variant(3));
      EXPECT_TRUE(same(got.data(), again.data(), M * h.N)) << what << ": two runs differ";
      EXPECT_TRUE(same(got.data(), nopdl.data(), M * h.N)) << what << ": without PDL differs";
      EXPECT_TRUE(same(got.data(), tc3.data(), M * h.N)) << what << ": tc3 differs";
    }
    const std::vector<float> r5 = run_grouped(h, g, px + 5 * g.G * g.K, 1);
    EXPECT_TRUE(same(r5.data(), full.data() + 5 * h.N, h.N))
        << g.name << ": x row 5 alone differs; seed " << seed_;
  }
}

TEST_F(CudaSkinnyGrouped, RefusesWhatItDoesNotImplement) {
  DeviceBuffer b = std::move(DeviceBuffer::allocate(1 << 20)).value();
  const uint8_t* p = static_cast<const uint8_t*>(b.data());
  EXPECT_TRUE(kernels::skinny_grouped_supported(1, p, 8, 128, 512, true, 128, 128));
  EXPECT_FALSE(kernels::skinny_grouped_supported(1, p, 8, 64, 512, true, 128,
                                                 128));  // group off a block row
  EXPECT_FALSE(
      kernels::skinny_grouped_supported(1, p, 9, 128, 512, true, 128, 128));  // more than 8 groups
  EXPECT_FALSE(
      kernels::skinny_grouped_supported(1, p, 1, 128, 512, true, 128, 128));        // not grouped
  EXPECT_FALSE(kernels::skinny_grouped_supported(2, p, 8, 128, 512, true, 1, 32));  // FP4
  EXPECT_TRUE(kernels::skinny_grouped_supported(0, p, 3, 40, 192, false, 1, 1));
  EXPECT_FALSE(kernels::skinny_grouped_linear(
      1, reinterpret_cast<const float*>(p), p, p, false, 17, 8, 128, 512, 128, 128,
      reinterpret_cast<float*>(b.data()), b.data(), nullptr, false, {}));
}

TEST_F(CudaSkinnyGrouped, BackendGroupedLinearRunsIt) {
  ASSERT_EQ(env().gemv_kernel, "tc");
  kernels::SkinnyOptions tc;
  ASSERT_TRUE(kernels::skinny_options_for("tc", &tc));
  int taken = 0;
  for (const GroupedShape& g : shapes()) {
    HostW h = make(g.fmt, g.G * g.N, g.K);
    backend::Weight w;
    w.w = Tensor::borrow(const_cast<void*>(h.dw.data()), h.fmt == 0 ? DType::kBF16 : DType::kF8E4M3,
                         {h.N, h.K});
    if (h.fmt != 0) {
      w.scale =
          Tensor::borrow(const_cast<void*>(h.ds.data()), h.fmt == 4 ? DType::kF32 : DType::kF8E8M0,
                         {(h.N + 127) / 128, h.scols()});
      w.block_rows = w.block_cols = 128;
    }
    const std::vector<float> x = make_x(16, g.G * g.K);
    DeviceBuffer dx = dev(x);
    for (int64_t M : {1, 2, 3, 8, 9, 16}) {
      const std::string what =
          std::string(g.name) + " M=" + std::to_string(M) + " seed " + std::to_string(seed_);
      const Tensor xt = Tensor::borrow(dx.data(), DType::kF32, {M, g.G * g.K});
      Tensor out = std::move(gpu_->alloc(DType::kF32, {M, h.N})).value();
      ASSERT_TRUE(gpu_->linear(xt, w, out, g.G).ok()) << what;
      ASSERT_TRUE(gpu_->synchronize().ok());
      const Tensor got = testing::to_host(out);
      const float* gp = static_cast<const float*>(got.raw());
      const std::vector<float> gv(gp, gp + M * h.N);
      if (kernels::skinny_takes(h.kfmt(), h.N, g.K, M, tc)) {
        ++taken;
        const std::vector<float> want = run_grouped(h, g, static_cast<const float*>(dx.data()), M);
        EXPECT_TRUE(same(gv.data(), want.data(), M * h.N)) << what << ": not skinny's bits";
      } else {  // the GEMV (M <= 8) or the tensor-core kernels: within the GEMV's or linear_tc's
                // bound
        const double steps = g.fmt == 0 ? double(g.K) / 16 : 8 + double(g.K) / 128;
        EXPECT_LE(worst_grouped(h, g, x, M, gv, 2 * steps + 16 + gemv_factor(h)), 1.0) << what;
      }
    }
  }
  EXPECT_GE(taken, 6);
}

}  // namespace
}  // namespace deepinfer::cuda
