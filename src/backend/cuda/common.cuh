// Small device helpers shared by the kernel files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::kernels {

inline unsigned grid_for(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// Block-wide sum with a fixed reduction tree (deterministic for a given blockDim).
template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* shared /* [kThreads/32] */) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0.f;
  if (threadIdx.x < 32) {
    total = lane < kThreads / 32 ? shared[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
    if (lane == 0) shared[0] = total;
  }
  __syncthreads();
  total = shared[0];
  __syncthreads();
  return total;
}

template <int kThreads>
__device__ __forceinline__ float block_max(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = -INFINITY;
  if (threadIdx.x < 32) {
    m = lane < kThreads / 32 ? shared[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) shared[0] = m;
  }
  __syncthreads();
  m = shared[0];
  __syncthreads();
  return m;
}

__device__ __forceinline__ void set_error(int32_t* flag, int32_t code) {
  if (flag) atomicCAS(flag, 0, code);
}

}  // namespace deepinfer::cuda::kernels
