// Small-M tensor-core product with linear_tc's bits, v2 (session 8; linear_tc_small.cuh for the
// layout and why its bits are linear_tc's): the same per-element arithmetic as linear_tc with the
// caller's split-K plan, so every row's bits equal linear_tc's for 1 ≤ M ≤ kLinearTcSmallMaxRows,
// with the weights streamed through a ring of slots in shared memory.
// Host-only header (C++17/20 safe).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::kernels {

// M bound: up to 4 m16 MMA fragments of x rows per CTA.
constexpr int64_t kLinearTcSmallMaxRows = 64;

// Whether linear_tc_small takes the product: linear_tc_supported's layout (fmt 0 bf16, 1 e4m3,
// 2 e2m1; row bytes a multiple of 16; w and x 16-byte aligned; block_cols a multiple of 32 when
// scaled) and 1 ≤ M ≤ kLinearTcSmallMaxRows.
bool linear_tc_small_supported(int fmt, const void* w, const float* x, int64_t M, int64_t K,
                               bool scaled, int64_t block_cols);

// out [M, G·N] = x [M, G·K] · deq(w [G·N, K])ᵀ per group, bitwise equal to linear_tc(...) with the
// same arguments and the same k_split (any k_split linear_tc accepts: a multiple of 32 and of
// block_cols, e.g. linear_tc_k_split(M, G·N, K, block_cols or 0, batch_invariant)). When
// k_split < K, `workspace` holds [ceil(K / k_split), M, G·N] floats, summed in split order (the
// same adds as linear_tc's reduction). scale [ceil(G·N / block_rows), ceil(K / block_cols)] ue8m0
// or f32 (fewer than 2^31 elements), null for bf16. pdl: both launches with programmatic
// dependent launch (pdl.cuh); bulk: the ring filled by TMA bulk copies instead of cp.async;
// share_x: x split into bf16 terms once per CTA (shared by its warps) instead of once per warp;
// wide: ring slots of 256 bytes per weight row instead of 64 (cp.async, x split per warp; bulk
// and share_x ignored). The bits are the same for every pdl / bulk / share_x / wide.
void linear_tc_small(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                     int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows,
                     int64_t block_cols, int64_t k_split, float* out, float* workspace,
                     cudaStream_t s, bool pdl, bool bulk = false, bool share_x = true,
                     bool wide = false);

}  // namespace deepinfer::cuda::kernels
