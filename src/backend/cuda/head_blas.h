// Session 12 (issue 7): a large BF16 weight (the LM head, 129,280 × 4096) against a few fp32 rows
// in the default mode, through cuBLAS. x is split exactly into three bf16 terms per element
// (prefill::split_rows: x = x0 + x1 + x2), the 3M term rows go through one cuBLAS bf16 GEMM with
// fp32 accumulation (the weight read once for all of them), and a small kernel sums each row's
// three partial rows: out[m] = (P[3m] + P[3m+1]) + P[3m+2]. Products of bf16 terms and bf16 weights
// are exact in fp32, so the result is fp32-accurate like the other paths (its own summation
// order; deterministic for a fixed M). Not for --batch-invariant (cuBLAS picks kernels by shape).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace deepinfer::cuda::kernels {

// Session 16: up to 64 rows (was 16): at 17..64 the head otherwise ran on linear_tc_small at
// ~1 TB/s. Session 17: the rows of one cuBLAS call; head_blas_linear takes more rows in slabs of
// this many (CudaBackend takes up to env().head_blas_max_rows, default 384).
constexpr int64_t kHeadBlasMaxRows = 64;

// Whether the path takes a bf16 weight [N, K] at M rows: `min_rows` ≤ M ≤ max_rows, the weight
// at least 64 MiB, K % 4 == 0, x and w 16-byte aligned.
bool head_blas_takes(int64_t min_rows, int64_t M, int64_t N, int64_t K, const void* x,
                     const void* w, int64_t max_rows = kHeadBlasMaxRows);

// Workspace bytes of a call at M rows (one slab's: min(M, kHeadBlasMaxRows) rows).
size_t head_blas_workspace_bytes(int64_t M, int64_t N, int64_t K);

// out [M, N] = x [M, K] · wᵀ (w bf16 [N, K]); ws of head_blas_workspace_bytes, 16-byte aligned.
Status head_blas_linear(cublasHandle_t blas, const float* x, const void* w, int64_t M, int64_t N,
                        int64_t K, void* ws, float* out, cudaStream_t s);

}  // namespace deepinfer::cuda::kernels
