// Host-side stored weights for the dense decode product tests (cuda_gemv_v3_test,
// cuda_skinny_mma_test, cuda_skinny_wg_test): bf16 / e4m3 + ue8m0 / e4m3 + f32 128x128-scaled
// weights with their exact dequantization, random contents from a splitmix64 stream, and their
// device copies; the fixture those tests share (a fresh printed seed, the random streams, a
// CudaBackend) and their token rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/runtime.h"
#include "common/dtypes.h"

namespace deepinfer::cuda::testing {

// fmt 0 bf16, 1 e4m3 + ue8m0 128×128 scales, 4 e4m3 + f32 128×128 scales.
struct HostW {
  int fmt = 1;
  int64_t N = 0, K = 0, br = 128, bc = 128;
  std::vector<uint8_t> w;   // [N, K] stored bytes
  std::vector<uint8_t> s8;  // ue8m0 scales
  std::vector<float> s32;   // f32 scales
  DeviceBuffer dw, ds;
  int kfmt() const { return fmt == 0 ? 0 : 1; }
  bool f32() const { return fmt == 4; }
  int64_t rb() const { return fmt == 0 ? 2 * K : K; }
  int64_t scols() const { return (K + bc - 1) / bc; }
  double deq(int64_t n, int64_t k) const {
    if (fmt == 0) {
      uint16_t h;
      std::memcpy(&h, w.data() + 2 * (n * K + k), 2);
      return bf16_to_f32(h);
    }
    const int64_t si = (n / br) * scols() + k / bc;
    return double(e4m3_to_f32(w[n * K + k])) *
           (fmt == 4 ? double(s32[si]) : double(ue8m0_to_f32(s8[si])));
  }
  const void* scale() const { return fmt == 0 ? nullptr : ds.data(); }
};

inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline void upload_host_weight(HostW& h) {
  h.dw = std::move(DeviceBuffer::allocate(std::max<size_t>(h.w.size(), 16))).value();
  EXPECT_EQ(cudaMemcpy(h.dw.data(), h.w.data(), h.w.size(), cudaMemcpyHostToDevice), cudaSuccess);
  if (h.fmt != 0) {
    const size_t bytes = h.fmt == 4 ? h.s32.size() * 4 : h.s8.size();
    h.ds = std::move(DeviceBuffer::allocate(std::max<size_t>(bytes, 16))).value();
    EXPECT_EQ(
        cudaMemcpy(h.ds.data(), h.fmt == 4 ? static_cast<const void*>(h.s32.data()) : h.s8.data(),
                   bytes, cudaMemcpyHostToDevice),
        cudaSuccess);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// bf16 |w| in [2^-8, 2^8) with random signs; e4m3 any non-NaN code; ue8m0 scales 2^-9..2^0,
// f32 scales in [0.001, 0.1).
inline HostW make_host_weight(int fmt, int64_t N, int64_t K, uint64_t& mix, std::mt19937& rng) {
  HostW h;
  h.fmt = fmt;
  h.N = N;
  h.K = K;
  h.w.resize(static_cast<size_t>(N * h.rb()));
  if (fmt == 0) {
    for (size_t i = 0; i + 8 <= h.w.size(); i += 8) {
      const uint64_t r = splitmix(mix);
      for (int j = 0; j < 4; ++j) {
        const uint16_t v = static_cast<uint16_t>((0x3B80 + ((r >> (16 * j)) & 0x7FF)) ^
                                                 ((r >> (16 * j)) & 0x8000));
        std::memcpy(h.w.data() + i + 2 * j, &v, 2);
      }
    }
  } else {
    for (size_t i = 0; i < h.w.size(); i += 8) {
      const uint64_t r = splitmix(mix);
      for (size_t j = 0; j < 8 && i + j < h.w.size(); ++j) {
        uint8_t b = static_cast<uint8_t>(r >> (8 * j));
        if ((b & 0x7F) == 0x7F) b = 0x3F;  // NaN codes are tested apart
        h.w[i + j] = b;
      }
    }
    const int64_t ns = (N + h.br - 1) / h.br * h.scols();
    if (fmt == 4) {
      std::uniform_real_distribution<float> u(0.001f, 0.1f);
      for (int64_t i = 0; i < ns; ++i) h.s32.push_back(u(rng));
    } else {
      for (int64_t i = 0; i < ns; ++i) h.s8.push_back(static_cast<uint8_t>(118 + rng() % 10));
    }
  }
  upload_host_weight(h);
  return h;
}

// The dense product tests' fixture: a fresh seed (printed), rng_ and the splitmix state mix_
// from it, and a CudaBackend.
class SeededGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    mix_ = seed_;
    std::printf("seed %u\n", seed_);
    auto b = CudaBackend::create();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    gpu_ = std::move(b).value();
  }
  uint32_t seed_ = 0;
  uint64_t mix_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<CudaBackend> gpu_;
};

// M token rows of K normal entries, every 5th row from the 4th scaled by 1e-6 and from the 5th by
// 3e4 (rows of other magnitudes: the per-row power-of-two factors of the x splits).
inline std::vector<float> mixed_rows(int64_t M, int64_t K, std::mt19937& rng) {
  std::vector<float> v(static_cast<size_t>(M * K));
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t m = 0; m < M; ++m) {
    const float sc = m % 5 == 3 ? 1e-6f : m % 5 == 4 ? 3e4f : 1.f;
    for (int64_t k = 0; k < K; ++k) v[m * K + k] = sc * nd(rng);
  }
  return v;
}

// A device copy of v (at least 16 bytes), synchronized.
inline DeviceBuffer upload_floats(const std::vector<float>& v) {
  DeviceBuffer b = std::move(DeviceBuffer::allocate(std::max<size_t>(v.size() * 4, 16))).value();
  EXPECT_EQ(cudaMemcpy(b.data(), v.data(), v.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return b;
}

}  // namespace deepinfer::cuda::testing
