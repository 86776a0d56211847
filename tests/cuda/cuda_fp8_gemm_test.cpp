// FP8 block-scaled GEMM on the GPU (backend/cuda/fp8_gemm.h): the activation quantizer bit-exact
// against a host implementation (amax, DeepSeek's scale, e4m3 round-to-nearest-even from
// common/dtypes.h), and the cuBLASLt product against a double-precision host reference computed
// from the SAME quantized activations the kernel produced (downloaded codes and scales) and the
// weights decoded on the host — so the error measured is the GEMM's alone.
//
// Error model of the product (what the bounds below come from). Every e4m3×e4m3 product is exact
// (4+4 significant bits). cuBLASLt's Hopper block-scaled path runs the FP8 MMA over one 128-element
// k-block, then multiplies the partial sum by that block's two f32 scales and adds it to an f32
// accumulator: it has to, the scales change from block to block, and the FP8 MMA takes no scale.
// Inside the block the FP8 MMA accumulates with reduced precision (Hopper: e8m13 / "FP22", operands
// aligned to the largest exponent and truncated: DeepSeek-V3 report §3.3.2 "around 14 bits";
// Khattak & Mikaitis, arXiv:2512.07004, bit-accurate H100 models; cublasLt.h on
// CUBLASLT_MATMUL_DESC_FAST_ACCUM, off here: "intermediate results will ... periodically be
// promoted to a higher precision"): an MMA step over c products loses < 1 unit of
// 2^-13 · max|operand| on each of its c + 1 operands (products and running sum, all ≤ A_b), and a
// block takes 128/c steps, so for any chunking c ≥ 1
//   |err_block| < (128/c)·(c + 1) · 2^-13 · A_b ≤ 2^-5 · A_b,   A_b = Σ_{k∈b} |q_x q_w|  (hard bound)
// and the f32 sum of the L scaled blocks adds at most (L−1)·2^-24 · Σ_b |s_x s_w P_b|.
// 1. Exact test: dyadic data built so that every in-block partial sum is a multiple of 128 below
//    2^17 (needs only 11 significant bits < 14) and every scale a power of two: the MMA is exact and
//    only the f32 sum over blocks rounds → bound 2·L·2^-24·Σ|terms| (~1e-6 relative). Any wrong
//    scale layout, transposition, group offset or tail handling shows up as O(1) errors.
// 2. Random test: normal activations at mixed magnitudes, random e4m3 weights, ue8m0 or f32 scales:
//    every element within the hard bound above, and the mean error relative to Σ_b|s_x s_w|A_b
//    ≤ 2^-11 (truncation errors of random-signed products add like a random walk: ~2^-13 expected;
//    the test prints the measured value per shape).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/runtime.h"
#include "common/dtypes.h"
#include "memset_sync.h"

