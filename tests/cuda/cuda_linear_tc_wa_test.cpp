// linear_tc_wa (linear_tc_wa.cuh, session 9): the small-M tensor-core product with linear_tc's
// arithmetic and the weight as the MMA's A operand (Cᵀ = W·Xᵀ). Asserted BITWISE against
// linear_tc with the same k_split (the batch-invariant plan and the default mode's plan) at the
// V4-Flash shapes for M = 1, 2, 5, 8, 9, 16, extra splits (k_split = K, 640) for the ring walk,
// odd shapes (partial tiles and warps, partial scale blocks, half a k32 stage, groups, ±inf / NaN
// in x), x split per CTA and per warp, 64- and 128-row CTAs, PDL on and off,
// CudaBackend::linear's dispatch with DEEPINFER_SMALL_LINEAR=w in both modes, a double-precision
// reference (linear_tc's bound: 3e-6 of the row's largest output) and the refusals. Session 17:
// linear_tc_wr (the weight rows in registers), bitwise against linear_tc the same way.
// Every bitwise comparison also prints how many elements differ and by how many ulps at most
// (the question the H200 answers: are the tensor core's sums the same under transposition?).
// Session 18: linear_tc_wg (warpgroup MMA, 1..64 rows), bitwise against linear_tc the same way.
// BareMmaChainsGiveTheSameBitsTransposed asks it of bare MMA chains (no kernel plumbing), and
// ShortE4m3DecodeEqualsLinearTcsOnTheDevice checks the w3 decode on every e4m3 code.
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
#include "backend/cuda/linear_tc_wa.h"
#include "backend/cuda/linear_tc_wg.h"
#include "common/env.h"
#include "device_pair.h"
#include "memset_sync.h"
#include "tc_weights.h"

