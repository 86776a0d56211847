// The dense decode GEMVs launched with programmatic dependent launch (session 7; pdl.cuh,
// gemv.cuh, gemv_multi.cuh; DEEPINFER_GEMV_PDL):
//  - PDL on and off give the SAME BITS (memcmp) for every V4-Flash projection shape the decode
//    GEMV serves (wq_a, wkv, wq_b, grouped wo_a, wo_b, the shared expert, an FP4 expert matrix,
//    a BF16 compressor) at M = 1, 2, 8, for gemv_linear and for gemv_multi (default and deep),
//    with the L2-prefetch budget at 0, the default and "everything";
//  - the dependency: a producer kernel that lets the next kernel start at once, spins ~50 µs and
//    only then writes the GEMV's input x (and poisons the first GEMV's output with NaN), followed
//    immediately by a chain of PDL GEMVs (wq_a + wkv → wq_b → grouped wo_a → wo_b, each reading
//    the previous output, the first one as gemv_multi or as gemv_linear), repeated many times.
//    A kernel that read its input before griddepcontrol.wait (stale or NaN input) or wrote its
//    output before it (overwritten by the producer's NaN) would differ from the plain-launch
//    chain; the plain chain itself is checked stage by stage against a double reference within
//    cuda_gemv_test's rigorous bound (n·2^-24·Σ|x·w|, n = E + ceil(K / 32E) + 8).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/runtime.h"
#include "device_pair.h"
#include "pdl_producer.h"

