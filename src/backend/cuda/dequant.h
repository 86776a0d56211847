// Device dequantization of DeepSeek's official weight formats (deepseek-v4.md §8.4) to bf16/fp32.
//   FP8 e4m3fn [out, in] with ue8m0 block scales [ceil(out/128), ceil(in/128)]
//   FP4 e2m1   [out, in/2] (low nibble = even element) with ue8m0 scales [out, ceil(in/32)]
// Results are bit-identical to the CPU conversions in common/dtypes.h (tested exhaustively).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"

namespace deepinfer::cuda {

// out_f32: [rows, cols]
Status dequant_fp8_block128(const uint8_t* w, const uint8_t* scales, int64_t rows, int64_t cols,
                            float* out_f32, cudaStream_t stream);
// packed: [rows, cols/2]; cols must be even. out_f32: [rows, cols]
Status dequant_fp4_group32(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                           int64_t cols, float* out_f32, cudaStream_t stream);
// Elementwise: every code of a format to fp32 (used to test the device decoders).
Status decode_e4m3(const uint8_t* in, int64_t n, float* out, cudaStream_t stream);
Status decode_bf16(const uint16_t* in, int64_t n, float* out, cudaStream_t stream);
Status encode_bf16(const float* in, int64_t n, uint16_t* out, cudaStream_t stream);

}  // namespace deepinfer::cuda
