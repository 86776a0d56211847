// Device helpers shared by the mHC kernels (hyper_connection.cu: the composed ops and the
// session-6 fused site; hc_site.cu: the session-7 fused site), so that every kernel that computes
// one of these numbers computes it with the same instructions and therefore the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::kernels::hc_detail {

__device__ __forceinline__ float sigmoidf_(float v) { return 1.f / (1.f + expf(-v)); }

// One element of HC_expand: post_k·y[c] + Σ_j C[j][k]·X[j][c], j ascending. The rounding is
// pinned with intrinsics (no contraction left to the compiler), so hc_expand_kernel and the fused
// kernels that compute the new streams give the same bits. X, C: the token's streams and comb.
__device__ __forceinline__ float hc_expand_elem(float post_k, float yc, const float* C,
                                                const float* X, int64_t k, int64_t c,
                                                int64_t hc, int64_t H) {
  float o = __fmul_rn(post_k, yc);
  for (int64_t j = 0; j < hc; ++j) o = __fmaf_rn(C[j * hc + k], X[j * H + c], o);
  return o;
}

}  // namespace deepinfer::cuda::kernels::hc_detail