namespace deepinfer::cuda {
namespace {

// CudaBackend::linear reads DEEPINFER_SMALL_LINEAR once (env()); select the weight-as-A kernel
// before anything reads it, unless the caller chose a value. The default mode's head at 9..64
// rows goes to cuBLAS by default (DEEPINFER_HEAD_BLAS, its own bits): off here, where the
// tensor-core branch's bits are checked.
const bool kSelectW = [] {
  setenv("DEEPINFER_SMALL_LINEAR", "w", 0);
  setenv("DEEPINFER_HEAD_BLAS", "0", 1);
  setenv("DEEPINFER_DENSE_WG", "0", 1);  // session 16: e4m3 at 17..64 rows on skinny_wg otherwise
  // Session 19: linear_tc_wg up to 128 rows, so BackendLinearKeepsLinearTcBits' 100 rows run it in
  // two slabs (64 + 36) that share one workspace.
  setenv("DEEPINFER_LINEAR_WG_MAX_ROWS", "128", 1);
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
      {"indexer weights_proj (bf16, 64 rows: warps without rows)", Fmt::kBf16, 1, 64, 4096, false},
      {"wq_a, f32 scales", Fmt::kFp8F32Scale, 1, 1024, 4096, false},
      {"wq_b, f32 scales", Fmt::kFp8F32Scale, 1, 32768, 1024, false},
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

// Differing elements and the largest ulp distance (same-sign finite pairs; -1: a NaN / sign /
// non-finite difference), printed before the bitwise assertion.
void print_diff(const std::string& what, const Tensor& got, const Tensor& want) {
  int64_t diff = 0;
  int64_t max_ulp = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    int32_t g, w;
    std::memcpy(&g, got.data<float>() + i, 4);
    std::memcpy(&w, want.data<float>() + i, 4);
    if (g == w) continue;
    ++diff;
    const bool comparable = std::isfinite(got.data<float>()[i]) && std::isfinite(want.data<float>()[i]) &&
                            ((g < 0) == (w < 0));
    max_ulp = comparable ? std::max<int64_t>(max_ulp, std::llabs(int64_t{g} - int64_t{w})) : -1;
    if (max_ulp < 0) break;
  }
  std::printf("[wa] %-100s %s (%lld of %lld differ, max %lld ulp)\n", what.c_str(),
              diff == 0 ? "SAME BITS" : "DIFFERENT", static_cast<long long>(diff),
              static_cast<long long>(got.numel()), static_cast<long long>(max_ulp));
}

struct Variant {
  const char* name;
  bool pdl, share;
  int tpw;
  bool fast = false, wide = false, deep = false, fused = false;
};
const Variant kVariants[] = {
    {"x split per CTA, 128-row CTAs", true, true, 2},
    {"x split per warp", true, false, 2},
    {"64-row CTAs", true, true, 1},
    {"short e4m3 decode (w3)", true, true, 2, true},
    {"256-byte slots (bf16)", true, true, 2, false, true},
    {"3 CTAs per SM, deeper ring (fp8)", true, true, 2, false, false, true},
    // Session 13: the split partials summed by each tile's last CTA (every
    // later launch also relies on the counters being back at zero).
    {"split sums in the last CTA", true, true, 2, false, false, false, true},
    {"split sums in the last CTA, plain launch", false, true, 2, false, false, false, true}};

class CudaLinearTcWa : public ::testing::Test {
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
    for (int64_t i = 0; i < t.numel(); ++i) {
      float v = nd(rng_);
      if (v == 0.f) v = 0.5f;  // non-zero inputs
      t.data<float>()[i] = v;
    }
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
  // An output [M, GN] and a split workspace [splits, M, GN] on the device, NaN-filled: an element
  // the kernels fail to write cannot pass.
  void nan_filled(int64_t M, int64_t GN, int64_t splits, Tensor* got, Tensor* ws) {
    auto g = bi_->alloc(DType::kF32, {M, GN});
    auto w = bi_->alloc(DType::kF32, {splits, M, GN});
    ASSERT_TRUE(g.ok() && w.ok());
    ASSERT_EQ(testing::memset_sync(g->raw(), 0xFF, static_cast<size_t>(M * GN) * 4), cudaSuccess);
    ASSERT_EQ(testing::memset_sync(w->raw(), 0xFF, static_cast<size_t>(splits * M * GN) * 4),
              cudaSuccess);
    *got = std::move(g).value();
    *ws = std::move(w).value();
  }
  // linear_tc (ref) with one k_split, on the host.
  void run_ref(const ShapeCase& c, const backend::Weight& hw, const backend::Weight& dw, const Pair& dx,
               int64_t M, int64_t k_split, Tensor* ref_h) {
    const int64_t G = c.G, N = c.N, K = c.K, GN = G * N, splits = (K + k_split - 1) / k_split;
    const int fmt = fmt_code(c.f);
    auto ref = bi_->alloc(DType::kF32, {M, GN});
    auto ws = bi_->alloc(DType::kF32, {splits, M, GN});
    ASSERT_TRUE(ref.ok() && ws.ok());
    kernels::linear_tc(fmt, dx.dev.data<float>(), dw.w.raw(), fmt == 0 ? nullptr : dw.scale.raw(),
                       c.f == Fmt::kFp8F32Scale, M, N, K, G, hw.block_rows, hw.block_cols, k_split,
                       ref->data<float>(), ws->data<float>(), bi_->stream());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_TRUE(bi_->synchronize().ok());
    *ref_h = to_host(*ref);
  }
  // linear_tc_wa with one k_split and variant, on the host.
  void run_wa(const ShapeCase& c, const backend::Weight& hw, const backend::Weight& dw, const Pair& dx,
              int64_t M, int64_t k_split, const Variant& v, Tensor* got_h) {
    const int64_t G = c.G, N = c.N, K = c.K, GN = G * N, splits = (K + k_split - 1) / k_split;
    const int fmt = fmt_code(c.f);
    Tensor got, ws;
    nan_filled(M, GN, splits, &got, &ws);
    kernels::linear_tc_wa(fmt, dx.dev.data<float>(), dw.w.raw(),
                          fmt == 0 ? nullptr : dw.scale.raw(), c.f == Fmt::kFp8F32Scale, M, N, K, G,
                          hw.block_rows, hw.block_cols, k_split, got.data<float>(),
                          ws.data<float>(), bi_->stream(), v.pdl, v.share, v.tpw, v.fast, v.wide,
                          v.deep, v.fused);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_TRUE(bi_->synchronize().ok());
    *got_h = to_host(got);
  }
  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<CudaBackend> gpu_, bi_;
  std::vector<Pair> keep_;
};

const int64_t kRowsToTry[] = {16, 1, 2, 5, 8, 9};

TEST_F(CudaLinearTcWa, IsBitwiseLinearTcAtModelShapes) {
  uint64_t wseed = seed_;
  for (const ShapeCase& c : cases()) {
    const int64_t G = c.G, K = c.K, GN = G * c.N;
    backend::Weight hw;
    fast_weight(c.f, GN, K, ++wseed * 0x2545F4914F6CDD1DULL, &hw);
    const backend::Weight dw = upload_weight(hw);
    const int64_t bc = fmt_code(c.f) == 0 ? 0 : hw.block_cols;
    const Tensor x = randn({16, G * K}, c.nonfinite_x);
    const Pair dx = on_device(x);
    Tensor full;  // rows of M = 16 under the batch-invariant split
    for (int64_t M : kRowsToTry) {
      std::vector<int64_t> splits_to_try = {kernels::linear_tc_k_split(M, GN, K, bc, true)};
      const int64_t def = kernels::linear_tc_k_split(M, GN, K, bc, false);
      if (def != splits_to_try[0]) splits_to_try.push_back(def);
      if (M == 16 && (std::string(c.name) == "wq_a" || std::string(c.name) == "compressor wkv (bf16)" ||
                      std::string(c.name) == "fp4 expert w1+w3"))
        for (int64_t ks : {K, int64_t{640}}) splits_to_try.push_back(ks);
      for (size_t si = 0; si < splits_to_try.size(); ++si) {
        const int64_t k_split = splits_to_try[si];
        ASSERT_TRUE(kernels::linear_tc_wa_supported(fmt_code(c.f), dw.w.raw(), dx.dev.data<float>(), M, K,
                                                    bc > 0, hw.block_cols)) << c.name;
        Tensor ref_h;
        run_ref(c, hw, dw, dx, M, k_split, &ref_h);
        for (const Variant& v : kVariants) {
          if (si > 0 && v.tpw == 1) continue;  // the 64-row CTAs at the batch-invariant split only
          if (v.fast && fmt_code(c.f) != 1) continue;  // the short decode is for e4m3 only
          if (v.wide && fmt_code(c.f) != 0) continue;  // 256-byte slots: bf16 only
          if (v.deep && fmt_code(c.f) != 1) continue;  // the deeper ring: e4m3 only
          Tensor got_h;
          run_wa(c, hw, dw, dx, M, k_split, v, &got_h);
          const std::string what = std::string("wa vs linear_tc, ") + c.name + " " + fmt_name(c.f) +
                                   " M=" + std::to_string(M) + " k_split=" + std::to_string(k_split) + " (" +
                                   std::to_string((K + k_split - 1) / k_split) + " splits), " + v.name;
          print_diff(what, got_h, ref_h);
          expect_same_bits(what.c_str(), got_h, ref_h, seed_);
          if (si == 0 && v.share && v.tpw == 2) {  // the batch-invariant split: rows equal M = 16's
            if (M == 16) full = got_h;
            else expect_same_bits((what + ", rows vs the same rows at M = 16").c_str(), got_h,
                                  full.rows(0, M), seed_);
          }
        }
      }
    }
  }
}

TEST_F(CudaLinearTcWa, PdlOffGivesTheSameBits) {
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
      Tensor ref_h, with_pdl, plain;
      run_ref(c, hw, dw, dx, M, k_split, &ref_h);
      run_wa(c, hw, dw, dx, M, k_split, Variant{"pdl", true, true, 2}, &with_pdl);
      run_wa(c, hw, dw, dx, M, k_split, Variant{"plain", false, true, 2}, &plain);
      expect_same_bits((name + " M=" + std::to_string(M) + ": PDL launch vs plain launch").c_str(), with_pdl,
                       plain, seed_);
      print_diff(name + " M=" + std::to_string(M) + ": plain launch vs linear_tc", plain, ref_h);
      expect_same_bits((name + " M=" + std::to_string(M) + ": plain launch vs linear_tc").c_str(), plain,
                       ref_h, seed_);
    }
  }
}

