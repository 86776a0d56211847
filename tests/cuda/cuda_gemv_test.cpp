// The streaming GEMV (gemv.cu, gemv_experts.cu) on the GPU: every stored format (bf16, e4m3 with
// ue8m0 or f32 128×128 scales, e2m1 with ue8m0 1×32 scales, f32) on random shapes with odd K / N
// tails, partial scale blocks and groups, against a double-precision reference of the
// dequantized weights and the CPU backend; bitwise row independence (a row alone = the same row
// in any batch, any tile of x rows, the vector and the scalar path); the routed experts with
// repeated picks, crowded experts, bad ids, against the CPU and bitwise against the same products
// computed one slot at a time; the session-5 expert kernel (gemv_experts_v2) bit for bit equal to
// session 4's at V4-Flash's expert shapes (decode batches 1, 4, 16, 32 × top-6 of 256) and on odd
// shapes, and within the bound below of a double reference.
//
// Error bound per element (first order, rigorous for the kernel's arithmetic; gemv.cuh): the
// decode is exact, a lane fma-chains a chunk's E elements from zero (E roundings), promotes the
// chunk with one fma into its accumulator (one rounding per chunk, ceil(K / (32·E)) chunks per
// lane), and 5 xor-tree additions sum the lanes. Every rounding is ≤ u = 2^-24 of a partial sum
// bounded by Σ_k |x_k · w_k|, so |gemv − exact| ≤ n·u·Σ|x·w| with n = E + K/(32E) + 8 (slack
// included). The CPU backend's reference mode sums sequentially in fp32 (≤ K·u·Σ|x·w|), so
// |gemv − cpu| ≤ (n + K)·u·Σ|x·w|. Routed experts chain two products through a clamped SwiGLU
// and add into a base row: row-relative bound 5e-5 as in cuda_linear_tc_test.
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
#include "backend/cuda/kernels.h"
#include "common/env.h"
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

enum class Fmt { kBf16, kFp8, kFp8F32Scale, kFp4, kF32 };
const char* fmt_name(Fmt f) {
  return f == Fmt::kBf16 ? "bf16" : f == Fmt::kFp8 ? "fp8 (ue8m0 128x128)"
         : f == Fmt::kFp8F32Scale ? "fp8 (f32 128x128)" : f == Fmt::kFp4 ? "fp4 (ue8m0 1x32)" : "f32";
}
int kernel_fmt(Fmt f) {
  return f == Fmt::kBf16 ? 0 : f == Fmt::kFp4 ? 2 : f == Fmt::kF32 ? 3 : 1;
}
int64_t elems_per_chunk(Fmt f) {
  return f == Fmt::kBf16 ? 8 : f == Fmt::kFp4 ? 32 : f == Fmt::kF32 ? 4 : 16;
}
bool scaled(Fmt f) { return f == Fmt::kFp8 || f == Fmt::kFp8F32Scale || f == Fmt::kFp4; }

