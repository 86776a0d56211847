// Lightning indexer of CSA layers (deepseek-v4.md §5.5): scores every visible index key for each
// query and keeps the top index_topk (tie rule: higher score, then lower index).
#pragma once

#include <span>

#include "model/deepseek_v4/weights.h"

namespace deepinfer::model::v4 {

// All rows of a step at once, each row reading its own sequence's index keys:
// q_res [S, Rq] (after q_a_norm), x [S, H] (attention input), positions [S] I32 (backend),
// keys [Tk, cI] (every sequence's index keys back to back), per row (host): visible[s] (entries
// the row may see) and key_start[s] (its sequence's first key row); width >= every visible[s].
// selected [S, topk] I32 (-1 = empty slot; the valid picks are the first min(topk, visible[s])).
// `pre`: the indexer's two projections when the caller computed them already (fused with its
// own projections of q_res and x): q_idx [S, nI·cI] = q_res · wq_bᵀ (not roped; roped in place
// here) and head_w [S, nI] = x · weights_projᵀ. Null: computed here.
struct IndexerProjections {
  Tensor q_idx;
  Tensor head_w;
};
Status indexer_select(backend::Backend& be, const Dims& d, const IndexerWeights& w,
                      const RopeTable& rope, const Tensor& q_res, const Tensor& x,
                      const Tensor& positions, std::span<const int32_t> visible,
                      std::span<const int32_t> key_start, const Tensor& keys, int64_t width,
                      Tensor& selected, const IndexerProjections* pre = nullptr);

}  // namespace deepinfer::model::v4
