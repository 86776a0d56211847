// Compressor pooling (deepseek-v4.md §5.2): per output row and channel, a softmax over the L slots
// of the gate scores weighs the slot values. Slots with a -inf score weigh exactly 0.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

Status softmax_pool(const CpuContext& ctx, const Tensor& values, const Tensor& scores,
                    Tensor& out) {
  DI_ASSIGN_OR_RETURN(const PoolDims dims, check_softmax_pool(values, scores, out));
  const int64_t n = dims.n, L = dims.L, d = dims.d;
  const float* vp = values.data<float>();
  const float* sp = scores.data<float>();
  float* op = out.data<float>();
  ctx.parallel_for(n, L * d * 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < d; ++c) {
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t l = 0; l < L; ++l) mx = std::max(mx, sp[(r * L + l) * d + c]);
        float denom = 0.f, acc = 0.f;
        if (mx == -std::numeric_limits<float>::infinity()) {
          op[r * d + c] = 0.f;
          continue;
        }
        for (int64_t l = 0; l < L; ++l) {
          const float e = std::exp(sp[(r * L + l) * d + c] - mx);
          denom += e;
          acc += e * vp[(r * L + l) * d + c];
        }
        op[r * d + c] = acc / denom;
      }
  });
  return OkStatus();
}

}  // namespace deepinfer::backend::cpu
