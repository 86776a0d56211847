#include "model/deepseek_v4/indexer.h"

#include <cmath>
#include <vector>

#include "model/placement.h"

namespace deepinfer::model::v4 {

Status indexer_select(backend::Backend& be, const Dims& d, const IndexerWeights& w,
                      const RopeTable& rope, const Tensor& q_res, const Tensor& x,
                      const Tensor& positions, std::span<const int32_t> positions_host,
                      const Tensor& keys, Tensor& selected) {
  const int64_t S = x.dim(0), T = keys.dim(0), m = w.compressor.m;
  DI_ALLOC(q_idx, be, DType::kF32, {S, d.nI * d.cI});  // qI = q_res · wq_bᵀ
  DI_RETURN_IF_ERROR(be.linear(q_res, w.wq_b, q_idx));
  Tensor q3 = q_idx.view({S, d.nI, d.cI});
  DI_RETURN_IF_ERROR(be.rope(q3, positions, rope.inv_freq, backend::RopeStyle::kInterleavedTrailing,
                             rope.mscale, false));
  DI_ALLOC(head_w, be, DType::kF32, {S, d.nI});  // wI (scaled by nI^-½ inside the op)
  DI_RETURN_IF_ERROR(be.linear(x, w.weights_proj, head_w));
  std::vector<int32_t> visible(S);               // entries w < ⌊(p+1)/m⌋
  for (int64_t s = 0; s < S; ++s) visible[s] = static_cast<int32_t>((positions_host[s] + 1) / m);
  DI_ASSIGN_OR_RETURN(Tensor visible_t, to_backend_i32(be, visible, {S}));
  DI_ALLOC(scores, be, DType::kF32, {S, T});
  DI_RETURN_IF_ERROR(be.indexer_scores(q3, head_w, keys, visible_t,
                                       1.0f / std::sqrt(static_cast<float>(d.nI)),
                                       1.0f / std::sqrt(static_cast<float>(d.cI)), scores));
  return be.topk(scores, d.topk, selected);
}

}  // namespace deepinfer::model::v4