namespace deepinfer::cuda {
namespace {

using backend::Shape;
using backend::Tensor;
using backend::Weight;

DeviceBuffer upload(const void* data, uint64_t bytes) {
  auto b = DeviceBuffer::allocate(std::max<uint64_t>(bytes, 16));
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(cudaMemcpy(b->data(), data, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  return std::move(b).value();
}

template <typename T>
std::vector<T> download(const void* p, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  EXPECT_EQ(cudaMemcpy(v.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// One product: x [M, G·K] f32, w [G·N, K] e4m3 codes, block scales [ceil(G·N/128), K/128].
struct Problem {
  int64_t M = 0, N = 0, K = 0, G = 1;
  std::vector<float> x;
  std::vector<uint8_t> w;
  std::vector<uint8_t> scale_u8;  // ue8m0 (scale_f32 = false)
  std::vector<float> scale_f32;   // f32 (scale_f32 = true)
  bool f32_scales = false;
  int64_t L() const { return K / 128; }
  int64_t row_blocks() const { return (G * N + 127) / 128; }
  // Scale at flat index i of the stored [ceil(G·N/128), L] table.
  float w_scale(int64_t i) const { return f32_scales ? scale_f32[i] : ue8m0_to_f32(scale_u8[i]); }
};

// What the device produced: out, and the quantized activations with their scales.
struct Result {
  Fp8GemmPlan plan;
  std::vector<float> out;     // [M, G·N]
  std::vector<uint8_t> q;     // [q_rows, G·K]
  std::vector<float> act_s;   // plan.act_scale_index
};

class CudaFp8Gemm : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    std::printf("[cuda_fp8_gemm_test] seed %u\n", seed_);
    auto s = Stream::create();
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    stream_ = std::make_unique<Stream>(std::move(s).value());
  }

  // Normal activations, each 1×128 group at its own magnitude 2^[-8, 8]; one all-zero group per
  // row 0 (the 1e-4 amax floor). Weights: any non-NaN e4m3 code; scales ue8m0 2^[-9, -3] or f32.
  Problem random_problem(int64_t M, int64_t N, int64_t K, int64_t G, bool f32_scales) {
    Problem p;
    p.M = M, p.N = N, p.K = K, p.G = G;
    p.f32_scales = f32_scales;
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_int_distribution<int> mag(-8, 8), code(0, 255), ex(118, 124);
    std::uniform_real_distribution<float> man(1.f, 2.f);
    p.x.resize(M * G * K);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t b = 0; b < G * K / 128; ++b) {
        const float s = std::ldexp(1.f, mag(rng_));
        for (int64_t k = 0; k < 128; ++k)
          p.x[m * G * K + b * 128 + k] = (m == 0 && b == 1) ? 0.f : nd(rng_) * s;
      }
    }
    p.w.resize(G * N * K);
    for (auto& c : p.w) {
      c = static_cast<uint8_t>(code(rng_));
      if ((c & 0x7F) == 0x7F) c ^= 1;  // no NaN codes
    }
    const int64_t ns = p.row_blocks() * p.L();
    p.scale_u8.resize(ns);
    p.scale_f32.resize(ns);
    for (int64_t i = 0; i < ns; ++i) {
      p.scale_u8[i] = static_cast<uint8_t>(ex(rng_));
      p.scale_f32[i] = ue8m0_to_f32(p.scale_u8[i]) * man(rng_);
    }
    return p;
  }

  // Dyadic data (exact test): x = n·2^e, n ∈ [-2, 2] with one ±2 per group (so the pow2 scale is
  // 2^(e-7) and every code is 128·n ∈ {0, ±128, ±256}), e per group in [-6, 6]; weights are the
  // integers [-4, 4]; ue8m0 scales 2^[-7, 3].
  Problem dyadic_problem(int64_t M, int64_t N, int64_t K, int64_t G) {
    Problem p;
    p.M = M, p.N = N, p.K = K, p.G = G;
    std::uniform_int_distribution<int> n(-2, 2), e(-6, 6), wi(-4, 4), ex(120, 130), pos(0, 127),
        sign(0, 1);
    p.x.resize(M * G * K);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t b = 0; b < G * K / 128; ++b) {
        const int ee = e(rng_);
        const int at = pos(rng_);
        for (int64_t k = 0; k < 128; ++k) {
          const int v = k == at ? (sign(rng_) ? 2 : -2) : n(rng_);
          p.x[m * G * K + b * 128 + k] = std::ldexp(static_cast<float>(v), ee);
        }
      }
    }
    p.w.resize(G * N * K);
    for (auto& c : p.w) c = f32_to_e4m3(static_cast<float>(wi(rng_)));
    p.scale_u8.resize(p.row_blocks() * p.L());
    for (auto& s : p.scale_u8) s = static_cast<uint8_t>(ex(rng_));
    return p;
  }

  Result run(Fp8Gemm& gemm, const Problem& p) {
    Result r;
    auto plan = plan_fp8_gemm(p.M, p.N, p.K, p.G);
    EXPECT_TRUE(plan.ok()) << plan.status().to_string();
    r.plan = *plan;
    DeviceBuffer x = upload(p.x.data(), 4 * p.x.size());
    DeviceBuffer w = upload(p.w.data(), p.w.size());
    DeviceBuffer s = p.f32_scales ? upload(p.scale_f32.data(), 4 * p.scale_f32.size())
                                  : upload(p.scale_u8.data(), p.scale_u8.size());
    auto out = DeviceBuffer::allocate(4 * p.M * p.G * p.N);
    EXPECT_TRUE(out.ok());
    const Status st = gemm.gemm(static_cast<const float*>(x.data()), p.M,
                                static_cast<const uint8_t*>(w.data()), s.data(), p.f32_scales, p.N,
                                p.K, p.G, static_cast<float*>(out->data()), stream_->get());
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(stream_->synchronize().ok());
    r.out = download<float>(out->data(), p.M * p.G * p.N);
    r.q = download<uint8_t>(gemm.quantized_x(), r.plan.q_rows * p.G * p.K);
    r.act_s = download<float>(gemm.act_scales(), r.plan.act_scale_floats);
    return r;
  }

