// Session 16: skinny_wg (skinny_wg.h — the default mode's e4m3 products at 9..64 rows on wgmma,
// the weight rows in registers, x as three bf16 planes streamed through shared memory). Fresh
// random inputs (seed printed):
//  - at the V4-Flash decode shapes (wq_a, wkv, wq_b, wo_b, shared expert gate_up / down, indexer
//    wq_b) and odd ones (partial 128-row tiles, K = 1152: an odd number of scale blocks), for
//    M = 64, 48, 33, 32, 17, 16, 9, 1: within a rigorous bound of a double reference (relative to
//    Σ|x·w|); every row of an M-row call bitwise equal to the same row of the 64-row call (the
//    MMA's N, 3M rounded up, changes from 192 to 24 columns; the bits must not);
//  - two runs bitwise equal; without programmatic dependent launch bitwise equal;
//  - a NaN code makes exactly its weight row NaN; extreme block scales (E = 140, E = 2) stay
//    within the bound;
//  - grouped products (G groups of N rows, x [M, G·K]; V4's wo_a is 8 × 1024 × 4096) the same way;
//  - layouts it does not implement are refused;
//  - CudaBackend::linear (default DEEPINFER_DENSE_WG = 17) runs it at 17..64 rows, plain and
//    grouped (bitwise the direct call), and not at 16 rows; session 17: at 65..384 rows
//    (DEEPINFER_DENSE_WG_MAX_ROWS) in slabs of 64, each slab bitwise the direct call on its rows,
//    and not at 385.
// Bound: |got − exact| ≤ (2·K/(16·S) + S + 8)·2^-24·Σ|x·w| — the k-steps of a slice chained in one
// fp32 accumulator, S slices summed, the three plane sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/skinny_wg.h"
#include "common/dtypes.h"
#include "common/env.h"
#include "device_pair.h"
#include "host_weights.h"
#include "memset_sync.h"

