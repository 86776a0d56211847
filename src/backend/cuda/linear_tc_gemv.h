// Weight-streaming tensor-core product for decode-sized M under --batch-invariant
// (linear_tc_gemv.cuh for the layout and why its bits are linear_tc's): the same per-element
// arithmetic as linear_tc (linear_tc.cuh) with the same split-K plan, so every row's bits equal
// linear_tc's for any M ≤ kLinearTcGemvMaxRows, at GEMV speed (no shared-memory weight tiles).
// Host-only header (C++17/20 safe).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::kernels {

// M bound of the kernel: one m16 MMA fragment holds every x row (rows ≥ M are zero padding, as
// in linear_tc's 16-row tile).
constexpr int64_t kLinearTcGemvMaxRows = 16;

// Whether linear_tc_gemv takes the product: linear_tc_supported's layout (fmt 0 bf16, 1 e4m3,
// 2 e2m1; row bytes a multiple of 16; w and x 16-byte aligned; block_cols a multiple of 32 when
// scaled) and 1 ≤ M ≤ kLinearTcGemvMaxRows.
bool linear_tc_gemv_supported(int fmt, const void* w, const float* x, int64_t M, int64_t K,
                              bool scaled, int64_t block_cols);

// out [M, G·N] = x [M, G·K] · deq(w [G·N, K])ᵀ per group, bitwise equal to linear_tc(...) with
// the same arguments (k_split from linear_tc_k_split(M, G·N, K, block_cols or 0, true) — any
// k_split linear_tc accepts gives linear_tc's bits for that k_split). When k_split < K,
// `workspace` holds [ceil(K / k_split), M, G·N] floats, summed in split order by linear_tc's own
// reduction kernel. scale [ceil(G·N / block_rows), ceil(K / block_cols)] ue8m0 or f32 (fewer than
// 2^31 elements), null for bf16.
void linear_tc_gemv(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                    int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows,
                    int64_t block_cols, int64_t k_split, float* out, float* workspace,
                    cudaStream_t s);

// linear_tc.cu: linear_tc's split-K reduction, out[i] = ((ws[0·n + i] + ws[1·n + i]) + …) in split
// order — shared so both kernels sum their partials with the same code.
void linear_tc_reduce_splits(const float* ws, int64_t splits, int64_t n, float* out,
                             cudaStream_t s);

}  // namespace deepinfer::cuda::kernels
