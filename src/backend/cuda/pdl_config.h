// Which launches use programmatic dependent launch (pdl.cuh), from the environment (common/env.h).
// A plain header so C++17 .cu files and C++20 .cpp files can both ask.
#pragma once

namespace deepinfer::cuda::pdl {

// DEEPINFER_SMALL_PDL (default 1): the small decode kernels (norms, rope, routing, swiglu, adds,
// copies, the indexer's and the compressor's, sampling) launch with PDL, each one entering with
// pdl::enter() — so a kernel's launch overlaps the tail of the one before it. Same bits either way.
bool small_kernels();

}  // namespace deepinfer::cuda::pdl
