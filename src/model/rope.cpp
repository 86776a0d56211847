#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::model {

StatusOr<RopeTable> make_rope_table(const io::RopeParams& p, int64_t r) {
  if (r <= 0 || r % 2 != 0)
    return InvalidArgument("rope: rotary width must be even and positive, got " + std::to_string(r));
  RopeTable t;
  t.rotary_dim = r;
  const int64_t half = r / 2;
  t.inv_freq = backend::Tensor::empty(DType::kF32, {half});
  float* th = t.inv_freq.data<float>();
  // HF: 1 / base^(arange(0, r, 2) / r), in fp32.
  for (int64_t i = 0; i < half; ++i)
    th[i] = 1.0f / std::pow(static_cast<float>(p.theta),
                            static_cast<float>(2 * i) / static_cast<float>(r));
  if (p.type == io::RopeType::kDefault) return t;
  if (p.type != io::RopeType::kYarn)
    return Unimplemented(std::string("rope: type '") + io::rope_type_name(p.type) +
                         "' is not supported (default, yarn)");
  const double base = p.theta, f = p.factor;
  const double O = static_cast<double>(p.original_max_position_embeddings);
  if (O <= 0 || f <= 0)
    return InvalidArgument("rope: yarn needs factor > 0 and original_max_position_embeddings > 0");
  auto corr = [&](double n) { return r * std::log(O / (n * 2 * M_PI)) / (2 * std::log(base)); };
  double lo = corr(p.beta_fast), hi = corr(p.beta_slow);
  if (p.truncate) {
    lo = std::floor(lo);
    hi = std::ceil(hi);
  }
  lo = std::max(lo, 0.0);
  hi = std::min(hi, static_cast<double>(r - 1));
  if (lo == hi) hi += 0.001;
  for (int64_t i = 0; i < half; ++i) {
    const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - lo) / (hi - lo)), 0.f, 1.f);
    const float keep = 1.f - ramp;
    const float pos_freq = std::pow(static_cast<float>(base),
                                    static_cast<float>(2 * i) / static_cast<float>(r));
    const float extrap = 1.0f / pos_freq;
    const float interp = 1.0f / (static_cast<float>(f) * pos_freq);
    th[i] = interp * (1.f - keep) + extrap * keep;
  }
  t.mscale = static_cast<float>(p.attention_factor);
  return t;
}

}  // namespace deepinfer::model
