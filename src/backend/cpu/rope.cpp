// Rotary position embedding, in place: interleaved pairs on the trailing r channels (DeepSeek,
// deepseek-v4.md §4.2) or rotate-half pairs on the leading r channels (HF Llama). The angle is
// the fp32 product fp32(position) · inv_freq[i] (§1.3), cos/sin of that fp32 value.
#include <cmath>
#include <vector>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

Status rope(const CpuContext& ctx, Tensor& x, const Tensor& positions, const Tensor& inv_freq,
            RopeStyle style, float mscale, bool inverse) {
  DI_RETURN_IF_ERROR(check_rank("rope", "x", x, DType::kF32, 3));
  const int64_t S = x.dim(0), nh = x.dim(1), D = x.dim(2);
  DI_RETURN_IF_ERROR(check_tensor("rope", "positions", positions, DType::kI32, {S}));
  DI_RETURN_IF_ERROR(check_rank("rope", "inv_freq", inv_freq, DType::kF32, 1));
  const int64_t half = inv_freq.dim(0), r = 2 * half;
  if (r > D)
    return InvalidArgument("rope: rotary width " + std::to_string(r) + " exceeds head dim " +
                           std::to_string(D));
  float* xp = x.data<float>();
  const float* th = inv_freq.data<float>();
  ctx.parallel_for(S, nh * r * 8, [&](int64_t s0, int64_t s1) {
    std::vector<float> cs(half), sn(half);
    for (int64_t s = s0; s < s1; ++s) {
      const float p = static_cast<float>(positions.data<int32_t>()[s]);
      for (int64_t i = 0; i < half; ++i) {
        const float ang = p * th[i];
        cs[i] = std::cos(ang) * mscale;
        sn[i] = (inverse ? -std::sin(ang) : std::sin(ang)) * mscale;
      }
      for (int64_t h = 0; h < nh; ++h) {
        float* v = xp + (s * nh + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          float* pa = style == RopeStyle::kInterleavedTrailing ? v + (D - r) + 2 * i : v + i;
          float* pb = style == RopeStyle::kInterleavedTrailing ? pa + 1 : v + i + half;
          const float a = *pa, b = *pb;
          *pa = a * cs[i] - b * sn[i];
          *pb = b * cs[i] + a * sn[i];
        }
      }
    }
  });
  return OkStatus();
}

}  // namespace deepinfer::backend::cpu
