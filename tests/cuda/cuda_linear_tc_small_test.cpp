// linear_tc_small (linear_tc_small.cuh, session 8): the small-M tensor-core product with
// linear_tc's bits, weights through a TMA ring. Asserted BITWISE against linear_tc with the same
// k_split (the batch-invariant plan and the default mode's plan) at the V4-Flash shapes for
// M = 1, 2, 5, 8, 9, 16, 33, 64, extra splits (k_split = K, 640) for the ring walk, odd shapes
// (partial tiles and warps, partial scale blocks, half a k32 stage, groups, ±inf / NaN in x), both
// ring fills (cp.async, TMA bulk copies), x split per CTA and per warp, 64- and 256-byte slots,
// PDL on and off, CudaBackend::linear's dispatch in both modes, a double-precision reference (the
// bound of linear_tc's own tests: 3e-6 of the row's largest output) and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../backend/op_test_util.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_tc_small.h"
#include "common/env.h"
#include "device_pair.h"
#include "memset_sync.h"
#include "tc_weights.h"

namespace deepinfer::cuda {
namespace {

// The default mode's head at 9..64 rows goes to cuBLAS by default (DEEPINFER_HEAD_BLAS, its own
// bits); off before the environment is first read, since BackendLinearKeepsLinearTcBits checks
// the tensor-core branch's bits there.
const bool kHeadBlasOff = [] {
  setenv("DEEPINFER_HEAD_BLAS", "0", 1);
  setenv("DEEPINFER_DENSE_WG", "0", 1);  // session 16: e4m3 at 17..64 rows on skinny_wg otherwise
  return true;
}();

using backend::Shape;
using backend::Tensor;
using backend::testing::expect_same_bits;
using testing::on_device;
using testing::Pair;
using testing::to_host;

using testing::fast_weight;
using testing::Fmt;
using testing::fmt_code;
using testing::fmt_name;
using testing::reference64;
using testing::worst_row_relative_error;
using testing::WorstError;

struct ShapeCase { const char* name; Fmt f; int64_t G, N, K; bool nonfinite_x; };

// The V4-Flash projections CudaBackend::linear runs at decode, and odd shapes.
const std::vector<ShapeCase>& cases() {
  static const std::vector<ShapeCase> c = {
      {"wq_a", Fmt::kFp8, 1, 1024, 4096, false},
      {"wkv", Fmt::kFp8, 1, 512, 4096, false},
      {"wq_b", Fmt::kFp8, 1, 32768, 1024, false},
      {"wo_a (8 groups)", Fmt::kFp8, 8, 1024, 4096, false},
      {"wo_b", Fmt::kFp8, 1, 4096, 8192, false},
      {"shared expert w1 / w3", Fmt::kFp8, 1, 2048, 4096, false},
      {"shared expert w2", Fmt::kFp8, 1, 4096, 2048, false},
      {"indexer wq_b (64 heads x 128)", Fmt::kFp8, 1, 8192, 1024, false},
      {"indexer weights_proj (bf16, 64 rows: two warps without rows)", Fmt::kBf16, 1, 64, 4096, false},
      {"wq_a, f32 scales", Fmt::kFp8F32Scale, 1, 1024, 4096, false},
      {"fp4 expert w1+w3", Fmt::kFp4, 1, 4096, 4096, false},
      {"compressor wkv (bf16)", Fmt::kBf16, 1, 1024, 4096, false},
      {"head (bf16)", Fmt::kBf16, 1, 129280, 4096, false},
      // Partial n tiles and warps, a partial last scale block (K = 1056), half a k32 stage and a
      // partial slot at the end (K = 208, 200, 352), FP4's per-stage promotion, 2 and 3 groups,
      // ±inf and NaN in x (the NaN-remainder rule of the x split).
      {"odd fp8", Fmt::kFp8, 1, 300, 1056, true},
      {"odd fp8 f32 scales, 3 groups", Fmt::kFp8F32Scale, 3, 50, 208, false},
      {"odd bf16, 2 groups", Fmt::kBf16, 2, 77, 200, true},
      {"odd fp4", Fmt::kFp4, 1, 45, 352, true},
  };
  return c;
}

class CudaLinearTcSmall : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    std::printf("seed %u\n", seed_);
    auto b = CudaBackend::create();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    gpu_ = std::move(b).value();
    CudaBackendOptions bi;
    bi.batch_invariant = true;
    auto c = CudaBackend::create(bi);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    bi_ = std::move(c).value();
  }
  Tensor randn(Shape s, bool nonfinite = false) {
    Tensor t = Tensor::empty(DType::kF32, std::move(s));
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng_);
    if (nonfinite && t.dim(0) >= 3) {  // rows 1 and 2 get +inf / −inf, row 2 a NaN too
      const int64_t cols = t.dim(1);
      t.data<float>()[1 * cols + cols / 3] = std::numeric_limits<float>::infinity();
      t.data<float>()[2 * cols + cols / 2] = -std::numeric_limits<float>::infinity();
      t.data<float>()[2 * cols + cols - 1] = std::numeric_limits<float>::quiet_NaN();
    }
    return t;
  }
  backend::Weight upload_weight(const backend::Weight& hw) {
    backend::Weight dw = hw;
    keep_.push_back(on_device(hw.w));
    dw.w = keep_.back().dev;
    if (hw.scale.defined()) {
      keep_.push_back(on_device(hw.scale));
      dw.scale = keep_.back().dev;
    }
    return dw;
  }
  // linear_tc (ref) and linear_tc_small (got) with one k_split, both on the host.
  void run_pair(const ShapeCase& c, const backend::Weight& hw, const backend::Weight& dw, const Pair& dx,
                int64_t M, int64_t k_split, bool pdl, Tensor* ref_h, Tensor* got_h, bool bulk = false,
                bool share = true, bool wide = false) {
    const int64_t G = c.G, N = c.N, K = c.K, GN = G * N, splits = (K + k_split - 1) / k_split;
    const int fmt = fmt_code(c.f);
    const void* scale = fmt == 0 ? nullptr : dw.scale.raw();
    const bool f32s = c.f == Fmt::kFp8F32Scale;
    auto ref = bi_->alloc(DType::kF32, {M, GN});
    auto got = bi_->alloc(DType::kF32, {M, GN});
    auto ws = bi_->alloc(DType::kF32, {splits, M, GN});
    ASSERT_TRUE(ref.ok() && got.ok() && ws.ok());
    kernels::linear_tc(fmt, dx.dev.data<float>(), dw.w.raw(), scale, f32s, M, N, K, G, hw.block_rows,
                       hw.block_cols, k_split, ref->data<float>(), ws->data<float>(), bi_->stream());
    ASSERT_TRUE(bi_->synchronize().ok());
    // NaN-filled output first: a row or column the kernel fails to write cannot pass.
    ASSERT_EQ(testing::memset_sync(got->raw(), 0xFF, static_cast<size_t>(M * GN) * 4), cudaSuccess);
    kernels::linear_tc_small(fmt, dx.dev.data<float>(), dw.w.raw(), scale, f32s, M, N, K, G,
                             hw.block_rows, hw.block_cols, k_split, got->data<float>(),
                             ws->data<float>(), bi_->stream(), pdl, bulk, share, wide);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_TRUE(bi_->synchronize().ok());
    *ref_h = to_host(*ref);
    *got_h = to_host(*got);
  }
  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<CudaBackend> gpu_, bi_;
  std::vector<Pair> keep_;
};

