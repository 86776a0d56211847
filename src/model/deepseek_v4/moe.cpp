#include "model/deepseek_v4/moe.h"

#include <vector>

#include "model/placement.h"

namespace deepinfer::model::v4 {

namespace {

// One expert over the rows xs [n, H]: out [n, H] = (silu(min(g, lim)) ⊙ clamp(u)) · downᵀ.
Status expert(backend::Backend& be, const Dims& d, const Tensor& gate_up /*[2I, H]*/,
              const Tensor& down /*[H, I]*/, const Tensor& xs, Tensor& out) {
  const int64_t n = xs.dim(0);
  DI_ALLOC(gu, be, DType::kF32, {n, 2 * d.I});
  DI_RETURN_IF_ERROR(be.matmul(xs, gate_up, gu));
  DI_ALLOC(act, be, DType::kF32, {n, d.I});
  DI_RETURN_IF_ERROR(be.swiglu(gu, d.swiglu_limit, act));
  return be.matmul(act, down, out);
}

}  // namespace

Status moe_forward(backend::Backend& be, const Dims& d, const io::ScoringFunc scoring,
                   const MoeWeights& w, const Tensor& x, std::span<const int32_t> token_ids,
                   Tensor& y) {
  const int64_t S = x.dim(0);
  // Router.
  DI_ALLOC(logits, be, DType::kF32, {S, d.E});
  DI_RETURN_IF_ERROR(be.matmul(x, w.gate, logits));
  backend::RouterParams rp;
  rp.scoring = scoring == io::ScoringFunc::kSoftmax   ? backend::RouterScoring::kSoftmax
               : scoring == io::ScoringFunc::kSigmoid ? backend::RouterScoring::kSigmoid
                                                      : backend::RouterScoring::kSqrtSoftplus;
  rp.top_k = d.k;
  rp.routed_scaling_factor = d.routed_scaling;
  rp.renormalize = true;
  Tensor hash_ids;  // [S, k] = tid2eid[token] (tid2eid lives on the host)
  if (w.hash) {
    std::vector<int32_t> h(S * d.k);
    for (int64_t s = 0; s < S; ++s) {
      const int32_t t = token_ids[s];
      if (t < 0 || t >= d.V) return OutOfRange("moe: token id " + std::to_string(t) + " outside tid2eid");
      for (int64_t j = 0; j < d.k; ++j) h[s * d.k + j] = w.tid2eid.data<int32_t>()[t * d.k + j];
    }
    DI_ASSIGN_OR_RETURN(hash_ids, to_backend_i32(be, h, {S, d.k}));
  }
  DI_ALLOC(expert_ids, be, DType::kI32, {S, d.k});
  DI_ALLOC(expert_w, be, DType::kF32, {S, d.k});
  DI_RETURN_IF_ERROR(be.moe_route(logits, w.bias.defined() ? &w.bias : nullptr,
                                  w.hash ? &hash_ids : nullptr, rp, expert_ids, expert_w));

  // Shared expert on every token.
  DI_RETURN_IF_ERROR(expert(be, d, w.shared_gate_up, w.shared_down, x, y));

  // Routed experts: gather each expert's tokens (one row per routing slot), run, weighted add.
  // The grouping is done on the host from the downloaded routing.
  DI_ASSIGN_OR_RETURN(Tensor ids_host, to_host(be, expert_ids));
  DI_ASSIGN_OR_RETURN(Tensor w_host, to_host(be, expert_w));
  std::vector<std::vector<int32_t>> rows(d.E);
  std::vector<std::vector<float>> weights(d.E);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < d.k; ++j) {
      const int32_t e = ids_host.data<int32_t>()[s * d.k + j];
      if (e < 0 || e >= d.E) return Internal("moe: router picked expert " + std::to_string(e));
      rows[e].push_back(static_cast<int32_t>(s));
      weights[e].push_back(w_host.data<float>()[s * d.k + j]);
    }
  Tensor gate_up_all = w.experts_gate_up.view({d.E * 2 * d.I, d.H});
  Tensor down_all = w.experts_down.view({d.E * d.H, d.I});
  DI_ALLOC(routed, be, DType::kF32, {S, d.H});
  for (int64_t e = 0; e < d.E; ++e) {
    const int64_t n = static_cast<int64_t>(rows[e].size());
    if (n == 0) continue;
    DI_ASSIGN_OR_RETURN(Tensor ids, to_backend_i32(be, rows[e], {n}));
    DI_ASSIGN_OR_RETURN(Tensor wts, to_backend_f32(be, weights[e], {n}));
    DI_ALLOC(xs, be, DType::kF32, {n, d.H});
    DI_RETURN_IF_ERROR(be.gather_rows(x, ids, xs));
    DI_ALLOC(out, be, DType::kF32, {n, d.H});
    DI_RETURN_IF_ERROR(expert(be, d, gate_up_all.rows(e * 2 * d.I, (e + 1) * 2 * d.I),
                              down_all.rows(e * d.H, (e + 1) * d.H), xs, out));
    DI_RETURN_IF_ERROR(be.scatter_add_rows(out, ids, &wts, routed));
  }
  return be.add(routed, y, y);
}

}  // namespace deepinfer::model::v4
