// Test-only producer kernel for the programmatic-dependent-launch tests (cuda_gemv_pdl_test.cpp):
// it lets a following PDL kernel start at once and writes that kernel's input late.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::testing {

// A plain launch of `blocks` CTAs on s that first executes griddepcontrol.launch_dependents (a
// following kernel launched with PDL may start right away), then spins for spin_ns nanoseconds
// (%globaltimer), then writes dst[i] = src[i] for i < n and poison[i] = NaN for i < n_poison.
// A PDL kernel that read dst, or wrote poison, before its griddepcontrol.wait would see NaN or
// have its writes overwritten with NaN.
void slow_producer(float* dst, const float* src, int64_t n, float* poison, int64_t n_poison,
                   int64_t spin_ns, int blocks, cudaStream_t s);

}  // namespace deepinfer::cuda::testing