const int64_t kRowsToTry[] = {64, 1, 2, 5, 8, 9, 16, 33};

TEST_F(CudaLinearTcSmall, IsBitwiseLinearTcAtModelShapes) {
  uint64_t wseed = seed_;
  for (const ShapeCase& c : cases()) {
    const int64_t G = c.G, K = c.K, GN = G * c.N;
    backend::Weight hw;
    fast_weight(c.f, GN, K, ++wseed * 0x2545F4914F6CDD1DULL, &hw);
    const backend::Weight dw = upload_weight(hw);
    const int64_t bc = fmt_code(c.f) == 0 ? 0 : hw.block_cols;
    const Tensor x = randn({64, G * K}, c.nonfinite_x);
    const Pair dx = on_device(x);
    Tensor full;  // rows of M = 64 under the batch-invariant split
    for (int64_t M : kRowsToTry) {
      std::vector<int64_t> splits_to_try = {kernels::linear_tc_k_split(M, GN, K, bc, true)};
      const int64_t def = kernels::linear_tc_k_split(M, GN, K, bc, false);
      if (def != splits_to_try[0]) splits_to_try.push_back(def);
      if (M == 16 && (std::string(c.name) == "wq_a" || std::string(c.name) == "compressor wkv (bf16)" ||
                      std::string(c.name) == "fp4 expert w1+w3"))
        for (int64_t ks : {K, int64_t{640}}) splits_to_try.push_back(ks);
      for (size_t si = 0; si < splits_to_try.size(); ++si) {
        const int64_t k_split = splits_to_try[si];
        ASSERT_TRUE(kernels::linear_tc_small_supported(fmt_code(c.f), dw.w.raw(), dx.dev.data<float>(), M,
                                                       K, bc > 0, hw.block_cols)) << c.name;
        Tensor ref_h, got_h, ref2, tma_h;
        run_pair(c, hw, dw, dx, M, k_split, true, &ref_h, &got_h);
        const std::string what = std::string("small vs linear_tc, ") + c.name + " " + fmt_name(c.f) +
                                 " M=" + std::to_string(M) + " k_split=" + std::to_string(k_split) + " (" +
                                 std::to_string((K + k_split - 1) / k_split) + " splits)";
        expect_same_bits(what.c_str(), got_h, ref_h, seed_);
        run_pair(c, hw, dw, dx, M, k_split, true, &ref2, &tma_h, /*bulk=*/true);
        expect_same_bits((what + ", TMA bulk fill").c_str(), tma_h, ref_h, seed_);
        run_pair(c, hw, dw, dx, M, k_split, true, &ref2, &tma_h, /*bulk=*/false, /*share=*/false);
        expect_same_bits((what + ", x split per warp").c_str(), tma_h, ref_h, seed_);
        run_pair(c, hw, dw, dx, M, k_split, true, &ref2, &tma_h, false, false, /*wide=*/true);
        expect_same_bits((what + ", 256-byte slots").c_str(), tma_h, ref_h, seed_);
        if (si == 0) {  // the batch-invariant split does not depend on M: rows equal M = 64's
          if (M == 64) full = got_h;
          else expect_same_bits((what + ", rows vs the same rows at M = 64").c_str(), got_h,
                                full.rows(0, M), seed_);
        }
      }
    }
  }
}

