// Context parallelism: which rank owns which query rows of one prompt's prefill, and the row
// all-gather that gives every rank the whole chunk (docs/dist.md, "Context parallelism").
//
// Split: the prompt's S rows are cut into blocks of `block` consecutive rows, and the blocks are
// dealt to the W ranks in serpentine (zigzag) order 0, 1, …, W−1, W−1, …, 1, 0, 0, 1, … — every
// round of 2W blocks gives rank r blocks r and 2W−1−r. Because the attention cost of a query,
// c(p) = (window keys) + (compressed entries it attends), never decreases with its position p,
// the per-rank totals of any round differ by at most the cost growth inside the round, and these
// growths telescope: over the whole prompt, max_r work − min_r work ≤ 3·block·c(last position)
// (rounds: ≤ block·c_last in total; the partial last round: ≤ 2·block·c_last). Token counts differ
// by at most `block` rows, so the per-token work (projections, MoE, hyper-connections) is
// balanced too.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "dist/communicator.h"

namespace deepinfer::model::v4 {

struct ContextParallelSplit {
  int world_size = 0;
  int64_t num_tokens = 0;  // S, rows of the prompt chunk
  int64_t block = 0;       // rows per dealt block
  std::vector<std::vector<int32_t>> rows;  // [W][n_r] chunk rows (0 … S−1) of rank r, ascending
  std::vector<int64_t> rank_offset;        // [W+1] start of rank r in the rank-major order
  std::vector<int32_t> gather_order;       // [S] chunk row s → its row in the rank-major order
};

// Errors (InvalidArgument): world_size < 1, block < 1, num_tokens < 1, or fewer blocks than ranks
// (a rank would own no row).
StatusOr<ContextParallelSplit> plan_context_parallel_split(int64_t num_tokens, int world_size,
                                                           int64_t block);

// The index lists all_gather_rows needs, in the backend's memory (uploaded once per prefill).
struct RowGatherIndex {
  backend::Tensor repeat;  // [W·n_rank] I32: 0 … n_rank−1, W times (empty when n_rank = 0)
  backend::Tensor order;   // [S] I32: split.gather_order
};
StatusOr<RowGatherIndex> make_row_gather_index(backend::Backend& be,
                                               const ContextParallelSplit& split, int rank);

// Collective. mine [n_rank, w] (this rank's rows, in its ascending row order) → full [S, w] in
// chunk order on every rank (F32; the all-gather is an all_to_all_v that sends `mine` to
// every peer, then a gather_rows into chunk order). Bitwise: rows are only moved. `index`
// (optional) = make_row_gather_index(be, split, comm.rank()), else built here.
Status all_gather_rows(dist::Communicator& comm, backend::Backend& be,
                       const ContextParallelSplit& split, const backend::Tensor& mine,
                       backend::Tensor& full, const RowGatherIndex* index = nullptr);

}  // namespace deepinfer::model::v4