  // The quantizer, element by element, against the host: amax over the group, s = max(amax,
  // 1e-4)/448 (pow2: ue8m0-ceil of it via common/dtypes.h), code = e4m3_rne_saturating(x / s).
  void check_quantizer(const Problem& p, const Result& r, bool pow2) {
    const int64_t GK = p.G * p.K, GL = p.G * p.L();
    int64_t bad = 0;
    for (int64_t m = 0; m < r.plan.q_rows; ++m) {
      for (int64_t b = 0; b < GL; ++b) {
        const float got_s = r.act_s[r.plan.act_scale_index(m, b)];
        if (m >= p.M) {  // padding rows: zero codes and zero scales
          EXPECT_EQ(got_s, 0.f) << "padding row " << m;
          for (int64_t k = 0; k < 128; ++k) EXPECT_EQ(r.q[m * GK + b * 128 + k], 0) << "padding row " << m;
          continue;
        }
        float amax = 0.f;
        for (int64_t k = 0; k < 128; ++k) amax = std::max(amax, std::fabs(p.x[m * GK + b * 128 + k]));
        float s = std::max(amax, 1e-4f) / 448.0f;
        if (pow2) s = ue8m0_to_f32(f32_to_ue8m0_ceil(s));
        if (got_s != s && bad++ < 5)
          ADD_FAILURE() << "scale m=" << m << " b=" << b << ": got " << got_s << " want " << s
                        << " (seed " << seed_ << ")";
        for (int64_t k = 0; k < 128; ++k) {
          const int64_t i = m * GK + b * 128 + k;
          const uint8_t want = f32_to_e4m3(p.x[i] / s, /*saturate=*/true);
          const bool both_zero = (r.q[i] & 0x7F) == 0 && (want & 0x7F) == 0;  // ±0: same value
          if (r.q[i] != want && !both_zero && bad++ < 5)
            ADD_FAILURE() << "code m=" << m << " k=" << b * 128 + k << ": x " << p.x[i] << " / s " << s
                          << " → got 0x" << std::hex << int(r.q[i]) << " want 0x" << int(want)
                          << std::dec << " (seed " << seed_ << ")";
        }
      }
    }
    EXPECT_EQ(bad, 0) << "quantizer mismatches (seed " << seed_ << ")";
  }

  // Double-precision reference from the device's own quantized activations; per element also
  // Σ_b |s_x s_w| A_b (abs_prod) and Σ_b |s_x s_w P_b| (abs_term). `act_idx` / `w_idx` give the
  // scale positions (the plan's layouts; alternatives only to diagnose a failure).
  template <typename ActIdx, typename WIdx>
  void reference(const Problem& p, const Result& r, ActIdx act_idx, WIdx w_idx, std::vector<double>& ref,
                 std::vector<double>& abs_prod, std::vector<double>& abs_term) const {
    const int64_t GK = p.G * p.K, GN = p.G * p.N, L = p.L();
    std::vector<double> qf(p.M * GK), wf(GN * p.K);
    for (int64_t i = 0; i < p.M * GK; ++i) qf[i] = e4m3_to_f32(r.q[i]);
    for (int64_t i = 0; i < GN * p.K; ++i) wf[i] = e4m3_to_f32(p.w[i]);
    ref.assign(p.M * GN, 0.0);
    abs_prod.assign(p.M * GN, 0.0);
    abs_term.assign(p.M * GN, 0.0);
    for (int64_t m = 0; m < p.M; ++m) {
      for (int64_t c = 0; c < GN; ++c) {
        const int64_t g = c / p.N;
        double acc = 0, ap = 0, at = 0;
        for (int64_t b = 0; b < L; ++b) {
          const double* xq = &qf[m * GK + g * p.K + b * 128];
          const double* wq = &wf[c * p.K + b * 128];
          double P = 0, A = 0;
          for (int k = 0; k < 128; ++k) {
            P += xq[k] * wq[k];
            A += std::fabs(xq[k] * wq[k]);
          }
          const double s = double(r.act_s[act_idx(m, g * L + b)]) * double(p.w_scale(w_idx(c / 128, b)));
          acc += s * P;
          ap += std::fabs(s) * A;
          at += std::fabs(s * P);
        }
        ref[m * GN + c] = acc;
        abs_prod[m * GN + c] = ap;
        abs_term[m * GN + c] = at;
      }
    }
  }

