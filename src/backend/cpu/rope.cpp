// Rotary position embedding, in place: interleaved pairs on the trailing r channels (DeepSeek,
// deepseek-v4.md §4.2) or rotate-half pairs on the leading r channels (HF Llama). The angle is
// the fp32 product fp32(position) · inv_freq[i] (§1.3), cos/sin of that fp32 value.
#include <cmath>
#include <vector>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

Status rope(const CpuContext& ctx, Tensor& x, const Tensor& positions, const Tensor& inv_freq,
            RopeStyle style, float mscale, bool inverse) {
  DI_ASSIGN_OR_RETURN(const RopeDims dims, check_rope(x, positions, inv_freq));
  const int64_t S = dims.S, nh = dims.nh, D = dims.D, half = dims.half, r = 2 * half;
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
