// Weight dequantization to F32: BF16/F16/F32 plain, FP8 e4m3 and FP4 e2m1 with block scales
// (deepseek-v4.md §8.4). The CPU backend calls this once per weight at load time.
#include <cstring>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

namespace {

float scale_at(const Tensor& scale, int64_t r, int64_t c) {
  const int64_t idx = r * scale.dim(1) + c;
  if (scale.dtype() == DType::kF8E8M0) return ue8m0_to_f32(scale.data<uint8_t>()[idx]);
  // Checkpoint scale data may be unaligned: read through memcpy.
  if (scale.dtype() == DType::kBF16) {
    uint16_t h;
    std::memcpy(&h, scale.data<uint8_t>() + 2 * idx, 2);
    return bf16_to_f32(h);
  }
  float f;
  std::memcpy(&f, scale.data<uint8_t>() + 4 * idx, 4);
  return f;
}

}  // namespace

Status dequantize(const CpuContext& ctx, const Tensor& w, const Tensor* scale, int64_t block_rows,
                  int64_t block_cols, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const DequantDims dims, check_dequantize(w, scale, block_rows, block_cols, out));
  const int64_t N = dims.N, K = dims.K;
  float* op = out.data<float>();
  const DType dt = w.dtype();
  if (!dims.quantized) {
    ctx.parallel_for(N, K, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0 * K; i < r1 * K; ++i) {
        if (dt == DType::kF32) {
          float v;
          std::memcpy(&v, w.data<uint8_t>() + 4 * i, 4);  // checkpoint data may be unaligned
          op[i] = v;
        } else {
          uint16_t h;
          std::memcpy(&h, w.data<uint8_t>() + 2 * i, 2);
          op[i] = dt == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
        }
      }
    });
    return OkStatus();
  }
  const bool fp8 = dt == DType::kF8E4M3;
  const uint8_t* wp = w.data<uint8_t>();
  ctx.parallel_for(N, K, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < K; ++c) {
        float v;
        if (fp8) {
          v = e4m3_to_f32(wp[r * K + c]);
        } else {
          const uint8_t byte = wp[(r * K + c) / 2];
          v = e2m1_to_f32(((r * K + c) % 2 == 0) ? (byte & 0xF) : (byte >> 4));
        }
        op[r * K + c] = v * scale_at(*scale, r / block_rows, c / block_cols);
      }
  });
  return OkStatus();
}

}  // namespace deepinfer::backend::cpu