  void check_exact(const Problem& p, const Result& r) {
    std::vector<double> ref, ap, at;
    auto act_idx = [&](int64_t m, int64_t b) { return r.plan.act_scale_index(m, b); };
    auto w_idx = [&](int64_t q, int64_t b) { return q * p.L() + b; };
    reference(p, r, act_idx, w_idx, ref, ap, at);
    const double u = std::ldexp(1.0, -24);
    double worst = 0;
    int64_t wi = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double tol = 2.0 * p.L() * u * at[i];
      const double e = std::fabs(double(r.out[i]) - ref[i]);
      const double ratio = std::isfinite(e) ? e / std::max(tol, 1e-300) : HUGE_VAL;  // NaN fails
      if (!(e <= tol) && ratio > worst) worst = ratio, wi = static_cast<int64_t>(i);
    }
    if (worst > 0) {
      const int64_t GN = p.G * p.N;
      ADD_FAILURE() << "M=" << p.M << " N=" << p.N << " K=" << p.K << " G=" << p.G << ": worst element ["
                    << wi / GN << ", " << wi % GN << "] got " << r.out[wi] << " want " << ref[wi]
                    << " (bound " << 2.0 * p.L() * u * at[wi] << ", seed " << seed_ << ")";
      diagnose_layout(p, r);
    }
  }

  // On failure: does the output match the other reading of the activation-scale buffer (K-major
  // per token instead of token-major)? Points the fix at fp8_gemm_plan.h.
  void diagnose_layout(const Problem& p, const Result& r) {
    if (r.plan.parts != 1) return;
    const int64_t GL = p.G * p.L();
    auto act_idx = [&](int64_t m, int64_t b) { return m * GL + b; };
    auto w_idx = [&](int64_t q, int64_t b) { return q * p.L() + b; };
    std::vector<double> ref, ap, at;
    reference(p, r, act_idx, w_idx, ref, ap, at);
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      worst = std::max(worst, std::fabs(double(r.out[i]) - ref[i]) / std::max(at[i], 1e-300));
    std::printf("[diagnose] reading activation scales K-major per token instead: worst relative "
                "error %.3g (≈1e-7 means cuBLASLt wants that layout)\n", worst);
  }

  void check_bounded(const Problem& p, const Result& r) {
    std::vector<double> ref, ap, at;
    auto act_idx = [&](int64_t m, int64_t b) { return r.plan.act_scale_index(m, b); };
    auto w_idx = [&](int64_t q, int64_t b) { return q * p.L() + b; };
    reference(p, r, act_idx, w_idx, ref, ap, at);
    const double u = std::ldexp(1.0, -24), hard = std::ldexp(1.0, -5);
    double worst = 0, sum_rel = 0;
    int64_t wi = 0, counted = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double e = std::fabs(double(r.out[i]) - ref[i]);
      const double tol = hard * ap[i] + 2.0 * p.L() * u * at[i];
      const double ratio = std::isfinite(e) ? e / std::max(tol, 1e-300) : HUGE_VAL;  // NaN fails
      if (ratio > worst) worst = ratio, wi = static_cast<int64_t>(i);
      if (ap[i] > 0) sum_rel += e / ap[i], ++counted;
    }
    const int64_t GN = p.G * p.N;
    EXPECT_LE(worst, 1.0) << "M=" << p.M << " N=" << p.N << " K=" << p.K << " G=" << p.G
                          << ": worst element [" << wi / GN << ", " << wi % GN << "] got " << r.out[wi]
                          << " want " << ref[wi] << " (seed " << seed_ << ")";
    const double mean_rel = counted ? sum_rel / counted : 0;
    EXPECT_LE(mean_rel, std::ldexp(1.0, -11)) << "mean |err| / Σ|s·q_x·q_w| (seed " << seed_ << ")";
    std::printf("  M=%lld N=%lld K=%lld G=%lld %s scales: mean rel err %.3g (2^%.1f), worst/bound %.3g\n",
                (long long)p.M, (long long)p.N, (long long)p.K, (long long)p.G,
                p.f32_scales ? "f32" : "ue8m0", mean_rel, mean_rel > 0 ? std::log2(mean_rel) : -999.0, worst);
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<Stream> stream_;
};

const int64_t kMs[] = {1, 7, 128, 300, 2048};

TEST_F(CudaFp8Gemm, QuantizerIsBitExactWithTheHost) {
  for (bool pow2 : {false, true}) {
    auto gemm = Fp8Gemm::create({.pow2_scales = pow2});
    ASSERT_TRUE(gemm.ok()) << gemm.status().to_string();
    for (int64_t M : kMs) {
      const Problem p = random_problem(M, 128, 384, 2, false);
      const Result r = run(**gemm, p);
      check_quantizer(p, r, pow2);
    }
  }
}

