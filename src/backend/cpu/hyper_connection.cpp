// Manifold-constrained hyper-connections (deepseek-v4.md §3): the per-token coefficients
// (pre / post / Sinkhorn-Knopp comb), the stream collapse and the expand (X_new = post·y + Cᵀ·X).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

namespace {
float sigmoid(float v) { return 1.f / (1.f + std::exp(-v)); }
}  // namespace

Status hc_coeffs(const CpuContext& ctx, const Tensor& mix, const Tensor& base, const Tensor& scale,
                 const HcParams& p, Tensor& pre, Tensor* post, Tensor* comb) {
  DI_ASSIGN_OR_RETURN(const HcDims dims, check_hc_coeffs(mix, base, scale, p, pre, post, comb));
  const int64_t hc = dims.hc, S = dims.S, width = dims.width;
  const bool head = dims.head;
  const float* sc = scale.data<float>();
  const float* b = base.data<float>();
  const float eps = p.hc_eps;
  for (int64_t s = 0; s < S; ++s) {
    const float* a = mix.data<float>() + s * width;
    float* pr = pre.data<float>() + s * hc;
    for (int64_t j = 0; j < hc; ++j) pr[j] = sigmoid(a[j] * sc[0] + b[j]) + eps;
    if (head) continue;
    float* po = post->data<float>() + s * hc;
    for (int64_t j = 0; j < hc; ++j) po[j] = 2.f * sigmoid(a[hc + j] * sc[1] + b[hc + j]);
    float* C = comb->data<float>() + s * hc * hc;
    for (int64_t j = 0; j < hc; ++j) {  // row softmax of the raw mix, then + eps
      float mx = -INFINITY;
      for (int64_t k = 0; k < hc; ++k) {
        C[j * hc + k] = a[2 * hc + j * hc + k] * sc[2] + b[2 * hc + j * hc + k];
        mx = std::max(mx, C[j * hc + k]);
      }
      float den = 0.f;
      for (int64_t k = 0; k < hc; ++k) den += (C[j * hc + k] = std::exp(C[j * hc + k] - mx));
      for (int64_t k = 0; k < hc; ++k) C[j * hc + k] = C[j * hc + k] / den + eps;
    }
    auto col_norm = [&] {
      for (int64_t k = 0; k < hc; ++k) {
        float sum = 0.f;
        for (int64_t j = 0; j < hc; ++j) sum += C[j * hc + k];
        for (int64_t j = 0; j < hc; ++j) C[j * hc + k] /= (sum + eps);
      }
    };
    auto row_norm = [&] {
      for (int64_t j = 0; j < hc; ++j) {
        float sum = 0.f;
        for (int64_t k = 0; k < hc; ++k) sum += C[j * hc + k];
        for (int64_t k = 0; k < hc; ++k) C[j * hc + k] /= (sum + eps);
      }
    };
    col_norm();
    for (int64_t it = 1; it < p.sinkhorn_iters; ++it) {
      row_norm();
      col_norm();
    }
  }
  return OkStatus();
}

Status hc_collapse(const CpuContext& ctx, const Tensor& x, const Tensor& pre, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const StreamDims dims, check_hc_collapse(x, pre, out));
  const int64_t S = dims.S, hc = dims.hc, H = dims.H;
  ctx.parallel_for(S, hc * H, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      float* o = out.data<float>() + s * H;
      const float* X = x.data<float>() + s * hc * H;
      const float* pr = pre.data<float>() + s * hc;
      for (int64_t c = 0; c < H; ++c) o[c] = pr[0] * X[c];
      for (int64_t j = 1; j < hc; ++j)
        for (int64_t c = 0; c < H; ++c) o[c] += pr[j] * X[j * H + c];
    }
  });
  return OkStatus();
}

Status hc_expand(const CpuContext& ctx, const Tensor& x, const Tensor& y, const Tensor& post,
                 const Tensor& comb, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const StreamDims dims, check_hc_expand(x, y, post, comb, out));
  const int64_t S = dims.S, hc = dims.hc, H = dims.H;
  ctx.parallel_for(S, hc * hc * H, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const float* X = x.data<float>() + s * hc * H;
      const float* Y = y.data<float>() + s * H;
      const float* C = comb.data<float>() + s * hc * hc;
      const float* po = post.data<float>() + s * hc;
      for (int64_t k = 0; k < hc; ++k) {
        float* o = out.data<float>() + (s * hc + k) * H;
        for (int64_t c = 0; c < H; ++c) o[c] = po[k] * Y[c];
        for (int64_t j = 0; j < hc; ++j)
          for (int64_t c = 0; c < H; ++c) o[c] += C[j * hc + k] * X[j * H + c];
      }
    }
  });
  return OkStatus();
}

}  // namespace deepinfer::backend::cpu