namespace deepinfer::cuda {
namespace {

using backend::Tensor;
using testing::HostW;

constexpr int64_t kMaxM = 64;
constexpr int64_t kMaxBackendM = 385;  // CudaBackend::linear: slabs of 64 up to 384 rows

class CudaSkinnyWg : public testing::SeededGpuTest {
 protected:
  // Normal entries; rows of other magnitudes (1e-6, 3e4) every few rows.
  std::vector<float> make_x(int64_t M, int64_t K) { return testing::mixed_rows(M, K, rng_); }
  static DeviceBuffer dev(const std::vector<float>& v) { return testing::upload_floats(v); }
  // out [M, G·N] by skinny_wg_linear (NaN-filled first); h holds G·N rows.
  std::vector<float> run(const HostW& h, int64_t G, const float* dx, int64_t M, bool pdl = true) {
    const int64_t N = h.N / G, R = M * h.N;
    DeviceBuffer out = std::move(DeviceBuffer::allocate(R * 4)).value();
    DeviceBuffer ws =
        std::move(DeviceBuffer::allocate(kernels::skinny_wg_workspace_bytes(M, G, N, h.K))).value();
    EXPECT_EQ(testing::memset_sync(out.data(), 0xFF, R * 4), cudaSuccess);
    EXPECT_TRUE(kernels::skinny_wg_linear(dx, h.dw.data(), h.ds.data(), M, G, N, h.K, h.br,
                                          static_cast<float*>(out.data()), ws.data(), nullptr,
                                          pdl));
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<float> v(static_cast<size_t>(R));
    EXPECT_EQ(cudaMemcpy(v.data(), out.data(), R * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  // Worst |got − exact| / (factor·2^-24·Σ|x·w|) over sampled weight rows and the first M tokens;
  // x [*, G·K], weight row n of group n / N reads x columns (n / N)·K ...
  static double worst(const HostW& h, int64_t G, const std::vector<float>& x, int64_t M,
                      const std::vector<float>& got, double factor) {
    const int64_t N = h.N / G, ldx = G * h.K;
    const double u = std::ldexp(1.0, -24);
    double w = 0;
    std::vector<double> wr(static_cast<size_t>(h.K));
    std::vector<int64_t> rows;
    for (int64_t n = 0; n < h.N; n += std::max<int64_t>(1, h.N / 48)) rows.push_back(n);
    if (rows.back() != h.N - 1) rows.push_back(h.N - 1);
    for (int64_t n : rows) {
      for (int64_t k = 0; k < h.K; ++k) wr[k] = h.deq(n, k);
      const float* xg = x.data() + (n / N) * h.K;
      for (int64_t m = 0; m < M; ++m) {
        double s = 0, a = 0;
        for (int64_t k = 0; k < h.K; ++k) {
          const double p = double(xg[m * ldx + k]) * wr[k];
          s += p;
          a += std::fabs(p);
        }
        const double q = std::fabs(double(got[m * h.N + n]) - s) / (factor * u * a + 1e-300);
        if (!(q <= w)) w = std::isnan(q) ? 1e30 : q;
      }
    }
    return w;
  }
  static double factor(int64_t G, int64_t N, int64_t K) {
    const int S = kernels::skinny_wg_split(G, N, K);
    return 2.0 * double(K) / (16.0 * S) + S + 8;
  }
  static bool same(const float* a, const float* b, size_t n) {
    return std::memcmp(a, b, n * 4) == 0;
  }

  // Every check of one (G, N, K): bound, rows vs the 64-row call, determinism, PDL.
  void check(const char* name, int64_t G, int64_t N, int64_t K) {
    HostW h = testing::make_host_weight(1, G * N, K, mix_, rng_);
    ASSERT_TRUE(kernels::skinny_wg_supported(h.dw.data(), G, N, K, false, h.br, h.bc)) << name;
    const std::vector<float> x = make_x(kMaxM, G * K);
    DeviceBuffer dx = dev(x);
    const float* px = static_cast<const float*>(dx.data());
    const double f = factor(G, N, K);
    std::vector<float> full;
    for (int64_t M : {64, 48, 33, 32, 17, 16, 9, 1}) {
      const std::string what =
          std::string(name) + " M=" + std::to_string(M) + " seed " + std::to_string(seed_);
      const std::vector<float> got = run(h, G, px, M);
      const double e = worst(h, G, x, M, got, f);
      EXPECT_LE(e, 1.0) << what << ": vs double";
      if (M == 64 || M == 9) std::printf("%s: worst error %.3g of the bound\n", what.c_str(), e);
      if (M == 64) {
        full = got;
        const std::vector<float> again = run(h, G, px, M), nopdl = run(h, G, px, M, false);
        EXPECT_TRUE(same(got.data(), again.data(), got.size())) << what << ": two runs differ";
        EXPECT_TRUE(same(got.data(), nopdl.data(), got.size())) << what << ": without PDL differs";
      } else {
        EXPECT_TRUE(same(got.data(), full.data(), M * h.N))
            << what << ": rows differ from the 64-row call";
      }
    }
    const std::vector<float> r5 = run(h, G, px + 5 * G * K, 1);
    EXPECT_TRUE(same(r5.data(), full.data() + 5 * h.N, h.N))
        << name << ": x row 5 alone differs; seed " << seed_;
  }
};

TEST_F(CudaSkinnyWg, MatchesDoubleAtV4ShapesRowIndependent) {
  struct Shape {
    const char* name;
    int64_t N, K;
  };
  const Shape shapes[] = {{"wq_a", 1024, 4096},           {"wkv", 512, 4096},
                          {"wq_b", 32768, 1024},          {"wo_b", 4096, 8192},
                          {"shared gate_up", 4096, 4096}, {"shared down", 4096, 2048},
                          {"indexer wq_b", 8192, 1024},   {"odd 129x1152", 129, 1152},
                          {"odd 300x384", 300, 384}};
  for (const Shape& s : shapes) check(s.name, 1, s.N, s.K);
}

TEST_F(CudaSkinnyWg, GroupedMatchesDoubleRowIndependent) {
  check("wo_a 8x1024x4096", 8, 1024, 4096);
  check("grouped 3x200x512", 3, 200, 512);  // groups not on a tile boundary, partial tiles
}

// A NaN code makes exactly its weight row NaN (every token); extreme scales (E = 140: 2^13,
// E = 2: 2^-125) give the values of the double reference within the bound.
TEST_F(CudaSkinnyWg, NanCodesAndExtremeScales) {
  const int64_t N = 384, K = 1024;
  HostW h = testing::make_host_weight(1, N, K, mix_, rng_);
  h.w[5 * K + 300] = 0x7F;        // row 5: a NaN code
  h.w[200 * K + 1000] = 0xFF;     // row 200: a negative NaN code
  h.s8[0 * h.scols() + 3] = 140;  // rows 0..127, k block 3: 2^13
  h.s8[2 * h.scols() + 5] = 2;    // rows 256..383, k block 5: 2^-125
  testing::upload_host_weight(h);
  const std::vector<float> x = make_x(kMaxM, K);
  DeviceBuffer dx = dev(x);
  for (int64_t M : {1, 20}) {
    const std::vector<float> got = run(h, 1, static_cast<const float*>(dx.data()), M);
    for (int64_t m = 0; m < M; ++m) {
      EXPECT_TRUE(std::isnan(got[m * N + 5])) << "M " << M << " token " << m;
      EXPECT_TRUE(std::isnan(got[m * N + 200])) << "M " << M << " token " << m;
    }
    std::vector<float> masked = got;
    for (int64_t m = 0; m < M; ++m) {
      masked[m * N + 5] = 0.f;
      masked[m * N + 200] = 0.f;
    }
    // Every other sampled row within the bound (rows 5 and 200 skipped: NaN).
    double w = 0;
    const double u = std::ldexp(1.0, -24), f = factor(1, N, K);
    for (int64_t n = 0; n < N; n += 7) {
      if (n == 5 || n == 200) continue;
      for (int64_t m = 0; m < M; ++m) {
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = double(x[m * K + k]) * h.deq(n, k);
          sum += p;
          mag += std::fabs(p);
        }
        const double q = std::fabs(double(masked[m * N + n]) - sum) / (f * u * mag + 1e-300);
        if (!(q <= w)) w = std::isnan(q) ? 1e30 : q;
      }
    }
    EXPECT_LE(w, 1.0) << "M " << M << " seed " << seed_;
  }
}

TEST_F(CudaSkinnyWg, RefusesWhatItDoesNotImplement) {
  DeviceBuffer b = std::move(DeviceBuffer::allocate(1 << 20)).value();
  const uint8_t* p = static_cast<const uint8_t*>(b.data());
  EXPECT_TRUE(kernels::skinny_wg_supported(p, 1, 256, 512, false, 128, 128));
  EXPECT_TRUE(kernels::skinny_wg_supported(p, 8, 100, 512, false, 128, 128));
  EXPECT_FALSE(kernels::skinny_wg_supported(p, 1, 256, 512, true, 128, 128));       // f32 scales
  EXPECT_FALSE(kernels::skinny_wg_supported(p, 1, 256, 512, false, 128, 64));       // block columns
  EXPECT_FALSE(kernels::skinny_wg_supported(p, 1, 256, 448, false, 128, 128));      // K % 128
  EXPECT_FALSE(kernels::skinny_wg_supported(p + 8, 1, 256, 512, false, 128, 128));  // misaligned
  EXPECT_FALSE(kernels::skinny_wg_supported(p, 0, 256, 512, false, 128, 128));
  float* o = reinterpret_cast<float*>(b.data());
  const float* x = reinterpret_cast<const float*>(p);
  EXPECT_FALSE(
      kernels::skinny_wg_linear(x, p, p, 65, 1, 128, 512, 128, o, b.data(), nullptr, false));
  EXPECT_FALSE(
      kernels::skinny_wg_linear(x, p, p, 0, 1, 128, 512, 128, o, b.data(), nullptr, false));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // nothing launched
}

TEST_F(CudaSkinnyWg, BackendLinearRunsIt) {
  ASSERT_EQ(env().dense_wg, 17);
  ASSERT_EQ(env().dense_wg_max_rows, 384);
  struct Case {
    int64_t G, N, K;
  };
  for (const Case c : {Case{1, 1024, 4096}, Case{8, 256, 1024}}) {
    HostW h = testing::make_host_weight(1, c.G * c.N, c.K, mix_, rng_);
    backend::Weight w;
    w.w = Tensor::borrow(const_cast<void*>(h.dw.data()), DType::kF8E4M3, {h.N, h.K});
    w.scale = Tensor::borrow(const_cast<void*>(h.ds.data()), DType::kF8E8M0,
                             {(h.N + 127) / 128, h.scols()});
    w.block_rows = w.block_cols = 128;
    const std::vector<float> x = make_x(kMaxBackendM, c.G * c.K);
    DeviceBuffer dx = dev(x);
    const float* px = static_cast<const float*>(dx.data());
    // CudaBackend::linear on the first M rows of x, on the host.
    auto backend_rows = [&](int64_t M, const std::string& what) {
      const Tensor xt = Tensor::borrow(dx.data(), DType::kF32, {M, c.G * c.K});
      Tensor out = std::move(gpu_->alloc(DType::kF32, {M, h.N})).value();
      EXPECT_TRUE(gpu_->linear(xt, w, out, c.G).ok()) << what;
      EXPECT_TRUE(gpu_->synchronize().ok());
      return testing::to_host(out);
    };
    for (int64_t M : {16, 17, 24, 64}) {
      const std::string what =
          "G=" + std::to_string(c.G) + " M=" + std::to_string(M) + " seed " + std::to_string(seed_);
      const Tensor got = backend_rows(M, what);
      const float* gp = static_cast<const float*>(got.raw());
      const std::vector<float> direct = run(h, c.G, static_cast<const float*>(dx.data()), M);
      if (M >= 17)
        EXPECT_TRUE(same(gp, direct.data(), M * h.N)) << what << ": not skinny_wg's bits";
      else
        EXPECT_FALSE(same(gp, direct.data(), M * h.N)) << what << ": skinny_wg ran below 17 rows";
    }
    // Session 17: 65..DEEPINFER_DENSE_WG_MAX_ROWS (default 384) rows in slabs of 64 — each slab's
    // rows the direct call's on those rows (the last slab partial at 100 and 130); 385 rows go to
    // the prefill path (other bits).
    for (int64_t M : {100, 130, 384, 385}) {
      const std::string what =
          "G=" + std::to_string(c.G) + " M=" + std::to_string(M) + " seed " + std::to_string(seed_);
      const Tensor got = backend_rows(M, what);
      const float* gp = static_cast<const float*>(got.raw());
      std::vector<float> direct;
      for (int64_t r0 = 0; r0 < M; r0 += kMaxM) {
        const std::vector<float> d = run(h, c.G, px + r0 * c.G * c.K, std::min(kMaxM, M - r0));
        direct.insert(direct.end(), d.begin(), d.end());
      }
      if (M <= 384) {
        EXPECT_TRUE(same(gp, direct.data(), M * h.N))
            << what << ": not skinny_wg's bits in 64-row slabs";
        EXPECT_LE(worst(h, c.G, x, M, direct, factor(c.G, c.N, c.K)), 1.0) << what << ": vs double";
      } else {
        EXPECT_FALSE(same(gp, direct.data(), M * h.N)) << what << ": skinny_wg ran above 384 rows";
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::cuda
