// See pdl_producer.h.
#include "pdl_producer.h"

#include "backend/cuda/pdl.cuh"

namespace deepinfer::cuda::testing {
namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void slow_producer_kernel(float* dst, const float* src, int64_t n, float* poison,
                                     int64_t n_poison, int64_t spin_ns) {
  pdl::launch_dependents();
  if (threadIdx.x == 0) {
    const uint64_t t0 = global_ns();
    while (global_ns() - t0 < static_cast<uint64_t>(spin_ns)) __nanosleep(1000);
  }
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = src[i];
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_poison; i += stride)
    poison[i] = __int_as_float(0x7FC00000);
}

}  // namespace

void slow_producer(float* dst, const float* src, int64_t n, float* poison, int64_t n_poison,
                   int64_t spin_ns, int blocks, cudaStream_t s) {
  slow_producer_kernel<<<blocks, 256, 0, s>>>(dst, src, n, poison, n_poison, spin_ns);
}

}  // namespace deepinfer::cuda::testing
