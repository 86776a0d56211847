// RMSNorm: y = x · rsqrt(mean(x²) + eps) (· weight), statistics in fp32 over the last axis.
#include <cmath>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

Status rms_norm(const CpuContext& ctx, const Tensor& x, const Tensor* weight, float eps,
                Tensor& out) {
  DI_ASSIGN_OR_RETURN(const RowsDims dims, check_rms_norm(x, weight, out));
  const int64_t M = dims.M, N = dims.N;
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  const float* wp = weight ? weight->data<float>() : nullptr;
  ctx.parallel_for(M, N, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const float* r = xp + m * N;
      const float ss = dot(ctx, r, r, N);
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(N) + eps);
      float* o = op + m * N;
      if (wp) {
        for (int64_t i = 0; i < N; ++i) o[i] = wp[i] * (r[i] * inv);
      } else {
        for (int64_t i = 0; i < N; ++i) o[i] = r[i] * inv;
      }
    }
  });
  return OkStatus();
}

}  // namespace deepinfer::backend::cpu