TEST_F(CudaLinearTcWa, BackendLinearKeepsLinearTcBits) {
  // CudaBackend::linear with --batch-invariant (M = 1, 5, 16, 20, 33, 64) and in the default mode
  // (M = 9, 16, 20, 33, 64: the tensor-core branch) equals linear_tc with the mode's split; this
  // binary selects DEEPINFER_SMALL_LINEAR=w (unless set), so at M <= 16 that is linear_tc_wa's
  // dispatch.
  ASSERT_TRUE(kSelectW);
  std::printf("DEEPINFER_SMALL_LINEAR=%s\n", env().small_linear.c_str());
  uint64_t wseed = seed_ ^ 0x9e3779b9u;
  for (const ShapeCase& c : cases()) {
    const std::string name = c.name;
    if (name != "wq_b" && name != "wo_a (8 groups)" && name != "head (bf16)" && name != "odd fp8" &&
        name != "wq_a")
      continue;
    const int64_t G = c.G, N = c.N, K = c.K, GN = G * N;
    backend::Weight hw;
    fast_weight(c.f, GN, K, ++wseed * 0x2545F4914F6CDD1DULL, &hw);
    const backend::Weight dw = upload_weight(hw);
    const int fmt = fmt_code(c.f);
    const int64_t bc = fmt == 0 ? 0 : hw.block_cols;
    const Pair dx = on_device(randn({100, G * K}));
    for (bool bi : {true, false}) {
      CudaBackend* be = bi ? bi_.get() : gpu_.get();
      // Session 15: also M = 20, 33, 64 (linear_tc_small's rows: linear_tc's bits too).
      // Session 18: M = 100 under --batch-invariant (linear_tc_wg in 64-row slabs: 64 + 36).
      for (int64_t M : {1, 5, 9, 16, 20, 33, 64, 100}) {
        if (!bi && M > 64) continue;
        if (!bi && M <= kernels::kGemvMaxRows) continue;  // the GEMV's rows in the default mode
        if (bi && M == 9) continue;
        if (!bi && M > 16 && name == "head (bf16)") continue;  // the head's cuBLAS path (default)
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
        const std::string what = std::string("CudaBackend::linear ") + (bi ? "--batch-invariant " : "default mode ") +
                                 name + " M=" + std::to_string(M) + " vs linear_tc";
        const Tensor got_h = to_host(*got), ref_h = to_host(*ref);
        print_diff(what, got_h, ref_h);
        expect_same_bits(what.c_str(), got_h, ref_h, seed_);
      }
    }
  }
}

