// Device dequantization of DeepSeek's official weight formats (deepseek-v4.md §8.4) to bf16/fp32.
//   FP8 e4m3fn [out, in] with ue8m0 block scales [ceil(out/128), ceil(in/128)]
//   FP4 e2m1   [out, in/2] (low nibble = even element) with ue8m0 scales [out, ceil(in/32)]
// Results are bit-identical to the CPU conversions in common/dtypes.h (tested exhaustively).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"

namespace deepinfer::cuda {

enum class ScaleType { kUe8m0, kF32, kBf16 };
// General form: w is e4m3 [rows, cols] (packed_fp4=false) or packed e2m1 [rows, cols/2]
// (packed_fp4=true); scales [ceil(rows/block_rows), ceil(cols/block_cols)] of `scale_type`.
Status dequant_block_scaled(const uint8_t* w, bool packed_fp4, const void* scales,
                            ScaleType scale_type, int64_t rows, int64_t cols, int64_t block_rows,
                            int64_t block_cols, float* out_f32, cudaStream_t stream);
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