// A device buffer holding `h`'s bytes at byte offset `shift` (misaligned copies force the
// kernels' scalar paths).
struct Shifted {
  DeviceBuffer buf;
  void* ptr = nullptr;
};
Shifted shifted_copy(const Tensor& h, int shift) {
  Shifted s{std::move(DeviceBuffer::allocate(h.nbytes() + 32)).value(), nullptr};
  s.ptr = static_cast<uint8_t*>(s.buf.data()) + shift;
  EXPECT_EQ(cudaMemcpy(s.ptr, h.raw(), h.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  return s;
}

class CudaGemv : public ::testing::Test {
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
  // A random weight [R, K] in format f (host) and its dequantized fp32 copy (CPU backend).
  // block_cols > 0 overrides the format's scale block width.
  void random_weight(Fmt f, int64_t R, int64_t K, backend::Weight* w, Tensor* deq,
                     int64_t block_cols = 0) {
    if (f == Fmt::kF32) {
      w->w = randn({R, K}, 0.1f);
      w->scale = Tensor();
      w->block_rows = w->block_cols = 1;
      *deq = w->w.clone();
      return;
    }
    if (f == Fmt::kBf16) {
      w->w = Tensor::empty(DType::kBF16, {R, K});
      for (int64_t i = 0; i < R * K; ++i)  // |w| in [2^-8, 2^8), random sign
        w->w.data<uint16_t>()[i] = static_cast<uint16_t>(0x3B80 + rng_() % 0x0800) ^ (rng_() & 0x8000);
    } else {
      w->w = Tensor::empty(f == Fmt::kFp4 ? DType::kF4E2M1 : DType::kF8E4M3, {R, K});
      for (uint64_t i = 0; i < w->w.nbytes(); ++i) {
        uint8_t b = static_cast<uint8_t>(rng_());
        if (f != Fmt::kFp4 && (b & 0x7F) == 0x7F) b = 0x3F;  // no NaN codes (tested apart)
        w->w.data<uint8_t>()[i] = b;
      }
      w->block_rows = f == Fmt::kFp4 ? 1 : 128;
      w->block_cols = block_cols > 0 ? block_cols : f == Fmt::kFp4 ? 32 : 128;
      const int64_t sr = (R + w->block_rows - 1) / w->block_rows, sc = (K + w->block_cols - 1) / w->block_cols;
      if (f == Fmt::kFp8F32Scale) {
        w->scale = Tensor::empty(DType::kF32, {sr, sc});
        std::uniform_real_distribution<float> u(0.001f, 0.1f);
        for (int64_t i = 0; i < w->scale.numel(); ++i) w->scale.data<float>()[i] = u(rng_);
      } else {
        w->scale = Tensor::empty(DType::kF8E8M0, {sr, sc});
        for (int64_t i = 0; i < w->scale.numel(); ++i)
          w->scale.data<uint8_t>()[i] = static_cast<uint8_t>(118 + rng_() % 10);
        if (w->scale.numel() > 2) w->scale.data<uint8_t>()[1] = 0;  // 2^-127: the smallest scale
      }
    }
    *deq = Tensor::empty(DType::kF32, {R, K});
    ASSERT_TRUE(cpu_->dequantize(w->w, w->scale.defined() ? &w->scale : nullptr, w->block_rows,
                                 w->block_cols, *deq).ok());
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
  // GEMV through the kernel entry point (any format, f32 included) into a host tensor.
  Tensor run_gemv(Fmt f, const void* x, const void* w, const void* scale, int64_t M, int64_t N,
                  int64_t K, int64_t G, const backend::Weight& hw) {
    auto out = DeviceBuffer::allocate(std::max<int64_t>(M * G * N, 4) * 4);
    EXPECT_TRUE(out.ok());
    kernels::gemv_linear(kernel_fmt(f), static_cast<const float*>(x), w, scale,
                         hw.scale.defined() && hw.scale.dtype() == DType::kF32, M, N, K, G,
                         hw.block_rows, hw.block_cols, static_cast<float*>(out->data()), nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    Tensor h = Tensor::empty(DType::kF32, {M, G * N});
    EXPECT_EQ(cudaMemcpy(h.raw(), out->data(), h.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<backend::Backend> cpu_;
  std::vector<Pair> keep_;
};

// Per element: the double result of x · deqᵀ and Σ|x·w| (the error scale).
struct Ref {
  std::vector<double> val, abs;
};
Ref reference(const Tensor& x, const Tensor& deq, int64_t G) {
  const int64_t M = x.dim(0), GN = deq.dim(0), K = deq.dim(1), N = GN / G;
  Ref r{std::vector<double>(M * GN), std::vector<double>(M * GN)};
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < GN; ++n) {
      const float* xr = x.data<float>() + m * G * K + (n / N) * K;
      const float* wr = deq.data<float>() + n * K;
      double s = 0, a = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(xr[k]) * wr[k];
        s += p;
        a += std::fabs(p);
      }
      r.val[m * GN + n] = s;
      r.abs[m * GN + n] = a;
    }
  return r;
}

// |got − want| ≤ factor · u · Σ|x·w| + 1e-37 for every element (NaN must match NaN).
void expect_within(const std::string& what, const float* got, const std::vector<double>& want,
                   const std::vector<double>& abs, double factor, uint32_t seed) {
  const double u = std::ldexp(1.0, -24);
  double worst = 0;
  size_t wi = 0;
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) || std::isnan(got[i])) {
      if (std::isnan(want[i]) != std::isnan(got[i]) && bad++ == 0)
        ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i]
                      << " seed " << seed;
      continue;
    }
    const double err = std::fabs(got[i] - want[i]), lim = factor * u * abs[i] + 1e-37;
    if (err / lim > worst) worst = err / lim, wi = i;
  }
  EXPECT_LE(worst, 1.0) << what << ": worst element " << wi << " error " << std::fabs(got[wi] - want[wi])
                        << " = " << worst << " × the bound; seed " << seed;
}

TEST_F(CudaGemv, MatchesDoubleAndCpuInEveryFormat) {
  struct Case { Fmt f; int64_t G, N, K; };
  // K = 208: fp4 rows of 104 bytes (scalar path), a partial 128-column scale block for fp8;
  // K = 100 / 30 / 7: element paths with tails; N = 129 / 300: partial 128-row scale blocks;
  // G = 2, 3: grouped products; K = 4096: the decode shape.
  const std::vector<Case> cases = {
      {Fmt::kBf16, 1, 300, 1056}, {Fmt::kBf16, 2, 72, 200}, {Fmt::kBf16, 1, 33, 7},
      {Fmt::kFp8, 1, 129, 1056},  {Fmt::kFp8, 2, 72, 208},  {Fmt::kFp8, 3, 40, 100},
      {Fmt::kFp8, 1, 260, 4096},  {Fmt::kFp8F32Scale, 1, 130, 384},
      {Fmt::kFp4, 1, 300, 352},   {Fmt::kFp4, 2, 40, 128},  {Fmt::kFp4, 1, 257, 208},
      {Fmt::kFp4, 1, 3, 30},      {Fmt::kFp4, 1, 200, 4096}, {Fmt::kF32, 1, 77, 260},
      {Fmt::kF32, 2, 5, 13}};
  for (const Case& c : cases) {
    const int64_t R = c.G * c.N;
    backend::Weight hw;
    Tensor deq;
    random_weight(c.f, R, c.K, &hw, &deq);
    ASSERT_TRUE(kernels::gemv_supported(kernel_fmt(c.f), c.K, scaled(c.f), hw.block_cols));
    const backend::Weight dw = upload_weight(hw);
    Tensor x = randn({8, c.G * c.K});
    auto dx = on_device(x);
    for (int64_t M : {1, 2, 3, 5, 8}) {
      Tensor xm = x.rows(0, M);
      const Ref ref = reference(xm, deq, c.G);
      Tensor cpu = Tensor::empty(DType::kF32, {M, R});
      ASSERT_TRUE(cpu_->matmul(xm, deq, cpu, c.G).ok());
      std::vector<double> cpu64(cpu.data<float>(), cpu.data<float>() + M * R);
      const std::string what = std::string(fmt_name(c.f)) + " M=" + std::to_string(M) + " G=" +
                               std::to_string(c.G) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K);
      Tensor got = run_gemv(c.f, dx.dev.raw(), dw.w.raw(), dw.scale.defined() ? dw.scale.raw() : nullptr,
                            M, c.N, c.K, c.G, hw);
      const double E = double(elems_per_chunk(c.f));
      const double n = E + std::ceil(c.K / (32 * E)) + 8;
      expect_within(what + " vs double", got.data<float>(), ref.val, ref.abs, n, seed_);
      expect_within(what + " vs cpu", got.data<float>(), cpu64, ref.abs, n + c.K, seed_);
      // The backend's linear dispatches M ≤ 8 to the GEMV (stored formats, K here is small):
      // the same bits as the kernel entry point.
      if (c.f != Fmt::kF32) {
        auto out = gpu_->alloc(DType::kF32, {M, R});
        ASSERT_TRUE(out.ok());
        Status st = gpu_->linear(dx.dev.rows(0, M), dw, *out, c.G);
        ASSERT_TRUE(st.ok()) << st.to_string();
        ASSERT_TRUE(gpu_->synchronize().ok());
        Tensor be = to_host(*out);
        // Session 8: with DEEPINFER_GEMV_KERNEL auto | v1..v4 the dispatch runs gemv_v3.cuh where
        // it takes the layout (its own arithmetic, checked here against double too), else the s7
        // kernel above.
        Tensor want_be = got;
        kernels::Gemv3Options o3;
        const int kf = kernel_fmt(c.f);
        if (kernels::gemv3_options_for(env().gemv_kernel.c_str(), &o3) && (kf == 0 || kf == 1) &&
            c.G <= 8 && kernels::gemv3_supported(kf, c.K, kf == 1, hw.block_cols) &&
            kernels::gemv3_dispatch_takes(o3, kf, R, c.K, c.G)) {
          const int passes = kernels::gemv3_passes(kf, M, c.K, o3);
          auto b3 = DeviceBuffer::allocate(std::max<int64_t>(M * R, 4) * 4);
          ASSERT_TRUE(b3.ok());
          if (passes >= 1 && passes <= 2 &&
              kernels::gemv3_linear(kf, static_cast<const float*>(dx.dev.raw()), dw.w.raw(),
                                    dw.scale.defined() ? dw.scale.raw() : nullptr,
                                    c.f == Fmt::kFp8F32Scale, M, c.N, c.K, c.G, hw.block_rows,
                                    hw.block_cols, static_cast<float*>(b3->data()), nullptr, false, o3)) {
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            want_be = Tensor::empty(DType::kF32, {M, R});
            ASSERT_EQ(cudaMemcpy(want_be.raw(), b3->data(), M * R * 4, cudaMemcpyDeviceToHost), cudaSuccess);
            expect_within(what + " v3 vs double", want_be.data<float>(), ref.val, ref.abs, n, seed_);
          }
        }
        EXPECT_EQ(0, std::memcmp(be.data<float>(), want_be.data<float>(), M * R * 4))
            << what << ": CudaBackend::linear differs from the GEMV (not dispatched to it?)";
      }
    }
  }
}

