// MoE router (deepseek-v4.md §7: sqrtsoftplus scores, correction bias for selection only, hash
// routing through precomputed tid2eid rows) and the clamped SwiGLU of every expert.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

namespace {
float softplus(float v) { return v > 20.f ? v : std::log1p(std::exp(v)); }  // torch threshold 20
}  // namespace

Status moe_route(const CpuContext& ctx, const Tensor& logits, const Tensor* bias,
                 const Tensor* hash_ids, const RouterParams& params, Tensor& ids,
                 Tensor& weights) {
  DI_ASSIGN_OR_RETURN(const RouteDims dims, check_moe_route(logits, bias, hash_ids, params, ids, weights));
  const int64_t S = dims.S, E = dims.E, k = dims.k;
  if (hash_ids)
    for (int64_t i = 0; i < S * k; ++i) {
      const int32_t e = hash_ids->data<int32_t>()[i];
      if (e < 0 || e >= E)
        return OutOfRange("moe_route: hash expert id " + std::to_string(e) + " outside [0, " +
                          std::to_string(E) + ")");
    }
  std::vector<float> sc(E), sel(E);
  std::vector<int32_t> order(E);
  for (int64_t s = 0; s < S; ++s) {
    const float* l = logits.data<float>() + s * E;
    if (params.scoring == RouterScoring::kSoftmax) {
      float mx = *std::max_element(l, l + E), den = 0.f;
      for (int64_t e = 0; e < E; ++e) den += (sc[e] = std::exp(l[e] - mx));
      for (int64_t e = 0; e < E; ++e) sc[e] /= den;
    } else {
      for (int64_t e = 0; e < E; ++e)
        sc[e] = params.scoring == RouterScoring::kSigmoid ? 1.f / (1.f + std::exp(-l[e]))
                                                          : std::sqrt(softplus(l[e]));
    }
    int32_t* out_ids = ids.data<int32_t>() + s * k;
    if (hash_ids) {
      for (int64_t j = 0; j < k; ++j) out_ids[j] = hash_ids->data<int32_t>()[s * k + j];
    } else {
      for (int64_t e = 0; e < E; ++e) sel[e] = sc[e] + (bias ? bias->data<float>()[e] : 0.f);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return sel[a] > sel[b] || (sel[a] == sel[b] && a < b);
      });
      for (int64_t j = 0; j < k; ++j) out_ids[j] = order[j];
    }
    float sum = 0.f;
    for (int64_t j = 0; j < k; ++j) sum += sc[out_ids[j]];
    float* w = weights.data<float>() + s * k;
    for (int64_t j = 0; j < k; ++j) {
      const float v = sc[out_ids[j]];
      w[j] = (params.renormalize ? v / (sum + 1e-20f) : v) * params.routed_scaling_factor;
    }
  }
  return OkStatus();
}

Status swiglu(const CpuContext& ctx, const Tensor& gate_up, float limit, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const SwigluDims dims, check_swiglu(gate_up, out));
  const int64_t M = dims.M, I = dims.I, I2 = 2 * I;
  const float* gp = gate_up.data<float>();
  float* op = out.data<float>();
  ctx.parallel_for(M, I * 16, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      for (int64_t i = 0; i < I; ++i) {
        float g = gp[m * I2 + i], u = gp[m * I2 + I + i];
        if (limit > 0.f) {
          g = std::min(g, limit);
          u = std::clamp(u, -limit, limit);
        }
        op[m * I + i] = (g / (1.f + std::exp(-g))) * u;
      }
  });
  return OkStatus();
}

}  // namespace deepinfer::backend::cpu