TEST_F(CudaFp8Gemm, ExactOnDyadicDataEveryScaleAndTail) {
  auto gemm = Fp8Gemm::create({.pow2_scales = true});
  ASSERT_TRUE(gemm.ok()) << gemm.status().to_string();
  for (int64_t M : kMs) {
    // N = 320: not a multiple of 128 (a partial last row block of 64); K = 640: L = 5, L4 = 8
    // (padded weight-scale columns).
    const Problem p = dyadic_problem(M, 320, 640, 1);
    const Result r = run(**gemm, p);
    check_quantizer(p, r, true);
    check_exact(p, r);
    // The grouped o-projection shape in small: 4 groups, one call per group.
    const Problem g = dyadic_problem(M, 128, 256, 4);
    const Result rg = run(**gemm, g);
    check_exact(g, rg);
  }
}

TEST_F(CudaFp8Gemm, RandomDataWithinTheFp8AccumulationBound) {
  auto gemm = Fp8Gemm::create();
  ASSERT_TRUE(gemm.ok()) << gemm.status().to_string();
  for (int64_t M : kMs) {
    for (bool f32_scales : {false, true}) {
      const Problem p = random_problem(M, 256, 1024, 1, f32_scales);
      check_bounded(p, run(**gemm, p));
    }
    const Problem g = random_problem(M, 128, 512, 2, false);
    check_bounded(g, run(**gemm, g));
  }
}

TEST_F(CudaFp8Gemm, BadShapesAreStatusesNotCrashes) {
  auto gemm = Fp8Gemm::create();
  ASSERT_TRUE(gemm.ok()) << gemm.status().to_string();
  auto buf = DeviceBuffer::allocate(1 << 22);
  ASSERT_TRUE(buf.ok());
  void* d = buf->data();
  const cudaStream_t s = stream_->get();
  auto lin = [&](Shape xs, DType wt, Shape ws, DType st, Shape ss, Shape os, int64_t groups,
                 int64_t br = 128, int64_t bc = 128) {
    Tensor x = Tensor::borrow(d, DType::kF32, xs);
    Tensor out = Tensor::borrow(static_cast<char*>(d) + (2 << 20), DType::kF32, os);
    Weight w{Tensor::borrow(d, wt, ws), Tensor::borrow(d, st, ss), br, bc};
    return fp8_linear(**gemm, x, w, out, groups, s);
  };
  ASSERT_EQ(testing::memset_sync(d, 0x22, 1 << 22),
            cudaSuccess);  // finite codes, floats and scales
  const DType f8 = DType::kF8E4M3, e8 = DType::kF8E8M0;
  // K not a multiple of 128: the caller falls back.
  Status st = lin({4, 200}, f8, {256, 200}, e8, {2, 2}, {4, 256}, 1);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.to_string();
  EXPECT_NE(st.message().find("multiple of 128"), std::string::npos) << st.to_string();
  // N not a multiple of 4; grouped with N not a multiple of 128.
  EXPECT_EQ(lin({4, 256}, f8, {250, 256}, e8, {2, 2}, {4, 250}, 1).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(lin({4, 512}, f8, {392, 256}, e8, {4, 2}, {4, 392}, 2).code(), StatusCode::kUnimplemented);
  // Not FP8, or not 128×128 blocks: not this path.
  EXPECT_EQ(lin({4, 256}, DType::kBF16, {256, 256}, e8, {2, 2}, {4, 256}, 1).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(lin({4, 256}, f8, {256, 256}, e8, {256, 8}, {4, 256}, 1, 1, 32).code(), StatusCode::kUnimplemented);
  // Inconsistent shapes and dtypes: errors.
  EXPECT_EQ(lin({4, 384}, f8, {256, 256}, e8, {2, 2}, {4, 256}, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(lin({4, 256}, f8, {256, 256}, e8, {2, 2}, {5, 256}, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(lin({4, 256}, f8, {256, 256}, e8, {2, 3}, {4, 256}, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(lin({4, 256}, f8, {256, 256}, DType::kBF16, {2, 2}, {4, 256}, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(lin({4, 256}, f8, {256, 256}, e8, {2, 2}, {4, 256}, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(lin({4, 512}, f8, {255, 256}, e8, {2, 2}, {4, 255}, 2).code(), StatusCode::kInvalidArgument);
  // Raw entry point: the same refusal.
  st = (*gemm)->gemm(static_cast<const float*>(d), 3, static_cast<const uint8_t*>(d), d, false, 256,
                     100, 1, static_cast<float*>(d), s);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.to_string();
  // A valid call after the refusals still works (nothing left half-done).
  EXPECT_TRUE(lin({4, 256}, f8, {256, 256}, e8, {2, 2}, {4, 256}, 1).ok());
  EXPECT_TRUE(stream_->synchronize().ok());
}

}  // namespace
}  // namespace deepinfer::cuda