TEST_F(CudaGemv, RowsAreBitwiseIndependentOfTheBatchAndThePath) {
  // Every row of an M = 8 product must equal, bit for bit: the row alone (M = 1), the row inside
  // other windows (another position in the staged x tile, another tile size), and the product
  // with the weight or x misaligned (scalar weight loads / scalar x staging).
  for (Fmt f : {Fmt::kBf16, Fmt::kFp8, Fmt::kFp8F32Scale, Fmt::kFp4, Fmt::kF32}) {
    const int64_t G = f == Fmt::kFp8 ? 2 : 1, N = 136, K = f == Fmt::kFp4 ? 512 : 256;
    backend::Weight hw;
    Tensor deq;
    random_weight(f, G * N, K, &hw, &deq);
    const backend::Weight dw = upload_weight(hw);
    const void* sc = dw.scale.defined() ? dw.scale.raw() : nullptr;
    Tensor x = randn({8, G * K});
    auto dx = on_device(x);
    Tensor full = run_gemv(f, dx.dev.raw(), dw.w.raw(), sc, 8, N, K, G, hw);
    for (auto [b, M] : {std::pair<int64_t, int64_t>{0, 1}, {5, 1}, {7, 1}, {1, 2}, {3, 3}, {2, 5}, {4, 4}}) {
      Tensor got = run_gemv(f, static_cast<const float*>(dx.dev.raw()) + b * G * K, dw.w.raw(), sc,
                            M, N, K, G, hw);
      EXPECT_EQ(0, std::memcmp(got.data<float>(), full.data<float>() + b * G * N, M * G * N * 4))
          << fmt_name(f) << ": rows [" << b << ", " << b + M << ") differ from the same rows of M = 8";
    }
    // The same weight bytes off 16-byte alignment (by one element, fp4 by one byte = two codes):
    // the scalar path, which must compute the same chunks in the same order.
    const int shift = f == Fmt::kBf16 ? 2 : f == Fmt::kF32 ? 4 : 1;
    Shifted ws = shifted_copy(hw.w, shift);
    Tensor scalar_w = run_gemv(f, dx.dev.raw(), ws.ptr, sc, 8, N, K, G, hw);
    EXPECT_EQ(0, std::memcmp(scalar_w.data<float>(), full.data<float>(), 8 * G * N * 4))
        << fmt_name(f) << ": the scalar weight path differs from the vector path";
    Shifted xs = shifted_copy(x, 4);  // x rows off 16-byte alignment: scalar staging
    Tensor scalar_x = run_gemv(f, xs.ptr, dw.w.raw(), sc, 8, N, K, G, hw);
    EXPECT_EQ(0, std::memcmp(scalar_x.data<float>(), full.data<float>(), 8 * G * N * 4))
        << fmt_name(f) << ": scalar x staging differs from vector staging";
  }
}