TEST_F(CudaLinearTcWa, MatchesDoubleReference) {
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
    const Tensor x = randn({16, G * K});
    const Pair dx = on_device(x);
    for (int64_t M : {1, 7, 16}) {
      const int64_t k_split = kernels::linear_tc_k_split(M, GN, K, bc, true);
      auto got = bi_->alloc(DType::kF32, {M, GN});
      auto ws = bi_->alloc(DType::kF32, {(K + k_split - 1) / k_split, M, GN});
      ASSERT_TRUE(got.ok() && ws.ok());
      kernels::linear_tc_wa(fmt, dx.dev.data<float>(), dw.w.raw(), fmt == 0 ? nullptr : dw.scale.raw(),
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

TEST_F(CudaLinearTcWa, BareMmaChainsGiveTheSameBitsTransposed) {
  // The hypothesis itself, without the kernels' plumbing: chains of m16n8k16 bf16 MMAs computing
  // x·wᵀ with x in A / w in B and with w in A / x in B (the same k at the same positions) give the
  // same fp32 bits for every element. Operands: random signs, exponents over 2^-40..2^8 (x, like
  // the three bf16 terms) and e4m3-like w (3 mantissa bits) or full bf16 w; chains of 1 and 6.
  std::uniform_int_distribution<uint32_t> u16(0, 0xFFFF);
  std::uniform_int_distribution<int> xexp(127 - 40, 127 + 8), wexp(127 - 9, 127 + 8);
  for (int steps : {1, 6}) {
    for (bool e4m3_like : {true, false}) {
      const int trials = 4096;
      const int64_t n = int64_t{trials} * 16 * 16 * steps;
      std::vector<uint16_t> hx(n), hw(n);
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t r = u16(rng_), r2 = u16(rng_);
        hx[i] = static_cast<uint16_t>((r & 0x8000u) | static_cast<uint32_t>(xexp(rng_)) << 7 | (r2 & 0x7Fu));
        const uint32_t mant = e4m3_like ? (r2 >> 7 & 0x7u) << 4 : (r2 >> 7 & 0x7Fu);
        hw[i] = static_cast<uint16_t>((r << 1 & 0x8000u) | static_cast<uint32_t>(wexp(rng_)) << 7 | mant);
        if (r2 % 97 == 0) hw[i] = 0;  // some zero products
      }
      uint16_t *dx = nullptr, *dw = nullptr;
      float *dn = nullptr, *dt = nullptr;
      ASSERT_EQ(cudaMalloc(&dx, n * 2), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dw, n * 2), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dn, int64_t{trials} * 256 * 4), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&dt, int64_t{trials} * 256 * 4), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dx, hx.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dw, hw.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
      kernels::linear_tc_wa_mma_probe(dx, dw, trials, steps, dn, dt, bi_->stream());
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      ASSERT_TRUE(bi_->synchronize().ok());
      Tensor on = Tensor::empty(DType::kF32, {trials * 16, 16}), ot = Tensor::empty(DType::kF32, {trials * 16, 16});
      ASSERT_EQ(cudaMemcpy(on.raw(), dn, on.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(ot.raw(), dt, ot.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
      cudaFree(dx);
      cudaFree(dw);
      cudaFree(dn);
      cudaFree(dt);
      const std::string what = std::string("bare MMA chains of ") + std::to_string(steps) + (e4m3_like ? ", e4m3-like w" : ", bf16 w") +
                               ": w in A vs x in A";
      print_diff(what, ot, on);
      expect_same_bits(what.c_str(), ot, on, seed_);
    }
  }
}

TEST_F(CudaLinearTcWa, ShortE4m3DecodeEqualsLinearTcsOnTheDevice) {
  // Every e4m3 code through linear_tc's decode and the short one (mul.rn.bf16x2 on the device,
  // subnormal codes included): equal bf16 bits for the 254 non-NaN codes; the NaN codes give
  // ±480 (documented).
  uint32_t* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 512 * sizeof(uint32_t)), cudaSuccess);
  kernels::linear_tc_wa_decode_table(d, bi_->stream());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_TRUE(bi_->synchronize().ok());
  std::vector<uint32_t> h(512);
  ASSERT_EQ(cudaMemcpy(h.data(), d, 512 * sizeof(uint32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) {
      EXPECT_EQ(h[256 + c], (c & 0x80 ? 0xC3F0C3F0u : 0x43F043F0u)) << "NaN code " << c;
      continue;
    }
    EXPECT_EQ(h[256 + c], h[c]) << "e4m3 code 0x" << std::hex << c << ": short decode 0x" << h[256 + c]
                                << " vs linear_tc's 0x" << h[c];
  }
}

// ---- Session 10: wa2 (DEEPINFER_SMALL_LINEAR=x1..x4) -------------------------------------------

struct Wa2Variant { const char* name; kernels::Wa2Options o; };
std::vector<Wa2Variant> wa2_variants(int /*fmt*/) {
  using G2 = kernels::Wa2Geometry;
  return {{"wa2 cp.async slots, fused sums", {G2::kSmall, true, true}},
          {"wa2 cp.async slots, separate reduce", {G2::kSmall, false, true}},
          {"wa2 cp.async slots, plain launch", {G2::kSmall, true, false}},
          {"wa2 TMA slots, fused sums", {G2::kTmaSmall, true, true}},
          {"wa2 TMA slots, separate reduce", {G2::kTmaSmall, false, true}},
          {"wa2 TMA slots, plain launch", {G2::kTmaSmall, false, false}},
          {"wa2 TMA slots, ring sized for 2 CTAs per SM", {G2::kTmaSmall, true, true, 2}}};
}

TEST_F(CudaLinearTcWa, Wa2IsBitwiseLinearTcAtModelShapes) {
  // Both wa2 fills (cp.async, TMA), fused and separate split sums, PDL and plain launches, against linear_tc
  // with the same k_split (the batch-invariant plan, the default mode's, and K / 640 for the ring's
  // walk across items): bitwise. NaN-filled outputs and workspaces first; each launch also
  // relies on the previous one's tile counters being back at zero (else its sums would be
  // missing or wrong).
  uint64_t wseed = seed_ ^ 0x2d358dccu;
  for (const ShapeCase& c : cases()) {
    const int fmt = fmt_code(c.f);
    if (fmt == 2) continue;  // wa2: bf16 and e4m3
    const int64_t G = c.G, N = c.N, K = c.K, GN = G * N;
    backend::Weight hw;
    fast_weight(c.f, GN, K, ++wseed * 0x2545F4914F6CDD1DULL, &hw);
    const backend::Weight dw = upload_weight(hw);
    const int64_t bc = fmt == 0 ? 0 : hw.block_cols;
    const Pair dx = on_device(randn({16, G * K}, c.nonfinite_x));
    const bool head = std::string(c.name) == "head (bf16)";
    for (int64_t M : {1, 2, 5, 8, 9, 16}) {
      if (head && M != 1 && M != 8 && M != 16) continue;
      std::vector<int64_t> splits_to_try = {kernels::linear_tc_k_split(M, GN, K, bc, true)};
      const int64_t def = kernels::linear_tc_k_split(M, GN, K, bc, false);
      if (def != splits_to_try[0]) splits_to_try.push_back(def);
      if (M == 16 && (std::string(c.name) == "wq_a" || std::string(c.name) == "compressor wkv (bf16)" ||
                      std::string(c.name) == "odd fp8"))
        for (int64_t ks : {K, int64_t{640}}) splits_to_try.push_back(ks);
      for (const int64_t k_split : splits_to_try) {
        if (fmt == 1 && k_split < K && k_split % bc != 0) continue;
        Tensor ref_h;
        run_ref(c, hw, dw, dx, M, k_split, &ref_h);
        const int64_t splits = (K + k_split - 1) / k_split;
        for (const Wa2Variant& v : wa2_variants(fmt)) {
          Tensor got, ws;
          nan_filled(M, GN, splits, &got, &ws);
          kernels::WaProjection pr;
          pr.w = dw.w.raw();
          pr.scale = fmt == 0 ? nullptr : dw.scale.raw();
          pr.x = dx.dev.data<float>();
          pr.lda = G * K;
          pr.out = got.data<float>();
          pr.N = N;
          pr.G = G;
          pr.k_split = k_split;
          ASSERT_EQ(kernels::linear_tc_wa2_workspace_floats(&pr, 1, M, K), splits > 1 ? splits * M * GN : 0);
          ASSERT_TRUE(kernels::linear_tc_wa2(fmt, &pr, 1, c.f == Fmt::kFp8F32Scale, M, K,
                                             hw.block_rows, hw.block_cols, ws.data<float>(),
                                             bi_->stream(), v.o))
              << c.name;
          ASSERT_EQ(cudaGetLastError(), cudaSuccess);
          ASSERT_TRUE(bi_->synchronize().ok());
          const Tensor got_h = to_host(got);
          const std::string what = std::string("wa2 vs linear_tc, ") + c.name + " " + fmt_name(c.f) +
                                   " M=" + std::to_string(M) + " k_split=" + std::to_string(k_split) + " (" +
                                   std::to_string(splits) + " splits), " + v.name;
          print_diff(what, got_h, ref_h);
          expect_same_bits(what.c_str(), got_h, ref_h, seed_);
        }
      }
    }
  }
}

TEST_F(CudaLinearTcWa, Wa2FusedProjectionsKeepEachWeightsBits) {
  // Up to 8 projections of one x in one wa2 launch (linear_multi under --batch-invariant), each
  // with its own N and its own batch-invariant k_split: every output bitwise equal to linear_tc
  // on that weight alone; fused and separate split sums; sets with partial tiles and a weight
  // with a single split.
  struct SetCase { const char* name; Fmt f; int64_t K; std::vector<int64_t> N; };
  const SetCase sets[] = {
      {"fp8 wq_a + wkv", Fmt::kFp8, 4096, {1024, 512}},
      {"fp8 f32 scales, odd rows", Fmt::kFp8F32Scale, 1024, {300, 32768, 50}},
      {"bf16 compressors + weights_proj", Fmt::kBf16, 4096, {1024, 1024, 256, 256, 64}},
      {"bf16 eight odd weights", Fmt::kBf16, 200, {77, 1, 129, 16, 300, 8, 64, 1000}},
  };
  uint64_t wseed = seed_ ^ 0x68e31da4u;
  using G2 = kernels::Wa2Geometry;
  for (const SetCase& set : sets) {
    const int fmt = fmt_code(set.f);
    const int64_t K = set.K;
    const int n = static_cast<int>(set.N.size());
    std::vector<backend::Weight> hw(n), dw(n);
    for (int i = 0; i < n; ++i) {
      fast_weight(set.f, set.N[i], K, ++wseed * 0x2545F4914F6CDD1DULL, &hw[i]);
      dw[i] = upload_weight(hw[i]);
    }
    const int64_t bc = fmt == 0 ? 0 : hw[0].block_cols;
    const Pair dx = on_device(randn({16, K}));
    for (int64_t M : {1, 3, 16}) {
      std::vector<Tensor> ref(n);
      for (int i = 0; i < n; ++i) {
        const ShapeCase c{set.name, set.f, 1, set.N[i], K, false};
        run_ref(c, hw[i], dw[i], dx, M, kernels::linear_tc_k_split(M, set.N[i], K, bc, true), &ref[i]);
      }
      for (const kernels::Wa2Options o : {kernels::Wa2Options{G2::kSmall, true, true},
                                           kernels::Wa2Options{G2::kSmall, false, true},
                                           kernels::Wa2Options{G2::kTmaSmall, true, false},
                                           kernels::Wa2Options{G2::kTmaSmall, false, true}}) {
        std::vector<kernels::WaProjection> pr(n);
        std::vector<Tensor> outs;
        for (int i = 0; i < n; ++i) {
          auto o_i = bi_->alloc(DType::kF32, {M, set.N[i]});
          ASSERT_TRUE(o_i.ok());
          ASSERT_EQ(testing::memset_sync(o_i->raw(), 0xFF, static_cast<size_t>(M * set.N[i]) * 4),
                    cudaSuccess);
          outs.push_back(*o_i);
          pr[i].w = dw[i].w.raw();
          pr[i].scale = fmt == 0 ? nullptr : dw[i].scale.raw();
          pr[i].x = dx.dev.data<float>();
          pr[i].lda = K;
          pr[i].out = outs.back().data<float>();
          pr[i].N = set.N[i];
          pr[i].G = 1;
          pr[i].k_split = kernels::linear_tc_k_split(M, set.N[i], K, bc, true);
        }
        ASSERT_TRUE(kernels::linear_tc_wa2_supported(fmt, pr.data(), n, M, K, bc)) << set.name;
        const int64_t wsf = std::max<int64_t>(1, kernels::linear_tc_wa2_workspace_floats(pr.data(), n, M, K));
        auto ws = bi_->alloc(DType::kF32, {wsf});
        ASSERT_TRUE(ws.ok());
        ASSERT_EQ(testing::memset_sync(ws->raw(), 0xFF, static_cast<size_t>(wsf) * 4), cudaSuccess);
        ASSERT_TRUE(kernels::linear_tc_wa2(fmt, pr.data(), n, set.f == Fmt::kFp8F32Scale, M, K, hw[0].block_rows,
                                           hw[0].block_cols, ws->data<float>(), bi_->stream(), o));
        ASSERT_EQ(cudaGetLastError(), cudaSuccess);
        ASSERT_TRUE(bi_->synchronize().ok());
        for (int i = 0; i < n; ++i) {
          const std::string what = std::string("wa2 fused set ") + set.name + " weight " + std::to_string(i) +
                                   " (N=" + std::to_string(set.N[i]) + ") M=" + std::to_string(M) +
                                   (o.fused_reduce ? ", fused sums" : ", separate reduce") +
                                   ", geometry " + std::to_string(static_cast<int>(o.geom)) +
                                   (o.pdl ? "" : ", plain launch") + " vs linear_tc alone";
          const Tensor got_h = to_host(outs[i]);
          print_diff(what, got_h, ref[i]);
          expect_same_bits(what.c_str(), got_h, ref[i], seed_);
        }
      }
    }
  }
}

TEST_F(CudaLinearTcWa, BackendLinearMultiKeepsLinearTcBits) {
  // CudaBackend::linear_multi under --batch-invariant (M = 1, 4, 16): every output equals
  // linear_tc on its weight alone with the batch-invariant split, for a mixed list (two FP8
  // weights, a bf16 one, an FP8 one with f32 scales that cannot join the ue8m0 group, two more
  // bf16). With DEEPINFER_SMALL_LINEAR=x1..x3 the groups run as fused wa2 launches; with any
  // other value one by one: the bits are the same either way.
  std::printf("DEEPINFER_SMALL_LINEAR=%s\n", env().small_linear.c_str());
  struct W { Fmt f; int64_t N; };
  const int64_t K = 1024;
  const W list[] = {{Fmt::kFp8, 1024}, {Fmt::kFp8, 512}, {Fmt::kBf16, 300}, {Fmt::kFp8F32Scale, 256},
                    {Fmt::kBf16, 1024}, {Fmt::kBf16, 64}};
  const int n = 6;
  uint64_t wseed = seed_ ^ 0x1b873593u;
  std::vector<backend::Weight> hw(n), dw(n);
  for (int i = 0; i < n; ++i) {
    fast_weight(list[i].f, list[i].N, K, ++wseed * 0x2545F4914F6CDD1DULL, &hw[i]);
    dw[i] = upload_weight(hw[i]);
  }
  const Pair dx = on_device(randn({16, K}));
  for (int64_t M : {1, 4, 16}) {
    std::vector<Tensor> outs;
    std::vector<const backend::Weight*> wp;
    std::vector<Tensor*> op;
    for (int i = 0; i < n; ++i) {
      auto o = bi_->alloc(DType::kF32, {M, list[i].N});
      ASSERT_TRUE(o.ok());
      ASSERT_EQ(testing::memset_sync(o->raw(), 0xFF, static_cast<size_t>(M * list[i].N) * 4),
                cudaSuccess);
      outs.push_back(*o);
    }
    for (int i = 0; i < n; ++i) {
      wp.push_back(&dw[i]);
      op.push_back(&outs[i]);
    }
    const Status st = bi_->linear_multi(dx.dev.rows(0, M), wp, op);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(bi_->synchronize().ok());
    for (int i = 0; i < n; ++i) {
      const int fmt = fmt_code(list[i].f);
      const int64_t bc = fmt == 0 ? 0 : hw[i].block_cols;
      const ShapeCase c{"linear_multi member", list[i].f, 1, list[i].N, K, false};
      Tensor ref_h;
      run_ref(c, hw[i], dw[i], dx, M, kernels::linear_tc_k_split(M, list[i].N, K, bc, true), &ref_h);
      const std::string what = std::string("CudaBackend::linear_multi --batch-invariant member ") + std::to_string(i) +
                               " " + fmt_name(list[i].f) + " N=" + std::to_string(list[i].N) + " M=" +
                               std::to_string(M) + " vs linear_tc alone";
      const Tensor got_h = to_host(outs[i]);
      print_diff(what, got_h, ref_h);
      expect_same_bits(what.c_str(), got_h, ref_h, seed_);
    }
  }
}

TEST_F(CudaLinearTcWa, Wa2RefusesWhatItCannotTake) {
  float* x16 = nullptr;
  uint8_t* w16 = nullptr;
  float* o16 = nullptr;
  ASSERT_EQ(cudaMalloc(&x16, 4096), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&w16, 4096), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&o16, 4096), cudaSuccess);
  kernels::WaProjection p;
  p.w = w16;
  p.scale = w16;
  p.x = x16;
  p.lda = 128;
  p.out = o16;
  p.N = 4;
  p.k_split = 128;
  EXPECT_TRUE(kernels::linear_tc_wa2_supported(1, &p, 1, 16, 128, 128));
  EXPECT_FALSE(kernels::linear_tc_wa2_supported(1, &p, 1, 17, 128, 128));  // M > 16
  EXPECT_FALSE(kernels::linear_tc_wa2_supported(2, &p, 1, 4, 128, 128));   // FP4: not wa2's
  EXPECT_FALSE(kernels::linear_tc_wa2_supported(1, &p, 0, 4, 128, 128));   // no projection
  std::vector<kernels::WaProjection> nine(9, p);
  EXPECT_FALSE(kernels::linear_tc_wa2_supported(1, nine.data(), 9, 4, 128, 128));  // > 8
  kernels::WaProjection q = p;
  q.scale = nullptr;
  EXPECT_FALSE(kernels::linear_tc_wa2_supported(1, &q, 1, 4, 128, 128));   // e4m3 without scales
  q = p;
  q.lda = 64;
  EXPECT_FALSE(kernels::linear_tc_wa2_supported(1, &q, 1, 4, 128, 128));   // x rows overlap
  q = p;
  q.k_split = 48;
  EXPECT_FALSE(kernels::linear_tc_wa2_supported(1, &q, 1, 4, 256, 128));   // split not a multiple of 32
  q = p;
  q.x = x16 + 2;
  EXPECT_FALSE(kernels::linear_tc_wa2_supported(1, &q, 1, 4, 128, 128));   // x alignment
  EXPECT_FALSE(kernels::linear_tc_wa2(1, &q, 1, false, 4, 128, 128, 128, nullptr, bi_->stream(), {}));
  kernels::Wa2Options bad;
  bad.ctas_per_sm = 5;
  EXPECT_FALSE(kernels::linear_tc_wa2(1, &p, 1, false, 4, 128, 128, 128, nullptr, bi_->stream(), bad));  // 1..4
  EXPECT_EQ(kernels::linear_tc_wa2_variant("x1"), 1);
  EXPECT_EQ(kernels::linear_tc_wa2_variant("x4"), 4);
  EXPECT_EQ(kernels::linear_tc_wa2_variant("x5"), 0);
  EXPECT_EQ(kernels::linear_tc_wa2_variant("w"), 0);
  EXPECT_EQ(kernels::linear_tc_wa2_variant("x12"), 0);
  cudaFree(x16);
  cudaFree(w16);
  cudaFree(o16);
}