namespace deepinfer::cuda {
namespace {

using backend::Shape;
using backend::Tensor;
using testing::on_device;
using testing::Pair;

// fmt: 0 bf16, 1 e4m3 with ue8m0 128×128 scales, 2 e2m1 with ue8m0 1×32 scales.
struct HostWeight {
  int fmt = 1;
  backend::Weight w;  // host
  Tensor deq;         // [rows, K] fp32
};

class CudaGemvPdl : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    std::printf("seed %u\n", seed_);
    cpu_ = backend::make_cpu_backend({.reference = true});
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    saved_pf_ = kernels::gemv_pdl_prefetch_bytes();
  }
  void TearDown() override {
    kernels::gemv_set_pdl_prefetch_bytes(saved_pf_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  Tensor randn(Shape s, float scale = 1.f) {
    Tensor t = Tensor::empty(DType::kF32, std::move(s));
    std::normal_distribution<float> nd(0.f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng_);
    return t;
  }
  uint64_t next64() {  // splitmix64: fast bulk weight bytes, seeded from the test's seed
    uint64_t z = (sm_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // A random weight [R, K] and its dequantized copy (the CPU backend's dequantize).
  HostWeight random_weight(int fmt, int64_t R, int64_t K, bool want_deq) {
    sm_ = rng_();
    HostWeight h;
    h.fmt = fmt;
    backend::Weight& w = h.w;
    if (fmt == 0) {
      w.w = Tensor::empty(DType::kBF16, {R, K});
      uint16_t* p = w.w.data<uint16_t>();
      for (int64_t i = 0; i < R * K; ++i) {
        const uint64_t v = next64();  // |w| in [2^-8, 2^8), random sign
        p[i] = static_cast<uint16_t>(0x3B80 + v % 0x0800) ^ static_cast<uint16_t>((v >> 32) & 0x8000);
      }
    } else {
      w.w = Tensor::empty(fmt == 2 ? DType::kF4E2M1 : DType::kF8E4M3, {R, K});
      uint8_t* p = w.w.data<uint8_t>();
      for (uint64_t i = 0; i < w.w.nbytes(); i += 8) {
        uint64_t v = next64();
        for (uint64_t j = 0; j < 8 && i + j < w.w.nbytes(); ++j, v >>= 8) {
          uint8_t b = static_cast<uint8_t>(v);
          if (fmt == 1 && (b & 0x7F) == 0x7F) b = 0x3F;  // no NaN codes
          p[i + j] = b;
        }
      }
      w.block_rows = fmt == 2 ? 1 : 128;
      w.block_cols = fmt == 2 ? 32 : 128;
      const int64_t sr = (R + w.block_rows - 1) / w.block_rows, sc = (K + w.block_cols - 1) / w.block_cols;
      w.scale = Tensor::empty(DType::kF8E8M0, {sr, sc});
      for (int64_t i = 0; i < w.scale.numel(); ++i)
        w.scale.data<uint8_t>()[i] = static_cast<uint8_t>(112 + next64() % 10);  // 2^-15 .. 2^-6
    }
    if (want_deq) {
      h.deq = Tensor::empty(DType::kF32, {R, K});
      EXPECT_TRUE(cpu_->dequantize(w.w, w.scale.defined() ? &w.scale : nullptr, w.block_rows,
                                   w.block_cols, h.deq).ok());
    }
    return h;
  }
  backend::Weight upload(const HostWeight& h) {
    backend::Weight dw = h.w;
    keep_.push_back(on_device(h.w.w));
    dw.w = keep_.back().dev;
    if (h.w.scale.defined()) {
      keep_.push_back(on_device(h.w.scale));
      dw.scale = keep_.back().dev;
    }
    return dw;
  }
  float* device_floats(int64_t n) {
    bufs_.push_back(std::move(DeviceBuffer::allocate(std::max<int64_t>(n, 4) * 4)).value());
    return static_cast<float*>(bufs_.back().data());
  }
  std::vector<float> host(const float* d, int64_t n) {
    std::vector<float> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  uint32_t seed_ = 0;
  uint64_t sm_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<backend::Backend> cpu_;
  cudaStream_t stream_ = nullptr;
  int64_t saved_pf_ = 0;
  std::vector<Pair> keep_;
  std::vector<DeviceBuffer> bufs_;
};

// gemv_linear of a device weight (groups G; N rows per group) on stream s.
void run_linear(const backend::Weight& dw, int fmt, const float* x, int64_t M, int64_t G, float* out,
                cudaStream_t s, bool pdl) {
  const int64_t N = dw.rows() / G, K = dw.cols();
  kernels::gemv_linear(fmt, x, dw.w.raw(), dw.scale.defined() ? dw.scale.raw() : nullptr, false, M,
                       N, K, G, dw.block_rows, dw.block_cols, out, s, pdl);
}

// Worst |got − exact| / (n·2^-24·Σ|x·w|) over every element of x [M, G·K] · deq [G·N, K]ᵀ.
double worst_vs_double(const std::vector<float>& x, const Tensor& deq, const std::vector<float>& got,
                       int64_t M, int64_t G, int64_t E) {
  const int64_t GN = deq.dim(0), K = deq.dim(1), N = GN / G;
  const double n = double(E) + std::ceil(double(K) / (32.0 * E)) + 8.0, u = std::ldexp(1.0, -24);
  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t r = 0; r < GN; ++r) {
      const float* xr = x.data() + m * G * K + (r / N) * K;
      const float* wr = deq.data<float>() + r * K;
      double s = 0, a = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(xr[k]) * wr[k];
        s += p;
        a += std::fabs(p);
      }
      const double g = got[m * GN + r];
      if (std::isnan(g)) return INFINITY;
      worst = std::max(worst, std::fabs(g - s) / (n * u * a + 1e-37));
    }
  return worst;
}

TEST_F(CudaGemvPdl, OnAndOffGiveTheSameBitsAtV4Shapes) {
  struct Case { const char* name; int fmt; int64_t N, K, G; };
  const Case cases[] = {
      {"fp8 wq_a", 1, 1024, 4096, 1},          {"fp8 wkv", 1, 512, 4096, 1},
      {"fp8 wq_b", 1, 32768, 1024, 1},         {"fp8 wo_a (8 groups)", 1, 1024, 4096, 8},
      {"fp8 wo_b", 1, 4096, 8192, 1},          {"fp8 shared w1+w3", 1, 4096, 4096, 1},
      {"fp8 shared w2", 1, 4096, 2048, 1},     {"fp4 expert w2", 2, 4096, 2048, 1},
      {"bf16 compressor wkv", 0, 1024, 4096, 1},
  };
  const int64_t budgets[] = {0, kernels::kGemvPdlPrefetchDefault, int64_t{1} << 30};
  for (const Case& c : cases) {
    const HostWeight hw = random_weight(c.fmt, c.G * c.N, c.K, false);
    const backend::Weight dw = upload(hw);
    Tensor x = randn({8, c.G * c.K});
    auto dx = on_device(x);
    const float* px = dx.dev.data<float>();
    for (int64_t M : {1, 2, 8}) {
      const int64_t n_out = M * c.G * c.N;
      float* plain = device_floats(n_out);
      float* with = device_floats(n_out);
      run_linear(dw, c.fmt, px, M, c.G, plain, stream_, false);
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      const std::vector<float> want = host(plain, n_out);
      for (int64_t pf : budgets) {
        kernels::gemv_set_pdl_prefetch_bytes(pf);
        ASSERT_EQ(cudaMemsetAsync(with, 0xFF, n_out * 4, stream_), cudaSuccess);
        // Twice back to back: the second launch overlaps the first (the same output, same bits).
        run_linear(dw, c.fmt, px, M, c.G, with, stream_, true);
        run_linear(dw, c.fmt, px, M, c.G, with, stream_, true);
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        ASSERT_EQ(cudaGetLastError(), cudaSuccess);
        EXPECT_EQ(0, std::memcmp(host(with, n_out).data(), want.data(), n_out * 4))
            << c.name << " M=" << M << " prefetch " << pf << ": gemv_linear with PDL differs";
      }
      // gemv_multi, one projection (plain layouts only), default and deep: the same bits too.
      if (c.G != 1 || !kernels::gemv_multi_supported(c.fmt, c.K, c.fmt == 1, hw.w.block_cols)) continue;
      const kernels::GemvProjection pr{dw.w.raw(), dw.scale.defined() ? dw.scale.raw() : nullptr, with, c.N};
      for (bool deep : {false, true})
        for (int64_t pf : budgets) {
          kernels::gemv_set_pdl_prefetch_bytes(pf);
          ASSERT_EQ(cudaMemsetAsync(with, 0xFF, n_out * 4, stream_), cudaSuccess);
          for (bool pdl : {false, true})
            ASSERT_TRUE(kernels::gemv_multi(c.fmt, px, &pr, 1, false, M, c.K, dw.block_rows,
                                            dw.block_cols, deep, stream_, pdl));
          ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
          ASSERT_EQ(cudaGetLastError(), cudaSuccess);
          EXPECT_EQ(0, std::memcmp(host(with, n_out).data(), want.data(), n_out * 4))
              << c.name << " M=" << M << (deep ? " deep" : "") << " prefetch " << pf
              << ": gemv_multi with PDL differs from gemv_linear";
        }
    }
  }
}

TEST_F(CudaGemvPdl, AChainAfterASlowProducerReadsItsInputsOnlyAfterTheWait) {
  // The attention block's dense decode products at V4-Flash widths, FP8 with 128×128 scales:
  // S1 x [M, 4096] → q [M, 1024] (wq_a) and kv [M, 512] (wkv) (one gemv_multi, or two
  // gemv_linear); S2 q → h [M, 32768] (wq_b); S3 h → o [M, 8192] (wo_a, 8 groups of 4096 → 1024);
  // S4 o → y [M, 4096] (wo_b).
  const int64_t H = 4096, QL = 1024, KV = 512, HD = 64 * 512, OG = 8, OL = 1024;
  const HostWeight wq_a = random_weight(1, QL, H, true), wkv = random_weight(1, KV, H, true);
  const HostWeight wq_b = random_weight(1, HD, QL, true), wo_a = random_weight(1, OG * OL, HD / OG, true);
  const HostWeight wo_b = random_weight(1, H, OG * OL, true);
  const backend::Weight d_qa = upload(wq_a), d_kv = upload(wkv), d_qb = upload(wq_b);
  const backend::Weight d_oa = upload(wo_a), d_ob = upload(wo_b);
  const int64_t kMaxM = 8;
  float* x = device_floats(kMaxM * H);
  float* q = device_floats(kMaxM * QL);
  float* kv = device_floats(kMaxM * KV);
  float* h = device_floats(kMaxM * HD);
  float* o = device_floats(kMaxM * OG * OL);
  float* y = device_floats(kMaxM * H);
  struct Buf { float* p; int64_t per_row; };
  const Buf outs[] = {{q, QL}, {kv, KV}, {h, HD}, {o, OG * OL}, {y, H}};
  for (int64_t M : {1, 2, 8}) {
    Tensor xh = randn({M, H});
    auto src = on_device(xh);
    // One chain: poison every buffer (NaN), the producer (spins, then writes x and poisons q),
    // then the GEMVs back to back.
    auto chain = [&](bool pdl, bool multi) {
      ASSERT_EQ(cudaMemsetAsync(x, 0xFF, M * H * 4, stream_), cudaSuccess);
      for (const Buf& b : outs) ASSERT_EQ(cudaMemsetAsync(b.p, 0xFF, M * b.per_row * 4, stream_), cudaSuccess);
      testing::slow_producer(x, src.dev.data<float>(), M * H, q, M * QL, 50000, 4, stream_);
      if (multi) {
        const kernels::GemvProjection pr[2] = {{d_qa.w.raw(), d_qa.scale.raw(), q, QL},
                                               {d_kv.w.raw(), d_kv.scale.raw(), kv, KV}};
        ASSERT_TRUE(kernels::gemv_multi(1, x, pr, 2, false, M, H, 128, 128, false, stream_, pdl));
      } else {
        run_linear(d_qa, 1, x, M, 1, q, stream_, pdl);
        run_linear(d_kv, 1, x, M, 1, kv, stream_, pdl);
      }
      run_linear(d_qb, 1, q, M, 1, h, stream_, pdl);
      run_linear(d_oa, 1, h, M, OG, o, stream_, pdl);
      run_linear(d_ob, 1, o, M, 1, y, stream_, pdl);
    };
    auto read_all = [&]() {
      std::vector<std::vector<float>> r;
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
      for (const Buf& b : outs) r.push_back(host(b.p, M * b.per_row));
      return r;
    };
    chain(false, false);
    const std::vector<std::vector<float>> want = read_all();
    // The plain chain against a double reference, stage by stage (each from the GPU's input).
    const std::vector<float> xv(xh.data<float>(), xh.data<float>() + M * H);
    const std::string tag = " M=" + std::to_string(M) + " seed " + std::to_string(seed_);
    EXPECT_LE(worst_vs_double(xv, wq_a.deq, want[0], M, 1, 16), 1.0) << "wq_a" << tag;
    EXPECT_LE(worst_vs_double(xv, wkv.deq, want[1], M, 1, 16), 1.0) << "wkv" << tag;
    EXPECT_LE(worst_vs_double(want[0], wq_b.deq, want[2], M, 1, 16), 1.0) << "wq_b" << tag;
    EXPECT_LE(worst_vs_double(want[2], wo_a.deq, want[3], M, OG, 16), 1.0) << "wo_a" << tag;
    EXPECT_LE(worst_vs_double(want[3], wo_b.deq, want[4], M, 1, 16), 1.0) << "wo_b" << tag;
    // The PDL chains, many times, with every prefetch budget and both first kernels.
    const char* names[] = {"q (wq_a)", "kv (wkv)", "h (wq_b)", "o (wo_a)", "y (wo_b)"};
    int bad = 0;
    const int reps = M == 1 ? 60 : 20;
    for (int64_t pf : {int64_t{0}, kernels::kGemvPdlPrefetchDefault, int64_t{1} << 30}) {
      kernels::gemv_set_pdl_prefetch_bytes(pf);
      for (int rep = 0; rep < reps && bad < 3; ++rep) {
        const bool multi = rep % 2 == 0;
        chain(true, multi);
        const std::vector<std::vector<float>> got = read_all();
        for (size_t i = 0; i < got.size(); ++i)
          if (std::memcmp(got[i].data(), want[i].data(), got[i].size() * 4) != 0 && bad++ < 3)
            ADD_FAILURE() << names[i] << " differs from the plain chain at rep " << rep << " ("
                          << (multi ? "gemv_multi" : "gemv_linear") << " first, prefetch " << pf
                          << ")" << tag;
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::cuda
