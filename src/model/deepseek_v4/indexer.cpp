#include "model/deepseek_v4/indexer.h"

#include <cmath>
#include <vector>

#include "model/placement.h"

namespace deepinfer::model::v4 {

Status indexer_select(backend::Backend& be, const Dims& d, const IndexerWeights& w,
                      const RopeTable& rope, const Tensor& q_res, const Tensor& x,
                      const Tensor& positions, std::span<const int32_t> visible,
                      std::span<const int32_t> key_start, const Tensor& keys, int64_t width,
                      Tensor& selected, const IndexerProjections* pre) {
  const int64_t S = x.dim(0);
  Tensor q_idx, head_w;  // qI = q_res · wq_bᵀ [S, nI·cI]; wI [S, nI] (scaled by nI^-½ inside the op)
  if (pre != nullptr) {
    q_idx = pre->q_idx;
    head_w = pre->head_w;
  } else {
    DI_ASSIGN_OR_RETURN(q_idx, be.empty(DType::kF32, {S, d.nI * d.cI}));
    DI_RETURN_IF_ERROR(be.linear(q_res, w.wq_b, q_idx));
    DI_ASSIGN_OR_RETURN(head_w, be.empty(DType::kF32, {S, d.nI}));
    DI_RETURN_IF_ERROR(be.linear(x, w.weights_proj, head_w));
  }
  Tensor q3 = q_idx.view({S, d.nI, d.cI});
  DI_RETURN_IF_ERROR(be.rope(q3, positions, rope.inv_freq, backend::RopeStyle::kInterleavedTrailing,
                             rope.mscale, false));
  std::vector<int32_t> rows(2 * S);  // [visible | key_start], one upload
  std::copy(visible.begin(), visible.end(), rows.begin());
  std::copy(key_start.begin(), key_start.end(), rows.begin() + S);
  DI_ASSIGN_OR_RETURN(Tensor rows_t, to_backend_i32(be, rows, {2 * S}));
  const Tensor visible_t = rows_t.rows(0, S), start_t = rows_t.rows(S, 2 * S);
  DI_EMPTY(scores, be, DType::kF32, {S, std::max<int64_t>(width, 1)});
  DI_RETURN_IF_ERROR(be.indexer_scores(q3, head_w, keys, visible_t,
                                       1.0f / std::sqrt(static_cast<float>(d.nI)),
                                       1.0f / std::sqrt(static_cast<float>(d.cI)), scores,
                                       &start_t));
  return be.topk(scores, d.topk, selected);
}

}  // namespace deepinfer::model::v4
