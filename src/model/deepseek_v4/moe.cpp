#include "model/deepseek_v4/moe.h"

#include <vector>

namespace deepinfer::model::v4 {

namespace {

// One expert over the rows xs [n, H]: out [n, H] = (silu(min(g, lim)) ⊙ clamp(u)) · downᵀ.
Status expert(backend::Backend& be, const Dims& d, const Tensor& gate_up /*[2I, H]*/,
              const Tensor& down /*[H, I]*/, const Tensor& xs, Tensor& out) {
  const int64_t n = xs.dim(0);
  Tensor gu = Tensor::empty(DType::kF32, {n, 2 * d.I});
  DI_RETURN_IF_ERROR(be.matmul(xs, gate_up, gu));
  Tensor act = Tensor::empty(DType::kF32, {n, d.I});
  DI_RETURN_IF_ERROR(be.swiglu(gu, d.swiglu_limit, act));
  return be.matmul(act, down, out);
}

}  // namespace

Status moe_forward(backend::Backend& be, const Dims& d, const io::ScoringFunc scoring,
                   const MoeWeights& w, const Tensor& x, const Tensor& token_ids, Tensor& y) {
  const int64_t S = x.dim(0);
  // Router.
  Tensor logits = Tensor::empty(DType::kF32, {S, d.E});
  DI_RETURN_IF_ERROR(be.matmul(x, w.gate, logits));
  backend::RouterParams rp;
  rp.scoring = scoring == io::ScoringFunc::kSoftmax   ? backend::RouterScoring::kSoftmax
               : scoring == io::ScoringFunc::kSigmoid ? backend::RouterScoring::kSigmoid
                                                      : backend::RouterScoring::kSqrtSoftplus;
  rp.top_k = d.k;
  rp.routed_scaling_factor = d.routed_scaling;
  rp.renormalize = true;
  Tensor hash_ids;  // [S, k] = tid2eid[token]
  if (w.hash) {
    hash_ids = Tensor::empty(DType::kI32, {S, d.k});
    for (int64_t s = 0; s < S; ++s) {
      const int32_t t = token_ids.data<int32_t>()[s];
      if (t < 0 || t >= d.V) return OutOfRange("moe: token id " + std::to_string(t) + " outside tid2eid");
      for (int64_t j = 0; j < d.k; ++j)
        hash_ids.data<int32_t>()[s * d.k + j] = w.tid2eid.data<int32_t>()[t * d.k + j];
    }
  }
  Tensor expert_ids = Tensor::empty(DType::kI32, {S, d.k});
  Tensor expert_w = Tensor::empty(DType::kF32, {S, d.k});
  DI_RETURN_IF_ERROR(be.moe_route(logits, w.bias.defined() ? &w.bias : nullptr,
                                  w.hash ? &hash_ids : nullptr, rp, expert_ids, expert_w));

  // Shared expert on every token.
  DI_RETURN_IF_ERROR(expert(be, d, w.shared_gate_up, w.shared_down, x, y));

  // Routed experts: gather each expert's tokens (one row per routing slot), run, weighted add.
  std::vector<std::vector<int32_t>> rows(d.E);
  std::vector<std::vector<float>> weights(d.E);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < d.k; ++j) {
      const int32_t e = expert_ids.data<int32_t>()[s * d.k + j];
      rows[e].push_back(static_cast<int32_t>(s));
      weights[e].push_back(expert_w.data<float>()[s * d.k + j]);
    }
  Tensor gate_up_all = w.experts_gate_up.view({d.E * 2 * d.I, d.H});
  Tensor down_all = w.experts_down.view({d.E * d.H, d.I});
  Tensor routed = Tensor::empty(DType::kF32, {S, d.H});
  for (int64_t e = 0; e < d.E; ++e) {
    const int64_t n = static_cast<int64_t>(rows[e].size());
    if (n == 0) continue;
    Tensor ids = Tensor::from_i32({n}, rows[e]);
    Tensor wts = Tensor::from_f32({n}, weights[e]);
    Tensor xs = Tensor::empty(DType::kF32, {n, d.H});
    DI_RETURN_IF_ERROR(be.gather_rows(x, ids, xs));
    Tensor out = Tensor::empty(DType::kF32, {n, d.H});
    DI_RETURN_IF_ERROR(expert(be, d, gate_up_all.rows(e * 2 * d.I, (e + 1) * 2 * d.I),
                              down_all.rows(e * d.H, (e + 1) * d.H), xs, out));
    DI_RETURN_IF_ERROR(be.scatter_add_rows(out, ids, &wts, routed));
  }
  return be.add(routed, y, y);
}

}  // namespace deepinfer::model::v4
