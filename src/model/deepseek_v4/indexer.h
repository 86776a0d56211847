// Lightning indexer of CSA layers (deepseek-v4.md §5.5): scores every visible index key for each
// query and keeps the top index_topk (tie rule: higher score, then lower index).
#pragma once

#include <span>

#include "model/deepseek_v4/weights.h"

namespace deepinfer::model::v4 {

// q_res [S, Rq] (after q_a_norm), x [S, H] (attention input), positions [S] I32,
// keys [T, cI] (all index keys incl. the chunk's), selected [S, topk] I32 (-1 = empty slot).
Status indexer_select(backend::Backend& be, const Dims& d, const IndexerWeights& w,
                      const RopeTable& rope, const Tensor& q_res, const Tensor& x,
                      const Tensor& positions, std::span<const int32_t> positions_host,
                      const Tensor& keys, Tensor& selected);

}  // namespace deepinfer::model::v4
