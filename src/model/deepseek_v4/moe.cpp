#include "model/deepseek_v4/moe.h"

#include <vector>

#include "model/placement.h"

namespace deepinfer::model::v4 {

namespace {

// One expert over the rows xs [n, H]: out [n, H] = (silu(min(g, lim)) ⊙ clamp(u)) · downᵀ.
Status expert(backend::Backend& be, const Dims& d, const Weight& gate_up /*[2I, H]*/,
              const Weight& down /*[H, I]*/, const Tensor& xs, Tensor& out) {
  const int64_t n = xs.dim(0);
  DI_EMPTY(gu, be, DType::kF32, {n, 2 * d.I});  // linear writes every element
  DI_RETURN_IF_ERROR(be.linear(xs, gate_up, gu));
  DI_EMPTY(act, be, DType::kF32, {n, d.I});
  DI_RETURN_IF_ERROR(be.swiglu(gu, d.swiglu_limit, act));
  return be.linear(act, down, out);
}

// Steps of up to this many rows put the shared expert on the side queue (moe_forward).
constexpr int64_t kSideQueueMaxRows = 128;

}  // namespace

Status moe_hash_ids(const Dims& d, const MoeWeights& w, std::span<const int32_t> token_ids,
                    std::vector<int32_t>& h) {
  const int64_t S = static_cast<int64_t>(token_ids.size());
  h.resize(S * d.k);
  for (int64_t s = 0; s < S; ++s) {
    const int32_t t = token_ids[s];
    if (t < 0 || t >= d.V) return OutOfRange("moe: token id " + std::to_string(t) + " outside tid2eid");
    for (int64_t j = 0; j < d.k; ++j) h[s * d.k + j] = w.tid2eid.data<int32_t>()[t * d.k + j];
  }
  return OkStatus();
}

Status moe_forward(backend::Backend& be, const Dims& d, const io::ScoringFunc scoring,
                   const MoeWeights& w, const Tensor& x, std::span<const int32_t> token_ids,
                   Tensor& y, const dist::ExpertParallelMoe* ep, const Tensor* hash_ids_in,
                   Tensor* routed_out) {
  const int64_t S = x.dim(0);
  // The shared expert on the backend's side queue (session 14): it reads only x, so it runs
  // beside the router and the routed experts, which leave the device's bandwidth half used at
  // decode sizes; the same kernels on the same inputs (same bits). Decode-sized steps only (at
  // prefill sizes both halves fill the device on their own). Backends with one queue, and the
  // expert-parallel path (its collectives), run it in line below.
  struct SideJoin {  // joins the side queue on every return once it was opened
    backend::Backend& be;
    bool open = false;
    ~SideJoin() {
      if (open) (void)be.join_side();
    }
    Status join() {
      open = false;
      return be.join_side();
    }
  } side{be};
  if (S <= kSideQueueMaxRows && ep == nullptr) {
    const Status st = be.begin_side();
    if (st.ok()) {
      side.open = true;
      const Status shared = expert(be, d, w.shared_gate_up, w.shared_down, x, y);
      DI_RETURN_IF_ERROR(be.end_side());
      DI_RETURN_IF_ERROR(shared);
    } else if (st.code() != StatusCode::kUnimplemented) {
      return st;
    }
  }
  const bool on_side = side.open;
  // Router.
  // Uninitialised (DI_EMPTY) where the next op writes every element: on a device each fill is a
  // memset node that also breaks the decode graph's chain of programmatic dependent launches.
  DI_EMPTY(logits, be, DType::kF32, {S, d.E});
  DI_RETURN_IF_ERROR(be.linear(x, w.gate, logits));
  backend::RouterParams rp;
  rp.scoring = scoring == io::ScoringFunc::kSoftmax   ? backend::RouterScoring::kSoftmax
               : scoring == io::ScoringFunc::kSigmoid ? backend::RouterScoring::kSigmoid
                                                      : backend::RouterScoring::kSqrtSoftplus;
  rp.top_k = d.k;
  rp.routed_scaling_factor = d.routed_scaling;
  rp.renormalize = true;
  Tensor hash_ids;  // [S, k] = tid2eid[token] (tid2eid lives on the host)
  if (w.hash && hash_ids_in != nullptr) {
    hash_ids = *hash_ids_in;
  } else if (w.hash) {
    std::vector<int32_t> h;
    DI_RETURN_IF_ERROR(moe_hash_ids(d, w, token_ids, h));
    DI_ASSIGN_OR_RETURN(hash_ids, to_backend_i32(be, h, {S, d.k}));
  }
  DI_EMPTY(expert_ids, be, DType::kI32, {S, d.k});  // moe_route writes all k picks of a row
  DI_EMPTY(expert_w, be, DType::kF32, {S, d.k});
  DI_RETURN_IF_ERROR(be.moe_route(logits, w.bias.defined() ? &w.bias : nullptr,
                                  w.hash ? &hash_ids : nullptr, rp, expert_ids, expert_w));

  // Shared expert on every token (in line when not on the side queue).
  if (!on_side) DI_RETURN_IF_ERROR(expert(be, d, w.shared_gate_up, w.shared_down, x, y));

  // Routed experts (the backend groups or runs them in place; sums over the k picks in order).
  Tensor routed;
  if (ep != nullptr) {  // this rank's slots; rows travel to the rank of their slot and back
    DI_ALLOC(zeroed, be, DType::kF32, {S, d.H});  // the experts add into it
    routed = zeroed;
    DI_RETURN_IF_ERROR(ep->forward(be, w.experts, x, expert_ids, expert_w, d.swiglu_limit, routed));
  } else {  // written whole (no fill: on a device, no memset node)
    DI_EMPTY(sum, be, DType::kF32, {S, d.H});
    routed = sum;
    DI_RETURN_IF_ERROR(
        be.moe_experts_set(x, expert_ids, expert_w, w.experts, d.swiglu_limit, routed));
  }
  if (on_side) DI_RETURN_IF_ERROR(side.join());
  if (routed_out != nullptr) {  // the caller adds (inside its expand)
    *routed_out = routed;
    return OkStatus();
  }
  return be.add(routed, y, y);
}

}  // namespace deepinfer::model::v4