// Session 17: linear_tc_wr (the weight rows straight into registers) against linear_tc,
// bitwise, at every e4m3 shape of cases() it takes plus its own odd shapes (warps without rows,
// groups, f32 scales, ±inf / NaN in x), for the batch-invariant split, the default mode's, the
// whole K and 256-k splits where they differ (ring refills: 1024 k = 8 units of 128 through a
// 4- or 2-unit ring), with the split sums in the kernel and without, PDL on and off.
TEST_F(CudaLinearTcWa, WrIsBitwiseLinearTcAtModelShapes) {
  std::vector<ShapeCase> wr_cases;
  for (const ShapeCase& c : cases())
    if (fmt_code(c.f) == 1 && c.N % 16 == 0 && c.K % 128 == 0) wr_cases.push_back(c);
  wr_cases.push_back(
      {"odd wr: 3 groups of 48 rows (warps without rows), K 384", Fmt::kFp8, 3, 48, 384, true});
  wr_cases.push_back(
      {"odd wr f32 scales: 144 rows, K 1280", Fmt::kFp8F32Scale, 1, 144, 1280, true});
  ASSERT_GE(wr_cases.size(), 12u);
  uint64_t wseed = seed_ ^ 0x7f4a7c15u;
  int compared = 0;
  for (const ShapeCase& c : wr_cases) {
    const int64_t G = c.G, N = c.N, K = c.K, GN = G * N;
    backend::Weight hw;
    fast_weight(c.f, GN, K, ++wseed * 0x2545F4914F6CDD1DULL, &hw);
    ASSERT_EQ(hw.block_cols, 128);
    const backend::Weight dw = upload_weight(hw);
    const Tensor x = randn({16, G * K}, c.nonfinite_x);
    const Pair dx = on_device(x);
    for (int64_t M : kRowsToTry) {
      std::vector<int64_t> splits_to_try = {kernels::linear_tc_k_split(M, GN, K, 128, true)};
      for (int64_t ks : {kernels::linear_tc_k_split(M, GN, K, 128, false), K, int64_t{256}})
        if (std::find(splits_to_try.begin(), splits_to_try.end(), ks) == splits_to_try.end())
          splits_to_try.push_back(ks);
      for (int64_t k_split : splits_to_try) {
        if (!kernels::linear_tc_wr_supported(1, dw.w.raw(), dx.dev.data<float>(), M, N, K, G, 128,
                                             k_split)) {
          ASSERT_GT(std::min(k_split, K), 1024)
              << c.name << " k_split " << k_split;  // the only refusal here
          continue;
        }
        Tensor ref_h;
        run_ref(c, hw, dw, dx, M, k_split, &ref_h);
        const int64_t splits = (K + k_split - 1) / k_split;
        // 0: PDL, separate sums; 1: sums in the last CTA; 2: plain launch
        for (int v = 0; v < 3; ++v) {
          Tensor got, ws;
          nan_filled(M, GN, splits, &got, &ws);
          kernels::linear_tc_wr(dx.dev.data<float>(), dw.w.raw(), dw.scale.raw(),
                                c.f == Fmt::kFp8F32Scale, M, N, K, G, hw.block_rows, k_split,
                                got.data<float>(), ws.data<float>(), bi_->stream(), v != 2, v == 1);
          ASSERT_EQ(cudaGetLastError(), cudaSuccess);
          ASSERT_TRUE(bi_->synchronize().ok());
          const Tensor got_h = to_host(got);
          const std::string what = std::string("wr vs linear_tc, ") + c.name + " " + fmt_name(c.f) +
                                   " M=" + std::to_string(M) +
                                   " k_split=" + std::to_string(k_split) + " (" +
                                   std::to_string(splits) + " splits)" +
                                   (v == 1   ? ", sums in the last CTA"
                                    : v == 2 ? ", plain launch"
                                             : "");
          print_diff(what, got_h, ref_h);
          expect_same_bits(what.c_str(), got_h, ref_h, seed_);
          ++compared;
        }
      }
    }
  }
  std::printf("wr: %d bitwise comparisons\n", compared);
  EXPECT_GE(compared, 300);
}

