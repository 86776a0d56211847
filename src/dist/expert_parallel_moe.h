// The routed experts of one MoE layer, expert-parallel: every rank holds its own tokens
// (attention data parallelism) and a shard of the expert slots; rows travel to the rank of the
// slot that computes them and back (expert_dispatch.h has the index arithmetic).
//
// Per rank, per layer (`ExpertParallelMoe::forward`):
//   ids → host; token offset (all-gather of token counts); plan_dispatch;
//   send [T·K, H] = gather_rows(x, token of each send row);
//   exchange_counts(send_expert_counts) → plan_receive;
//   all_to_all_v(send) → recv [N, H] (per source, grouped by local expert);
//   y [N, H] = moe_experts(recv, local slot of each row, weight 1, k = 1) on zeros — exactly
//     expert(row): 0 + 1·v = v in IEEE arithmetic, with or without FMA;
//   all_to_all_v(y) back → [T·K, H] in send order; slot_out[t·K + k] = back[pair_position];
//   combine_slots(slot_out, weights, K, out): out[t] += Σ_k w[t,k]·slot_out[t·K+k], k ascending.
//
// The last step is the one `Backend::moe_experts` ends with on one rank (CPU, and CUDA on both of
// its paths), so the result is bitwise the single-rank MoE whenever the backend computes an
// expert's row independently of which other rows share the call (the CPU backend always; CUDA
// with --batch-invariant, or at world size 1 where every expert sees the same rows in the same
// order and count). Replicas hold the same weights, so the replica choice never changes a bit.
//
// Every call is collective over the communicator: all ranks call forward for the same layer,
// a rank with no tokens included (T = 0). An error on one rank leaves the group unusable (the
// others wait in the next collective): tear the group down (InProcessGroup::abort, NCCL abort).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "dist/eplb.h"
#include "dist/expert_dispatch.h"
#include "dist/expert_load.h"

namespace deepinfer::dist {

// What a model needs to run its MoE layers expert-parallel (the rank and world size are the
// communicator's). Local slot j of rank r in layer l is global slot r·spr + j, which holds the
// logical expert placement.logical_of(l, r·spr + j).
struct ExpertParallelContext {
  Communicator* comm = nullptr;  // borrowed; outlives the model
  ExpertPlacement placement;     // num_gpus = comm->world_size(); num_layers = the model's layers
  ReplicaChoice choice = ReplicaChoice::kTokenModulo;
  // Borrowed, optional (EPLB statistics, eplb_controller.h): when set, every MoE layer records
  // this rank's router picks (logical ids) into it — on the host copy of the ids the dispatch
  // makes anyway, so no extra device sync. Must outlive the model.
  ExpertLoadRecorder* load_recorder = nullptr;

  // InvalidArgument naming the mismatch (layers, experts, world size).
  Status validate(int num_layers, int num_logical_experts) const;
  // Logical expert of each local slot of this rank in `layer`: [slots_per_rank].
  std::vector<int32_t> local_experts(int layer) const;
};

class ExpertParallelMoe {
 public:
  ExpertParallelMoe() = default;
  // map.world_size must equal comm->world_size(). recorder (borrowed, may be null): forward
  // records the layer's router picks as ExpertLoadRecorder::record(layer, ids).
  static StatusOr<ExpertParallelMoe> create(Communicator* comm, ExpertMap map, ReplicaChoice choice,
                                            ExpertLoadRecorder* recorder = nullptr, int layer = 0);
  // The same layer (communicator, replica choice, recorder) on another map: an EPLB rebalance.
  StatusOr<ExpertParallelMoe> with_map(ExpertMap map) const {
    return create(comm_, std::move(map), choice_, recorder_, layer_);
  }

  int slots_per_rank() const { return map_.slots_per_rank(); }
  const ExpertMap& map() const { return map_; }
  Communicator* comm() const { return comm_; }
  ReplicaChoice choice() const { return choice_; }
  // Logical expert of each of this rank's slots under map(): [slots_per_rank], local slot order.
  std::vector<int32_t> local_experts() const;

  // x [T, H] F32, ids [T, K] I32 (logical experts), weights [T, K] F32, out [T, H] F32, all in
  // `be`'s memory; local: this rank's slots (slots_per_rank() experts, local slot order).
  // out[t] += Σ_k weights[t,k] · expert_{ids[t,k]}(x[t]), k ascending.
  Status forward(backend::Backend& be, const backend::ExpertSet& local, const backend::Tensor& x,
                 const backend::Tensor& ids, const backend::Tensor& weights, float swiglu_limit,
                 backend::Tensor& out) const;

 private:
  Communicator* comm_ = nullptr;
  ExpertMap map_;
  ReplicaChoice choice_ = ReplicaChoice::kTokenModulo;
  ExpertLoadRecorder* recorder_ = nullptr;
  int layer_ = 0;
};

}  // namespace deepinfer::dist
