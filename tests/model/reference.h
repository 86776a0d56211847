// Test helpers for model tests: reference outputs and the logits error metric.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/tensor.h"
#include "io/safetensors.h"

namespace deepinfer::model::testing {

inline std::vector<int32_t> read_ids(const io::TensorInfo& t) {
  std::vector<int32_t> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype == DType::kI64) {
      int64_t v;
      std::memcpy(&v, t.data + 8 * i, 8);
      out[i] = static_cast<int32_t>(v);
    } else {
      int32_t v;
      std::memcpy(&v, t.data + 4 * i, 4);
      out[i] = v;
    }
  }
  return out;
}

inline std::vector<float> read_f32(const io::TensorInfo& t) {
  std::vector<float> out(t.numel());
  std::memcpy(out.data(), t.data, out.size() * 4);
  return out;
}

// Metric used by every logits check: the worst row of ‖got − want‖₂ / ‖want‖₂ (one row = the
// logits of one position). Also reports which row.
struct RowError {
  double worst = 0;
  int64_t row = -1;
};
inline RowError row_relative_error(const float* got, const float* want, int64_t rows, int64_t V) {
  RowError e;
  for (int64_t r = 0; r < rows; ++r) {
    double num = 0, den = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double d = static_cast<double>(got[r * V + v]) - want[r * V + v];
      num += d * d;
      den += static_cast<double>(want[r * V + v]) * want[r * V + v];
    }
    const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
    if (!(rel <= e.worst)) {  // NaN counts as worst
      e.worst = rel;
      e.row = r;
    }
  }
  return e;
}

inline int32_t argmax(const float* row, int64_t V) {
  return static_cast<int32_t>(std::max_element(row, row + V) - row);  // first max wins
}

}  // namespace deepinfer::model::testing