TEST_F(CudaLinearTcWa, WrRefusesWhatItCannotTake) {
  float* x16 = nullptr;
  uint8_t* w16 = nullptr;
  ASSERT_EQ(cudaMalloc(&x16, 4096), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&w16, 4096), cudaSuccess);
  EXPECT_TRUE(kernels::linear_tc_wr_supported(1, w16, x16, 16, 32, 1024, 1, 128, 128));
  EXPECT_TRUE(kernels::linear_tc_wr_supported(1, w16, x16, 1, 16, 4096, 8, 128, 1024));
  EXPECT_TRUE(kernels::linear_tc_wr_supported(1, w16, x16, 1, 16, 1024, 1, 128,
                                              4096));  // one split of 1024
  EXPECT_FALSE(kernels::linear_tc_wr_supported(0, w16, x16, 1, 16, 1024, 1, 128, 128));   // bf16
  EXPECT_FALSE(kernels::linear_tc_wr_supported(2, w16, x16, 1, 16, 1024, 1, 128, 128));   // FP4
  EXPECT_FALSE(kernels::linear_tc_wr_supported(1, w16, x16, 17, 16, 1024, 1, 128, 128));  // M > 16
  EXPECT_FALSE(kernels::linear_tc_wr_supported(1, w16, x16, 0, 16, 1024, 1, 128, 128));
  EXPECT_FALSE(kernels::linear_tc_wr_supported(1, w16, x16, 1, 24, 1024, 1, 128, 128));  // N % 16
  EXPECT_FALSE(kernels::linear_tc_wr_supported(1, w16, x16, 1, 16, 1056, 1, 128, 128));  // K % 128
  EXPECT_FALSE(
      kernels::linear_tc_wr_supported(1, w16, x16, 1, 16, 1024, 1, 64, 128));  // block cols
  EXPECT_FALSE(
      kernels::linear_tc_wr_supported(1, w16, x16, 1, 16, 1024, 1, 128, 96));  // split % 128
  EXPECT_FALSE(
      kernels::linear_tc_wr_supported(1, w16, x16, 1, 16, 4096, 1, 128, 2048));  // split > 1024
  EXPECT_FALSE(
      kernels::linear_tc_wr_supported(1, w16 + 8, x16, 1, 16, 1024, 1, 128, 128));  // w alignment
  EXPECT_FALSE(
      kernels::linear_tc_wr_supported(1, w16, x16 + 2, 1, 16, 1024, 1, 128, 128));  // x alignment
  EXPECT_FALSE(kernels::linear_tc_wr_supported(1, w16, x16, 1, 16, 1024, 0, 128, 128));  // no group
  cudaFree(x16);
  cudaFree(w16);
}

