// Index arithmetic of expert-parallel token dispatch and combine (no communication here).
//
// Every rank holds its own tokens (attention data parallelism) and `slots_per_rank` physical
// expert slots; slot s lives on rank s / slots_per_rank as local expert s % slots_per_rank.
//
//   source rank                          destination rank
//   x [T, H], topk_ids [T, K]
//   plan_dispatch -> pair (t,k) -> slot
//   send buffer rows, ordered by         all-to-all-v   receive buffer: one segment per source,
//   (dest rank, local expert, t, k) ───────────────►    each ordered by local expert
//                                                       plan_receive: recv -> grouped by local
//                                                       expert (grouped GEMM), then back
//   combine: out[t] = sum_k w[t,k] *     all-to-all-v
//   y[pair_position[t*K + k]]  ◄─────────────────────   (counts reversed)
//
// Replica choice (a logical expert with several replicas), both deterministic:
//   kTokenModulo: replica (token_offset + t) % replica_count — spreads a rank's tokens over all
//     replicas; token_offset is the first global token index of the source rank, so ranks with
//     equal batch positions still spread.
//   kPreferLocal: the lowest-index replica on the source rank itself when there is one (no
//     traffic), else kTokenModulo.
// Combine sums in k order, so the result is bitwise equal to a single-rank MoE that sums in k order.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "dist/eplb.h"

namespace deepinfer::dist {

// One layer's placement as dispatch needs it.
struct ExpertMap {
  int num_logical = 0;
  int num_slots = 0;
  int world_size = 0;                  // EP ranks; divides num_slots
  int max_replicas = 1;
  std::vector<int32_t> log_to_phy;     // [num_logical, max_replicas], -1 padded
  std::vector<int32_t> replica_count;  // [num_logical], >= 1
  int slots_per_rank() const { return world_size > 0 ? num_slots / world_size : 0; }
};

// Layer `layer` of a placement; world_size = placement.num_gpus.
StatusOr<ExpertMap> expert_map_for_layer(const ExpertPlacement& placement, int layer);

enum class ReplicaChoice { kTokenModulo, kPreferLocal };

struct DispatchPlan {
  int world_size = 0;
  int slots_per_rank = 0;
  int num_tokens = 0;
  int top_k = 0;
  std::vector<int32_t> pair_slot;           // [T * K]: physical slot of pair (t, k)
  std::vector<int64_t> send_counts;         // [world_size]: rows sent to each rank
  std::vector<int64_t> send_offsets;        // [world_size + 1]: prefix sums of send_counts
  std::vector<int64_t> send_expert_counts;  // [world_size, slots_per_rank]: rows per dest expert
  std::vector<int32_t> send_pairs;          // [T * K]: pair id t*K + k at each send position
  std::vector<int64_t> pair_position;       // [T * K]: send position of pair id (inverse)
};

// topk_ids: [num_tokens, top_k] logical expert ids of this (source) rank's tokens.
StatusOr<DispatchPlan> plan_dispatch(const std::vector<int32_t>& topk_ids, int num_tokens, int top_k,
                                     const ExpertMap& map, int source_rank, int64_t token_offset,
                                     ReplicaChoice choice);

struct ReceiveLayout {
  int world_size = 0;
  int slots_per_rank = 0;
  std::vector<int64_t> recv_counts;      // [world_size]: rows from each source rank
  std::vector<int64_t> recv_offsets;     // [world_size + 1]
  std::vector<int64_t> expert_offsets;   // [slots_per_rank + 1]: rows of local expert j in the
                                         //   grouped buffer are [expert_offsets[j], [j+1])
  std::vector<int64_t> recv_to_grouped;  // [num_recv]: grouped row of each received row; grouped
                                         //   order is (local expert, source rank, arrival)
};

// recv_expert_counts: [world_size, slots_per_rank]; row src = send_expert_counts row of this
// rank in source src's plan (what the count all-to-all delivers).
StatusOr<ReceiveLayout> plan_receive(const std::vector<int64_t>& recv_expert_counts, int world_size,
                                     int slots_per_rank);

// --- CPU reference of the row movements (the GPU kernels must match these) ---------------------

// send[p] = x[send_pairs[p] / top_k]. x: [T, hidden] -> [T * K, hidden].
std::vector<float> gather_send_rows(const DispatchPlan& plan, const std::vector<float>& x, int hidden);
// dst[perm[i]] = src[i]. src: [N, hidden], perm: [N] a permutation.
std::vector<float> scatter_rows(const std::vector<float>& src, const std::vector<int64_t>& perm, int hidden);
// dst[i] = src[perm[i]]. src: [N, hidden], perm: [N].
std::vector<float> gather_rows(const std::vector<float>& src, const std::vector<int64_t>& perm, int hidden);
// out[t] = sum over k = 0..K-1 (in order) of weights[t, k] * y[pair_position[t*K + k]].
// y: [T * K, hidden] in send order (what the combine all-to-all returns), weights: [T, K].
StatusOr<std::vector<float>> combine_rows(const DispatchPlan& plan, const std::vector<float>& y,
                                          const std::vector<float>& weights, int hidden);

}  // namespace deepinfer::dist
