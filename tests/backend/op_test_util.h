// Op-test harness helpers: seeded random tensors, and a comparison that reports the worst
// element (flat index and coordinates) and the seed on failure.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace deepinfer::backend::testing {

class Rand {
 public:
  Rand() : seed_(std::random_device{}()), gen_(seed_) {}
  uint32_t seed() const { return seed_; }
  float uniform(float lo = -1.f, float hi = 1.f) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen_); }
  Tensor tensor(Shape shape, float lo = -1.f, float hi = 1.f) {
    Tensor t = Tensor::empty(DType::kF32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = uniform(lo, hi);
    return t;
  }
  std::mt19937& gen() { return gen_; }

 private:
  uint32_t seed_;
  std::mt19937 gen_;
};

inline std::string coords(const Shape& s, int64_t flat) {
  std::vector<int64_t> c(s.size());
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    c[i] = s[i] ? flat % s[i] : 0;
    flat = s[i] ? flat / s[i] : 0;
  }
  return shape_str(c);
}

// |got - want| <= atol + rtol·|want| everywhere; NaN/Inf must match exactly.
inline void expect_close(const std::string& what, const Tensor& got, const std::vector<double>& want,
                         double atol, double rtol, uint32_t seed) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  double worst_excess = 0;
  int64_t worst = -1;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.data<float>()[i], w = want[i];
    double excess;
    if (std::isnan(w) || std::isinf(w)) {
      excess = (std::isnan(w) && std::isnan(g)) || g == w ? 0 : INFINITY;
    } else {
      excess = std::abs(g - w) - (atol + rtol * std::abs(w));
      if (std::isnan(g)) excess = INFINITY;
    }
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst >= 0)
    ADD_FAILURE() << what << ": worst element " << coords(got.shape(), worst) << " got "
                  << got.data<float>()[worst] << " want " << want[worst] << " (atol " << atol
                  << ", rtol " << rtol << "), seed " << seed;
}

// Bitwise equality of two F32 tensors (NaN patterns included): the first differing element, its
// coordinates and the seed on failure.
inline void expect_same_bits(const char* what, const Tensor& got, const Tensor& want, uint32_t seed) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  for (int64_t i = 0; i < got.numel(); ++i) {
    uint32_t g, w;
    std::memcpy(&g, got.data<float>() + i, 4);
    std::memcpy(&w, want.data<float>() + i, 4);
    ASSERT_EQ(g, w) << what << " differs at flat index " << i << " (" << coords(got.shape(), i)
                    << "): " << got.data<float>()[i] << " vs " << want.data<float>()[i]
                    << ", seed " << seed;
  }
}

// A fixture over both CPU backend modes (the parameter: reference mode), two threads.
class CpuModesTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    CpuBackendOptions o;
    o.reference = GetParam();
    o.num_threads = 2;
    be_ = make_cpu_backend(o);
  }
  std::unique_ptr<Backend> be_;
  Rand rnd_;
};

}  // namespace deepinfer::backend::testing