// Session 18: linear_tc_wg (warpgroup MMA) against linear_tc, bitwise, at every bf16 / e4m3 shape
// of cases() it takes plus odd ones (partial 128-row tiles and warps, groups, f32 scales with
// 64-row blocks, ±inf / NaN in x), M from 1 to 64 (every B width: 16, 32, 48, 64 columns),
// the batch-invariant split, the default mode's, the whole K and 256-k splits, PDL on and off.
TEST_F(CudaLinearTcWa, WgIsBitwiseLinearTcAtModelShapes) {
  std::vector<ShapeCase> wg_cases;
  for (const ShapeCase& c : cases())
    if (fmt_code(c.f) != 2 && c.K % 128 == 0) wg_cases.push_back(c);
  wg_cases.push_back(
      {"odd wg fp8: 300 rows (a partial tile), K 1280", Fmt::kFp8, 1, 300, 1280, true});
  wg_cases.push_back(
      {"odd wg fp8 f32 scales: 3 groups of 50 rows, K 384", Fmt::kFp8F32Scale, 3, 50, 384, false});
  wg_cases.push_back({"odd wg bf16: 2 groups of 77 rows, K 640", Fmt::kBf16, 2, 77, 640, true});
  ASSERT_GE(wg_cases.size(), 14u);
  uint64_t wseed = seed_ ^ 0x51ed270bu;
  int compared = 0;
  const int64_t rows_to_try[] = {64, 17, 32, 33, 48, 1, 16};
  for (const ShapeCase& c : wg_cases) {
    const int64_t G = c.G, N = c.N, K = c.K, GN = G * N;
    const int fmt = fmt_code(c.f);
    backend::Weight hw;
    fast_weight(c.f, GN, K, ++wseed * 0x2545F4914F6CDD1DULL, &hw);
    const backend::Weight dw = upload_weight(hw);
    const int64_t bc = fmt == 0 ? 0 : hw.block_cols;
    const Tensor x = randn({64, G * K}, c.nonfinite_x);
    const Pair dx = on_device(x);
    const bool head = std::string(c.name) == "head (bf16)";
    for (int64_t M : rows_to_try) {
      if (head && M != 64 && M != 33 && M != 17) continue;  // the 1 GB head: three widths
      std::vector<int64_t> splits_to_try = {kernels::linear_tc_k_split(M, GN, K, bc, true)};
      for (int64_t ks : {kernels::linear_tc_k_split(M, GN, K, bc, false), K, int64_t{256}})
        if (!head &&
            std::find(splits_to_try.begin(), splits_to_try.end(), ks) == splits_to_try.end())
          splits_to_try.push_back(ks);
      for (int64_t k_split : splits_to_try) {
        ASSERT_TRUE(kernels::linear_tc_wg_supported(fmt, dw.w.raw(), dx.dev.data<float>(), M, N, K,
                                                    G, hw.block_cols, k_split))
            << c.name << " M " << M << " k_split " << k_split;
        Tensor ref_h;
        run_ref(c, hw, dw, dx, M, k_split, &ref_h);
        const int64_t splits = (K + k_split - 1) / k_split;
        for (bool pdl : {true, false}) {
          if (head && !pdl) continue;
          Tensor got, unused;
          nan_filled(M, GN, 1, &got, &unused);
          auto ws = bi_->alloc(
              DType::kU8,
              {static_cast<int64_t>(kernels::linear_tc_wg_workspace_bytes(M, N, K, G, k_split))});
          ASSERT_TRUE(ws.ok());
          ASSERT_EQ(testing::memset_sync(ws->raw(), 0xFF, static_cast<size_t>(ws->numel())),
                    cudaSuccess);
          ASSERT_TRUE(kernels::linear_tc_wg(
              fmt, dx.dev.data<float>(), dw.w.raw(), fmt == 0 ? nullptr : dw.scale.raw(),
              c.f == Fmt::kFp8F32Scale, M, N, K, G, hw.block_rows, k_split, got.data<float>(),
              ws->raw(), bi_->stream(), pdl));
          ASSERT_EQ(cudaGetLastError(), cudaSuccess);
          ASSERT_TRUE(bi_->synchronize().ok());
          const Tensor got_h = to_host(got);
          const std::string what =
              std::string("wg vs linear_tc, ") + c.name + " " + fmt_name(c.f) +
              " M=" + std::to_string(M) + " k_split=" + std::to_string(k_split) + " (" +
              std::to_string(splits) + " splits)" + (pdl ? "" : ", plain launch");
          print_diff(what, got_h, ref_h);
          expect_same_bits(what.c_str(), got_h, ref_h, seed_);
          ++compared;
        }
      }
    }
  }
  std::printf("wg: %d bitwise comparisons\n", compared);
  EXPECT_GE(compared, 250);
}

