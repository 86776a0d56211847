// Host-side planning of the FP8 block-scaled GEMM (fp8_gemm.h): how a product
//   out [M, G·N] f32 = x [M, G·K] f32 · deq(w [G·N, K] e4m3, 128×128 block scales)ᵀ, per group g
// is cut into cuBLASLt calls, and where every scale factor lives. No CUDA here (unit-tested on
// the CPU, tests/cuda/fp8_gemm_plan_test.cpp).
//
// cuBLASLt's Hopper block-scaled FP8 path (cuBLAS docs §3.1.4.5, "128-element 1D and 128x128 2D
// block scaling"): TN only, A = the weight with CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, B = the
// quantized activations with CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, f32 out. Its GEMM m (= our N)
// and n (= our tokens M) must be multiples of 4, scale pointers 16-byte aligned, and
//   - VEC128 scales of B are N-major (token-contiguous): scale(token j, k-block b) at b·n + j;
//   - BLK128x128 scales of A are K-major with the k-block count padded to L4 = roundup(L, 4):
//     scale(n-block p, k-block b) at p·L4 + b.
// Tokens: rows [0, M4) (M4 = M rounded down to 4) go straight into `out`; the last M − M4 rows are
// padded to 4 and computed into a small scratch output, then copied. Small M (< kSplitMinRows)
// that is not a multiple of 4 runs as one padded part into scratch (one pass over the weight).
// Groups (the grouped o-projection) are one cuBLASLt call per group: strided batches have no
// batch stride for the scale tensors.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/status.h"

namespace deepinfer::cuda {

inline constexpr int64_t kFp8Block = 128;      // quantization block along K (and weight rows)
inline constexpr int64_t kFp8TokenAlign = 4;    // cuBLASLt: n (tokens) must be a multiple of 4
inline constexpr int64_t kFp8SplitMinRows = 128;  // below: one padded part into scratch

// One cuBLASLt product over tokens [row0, row0 + rows) (rows_padded ≥ rows, a multiple of 4).
struct Fp8GemmPart {
  int64_t row0 = 0, rows = 0, rows_padded = 0;
  bool to_scratch = false;   // D is the scratch [rows_padded, G·N]; rows are then copied to out
  int64_t q_offset = 0;      // bytes into the quantized activations: row0 · G·K
  int64_t scale_offset = 0;  // floats into the activation scales (this part's region)
};

struct Fp8GemmPlan {
  int64_t M = 0, N = 0, K = 0, groups = 1;
  int64_t L = 0;         // k-blocks per group: K / 128
  int64_t L4 = 0;        // L rounded up to 4 (weight-scale column stride)
  int64_t n_blocks = 0;  // 128-row blocks of one group's weight: ceil(N / 128)
  int parts = 0;
  Fp8GemmPart part[2];
  int64_t q_rows = 0;         // rows of the quantized-activation buffer [q_rows, G·K] e4m3
  int64_t act_scale_floats = 0;  // size of the activation-scale buffer
  int64_t w_scale_floats = 0;    // size of the converted weight-scale buffer
  int64_t scratch_rows = 0;      // rows of the scratch output [scratch_rows, G·N] (0: none)

  // Activation scale of token m (m < q_rows) and k-block b (b < G·L, across groups) in the
  // activation-scale buffer. Rows in [M, q_rows) are padding (zero codes, zero scale).
  int64_t act_scale_index(int64_t m, int64_t b) const;
  // Converted weight scale of global 128-row block p (< ceil(G·N/128)) and k-block b (< L4).
  int64_t w_scale_index(int64_t p, int64_t b) const { return p * L4 + b; }
  // Offset (floats) of group g's weight scales / of group g's activation scales within a part.
  int64_t w_scale_group_offset(int64_t g) const { return g * n_blocks * L4; }
  int64_t act_scale_group_offset(const Fp8GemmPart& p, int64_t g) const {
    return p.scale_offset + g * L * p.rows_padded;
  }
};

// Plans the product. Unimplemented (the caller falls back to another path) when the FP8 path
// cannot take the shape: K not a multiple of 128, N not a multiple of 4, groups > 1 with N not a
// multiple of 128; InvalidArgument for non-positive sizes.
StatusOr<Fp8GemmPlan> plan_fp8_gemm(int64_t M, int64_t N, int64_t K, int64_t groups);

#if defined(__CUDACC__)
#define DI_FP8_HD __host__ __device__ __forceinline__
#else
#define DI_FP8_HD inline
#endif

// The activation quantizer's scale for one 1×128 group with absolute maximum `amax`, as
// DeepSeek's act_quant: s = max(amax, 1e-4) / 448 in fp32 (IEEE division; NaN stays NaN);
// pow2 = true rounds s up to a power of two (the ue8m0 variant: 2^ceil(log2 s), exact for the
// normal s the 1e-4 floor guarantees). Shared by the device kernel and the tests.
DI_FP8_HD float fp8_act_scale(float amax, bool pow2) {
  const float a = amax < 1e-4f ? 1e-4f : amax;
  float s = a / 448.0f;
  if (pow2) {
    uint32_t bits;
    memcpy(&bits, &s, 4);
    if ((bits & 0x7F800000u) != 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
      bits = (bits & 0x7F800000u) + 0x00800000u;  // next power of two (sign is +)
      memcpy(&s, &bits, 4);
    }
  }
  return s;
}

}  // namespace deepinfer::cuda