TEST_F(CudaLinearTcSmall, PdlOffGivesTheSameBits) {
  uint64_t wseed = seed_ ^ 0x5bd1e995u;
  for (const ShapeCase& c : cases()) {
    const std::string name = c.name;
    if (name != "wq_a" && name != "wq_b" && name != "odd bf16, 2 groups" && name != "odd fp4") continue;
    const int64_t GN = c.G * c.N, K = c.K;
    backend::Weight hw;
    fast_weight(c.f, GN, K, ++wseed * 0x2545F4914F6CDD1DULL, &hw);
    const backend::Weight dw = upload_weight(hw);
    const int64_t bc = fmt_code(c.f) == 0 ? 0 : hw.block_cols;
    const Pair dx = on_device(randn({16, c.G * K}));
    for (int64_t M : {1, 16}) {
      const int64_t k_split = kernels::linear_tc_k_split(M, GN, K, bc, true);
      Tensor ref_h, got_h, ref2, plain;
      run_pair(c, hw, dw, dx, M, k_split, true, &ref_h, &got_h);
      run_pair(c, hw, dw, dx, M, k_split, false, &ref2, &plain);
      expect_same_bits((name + " M=" + std::to_string(M) + ": PDL launch vs plain launch").c_str(), got_h,
                       plain, seed_);
      expect_same_bits((name + " M=" + std::to_string(M) + ": plain launch vs linear_tc").c_str(), plain,
                       ref_h, seed_);
    }
  }
}

TEST_F(CudaLinearTcSmall, BackendLinearKeepsLinearTcBits) {
  // CudaBackend::linear with --batch-invariant (M = 1, 5, 16, 33, 64) and in the default mode
  // (M = 9, 16, 33, 64: the tensor-core branch) equals linear_tc with the mode's split, whatever
  // DEEPINFER_SMALL_LINEAR selects (every selectable kernel has linear_tc's bits).
  uint64_t wseed = seed_ ^ 0x9e3779b9u;
  for (const ShapeCase& c : cases()) {
    const std::string name = c.name;
    if (name != "wq_b" && name != "wo_a (8 groups)" && name != "head (bf16)" && name != "odd fp8") continue;
    const int64_t G = c.G, N = c.N, K = c.K, GN = G * N;
    backend::Weight hw;
    fast_weight(c.f, GN, K, ++wseed * 0x2545F4914F6CDD1DULL, &hw);
    const backend::Weight dw = upload_weight(hw);
    const int fmt = fmt_code(c.f);
    const int64_t bc = fmt == 0 ? 0 : hw.block_cols;
    const Pair dx = on_device(randn({64, G * K}));
    for (bool bi : {true, false}) {
      CudaBackend* be = bi ? bi_.get() : gpu_.get();
      for (int64_t M : {1, 5, 9, 16, 33, 64}) {
        if (!bi && M <= kernels::kGemvMaxRows) continue;  // the GEMV's rows in the default mode
        if (bi && M == 9) continue;
        const int64_t k_split = kernels::linear_tc_k_split(M, GN, K, bc, bi);
        auto ref = be->alloc(DType::kF32, {M, GN});
        auto got = be->alloc(DType::kF32, {M, GN});
        auto ws = be->alloc(DType::kF32, {(K + k_split - 1) / k_split, M, GN});
        ASSERT_TRUE(ref.ok() && got.ok() && ws.ok());
        kernels::linear_tc(fmt, dx.dev.data<float>(), dw.w.raw(), fmt == 0 ? nullptr : dw.scale.raw(), false,
                           M, N, K, G, hw.block_rows, hw.block_cols, k_split, ref->data<float>(),
                           ws->data<float>(), be->stream());
        const Status st = be->linear(dx.dev.rows(0, M), dw, *got, G);
        ASSERT_TRUE(st.ok()) << st.to_string();
        ASSERT_TRUE(be->synchronize().ok());
        expect_same_bits((std::string("CudaBackend::linear ") + (bi ? "--batch-invariant " : "default mode ") +
                          name + " M=" + std::to_string(M) + " vs linear_tc")
                             .c_str(),
                         to_host(*got), to_host(*ref), seed_);
      }
    }
  }
}

