// The session-6 dense decode GEMV (gemv_multi.cuh): several projections of one x in one launch,
// software-pipelined. Its per-element arithmetic is gemv.cuh's, so every check against the
// session-5 kernel (gemv_linear) is BITWISE:
//  - one projection at the V4-Flash shapes (wq_a, wkv, wq_b, wo_b, the shared expert, the
//    indexer's wq_b in FP8 with 128×128 ue8m0 scales; the compressors' and a head slice in BF16)
//    for M = 1, 2, 4, 8, 16, the default and the "deep" variant, against gemv_linear, and within
//    the rigorous bound of cuda_gemv_test against a double reference (M = 1 and 16);
//  - a table of projections (attention's wq_a + wkv; the four compressor projections; odd N with
//    partial scale blocks, f32 scales) against each projection alone, and through the backend:
//    CudaBackend::linear_multi (mixed formats, FP4 / grouped-unfriendly members falling back, more
//    than eight projections) against CudaBackend::linear one weight at a time;
//  - NaN codes and NaN scales as the old kernel;
//  - the layouts it refuses (the caller then runs gemv_linear).
//
// Bound (cuda_gemv_test.cpp): |gemv − exact| ≤ (E + ceil(K / 32E) + 8)·2^-24·Σ|x·w|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv.h"
#include "device_pair.h"
#include "memset_sync.h"