TEST_F(CudaGemv, NanCodesAndScalesPropagate) {
  // An e4m3 NaN code makes its row's outputs NaN for every x row (as the CPU's dequantized NaN);
  // a ue8m0 0xFF scale makes its block's rows NaN. Other rows stay finite and within the bound.
  for (bool scalar : {false, true}) {
    const int64_t N = 130, K = scalar ? 200 : 256;
    backend::Weight hw;
    Tensor deq;
    random_weight(Fmt::kFp8, N, K, &hw, &deq);
    hw.w.data<uint8_t>()[5 * K + 17] = 0x7F;
    hw.w.data<uint8_t>()[9 * K + K - 1] = 0xFF;
    hw.scale.data<uint8_t>()[hw.scale.dim(1) * 1 + 0] = 0xFF;  // rows 128, 129
    ASSERT_TRUE(cpu_->dequantize(hw.w, &hw.scale, hw.block_rows, hw.block_cols, deq).ok());
    const backend::Weight dw = upload_weight(hw);
    Tensor x = randn({3, K});
    auto dx = on_device(x);
    Tensor got = run_gemv(Fmt::kFp8, dx.dev.raw(), dw.w.raw(), dw.scale.raw(), 3, N, K, 1, hw);
    const Ref ref = reference(x, deq, 1);
    for (int64_t m = 0; m < 3; ++m)
      for (int64_t n : {int64_t{5}, int64_t{9}, int64_t{128}, int64_t{129}})
        EXPECT_TRUE(std::isnan(got.data<float>()[m * N + n])) << "row " << m << " col " << n;
    expect_within(std::string("fp8 with NaN codes") + (scalar ? " (scalar path)" : ""),
                  got.data<float>(), ref.val, ref.abs, 16 + 8 + 8, seed_);
  }
}

TEST_F(CudaGemv, OtherScaleBlocksAndUnsupportedLayouts) {
  // What the GEMV takes: a chunk inside one scale block with a power-of-two number of chunks per
  // block, fp4 with an even K, one x row in shared memory.
  EXPECT_TRUE(kernels::gemv_supported(1, 4096, true, 128));
  EXPECT_TRUE(kernels::gemv_supported(1, 4096, true, 64));
  EXPECT_TRUE(kernels::gemv_supported(2, 4096, true, 32));
  EXPECT_TRUE(kernels::gemv_supported(2, 4096, true, 128));
  EXPECT_FALSE(kernels::gemv_supported(1, 4096, true, 48));   // 3 chunks per block
  EXPECT_FALSE(kernels::gemv_supported(1, 4096, true, 8));    // a chunk straddles blocks
  EXPECT_FALSE(kernels::gemv_supported(2, 4096, true, 16));
  EXPECT_FALSE(kernels::gemv_supported(2, 31, true, 32));     // odd K for packed fp4
  EXPECT_FALSE(kernels::gemv_supported(0, 40000, false, 1));  // x row > shared-memory budget
  EXPECT_EQ(kernels::gemv_tile_rows(1, 4096), 1);
  EXPECT_EQ(kernels::gemv_tile_rows(3, 4096), 4);
  EXPECT_EQ(kernels::gemv_tile_rows(8, 4096), 4);  // 6 rows fit: tiles of 4
  EXPECT_EQ(kernels::gemv_tile_rows(8, 1024), 8);
  // Other block widths through the backend: 128×64 (GEMV), 128×48 (refused: the fallback path);
  // both within the bound of the CPU.
  for (int64_t bc : {64, 48}) {
    const int64_t N = 200, K = 320, M = 3;
    backend::Weight hw;
    Tensor deq;
    random_weight(Fmt::kFp8, N, K, &hw, &deq, bc);
    const backend::Weight dw = upload_weight(hw);
    Tensor x = randn({M, K});
    auto dx = on_device(x);
    const Ref ref = reference(x, deq, 1);
    auto out = gpu_->alloc(DType::kF32, {M, N});
    ASSERT_TRUE(out.ok());
    Status st = gpu_->linear(dx.dev, dw, *out, 1);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(gpu_->synchronize().ok());
    Tensor got = to_host(*out);
    expect_within("fp8 128x" + std::to_string(bc) + " blocks vs double", got.data<float>(), ref.val,
                  ref.abs, 2.0 * K, seed_);
  }
}