TEST_F(CudaLinearTcSmall, MatchesDoubleReference) {
  // The bound of linear_tc's SplitProductsMatchDoubleAtModelShapes: 3e-6 of the row's largest
  // output (the arithmetic is linear_tc's). Shapes small enough for a host double reference.
  auto cpu = backend::make_cpu_backend({.reference = true});
  uint64_t wseed = seed_ ^ 0x7f4a7c15u;
  for (const ShapeCase& c : cases()) {
    const int64_t G = c.G, N = c.N, K = c.K, GN = G * N;
    if (GN * K > (int64_t{5} << 20) || c.nonfinite_x) continue;
    backend::Weight hw;
    fast_weight(c.f, GN, K, ++wseed * 0x2545F4914F6CDD1DULL, &hw);
    Tensor deq = Tensor::empty(DType::kF32, {GN, K});
    ASSERT_TRUE(cpu->dequantize(hw.w, hw.scale.defined() ? &hw.scale : nullptr, hw.block_rows, hw.block_cols,
                                deq).ok());
    const backend::Weight dw = upload_weight(hw);
    const int fmt = fmt_code(c.f);
    const int64_t bc = fmt == 0 ? 0 : hw.block_cols;
    const Tensor x = randn({64, G * K});
    const Pair dx = on_device(x);
    for (int64_t M : {1, 16, 64}) {
      const int64_t k_split = kernels::linear_tc_k_split(M, GN, K, bc, true);
      auto got = bi_->alloc(DType::kF32, {M, GN});
      auto ws = bi_->alloc(DType::kF32, {(K + k_split - 1) / k_split, M, GN});
      ASSERT_TRUE(got.ok() && ws.ok());
      kernels::linear_tc_small(fmt, dx.dev.data<float>(), dw.w.raw(), fmt == 0 ? nullptr : dw.scale.raw(),
                               c.f == Fmt::kFp8F32Scale, M, N, K, G, hw.block_rows, hw.block_cols, k_split,
                               got->data<float>(), ws->data<float>(), bi_->stream(), true);
      ASSERT_TRUE(bi_->synchronize().ok());
      const Tensor got_h = to_host(*got);
      const std::vector<double> want = reference64(x.rows(0, M), deq, G);
      const WorstError w = worst_row_relative_error(want, got_h.data<float>(), M, GN);
      EXPECT_LE(w.err, 3e-6) << c.name << " " << fmt_name(c.f) << " M=" << M << ": worst row-relative error at row "
                             << w.row << " col " << w.col << ", seed " << seed_;
    }
  }
}

TEST_F(CudaLinearTcSmall, RefusesWhatItCannotTake) {
  float* x16 = nullptr;
  uint8_t* w16 = nullptr;
  ASSERT_EQ(cudaMalloc(&x16, 4096), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&w16, 4096), cudaSuccess);
  EXPECT_TRUE(kernels::linear_tc_small_supported(1, w16, x16, 64, 128, true, 128));
  EXPECT_TRUE(kernels::linear_tc_small_supported(0, w16, x16, 1, 8, false, 0));
  EXPECT_FALSE(kernels::linear_tc_small_supported(1, w16, x16, 65, 128, true, 128));  // M > 64
  EXPECT_FALSE(kernels::linear_tc_small_supported(1, w16, x16, 0, 128, true, 128));
  EXPECT_FALSE(kernels::linear_tc_small_supported(1, w16, x16, 4, 120, true, 128));   // row bytes
  EXPECT_FALSE(kernels::linear_tc_small_supported(1, w16, x16, 4, 128, true, 16));    // block cols
  EXPECT_FALSE(kernels::linear_tc_small_supported(0, w16 + 8, x16, 4, 128, false, 0));  // w alignment
  EXPECT_FALSE(kernels::linear_tc_small_supported(0, w16, x16 + 2, 4, 128, false, 0));  // x alignment
  EXPECT_FALSE(kernels::linear_tc_small_supported(3, w16, x16, 4, 128, false, 0));    // f32 weights
  cudaFree(x16);
  cudaFree(w16);
}

}  // namespace
}  // namespace deepinfer::cuda
