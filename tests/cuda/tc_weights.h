// Random stored weights for the tensor-core tests with linear_tc's bits (cuda_linear_tc_small_test,
// cuda_linear_tc_wa_test): the formats, their names and linear_tc's format codes, and a fast
// random weight generator (the 1 GB head would be slow with mt19937 per element); and the double
// reference of a (grouped) product with its row-relative error (also cuda_linear_tc_test).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace deepinfer::cuda::testing {

enum class Fmt { kBf16, kFp8, kFp8F32Scale, kFp4 };
inline const char* fmt_name(Fmt f) {
  return f == Fmt::kBf16 ? "bf16" : f == Fmt::kFp8 ? "fp8 (ue8m0 128x128)"
                                  : f == Fmt::kFp8F32Scale ? "fp8 (f32 128x128)" : "fp4 (ue8m0 1x32)";
}
inline int fmt_code(Fmt f) { return f == Fmt::kBf16 ? 0 : f == Fmt::kFp4 ? 2 : 1; }

// A random stored weight [R, K] (splitmix64 stream: the head is 1 GB): bf16 |w| in [2^-8, 2^8)
// with random sign, e4m3 codes without NaN (subnormals and ±0 included), e2m1 codes, ue8m0
// scales 2^-9..2^0 or f32 scales.
inline void fast_weight(Fmt f, int64_t R, int64_t K, uint64_t seed, backend::Weight* w) {
  uint64_t st = seed;
  auto next = [&st] {
    uint64_t z = (st += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  if (f == Fmt::kBf16) {
    w->w = backend::Tensor::empty(DType::kBF16, {R, K});
    uint16_t* d = w->w.data<uint16_t>();
    for (int64_t i = 0; i < R * K; i += 4) {
      const uint64_t r = next();
      for (int j = 0; j < 4 && i + j < R * K; ++j) {
        const uint16_t v = static_cast<uint16_t>(r >> (16 * j));
        d[i + j] = static_cast<uint16_t>(0x3B80 + (v & 0x07FF)) ^ (v & 0x8000);
      }
    }
    return;
  }
  w->w = backend::Tensor::empty(f == Fmt::kFp4 ? DType::kF4E2M1 : DType::kF8E4M3, {R, K});
  uint8_t* d = w->w.data<uint8_t>();
  const uint64_t nb = w->w.nbytes();
  for (uint64_t i = 0; i < nb; i += 8) {
    const uint64_t r = next();
    for (uint64_t j = 0; j < 8 && i + j < nb; ++j) {
      uint8_t b = static_cast<uint8_t>(r >> (8 * j));
      if (f != Fmt::kFp4 && (b & 0x7F) == 0x7F) b = 0x3F;  // no NaN codes
      d[i + j] = b;
    }
  }
  w->block_rows = f == Fmt::kFp4 ? 1 : 128;
  w->block_cols = f == Fmt::kFp4 ? 32 : 128;
  const int64_t sr = (R + w->block_rows - 1) / w->block_rows, sc = (K + w->block_cols - 1) / w->block_cols;
  if (f == Fmt::kFp8F32Scale) {
    w->scale = backend::Tensor::empty(DType::kF32, {sr, sc});
    for (int64_t i = 0; i < w->scale.numel(); ++i)
      w->scale.data<float>()[i] = 0.001f + 0.099f * static_cast<float>(next() >> 40) / static_cast<float>(1 << 24);
  } else {
    w->scale = backend::Tensor::empty(DType::kF8E8M0, {sr, sc});
    for (int64_t i = 0; i < w->scale.numel(); ++i) w->scale.data<uint8_t>()[i] = static_cast<uint8_t>(118 + next() % 10);
  }
}

// out64 [M, G·N] = x [M, G·K] · deqᵀ per group, in double.
inline std::vector<double> reference64(const backend::Tensor& x, const backend::Tensor& deq, int64_t G) {
  const int64_t M = x.dim(0), GN = deq.dim(0), K = deq.dim(1), N = GN / G;
  std::vector<double> out(M * GN);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t r = 0; r < GN; ++r) {
      const float* xr = x.data<float>() + m * G * K + (r / N) * K;
      const float* wr = deq.data<float>() + r * K;
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(xr[k]) * wr[k];
      out[m * GN + r] = s;
    }
  return out;
}

// The worst |want − got| relative to its row's largest |want| over got [M, GN] (NaN counts as
// worst), with its row and column.
struct WorstError {
  double err = 0;
  int64_t row = 0, col = 0;
};
inline WorstError worst_row_relative_error(const std::vector<double>& want, const float* got, int64_t M,
                                           int64_t GN) {
  WorstError w;
  for (int64_t r = 0; r < M; ++r) {
    double scale = 1e-30;
    for (int64_t col = 0; col < GN; ++col) scale = std::max(scale, std::fabs(want[r * GN + col]));
    for (int64_t col = 0; col < GN; ++col) {
      const double e = std::fabs(want[r * GN + col] - got[r * GN + col]) / scale;
      if (!(e <= w.err)) w = {e, r, col};
    }
  }
  return w;
}

}  // namespace deepinfer::cuda::testing