class CudaGemvExperts : public CudaGemv {
 protected:
  // E experts in format f: CPU set (dequantized f32) and GPU set (stored, prepared).
  void make_experts(Fmt f, int64_t E, int64_t H, int64_t I) {
    cpu_set_ = {};
    gpu_set_ = {};
    for (int64_t e = 0; e < E; ++e)
      for (int proj = 0; proj < 2; ++proj) {
        backend::Weight hw;
        Tensor deq;
        random_weight(f, proj == 0 ? 2 * I : H, proj == 0 ? H : I, &hw, &deq);
        (proj == 0 ? cpu_set_.gate_up : cpu_set_.down).push_back(backend::Weight::of(deq));
        (proj == 0 ? gpu_set_.gate_up : gpu_set_.down).push_back(upload_weight(hw));
      }
    ASSERT_TRUE(gpu_->prepare_experts(gpu_set_).ok());
    ASSERT_NE(gpu_set_.prepared, nullptr);
  }
  // moe_experts on the GPU into base (a copy), host result.
  Tensor gpu_moe(const Tensor& x, const Tensor& ids, const Tensor& w, const Tensor& base, Status* st) {
    auto dx = on_device(x), dids = on_device(ids), dw = on_device(w), dout = on_device(base);
    *st = gpu_->moe_experts(dx.dev, dids.dev, dw.dev, gpu_set_, 7.0f, dout.dev);
    if (st->ok()) *st = gpu_->synchronize();
    return to_host(dout.dev);
  }
  backend::ExpertSet cpu_set_, gpu_set_;
};

// Row-relative: per row max |got − want| / max |want| ≤ bound.
void expect_rows_close(const std::string& what, const float* want, const float* got, int64_t rows,
                       int64_t cols, double bound, uint32_t seed) {
  double worst = 0;
  int64_t wr = -1;
  for (int64_t r = 0; r < rows; ++r) {
    double scale = 1e-30, err = 0;
    for (int64_t c = 0; c < cols; ++c) scale = std::max(scale, double(std::fabs(want[r * cols + c])));
    for (int64_t c = 0; c < cols; ++c) {
      const double e = std::fabs(double(want[r * cols + c]) - got[r * cols + c]);
      if (!(e <= err)) err = e;
    }
    if (!(err / scale <= worst)) worst = err / scale, wr = r;
  }
  EXPECT_LE(worst, bound) << what << ": worst row-relative error " << worst << " at row " << wr
                          << " seed " << seed;
}

