// Expert-parallel load balancing (EPLB): where to put redundant copies of hot experts.
//
// Same algorithm family as DeepSeek's EPLB (deepseek-ai/EPLB `eplb.py`), re-derived here with
// exact, documented tie rules so the placement is a pure function of its inputs:
//
//   hierarchical (num_groups % num_nodes == 0):
//     1. pack the expert groups onto nodes, balancing the group loads (balanced_packing);
//     2. inside each node, add redundant replicas one at a time to the expert with the largest
//        load per replica (replicate_experts);
//     3. pack each node's replicas onto its GPUs, balancing the per-replica loads (balanced_packing).
//   global (otherwise): the same with one group and one node — replicate over all slots, then
//     pack the replicas onto all GPUs.
//
// Tie rules (all deterministic, no floating-point in comparisons of the replication step):
//   - balanced_packing visits items by load descending, equal loads by lower item index first;
//     each item goes to the non-full pack with the smallest load, equal loads to the lower pack
//     index. An item's rank in its pack is the order in which it arrived.
//   - replicate_experts picks the expert with the largest load/replica_count (compared exactly as
//     load_a * count_b vs load_b * count_a), equal ratios to the lower expert index.
//   - Step 3's per-replica loads are load / replica_count in double; packs sum them in visit order.
//
// Slots: physical slot s (0 <= s < num_replicas) lives on GPU s / (num_replicas / num_gpus), and
// GPU g on node g / (num_gpus / num_nodes).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace deepinfer::dist {

enum class EplbPolicy {
  kAuto,          // hierarchical when num_groups % num_nodes == 0, else global (as DeepSeek's EPLB)
  kHierarchical,  // error when num_groups % num_nodes != 0
  kGlobal,
};

struct EplbParams {
  int num_replicas = 0;  // physical expert slots over all GPUs (>= num_logical_experts)
  int num_groups = 1;    // expert groups of the router (group-limited routing); divides the experts
  int num_nodes = 1;     // divides num_gpus
  int num_gpus = 1;      // divides num_replicas
  EplbPolicy policy = EplbPolicy::kAuto;
};

// The placement of every layer. All maps are row-major.
struct ExpertPlacement {
  int num_layers = 0;
  int num_logical_experts = 0;
  int num_replicas = 0;
  int num_gpus = 0;
  int max_replicas = 0;                // 1 + num_replicas - num_logical_experts
  bool hierarchical = false;           // which policy ran
  std::vector<int32_t> phy_to_log;     // [num_layers, num_replicas]: logical expert of each slot
  std::vector<int32_t> phy_rank;       // [num_layers, num_replicas]: replica index of the slot
  std::vector<int32_t> log_to_phy;     // [num_layers, num_logical, max_replicas], -1 padded:
                                       //   slot of replica r of expert e (r < replica_count)
  std::vector<int32_t> replica_count;  // [num_layers, num_logical]: >= 1

  int slots_per_gpu() const { return num_gpus > 0 ? num_replicas / num_gpus : 0; }
  int32_t logical_of(int layer, int slot) const {
    return phy_to_log[static_cast<size_t>(layer) * num_replicas + slot];
  }
  int32_t count_of(int layer, int expert) const {
    return replica_count[static_cast<size_t>(layer) * num_logical_experts + expert];
  }
  int32_t slot_of(int layer, int expert, int replica) const {
    return log_to_phy[(static_cast<size_t>(layer) * num_logical_experts + expert) * max_replicas +
                      replica];
  }
};

// load: [num_layers, num_logical_experts] token counts (>= 0) from the router statistics.
StatusOr<ExpertPlacement> rebalance_experts(const std::vector<int64_t>& load, int num_layers,
                                            int num_logical_experts, const EplbParams& params);

// The placement with no redundancy: slot s holds expert s (num_replicas == num_logical). The
// layout before any statistics exist.
StatusOr<ExpertPlacement> identity_placement(int num_layers, int num_logical_experts, int num_gpus);

// Load of each GPU under `placement` when each expert's load is split evenly over its replicas.
// load: [num_layers, num_logical] (exactly that size: a precondition, not checked).
// Returns [num_layers, num_gpus].
std::vector<double> gpu_loads(const ExpertPlacement& placement, const std::vector<int64_t>& load);

// --- building blocks, exposed for tests -----------------------------------------------------

struct Packing {
  std::vector<int32_t> pack;          // [num_items]: pack of each item
  std::vector<int32_t> rank_in_pack;  // [num_items]: arrival order inside the pack
};
// Packs items into num_packs packs of exactly num_items / num_packs items each (tie rules above).
// weight: [num_items]. Caller guarantees num_items % num_packs == 0.
Packing balanced_packing(const std::vector<double>& weight, int num_packs);

struct Replication {
  std::vector<int32_t> phy_to_log;     // [num_phy]: slots 0..n-1 hold experts 0..n-1, then extras
  std::vector<int32_t> phy_rank;       // [num_phy]
  std::vector<int32_t> replica_count;  // [n]
};
// Adds num_phy - n replicas to n experts one at a time (tie rules above). load: [n].
Replication replicate_experts(const std::vector<int64_t>& load, int num_phy);

}  // namespace deepinfer::dist