TEST_F(CudaLinearTcWa, WgRefusesWhatItCannotTake) {
  float* x16 = nullptr;
  uint8_t* w16 = nullptr;
  ASSERT_EQ(cudaMalloc(&x16, 4096), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&w16, 4096), cudaSuccess);
  EXPECT_TRUE(kernels::linear_tc_wg_supported(1, w16, x16, 64, 30, 1024, 1, 128, 128));
  EXPECT_TRUE(kernels::linear_tc_wg_supported(0, w16, x16, 1, 7, 4096, 8, 0, 4096));
  EXPECT_TRUE(
      kernels::linear_tc_wg_supported(0, w16, x16, 33, 16, 1024, 1, 0, 8192));  // k_split > K
  EXPECT_FALSE(kernels::linear_tc_wg_supported(2, w16, x16, 1, 16, 1024, 1, 128, 128));   // FP4
  EXPECT_FALSE(kernels::linear_tc_wg_supported(3, w16, x16, 1, 16, 1024, 1, 128, 128));   // f32
  EXPECT_FALSE(kernels::linear_tc_wg_supported(1, w16, x16, 65, 16, 1024, 1, 128, 128));  // M > 64
  EXPECT_FALSE(kernels::linear_tc_wg_supported(1, w16, x16, 0, 16, 1024, 1, 128, 128));
  EXPECT_FALSE(kernels::linear_tc_wg_supported(1, w16, x16, 1, 16, 1088, 1, 128, 128));  // K % 128
  EXPECT_FALSE(
      kernels::linear_tc_wg_supported(1, w16, x16, 1, 16, 1024, 1, 64, 128));  // block cols
  EXPECT_FALSE(
      kernels::linear_tc_wg_supported(1, w16, x16, 1, 16, 1024, 1, 128, 192));  // split % 128
  EXPECT_FALSE(
      kernels::linear_tc_wg_supported(1, w16 + 8, x16, 1, 16, 1024, 1, 128, 128));  // w align
  EXPECT_FALSE(
      kernels::linear_tc_wg_supported(1, w16, x16 + 2, 1, 16, 1024, 1, 128, 128));       // x align
  EXPECT_FALSE(kernels::linear_tc_wg_supported(1, w16, x16, 1, 16, 1024, 0, 128, 128));  // no group
  EXPECT_FALSE(kernels::linear_tc_wg_supported(1, w16, x16, 1, 0, 1024, 1, 128, 128));   // no rows
  // A refusal launches nothing and says so.
  EXPECT_FALSE(kernels::linear_tc_wg(1, x16, w16, w16, false, 65, 16, 1024, 1, 128, 128, x16, w16,
                                     bi_->stream(), true));
  EXPECT_FALSE(kernels::linear_tc_wg(1, x16, w16, nullptr, false, 8, 16, 1024, 1, 128, 128, x16,
                                     w16, bi_->stream(), true));  // e4m3 without scales
  cudaFree(x16);
  cudaFree(w16);
}

TEST_F(CudaLinearTcWa, RefusesWhatItCannotTake) {
  float* x16 = nullptr;
  uint8_t* w16 = nullptr;
  ASSERT_EQ(cudaMalloc(&x16, 4096), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&w16, 4096), cudaSuccess);
  EXPECT_TRUE(kernels::linear_tc_wa_supported(1, w16, x16, 16, 128, true, 128));
  EXPECT_TRUE(kernels::linear_tc_wa_supported(0, w16, x16, 1, 8, false, 0));
  EXPECT_FALSE(kernels::linear_tc_wa_supported(1, w16, x16, 17, 128, true, 128));  // M > 16
  EXPECT_FALSE(kernels::linear_tc_wa_supported(1, w16, x16, 0, 128, true, 128));
  EXPECT_FALSE(kernels::linear_tc_wa_supported(1, w16, x16, 4, 120, true, 128));   // row bytes
  EXPECT_FALSE(kernels::linear_tc_wa_supported(1, w16, x16, 4, 128, true, 16));    // block cols
  EXPECT_FALSE(kernels::linear_tc_wa_supported(0, w16 + 8, x16, 4, 128, false, 0));  // w alignment
  EXPECT_FALSE(kernels::linear_tc_wa_supported(0, w16, x16 + 2, 4, 128, false, 0));  // x alignment
  EXPECT_FALSE(kernels::linear_tc_wa_supported(3, w16, x16, 4, 128, false, 0));    // f32 weights
  cudaFree(x16);
  cudaFree(w16);
}

}  // namespace
}  // namespace deepinfer::cuda