namespace deepinfer::cuda {
namespace {

// Session 9: DEEPINFER_GEMV_KERNEL auto became skinny_mma (tc, its own tests); this file checks the
// GEMV dispatch, i.e. session 8's auto, now "b" (unless the variable is set).
const int kPinGemvKernel = (setenv("DEEPINFER_GEMV_KERNEL", "b", 0), 0);

using backend::Shape;
using backend::Tensor;
using testing::on_device;
using testing::Pair;
using testing::to_host;

// fmt 0 bf16, 1 e4m3 (ue8m0 scales), 4 e4m3 with f32 scales, 2 e2m1 (backend-level only).
struct Shape2 {
  const char* name;
  int fmt;
  int64_t N, K;
};

class CudaGemvMulti : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    std::printf("seed %u\n", seed_);
    auto b = CudaBackend::create();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    gpu_ = std::move(b).value();
    cpu_ = backend::make_cpu_backend({.reference = true});
  }
  Tensor randn(Shape s, float scale = 1.f) {
    Tensor t = Tensor::empty(DType::kF32, std::move(s));
    std::normal_distribution<float> nd(0.f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng_);
    return t;
  }
  // A random host weight [N, K]: bf16 |w| in [2^-8, 2^8); e4m3 any non-NaN code with ue8m0
  // (fmt 1) or f32 (fmt 4) 128×128 scales; e2m1 with ue8m0 1×32 scales (fmt 2).
  backend::Weight random_weight(int fmt, int64_t N, int64_t K) {
    backend::Weight w;
    if (fmt == 0) {
      w.w = Tensor::empty(DType::kBF16, {N, K});
      uint16_t* p = w.w.data<uint16_t>();
      for (int64_t i = 0; i < N * K; ++i)
        p[i] = static_cast<uint16_t>(0x3B80 + rng_() % 0x0800) ^ static_cast<uint16_t>(rng_() & 0x8000);
      return w;
    }
    w.w = Tensor::empty(fmt == 2 ? DType::kF4E2M1 : DType::kF8E4M3, {N, K});
    uint8_t* p = w.w.data<uint8_t>();
    for (uint64_t i = 0; i < w.w.nbytes(); ++i) {
      uint8_t b = static_cast<uint8_t>(rng_());
      if (fmt != 2 && (b & 0x7F) == 0x7F) b = 0x3F;  // NaN codes are tested apart
      p[i] = b;
    }
    w.block_rows = fmt == 2 ? 1 : 128;
    w.block_cols = fmt == 2 ? 32 : 128;
    const int64_t sr = (N + w.block_rows - 1) / w.block_rows, sc = (K + w.block_cols - 1) / w.block_cols;
    if (fmt == 4) {
      w.scale = Tensor::empty(DType::kF32, {sr, sc});
      std::uniform_real_distribution<float> u(0.001f, 0.1f);
      for (int64_t i = 0; i < w.scale.numel(); ++i) w.scale.data<float>()[i] = u(rng_);
    } else {
      w.scale = Tensor::empty(DType::kF8E8M0, {sr, sc});
      for (int64_t i = 0; i < w.scale.numel(); ++i)
        w.scale.data<uint8_t>()[i] = static_cast<uint8_t>(118 + rng_() % 10);
    }
    return w;
  }
  backend::Weight upload(const backend::Weight& hw) {
    backend::Weight dw = hw;
    keep_.push_back(on_device(hw.w));
    dw.w = keep_.back().dev;
    if (hw.scale.defined()) {
      keep_.push_back(on_device(hw.scale));
      dw.scale = keep_.back().dev;
    }
    return dw;
  }
  static int kfmt(int fmt) { return fmt == 4 ? 1 : fmt; }
  static bool f32_scales(const backend::Weight& w) {
    return w.scale.defined() && w.scale.dtype() == DType::kF32;
  }
  // gemv_linear (session 5) of one device weight: host [M, N].
  Tensor old_kernel(int fmt, const float* dx, const backend::Weight& dw, int64_t M) {
    const int64_t N = dw.rows(), K = dw.cols();
    auto out = DeviceBuffer::allocate(std::max<int64_t>(M * N, 4) * 4);
    EXPECT_TRUE(out.ok());
    kernels::gemv_linear(kfmt(fmt), dx, dw.w.raw(), dw.scale.defined() ? dw.scale.raw() : nullptr,
                         f32_scales(dw), M, N, K, 1, dw.block_rows, dw.block_cols,
                         static_cast<float*>(out->data()), nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    Tensor h = Tensor::empty(DType::kF32, {M, N});
    EXPECT_EQ(cudaMemcpy(h.raw(), out->data(), h.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  // gemv_multi over device weights of one format class: host outputs [M, N_j].
  std::vector<Tensor> new_kernel(int fmt, const float* dx, const std::vector<backend::Weight>& dws,
                                 int64_t M, bool deep) {
    std::vector<DeviceBuffer> bufs;
    std::vector<kernels::GemvProjection> pr;
    for (const backend::Weight& dw : dws) {
      bufs.push_back(std::move(DeviceBuffer::allocate(std::max<int64_t>(M * dw.rows(), 4) * 4)).value());
      EXPECT_EQ(testing::memset_sync(bufs.back().data(), 0xFF, M * dw.rows() * 4),
                cudaSuccess);  // NaN fill
      pr.push_back({dw.w.raw(), dw.scale.defined() ? dw.scale.raw() : nullptr,
                    static_cast<float*>(bufs.back().data()), dw.rows()});
    }
    const backend::Weight& d0 = dws[0];
    EXPECT_TRUE(kernels::gemv_multi(kfmt(fmt), dx, pr.data(), static_cast<int>(pr.size()),
                                    f32_scales(d0), M, d0.cols(), d0.block_rows, d0.block_cols,
                                    deep, nullptr));
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<Tensor> outs;
    for (size_t j = 0; j < dws.size(); ++j) {
      outs.push_back(Tensor::empty(DType::kF32, {M, dws[j].rows()}));
      EXPECT_EQ(cudaMemcpy(outs.back().raw(), bufs[j].data(), outs.back().nbytes(), cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return outs;
  }
  // |got − x·deq(w)ᵀ| ≤ (E + ceil(K/32E) + 8)·u·Σ|x·w| (double reference), NaN only where expected.
  void expect_within_bound(const std::string& what, const Tensor& x, const backend::Weight& hw,
                           int fmt, const Tensor& got) {
    const int64_t M = x.dim(0), N = hw.rows(), K = hw.cols();
    Tensor deq = Tensor::empty(DType::kF32, {N, K});
    ASSERT_TRUE(cpu_->dequantize(hw.w, hw.scale.defined() ? &hw.scale : nullptr, hw.block_rows,
                                 hw.block_cols, deq).ok());
    const double E = fmt == 0 ? 8 : 16, n = E + std::ceil(K / (32 * E)) + 8, u = std::ldexp(1.0, -24);
    double worst = 0;
    int64_t wi = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t r = 0; r < N; ++r) {
        const float* xr = x.data<float>() + m * K;
        const float* wr = deq.data<float>() + r * K;
        double s = 0, a = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = double(xr[k]) * wr[k];
          s += p;
          a += std::fabs(p);
        }
        const double g = got.data<float>()[m * N + r];
        const double q = std::fabs(g - s) / (n * u * a + 1e-37);
        if (!(q <= worst)) worst = q, wi = m * N + r;  // NaN counts as worst
      }
    EXPECT_LE(worst, 1.0) << what << ": worst element " << wi << " at " << worst
                          << " × the bound; seed " << seed_;
  }
  static bool same_bits(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  }
  static std::string first_diff(const Tensor& a, const Tensor& b) {
    for (int64_t i = 0; i < a.numel(); ++i) {
      uint32_t x, y;
      std::memcpy(&x, a.data<float>() + i, 4);
      std::memcpy(&y, b.data<float>() + i, 4);
      if (x != y)
        return "first difference at flat index " + std::to_string(i) + ": " +
               std::to_string(a.data<float>()[i]) + " vs " + std::to_string(b.data<float>()[i]);
    }
    return "same";
  }
  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<backend::Backend> cpu_;
  std::vector<Pair> keep_;
};

// V4-Flash decode projections (hidden 4096, q_lora 1024, 64 heads × 512, o_lora 1024 × 8 groups,
// shared expert 2048, indexer 64 heads × 128, compressors of the CSA (coff 2) and HCA layers).
const std::vector<Shape2>& v4_shapes() {
  static const std::vector<Shape2> s = {
      {"wq_a", 1, 1024, 4096},           {"wkv", 1, 512, 4096},
      {"wq_b", 1, 32768, 1024},          {"wo_b", 1, 4096, 8192},
      {"shared gate_up", 1, 4096, 4096}, {"shared down", 1, 4096, 2048},
      {"indexer wq_b", 1, 8192, 1024},   {"csa compressor wkv", 0, 1024, 4096},
      {"indexer compressor wkv", 0, 256, 4096}, {"head slice", 0, 4099, 4096},
  };
  return s;
}

TEST_F(CudaGemvMulti, OneProjectionEqualsOldKernelBitwiseAtV4Shapes) {
  for (const Shape2& s : v4_shapes()) {
    const backend::Weight hw = random_weight(s.fmt, s.N, s.K);
    const backend::Weight dw = upload(hw);
    Tensor xk = randn({16, s.K});
    auto dx = on_device(xk);
    for (int64_t M : {1, 2, 4, 8, 16}) {
      const std::string what = std::string(s.name) + " M=" + std::to_string(M);
      const Tensor want = old_kernel(s.fmt, static_cast<const float*>(dx.dev.raw()), dw, M);
      for (bool deep : {false, true}) {
        const Tensor got = new_kernel(s.fmt, static_cast<const float*>(dx.dev.raw()), {dw}, M, deep)[0];
        EXPECT_TRUE(same_bits(got, want)) << what << (deep ? " deep" : "") << ": "
                                          << first_diff(got, want) << "; seed " << seed_;
      }
      if (M == 1 || M == 16) expect_within_bound(what + " vs double", xk.rows(0, M), hw, s.fmt, want);
    }
  }
}

TEST_F(CudaGemvMulti, TableOfProjectionsEqualsEachAloneBitwise) {
  struct Set {
    int fmt;
    int64_t K;
    std::vector<int64_t> N;
  };
  const std::vector<Set> sets = {
      {1, 4096, {1024, 512}},             // attention: wq_a + wkv
      {0, 4096, {1024, 1024, 256, 256}},  // CSA layer: compressor wkv / wgate, indexer's
      {1, 1056, {1, 3, 129, 257, 64, 130, 5, 300}},  // odd N, partial 128-row / 128-column blocks
      {4, 384, {130, 7, 256}},            // f32 scales
      {0, 200, {33, 8, 1}},               // bf16 rows of 400 bytes
  };
  for (const Set& st : sets) {
    std::vector<backend::Weight> hws, dws;
    for (int64_t N : st.N) {
      hws.push_back(random_weight(st.fmt, N, st.K));
      dws.push_back(upload(hws.back()));
    }
    Tensor x = randn({16, st.K});
    auto dx = on_device(x);
    for (int64_t M : {1, 2, 3, 4, 8, 16}) {
      for (bool deep : {false, true}) {
        const std::vector<Tensor> got = new_kernel(st.fmt, static_cast<const float*>(dx.dev.raw()), dws, M, deep);
        for (size_t j = 0; j < dws.size(); ++j) {
          const Tensor want = old_kernel(st.fmt, static_cast<const float*>(dx.dev.raw()), dws[j], M);
          EXPECT_TRUE(same_bits(got[j], want))
              << "fmt " << st.fmt << " K=" << st.K << " projection " << j << " (N=" << st.N[j]
              << ") M=" << M << (deep ? " deep" : "") << ": " << first_diff(got[j], want) << "; seed " << seed_;
        }
      }
    }
  }
}

TEST_F(CudaGemvMulti, NanCodesAndScalesAsTheOldKernel) {
  const int64_t K = 512;
  backend::Weight a = random_weight(1, 130, K), b = random_weight(1, 64, K);
  a.w.data<uint8_t>()[5 * K + 17] = 0x7F;                  // NaN code: row 5
  b.w.data<uint8_t>()[9 * K + K - 1] = 0xFF;               // NaN code: row 9 of b
  a.scale.data<uint8_t>()[a.scale.dim(1) * 1 + 2] = 0xFF;  // NaN scale: rows 128, 129
  const std::vector<backend::Weight> dws{upload(a), upload(b)};
  Tensor x = randn({4, K});
  auto dx = on_device(x);
  const float* px = static_cast<const float*>(dx.dev.raw());
  const std::vector<Tensor> got = new_kernel(1, px, dws, 4, false);
  for (size_t j = 0; j < 2; ++j) {
    const Tensor want = old_kernel(1, px, dws[j], 4);
    EXPECT_TRUE(same_bits(got[j], want)) << "projection " << j << ": " << first_diff(got[j], want);
  }
  for (int64_t m = 0; m < 4; ++m) {
    EXPECT_TRUE(std::isnan(got[0].data<float>()[m * 130 + 5]));
    EXPECT_TRUE(std::isnan(got[0].data<float>()[m * 130 + 129]));
    EXPECT_TRUE(std::isnan(got[1].data<float>()[m * 64 + 9]));
    EXPECT_FALSE(std::isnan(got[0].data<float>()[m * 130 + 6]));
  }
}

TEST_F(CudaGemvMulti, RefusesLayoutsItDoesNotImplement) {
  EXPECT_TRUE(kernels::gemv_multi_supported(1, 4096, true, 128));
  EXPECT_TRUE(kernels::gemv_multi_supported(0, 4096, false, 1));
  EXPECT_FALSE(kernels::gemv_multi_supported(2, 4096, true, 32));   // fp4: gemv_linear
  EXPECT_FALSE(kernels::gemv_multi_supported(3, 4096, false, 1));   // f32
  EXPECT_FALSE(kernels::gemv_multi_supported(1, 4096, false, 128)); // unscaled e4m3
  EXPECT_FALSE(kernels::gemv_multi_supported(0, 4096, true, 128));  // scaled bf16
  EXPECT_FALSE(kernels::gemv_multi_supported(1, 200, true, 128));   // rows not 16-byte multiples
  EXPECT_FALSE(kernels::gemv_multi_supported(0, 7, false, 1));
  EXPECT_FALSE(kernels::gemv_multi_supported(1, 4096, true, 48));   // chunks straddle blocks
  EXPECT_FALSE(kernels::gemv_multi_supported(1, 32768, true, 128)); // x row over the staging budget
  const backend::Weight dw = upload(random_weight(1, 64, 256));
  Tensor x = randn({1, 256});
  auto dx = on_device(x);
  auto out = DeviceBuffer::allocate(64 * 4);
  ASSERT_TRUE(out.ok());
  const float* px = static_cast<const float*>(dx.dev.raw());
  kernels::GemvProjection p{dw.w.raw(), dw.scale.raw(), static_cast<float*>(out->data()), 64};
  EXPECT_FALSE(kernels::gemv_multi(1, px, &p, 0, false, 1, 256, 128, 128, false, nullptr));
  std::vector<kernels::GemvProjection> nine(9, p);
  EXPECT_FALSE(kernels::gemv_multi(1, px, nine.data(), 9, false, 1, 256, 128, 128, false, nullptr));
  EXPECT_FALSE(kernels::gemv_multi(1, px, &p, 1, false, 1, 256, 2, 128, false, nullptr));  // block rows
  kernels::GemvProjection odd = p;
  odd.w = static_cast<const uint8_t*>(dw.w.raw()) + 1;  // misaligned rows
  EXPECT_FALSE(kernels::gemv_multi(1, px, &odd, 1, false, 1, 256, 128, 128, false, nullptr));
  kernels::GemvProjection no_scale = p;
  no_scale.scale = nullptr;
  EXPECT_FALSE(kernels::gemv_multi(1, px, &no_scale, 1, false, 1, 256, 128, 128, false, nullptr));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(CudaGemvMulti, BackendLinearMultiEqualsLinearOneByOne) {
  // Mixed formats (fp8 ue8m0, fp8 f32 scales, bf16, fp4, f32) and more than eight projections of
  // one x: CudaBackend::linear_multi fuses what it can and runs the rest through linear; every
  // output must be linear's bits. M = 16 and 32 take the tensor-core / other paths (no fusion).
  const int64_t K = 1024;
  const std::vector<std::pair<int, int64_t>> spec = {
      {1, 1024}, {0, 256}, {1, 512}, {2, 96}, {4, 130}, {0, 1024}, {0, 3}, {0, 64}, {0, 8},
      {0, 100},  {0, 17}, {0, 40},  {0, 256}, {1, 33}};
  std::vector<backend::Weight> dws;
  for (auto [fmt, N] : spec) dws.push_back(upload(random_weight(fmt, N, K)));
  keep_.push_back(on_device(randn({50, K}, 0.1f)));  // an f32 weight: matmul through linear
  dws.push_back(backend::Weight::of(keep_.back().dev));
  Tensor x = randn({32, K});
  auto dx = on_device(x);
  for (int64_t M : {1, 2, 5, 8, 16, 32}) {
    std::vector<Tensor> multi, single;
    for (const backend::Weight& dw : dws) {
      multi.push_back(std::move(gpu_->alloc(DType::kF32, {M, dw.rows()})).value());
      single.push_back(std::move(gpu_->alloc(DType::kF32, {M, dw.rows()})).value());
      ASSERT_TRUE(gpu_->linear(dx.dev.rows(0, M), dw, single.back(), 1).ok());
    }
    std::vector<const backend::Weight*> wp;
    std::vector<Tensor*> op;
    for (size_t j = 0; j < dws.size(); ++j) {
      wp.push_back(&dws[j]);
      op.push_back(&multi[j]);
    }
    const Status st = gpu_->linear_multi(dx.dev.rows(0, M), wp, op);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(gpu_->synchronize().ok());
    for (size_t j = 0; j < dws.size(); ++j) {
      const Tensor a = to_host(multi[j]), b = to_host(single[j]);
      EXPECT_TRUE(same_bits(a, b)) << "M=" << M << " projection " << j << ": " << first_diff(a, b)
                                   << "; seed " << seed_;
    }
  }
  // A bad pair is linear's error, named.
  backend::Weight bad = dws[0];
  Tensor o = std::move(gpu_->alloc(DType::kF32, {1, 7})).value();
  const backend::Weight* wp[] = {&dws[1], &bad};
  Tensor ok_out = std::move(gpu_->alloc(DType::kF32, {1, dws[1].rows()})).value();
  Tensor* op[] = {&ok_out, &o};
  const Status st = gpu_->linear_multi(dx.dev.rows(0, 1), wp, op);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("out"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace deepinfer::cuda
