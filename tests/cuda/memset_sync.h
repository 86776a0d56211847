// cudaMemset for the device tests, finished before it returns. The backend's stream is created
// with cudaStreamNonBlocking, so a plain cudaMemset (legacy default stream, asynchronous with
// respect to the host) is not ordered before the kernels the test launches next on that stream:
// a NaN fill meant to expose unwritten outputs could land after the kernel wrote them (seen in
// session 13: one element of an output NaN).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace deepinfer::cuda::testing {

inline cudaError_t memset_sync(void* p, int value, size_t bytes) {
  const cudaError_t e = cudaMemset(p, value, bytes);
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
}

}  // namespace deepinfer::cuda::testing
