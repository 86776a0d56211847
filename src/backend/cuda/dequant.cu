#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dequant.h"

namespace deepinfer::cuda {
namespace {

__device__ __forceinline__ float ue8m0_value(uint8_t e) {
  return e == 0xFF ? __int_as_float(0x7FC00000) : ldexpf(1.0f, static_cast<int>(e) - 127);
}

__device__ __forceinline__ float e4m3_value(uint8_t v) {
  if ((v & 0x7F) == 0x7F) return __int_as_float(0x7FC00000);
  const int exp = (v >> 3) & 0xF, man = v & 0x7;
  const float mag = exp == 0 ? ldexpf(static_cast<float>(man), -9)
                             : ldexpf(static_cast<float>(8 + man), exp - 10);
  return (v & 0x80) ? -mag : mag;
}

__device__ __forceinline__ float e2m1_value(uint8_t code) {
  const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = mags[code & 7];
  return (code & 8) ? -m : m;
}

__device__ __forceinline__ float scale_value(const void* scales, ScaleType t, int64_t i) {
  if (t == ScaleType::kUe8m0) return ue8m0_value(static_cast<const uint8_t*>(scales)[i]);
  if (t == ScaleType::kF32) return static_cast<const float*>(scales)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(scales)[i]);
}

__global__ void dequant_kernel(const uint8_t* w, bool packed_fp4, const void* scales,
                               ScaleType scale_type, int64_t rows, int64_t cols,
                               int64_t block_rows, int64_t block_cols, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  float v;
  if (packed_fp4) {
    const uint8_t byte = w[r * (cols / 2) + c / 2];
    v = e2m1_value((c & 1) ? (byte >> 4) : (byte & 0xF));
  } else {
    v = e4m3_value(w[i]);
  }
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  out[i] = v * scale_value(scales, scale_type, (r / block_rows) * scale_cols + c / block_cols);
}

__global__ void decode_e4m3_kernel(const uint8_t* in, int64_t n, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = e4m3_value(in[i]);
}

__global__ void decode_bf16_kernel(const uint16_t* in, int64_t n, float* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __int_as_float(static_cast<int>(static_cast<uint32_t>(in[i]) << 16));
}

__global__ void encode_bf16_kernel(const float* in, int64_t n, uint16_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
}

unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

Status dequant_block_scaled(const uint8_t* w, bool packed_fp4, const void* scales,
                            ScaleType scale_type, int64_t rows, int64_t cols, int64_t block_rows,
                            int64_t block_cols, float* out_f32, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0 || block_rows < 1 || block_cols < 1 || (packed_fp4 && cols % 2)) {
    return InvalidArgument("dequant_block_scaled: bad shape rows=" + std::to_string(rows) +
                           " cols=" + std::to_string(cols) + " blocks=" +
                           std::to_string(block_rows) + "x" + std::to_string(block_cols) +
                           (packed_fp4 ? " (packed fp4 needs even cols)" : ""));
  }
  dequant_kernel<<<blocks_for(rows * cols, 256), 256, 0, stream>>>(
      w, packed_fp4, scales, scale_type, rows, cols, block_rows, block_cols, out_f32);
  DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return OkStatus();
}

Status dequant_fp8_block128(const uint8_t* w, const uint8_t* scales, int64_t rows, int64_t cols,
                            float* out_f32, cudaStream_t stream) {
  return dequant_block_scaled(w, false, scales, ScaleType::kUe8m0, rows, cols, 128, 128, out_f32,
                              stream);
}

Status dequant_fp4_group32(const uint8_t* packed, const uint8_t* scales, int64_t rows,
                           int64_t cols, float* out_f32, cudaStream_t stream) {
  return dequant_block_scaled(packed, true, scales, ScaleType::kUe8m0, rows, cols, 1, 32,
                              out_f32, stream);
}

Status decode_e4m3(const uint8_t* in, int64_t n, float* out, cudaStream_t stream) {
  decode_e4m3_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(in, n, out);
  DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return OkStatus();
}

Status decode_bf16(const uint16_t* in, int64_t n, float* out, cudaStream_t stream) {
  decode_bf16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(in, n, out);
  DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return OkStatus();
}

Status encode_bf16(const float* in, int64_t n, uint16_t* out, cudaStream_t stream) {
  encode_bf16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(in, n, out);
  DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return OkStatus();
}

}  // namespace deepinfer::cuda
