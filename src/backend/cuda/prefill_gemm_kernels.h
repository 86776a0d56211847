// Device side of the prefill products on cuBLAS (prefill_gemm.h): x split into three bf16 terms
// laid out for a K-stacked GEMM, weights dequantized exactly to bf16, the 3-row sums of the
// expert path, and a flag-guarded exact fallback. Plain C++17 (included by .cu files).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::prefill {

// xs [rows][3][K] bf16 (as uint16): for output row p, source row r = perm ? perm[p0 + p] / x_div
// : p, of x viewed as [*, K] fp32 (row stride K): x_0 = bf16_rn(x), x_1 = bf16_rn(x − x_0),
// x_2 = bf16_rn(x − x_0 − x_1), a NaN remainder (from ±inf) becoming 0 — the split of the
// tensor-core kernels (moe_tc.cu), in natural k order. K % 4 == 0, x 16-byte aligned.
void split_rows(const float* x, int64_t K, const int32_t* perm, int64_t p0, int64_t x_div,
                int64_t rows, uint16_t* xs, cudaStream_t s);

// Weights to bf16, exactly. One matrix (dense: w/scale, rows [row0, row0 + rows) of the stored
// weight) or `count` experts (experts[c] indexes w_table/s_table, all rows 0..rows−1).
//   fmt 0: bf16 (copied), 1: e4m3 [R, K], 2: e2m1 packed [R, K/2] (low nibble = even k);
//   scales [ceil(R/br), ceil(K/bc)], ue8m0 bytes or f32 (scale_f32); unscaled when fmt 0.
// out [count][rows][copies·K] bf16: the row written `copies` times side by side (3: the weight
// of the K-stacked product). An element whose value v·s is not a normal (or zero) bf16 number,
// or whose scale is ±inf, sets *inexact = 1 (NaN codes and NaN scales propagate as NaN, as in
// the stored-format kernels). K % 8 == 0, bc % 8 == 0 when scaled.
struct DequantArgs {
  int fmt = 1;
  const void* w = nullptr;
  const void* scale = nullptr;
  const void* const* w_table = nullptr;
  const void* const* s_table = nullptr;
  const int32_t* experts = nullptr;  // [count] on the device (experts mode)
  bool scale_f32 = false;
  int64_t row0 = 0, rows = 0, count = 1, K = 0, br = 1, bc = 1;
  int copies = 1;
  uint16_t* out = nullptr;
  int32_t* inexact = nullptr;
};
void dequant_bf16(const DequantArgs& a, cudaStream_t s);

// o[perm[p0 + p], n] = (y[3p, n] + y[3p+1, n]) + y[3p+2, n] for p < rows; y [3·rows, N] fp32.
void sum_terms(const float* y, const int32_t* perm, int64_t p0, int64_t rows, int64_t N, float* o,
               cudaStream_t s);

// Runs only when *inexact != 0 (checked on the device; otherwise every CTA exits at once):
// recomputes out[r, n] (r < R, n < N) from the stored weight with double accumulation.
//   dense (ids == nullptr): x viewed [R, K] (R = M·G), weight rows (r % G)·N + n of w/scale.
//   experts: e = ids[r] (rows with e outside [0, E) are skipped), x row r / x_div, weight
//   w_table[e] / s_table[e] rows n.
struct FallbackArgs {
  const int32_t* inexact = nullptr;
  int fmt = 1;
  const float* x = nullptr;
  int64_t x_div = 1, G = 1;
  const int32_t* ids = nullptr;
  int64_t E = 0;
  const void* w = nullptr;
  const void* scale = nullptr;
  const void* const* w_table = nullptr;
  const void* const* s_table = nullptr;
  bool scale_f32 = false;
  int64_t R = 0, N = 0, K = 0, br = 1, bc = 1;
  float* out = nullptr;
};
void exact_fallback(const FallbackArgs& a, int num_sms, cudaStream_t s);

}  // namespace deepinfer::cuda::prefill