TEST_F(CudaGemvExperts, MatchCpuWithRepeatsAndCrowdedExperts) {
  // Slots ≤ 128 (decode): grouped on the device, each selected expert read once per tile of its
  // tokens. Repeats within a token, one expert picked by every token (more rows than a tile),
  // experts never picked; H = 256, I = 160 (fp4 down rows of 80 bytes: the scalar path).
  const int64_t E = 40, H = 256, I = 160, k = 6;
  for (Fmt f : {Fmt::kFp4, Fmt::kFp8, Fmt::kBf16, Fmt::kF32}) {
    make_experts(f, E, H, I);
    for (int64_t S : {1, 3, 16, 21}) {
      Tensor x = randn({S, H}, 0.5f), w = randn({S, k}, 0.3f), base = randn({S, H});
      Tensor ids = Tensor::empty(DType::kI32, {S, k});
      for (int64_t i = 0; i < S * k; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>(rng_() % (E - 2));
      for (int64_t s = 0; s < S; ++s) ids.data<int32_t>()[s * k + 2] = 7;  // crowded expert 7
      ids.data<int32_t>()[1] = ids.data<int32_t>()[0];                      // a repeat in token 0
      Tensor want = base.clone();
      ASSERT_TRUE(cpu_->moe_experts(x, ids, w, cpu_set_, 7.0f, want).ok());
      Status st;
      Tensor got = gpu_moe(x, ids, w, base, &st);
      ASSERT_TRUE(st.ok()) << st.to_string();
      const std::string what = std::string("moe_experts ") + fmt_name(f) + " S=" + std::to_string(S);
      expect_rows_close(what, want.data<float>(), got.data<float>(), S, H, 5e-5, seed_);
      // Row independence: each token alone gives the bits it gets in the batch.
      for (int64_t s : {int64_t{0}, S - 1}) {
        Status st1;
        Tensor one = gpu_moe(x.rows(s, s + 1), ids.rows(s, s + 1), w.rows(s, s + 1), base.rows(s, s + 1), &st1);
        ASSERT_TRUE(st1.ok()) << st1.to_string();
        EXPECT_EQ(0, std::memcmp(one.data<float>(), got.data<float>() + s * H, H * 4))
            << what << ": token " << s << " alone differs from the batch";
      }
    }
  }
}

TEST_F(CudaGemvExperts, SlotsEqualTheSameProductsOneAtATime) {
  // Each slot's products are the plain GEMV's: linear (M = 1, dispatched to the GEMV) on the
  // slot's expert, swiglu, linear, then combine_slots — bit for bit equal to moe_experts on the
  // GEMV path (FP8 always; FP4 with DEEPINFER_EXPERTS_MMA=0).
  const int64_t E = 12, H = 256, I = 128, k = 4, S = 5;
  for (Fmt f : {Fmt::kFp4, Fmt::kFp8}) {
    make_experts(f, E, H, I);
    Tensor x = randn({S, H}), w = randn({S, k}, 0.3f), base = randn({S, H});
    Tensor ids = Tensor::empty(DType::kI32, {S, k});
    for (int64_t i = 0; i < S * k; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>(rng_() % E);
    ids.data<int32_t>()[3] = ids.data<int32_t>()[2];
    Status st;
    Tensor got = gpu_moe(x, ids, w, base, &st);
    ASSERT_TRUE(st.ok()) << st.to_string();
    auto dx = on_device(x);
    auto slot_out = gpu_->alloc(DType::kF32, {S * k, H});
    ASSERT_TRUE(slot_out.ok());
    for (int64_t i = 0; i < S * k; ++i) {
      const int32_t e = ids.data<int32_t>()[i];
      auto gu = gpu_->alloc(DType::kF32, {1, 2 * I});
      auto act = gpu_->alloc(DType::kF32, {1, I});
      ASSERT_TRUE(gu.ok() && act.ok());
      ASSERT_TRUE(gpu_->linear(dx.dev.rows(i / k, i / k + 1), gpu_set_.gate_up[e], *gu, 1).ok());
      ASSERT_TRUE(gpu_->swiglu(*gu, 7.0f, *act).ok());
      Tensor row = slot_out->rows(i, i + 1);
      ASSERT_TRUE(gpu_->linear(*act, gpu_set_.down[e], row, 1).ok());
    }
    auto dw = on_device(w), dbase = on_device(base);
    ASSERT_TRUE(gpu_->combine_slots(*slot_out, dw.dev, k, dbase.dev).ok());
    ASSERT_TRUE(gpu_->synchronize().ok());
    Tensor want = to_host(dbase.dev);
    // FP4 gate_up (K = 256) runs on the decode tensor-core kernel by default (experts_mma.cuh,
    // DEEPINFER_EXPERTS_MMA), whose bits are not the GEMV's: there, within fp32 rounding.
    if (f == Fmt::kFp4 && env().experts_mma) {
      expect_rows_close(std::string(fmt_name(f)) + " moe_experts (tensor cores) vs one slot at a time",
                        want.data<float>(), got.data<float>(), S, H, 5e-5, seed_);
      continue;
    }
    // Dense FP8 products of these shapes (K <= 1024) run on session 8's GEMV (gemv_v3.cuh, its
    // own row-independent bits) unless DEEPINFER_GEMV_KERNEL=s7, while the expert GEMV keeps
    // gemv.cuh's arithmetic: bitwise only against session 7's dense GEMV.
    if (f == Fmt::kFp8 && env().gemv_kernel != "s7") {
      expect_rows_close(std::string(fmt_name(f)) + " moe_experts vs one slot at a time (gemv_v3 dense)",
                        want.data<float>(), got.data<float>(), S, H, 5e-5, seed_);
      continue;
    }
    EXPECT_EQ(0, std::memcmp(want.data<float>(), got.data<float>(), S * H * 4))
        << fmt_name(f) << ": moe_experts differs from the same products one slot at a time";
  }
}

TEST_F(CudaGemvExperts, BadExpertIdsAreReportedAndContributeNothing) {
  const int64_t E = 10, H = 128, I = 64, k = 3, S = 6;
  make_experts(Fmt::kFp4, E, H, I);
  Tensor x = randn({S, H}), w = randn({S, k}, 0.3f), base = randn({S, H});
  Tensor ids = Tensor::empty(DType::kI32, {S, k});
  for (int64_t i = 0; i < S * k; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>(rng_() % E);
  ids.data<int32_t>()[4] = static_cast<int32_t>(E);  // token 1
  ids.data<int32_t>()[12] = -1;                      // token 4
  Status st;
  Tensor got = gpu_moe(x, ids, w, base, &st);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  EXPECT_TRUE(gpu_->synchronize().ok());  // the flag is cleared once reported
  // Expected: the CPU with those picks' weights set to 0 (ids made valid).
  Tensor ids_ok = ids.clone(), w0 = w.clone();
  for (int64_t i : {4, 12}) {
    ids_ok.data<int32_t>()[i] = 0;
    w0.data<float>()[i] = 0.f;
  }
  Tensor want = base.clone();
  ASSERT_TRUE(cpu_->moe_experts(x, ids_ok, w0, cpu_set_, 7.0f, want).ok());
  expect_rows_close("moe_experts with bad ids", want.data<float>(), got.data<float>(), S, H, 5e-5, seed_);
}

// The routed-expert GEMV at kernel level, at DeepSeek-V4-Flash's expert shapes (gate_up 4096×4096
// and down 4096×2048 FP4 with 1×32 ue8m0 scales, 256 experts, top-6) for decode batches of 1, 4,
// 16 and 32 tokens: session 5's kernel (gemv_experts_v2) bit for bit equal to session 4's
// (gemv_experts) on every output, and within the rigorous bound of a double reference on sampled
// outputs. The 256 experts' table entries share 40 distinct weight sets (entry e uses set e % 40)
// to keep host memory and generation small; the kernels only see 256 pointers.
class CudaGemvExpertKernels : public CudaGemv {
 protected:
  struct Set {
    int64_t P = 0, N = 0, K = 0, br = 1, bc = 32;
    bool f32 = false;
    std::vector<uint8_t> w;    // [P][N][K/2] e2m1 codes
    std::vector<uint8_t> s8;   // [P][SR][SC] ue8m0 (f32 == false)
    std::vector<float> s32;    // [P][SR][SC] (f32 == true)
    DeviceBuffer dw, ds, tables;  // tables: [E] weight pointers, then [E] scale pointers
    int64_t sr() const { return (N + br - 1) / br; }
    int64_t sc() const { return (K + bc - 1) / bc; }
    int64_t wbytes() const { return N * K / 2; }
  };
  uint64_t sm_ = 0;
  uint64_t next64() {  // splitmix64 (fast bulk bytes; seeded from the test's seed)
    uint64_t z = (sm_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  void make_set(Set& st, int64_t E) {
    sm_ = rng_();
    st.w.resize(st.P * st.wbytes());
    for (size_t i = 0; i < st.w.size(); i += 8) {
      const uint64_t v = next64();
      std::memcpy(st.w.data() + i, &v, std::min<size_t>(8, st.w.size() - i));
    }
    const int64_t ns = st.P * st.sr() * st.sc();
    if (st.f32) {
      st.s32.resize(ns);
      for (float& f : st.s32) f = std::ldexp(1.0f + float(next64() % 1000) / 1000.f, -int(next64() % 8));
    } else {
      st.s8.resize(ns);
      for (uint8_t& b : st.s8) b = static_cast<uint8_t>(118 + next64() % 10);
      st.s8[1] = 0;  // 2^-127, the smallest scale
    }
    const size_t sbytes = st.f32 ? st.s32.size() * 4 : st.s8.size();
    st.dw = std::move(DeviceBuffer::allocate(st.w.size())).value();
    st.ds = std::move(DeviceBuffer::allocate(sbytes)).value();
    ASSERT_EQ(cudaMemcpy(st.dw.data(), st.w.data(), st.w.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(st.ds.data(), st.f32 ? static_cast<const void*>(st.s32.data()) : st.s8.data(),
                         sbytes, cudaMemcpyHostToDevice), cudaSuccess);
    std::vector<const void*> tab(2 * E);
    const size_t sb = st.sr() * st.sc() * (st.f32 ? 4 : 1);
    for (int64_t e = 0; e < E; ++e) {
      tab[e] = static_cast<uint8_t*>(st.dw.data()) + (e % st.P) * st.wbytes();
      tab[E + e] = static_cast<uint8_t*>(st.ds.data()) + (e % st.P) * sb;
    }
    st.tables = std::move(DeviceBuffer::allocate(tab.size() * sizeof(void*))).value();
    ASSERT_EQ(cudaMemcpy(st.tables.data(), tab.data(), tab.size() * sizeof(void*), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  // Dequantized weight (set p, row n, column k).
  static double deq(const Set& st, int64_t p, int64_t n, int64_t k) {
    static const double kVal[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    const uint8_t b = st.w[p * st.wbytes() + n * (st.K / 2) + k / 2];
    const int c = (k & 1) ? b >> 4 : b & 15;
    const int64_t si = p * st.sr() * st.sc() + (n / st.br) * st.sc() + k / st.bc;
    const double s = st.f32 ? double(st.s32[si]) : std::ldexp(1.0, int(st.s8[si]) - 127);
    return (c & 8 ? -kVal[c & 7] : kVal[c & 7]) * s;
  }
  // out [slots, N] (host) from version v over the grouped slots; unwritten elements stay NaN.
  std::vector<float> run(const Set& st, int v, const float* dx, int64_t x_div, int64_t slots,
                         int64_t E, const int32_t* grp) {
    auto out = DeviceBuffer::allocate(slots * st.N * 4);
    EXPECT_TRUE(out.ok());
    EXPECT_EQ(testing::memset_sync(out->data(), 0xFF, slots * st.N * 4), cudaSuccess);
    const auto* tab = static_cast<const void* const*>(st.tables.data());
    const int32_t* perm = grp;
    const int32_t* row_off = perm + slots;
    const int32_t* act_off = row_off + E + 1;
    float* o = static_cast<float*>(out->data());
    if (v == 1) {
      kernels::gemv_experts(2, dx, x_div, perm, row_off, act_off, slots, E, tab, tab + E, st.f32,
                            true, st.N, st.K, st.br, st.bc, o, nullptr);
    } else {
      EXPECT_TRUE(kernels::gemv_experts_v2_supported(2, slots, E, true, true, st.N, st.K, st.bc));
      kernels::gemv_experts_v2(dx, x_div, perm, row_off, act_off, slots, E, tab, tab + E, st.f32,
                               st.N, st.K, st.br, st.bc, o, nullptr);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<float> h(slots * st.N);
    EXPECT_EQ(cudaMemcpy(h.data(), out->data(), h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  // Both versions on one projection: bitwise equal, and v2 within the bound on sampled outputs.
  void check(const std::string& what, const Set& st, const Tensor& x, int64_t x_shift, int64_t x_div,
             const std::vector<int32_t>& ids, int64_t E) {
    const int64_t slots = static_cast<int64_t>(ids.size());
    auto dids = DeviceBuffer::allocate(slots * 4);
    auto grp = DeviceBuffer::allocate((slots + 2 * (E + 1)) * 4);
    auto flag = DeviceBuffer::allocate(16);
    auto dxb = DeviceBuffer::allocate(x.nbytes() + 16);
    ASSERT_TRUE(dids.ok() && grp.ok() && flag.ok() && dxb.ok());
    ASSERT_EQ(cudaMemcpy(dids->data(), ids.data(), slots * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(testing::memset_sync(flag->data(), 0, 16), cudaSuccess);
    const float* dx = static_cast<const float*>(dxb->data()) + x_shift;  // shift 1: unaligned rows
    ASSERT_EQ(cudaMemcpy(const_cast<float*>(dx), x.raw(), x.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
    int32_t* g = static_cast<int32_t*>(grp->data());
    kernels::moe_group(static_cast<const int32_t*>(dids->data()), slots, E, static_cast<int>(slots), g,
                       g + slots, g + slots + E + 1, static_cast<int32_t*>(flag->data()), nullptr);
    const std::vector<float> v1 = run(st, 1, dx, x_div, slots, E, g);
    const std::vector<float> v2 = run(st, 2, dx, x_div, slots, E, g);
    EXPECT_EQ(0, std::memcmp(v1.data(), v2.data(), v1.size() * 4))
        << what << ": gemv_experts_v2 differs from gemv_experts; seed " << seed_;
    // Double reference on ~64 sampled outputs per slot (every output of every slot in v1 == v2).
    std::vector<double> want, abs;
    std::vector<float> got;
    for (int64_t sl = 0; sl < slots; ++sl) {
      const int64_t p = ids[sl] % st.P;
      const float* xr = x.data<float>() + (sl / x_div) * st.K;
      for (int64_t n = (sl * 7) % 61; n < st.N; n += std::max<int64_t>(1, st.N / 64)) {
        double s = 0, a = 0;
        for (int64_t k = 0; k < st.K; ++k) {
          const double pr = double(xr[k]) * deq(st, p, n, k);
          s += pr;
          a += std::fabs(pr);
        }
        want.push_back(s), abs.push_back(a), got.push_back(v2[sl * st.N + n]);
      }
    }
    expect_within(what + " v2 vs double", got.data(), want, abs, 32.0 + st.K / 1024.0 + 8.0, seed_);
  }
  // k distinct experts per token; with `hot`, expert 5 in every token (more rows than a tile).
  std::vector<int32_t> route(int64_t B, int64_t k, int64_t E, bool hot) {
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < B; ++t) {
      std::vector<int32_t> mine;
      if (hot) mine.push_back(5);
      while (static_cast<int64_t>(mine.size()) < k) {
        const int32_t e = static_cast<int32_t>(rng_() % E);
        if (std::find(mine.begin(), mine.end(), e) == mine.end()) mine.push_back(e);
      }
      ids.insert(ids.end(), mine.begin(), mine.end());
    }
    return ids;
  }
};

TEST_F(CudaGemvExpertKernels, NewKernelEqualsOldBitwiseAtV4ShapesAndMatchesDouble) {
  const int64_t E = 256, k = 6, H = 4096, I = 2048;
  Set gate_up, down;
  gate_up.P = down.P = 40;
  gate_up.N = 2 * I, gate_up.K = H;
  down.N = H, down.K = I;
  make_set(gate_up, E);
  make_set(down, E);
  for (int64_t B : {1, 4, 16, 32}) {
    const std::vector<int32_t> ids = route(B, k, E, B >= 4);
    const int64_t slots = B * k;
    const std::string tag = "B=" + std::to_string(B);
    check("gate_up " + tag, gate_up, randn({B, H}), 0, k, ids, E);
    check("down " + tag, down, randn({slots, I}, 0.3f), 0, 1, ids, E);
  }
}

TEST_F(CudaGemvExpertKernels, NewKernelTakesOnlyTheLayoutsItImplements) {
  EXPECT_TRUE(kernels::gemv_experts_v2_supported(2, 96, 256, true, true, 4096, 4096, 32));
  EXPECT_TRUE(kernels::gemv_experts_v2_supported(2, 128, 256, true, true, 4096, 2048, 128));
  EXPECT_TRUE(kernels::gemv_experts_v2_supported(2, 1, 1024, true, true, 1, 8192, 64));
  EXPECT_FALSE(kernels::gemv_experts_v2_supported(1, 96, 256, true, true, 4096, 4096, 128));  // FP8
  EXPECT_FALSE(kernels::gemv_experts_v2_supported(2, 96, 256, false, true, 4096, 4096, 32));  // no scales
  EXPECT_FALSE(kernels::gemv_experts_v2_supported(2, 96, 256, true, false, 4096, 4096, 32));  // unaligned rows
  EXPECT_FALSE(kernels::gemv_experts_v2_supported(2, 96, 256, true, true, 4096, 4080, 32));   // K % 32
  EXPECT_FALSE(kernels::gemv_experts_v2_supported(2, 96, 256, true, true, 4096, 8224, 32));   // K > 8192
  EXPECT_FALSE(kernels::gemv_experts_v2_supported(2, 96, 256, true, true, 4096, 4096, 96));   // 3 chunks per block
  EXPECT_FALSE(kernels::gemv_experts_v2_supported(2, 96, 2048, true, true, 4096, 4096, 32));  // > 1024 experts
}

TEST_F(CudaGemvExpertKernels, NewKernelEqualsOldOnOddShapesF32ScalesAndUnalignedX) {
  // Odd N (row groups past the end), K not a multiple of 1024 (lanes with fewer chunks), f32
  // scales over 3×64 blocks, x rows not 16-byte aligned (scalar staging), every K instantiation;
  // a subnormal x (the tile falls back to decoding with the multiply) and a huge one.
  const int64_t E = 24, k = 3;
  for (int64_t K : {96, 1056, 2080, 4160, 8192}) {
    Set st;
    st.P = 7, st.N = 203, st.K = K, st.br = 3, st.bc = 64, st.f32 = true;
    make_set(st, E);
    for (int64_t B : {1, 9}) {
      const std::vector<int32_t> ids = route(B, k, E, B > 1);
      const std::string tag = "K=" + std::to_string(K) + " B=" + std::to_string(B);
      Tensor x = randn({B, K});
      if (B > 6) {
        x.data<float>()[3 * K + 5] = 1e-39f;  // subnormal: token 3's tiles take the multiply path
        x.data<float>()[6 * K + 7] = 1e30f;   // large: token 6's x carries 2^(126 - 98)
      }
      check("odd " + tag, st, x, 1, k, ids, E);
    }
  }
}

}  // namespace
}  // namespace deepinfer::cuda
