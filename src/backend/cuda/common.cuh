// Small device helpers shared by the kernel files.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace deepinfer::cuda::kernels {

// The current device's SM count, cached per device (132 if it cannot be read).
inline int sms_of_current_device() {
  static std::atomic<int> cache[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
  std::atomic<int>& slot = cache[dev & 63];
  int v = slot.load(std::memory_order_relaxed);
  if (v > 0) return v;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0) {
    cudaGetLastError();
    v = 132;
  }
  slot.store(v, std::memory_order_relaxed);
  return v;
}

// Opts a kernel in to `smem_bytes` of dynamic shared memory (and, if asked, all of L1 as shared
// memory) once per device: the attribute belongs to the device's instance of the function, and
// threads-as-ranks drive several devices from one process. `done` is the caller's per-kernel
// bit set of devices (a function-local static).
template <typename Kernel>
void opt_in_smem_per_device(std::atomic<uint64_t>& done, Kernel kernel, int smem_bytes,
                            bool max_carveout = false) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if ((done.load(std::memory_order_relaxed) & bit) != 0) return;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (max_carveout)
    cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                         cudaSharedmemCarveoutMaxShared);
  done.fetch_or(bit, std::memory_order_relaxed);
}

// The same with all the dynamic shared memory a block may have on this device (its opt-in
// maximum less the kernel's static arrays): for kernels whose need varies from launch to launch.
template <typename Kernel>
void opt_in_max_smem_per_device(std::atomic<uint64_t>& done, Kernel kernel) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
  if ((done.load(std::memory_order_relaxed) & (uint64_t{1} << (dev & 63))) != 0) return;
  int optin = 0;
  cudaFuncAttributes attr{};
  if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
      cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();  // the launch then reports what is wrong
    return;
  }
  opt_in_smem_per_device(done, kernel, optin - static_cast<int>(attr.sharedSizeBytes));
}

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
