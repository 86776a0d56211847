#include "model/deepseek_v4/context_parallel_split.h"

#include <algorithm>
#include <string>

#include "model/placement.h"

namespace deepinfer::model::v4 {

StatusOr<ContextParallelSplit> plan_context_parallel_split(int64_t num_tokens, int world_size,
                                                           int64_t block) {
  if (world_size < 1)
    return InvalidArgument("context parallel: world size must be >= 1, got " + std::to_string(world_size));
  if (block < 1)
    return InvalidArgument("context parallel: block must be >= 1 row, got " + std::to_string(block));
  if (num_tokens < 1) return InvalidArgument("context parallel: the prompt has no tokens");
  const int64_t blocks = (num_tokens + block - 1) / block;
  if (blocks < world_size)
    return InvalidArgument("context parallel: " + std::to_string(num_tokens) + " tokens in blocks of " +
                           std::to_string(block) + " give " + std::to_string(blocks) +
                           " blocks, fewer than the world size " + std::to_string(world_size) +
                           " (every rank needs at least one block)");
  ContextParallelSplit sp;
  sp.world_size = world_size;
  sp.num_tokens = num_tokens;
  sp.block = block;
  sp.rows.resize(world_size);
  const int64_t W = world_size;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t q = b % (2 * W);
    const int64_t r = q < W ? q : 2 * W - 1 - q;  // serpentine
    for (int64_t s = b * block; s < std::min(num_tokens, (b + 1) * block); ++s)
      sp.rows[r].push_back(static_cast<int32_t>(s));
  }
  sp.rank_offset.assign(world_size + 1, 0);
  sp.gather_order.assign(num_tokens, 0);
  for (int r = 0; r < world_size; ++r) {
    sp.rank_offset[r + 1] = sp.rank_offset[r] + static_cast<int64_t>(sp.rows[r].size());
    for (size_t i = 0; i < sp.rows[r].size(); ++i)
      sp.gather_order[sp.rows[r][i]] = static_cast<int32_t>(sp.rank_offset[r] + static_cast<int64_t>(i));
  }
  return sp;
}

StatusOr<RowGatherIndex> make_row_gather_index(backend::Backend& be,
                                               const ContextParallelSplit& split, int rank) {
  if (rank < 0 || rank >= split.world_size)
    return InvalidArgument("make_row_gather_index: rank " + std::to_string(rank) + " outside [0, " +
                           std::to_string(split.world_size) + ")");
  const int64_t W = split.world_size, n = static_cast<int64_t>(split.rows[rank].size());
  RowGatherIndex index;
  if (n > 0) {
    std::vector<int32_t> repeat(static_cast<size_t>(W * n));
    for (int64_t i = 0; i < W * n; ++i) repeat[i] = static_cast<int32_t>(i % n);
    DI_ASSIGN_OR_RETURN(index.repeat, to_backend_i32(be, repeat, {W * n}));
  }
  DI_ASSIGN_OR_RETURN(index.order, to_backend_i32(be, split.gather_order, {split.num_tokens}));
  return index;
}

Status all_gather_rows(dist::Communicator& comm, backend::Backend& be,
                       const ContextParallelSplit& split, const backend::Tensor& mine,
                       backend::Tensor& full, const RowGatherIndex* index) {
  const int W = split.world_size, rank = comm.rank();
  if (comm.world_size() != W)
    return InvalidArgument("all_gather_rows: communicator has " + std::to_string(comm.world_size()) +
                           " ranks, the split " + std::to_string(W));
  const int64_t n = static_cast<int64_t>(split.rows[rank].size()), S = split.num_tokens;
  if (mine.rank() != 2 || mine.dim(0) != n || mine.dtype() != DType::kF32)
    return InvalidArgument("all_gather_rows: mine " + mine.describe() + " must be F32[" +
                           std::to_string(n) + ", w] (this rank's rows)");
  const int64_t w = mine.dim(1);
  DI_RETURN_IF_ERROR(backend::check_tensor("all_gather_rows", "full", full, DType::kF32, {S, w}));
  RowGatherIndex local;
  if (index == nullptr) {
    DI_ASSIGN_OR_RETURN(local, make_row_gather_index(be, split, rank));
    index = &local;
  }
  // send = `mine` once per peer (all_to_all_v sends a contiguous block to each rank). A rank may
  // send nothing (the logits of the last row live on one rank).
  DI_EMPTY(send, be, DType::kF32, {W * n, w});
  if (n > 0) {
    DI_RETURN_IF_ERROR(be.gather_rows(mine, index->repeat, send));
  }
  std::vector<int64_t> send_rows(W, n), recv_rows(W);
  for (int r = 0; r < W; ++r) recv_rows[r] = split.rank_offset[r + 1] - split.rank_offset[r];
  DI_EMPTY(recv, be, DType::kF32, {S, w});  // rank-major
  DI_RETURN_IF_ERROR(comm.all_to_all_v(send, send_rows, recv, recv_rows));
  return be.gather_rows(recv, index->order, full);
}

}  // namespace deepinfer::model::v4
