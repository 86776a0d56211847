#include "dist/eplb.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace deepinfer::dist {
namespace {

__extension__ typedef __int128 Int128;  // exact products of a 2^53 load and a replica count

constexpr int64_t kMaxLayerLoad = int64_t{1} << 53;  // sums stay exact in double

std::string layer_expert(int layer, int expert) {
  return "load[" + std::to_string(layer) + "][" + std::to_string(expert) + "]";
}

Status validate(const std::vector<int64_t>& load, int num_layers, int num_logical,
                const EplbParams& p, bool* hierarchical) {
  if (num_layers < 1) return InvalidArgument("num_layers must be >= 1, got " + std::to_string(num_layers));
  if (num_logical < 1) {
    return InvalidArgument("num_logical_experts must be >= 1, got " + std::to_string(num_logical));
  }
  if (load.size() != static_cast<size_t>(num_layers) * num_logical) {
    return InvalidArgument("load has " + std::to_string(load.size()) +
                           " entries, expected num_layers * num_logical_experts = " +
                           std::to_string(static_cast<int64_t>(num_layers) * num_logical));
  }
  if (p.num_gpus < 1) return InvalidArgument("num_gpus must be >= 1, got " + std::to_string(p.num_gpus));
  if (p.num_nodes < 1) return InvalidArgument("num_nodes must be >= 1, got " + std::to_string(p.num_nodes));
  if (p.num_groups < 1) {
    return InvalidArgument("num_groups must be >= 1, got " + std::to_string(p.num_groups));
  }
  if (p.num_replicas < num_logical) {
    return InvalidArgument("num_replicas (" + std::to_string(p.num_replicas) +
                           ") must be >= num_logical_experts (" + std::to_string(num_logical) + ")");
  }
  if (p.num_replicas % p.num_gpus != 0) {
    return InvalidArgument("num_replicas (" + std::to_string(p.num_replicas) +
                           ") must be divisible by num_gpus (" + std::to_string(p.num_gpus) + ")");
  }
  if (p.num_gpus % p.num_nodes != 0) {
    return InvalidArgument("num_gpus (" + std::to_string(p.num_gpus) +
                           ") must be divisible by num_nodes (" + std::to_string(p.num_nodes) + ")");
  }
  const bool groups_fit_nodes = p.num_groups % p.num_nodes == 0;
  switch (p.policy) {
    case EplbPolicy::kAuto: *hierarchical = groups_fit_nodes; break;
    case EplbPolicy::kGlobal: *hierarchical = false; break;
    case EplbPolicy::kHierarchical:
      if (!groups_fit_nodes) {
        return InvalidArgument("hierarchical policy needs num_groups (" + std::to_string(p.num_groups) +
                               ") divisible by num_nodes (" + std::to_string(p.num_nodes) + ")");
      }
      *hierarchical = true;
      break;
  }
  if (*hierarchical && num_logical % p.num_groups != 0) {
    return InvalidArgument("num_logical_experts (" + std::to_string(num_logical) +
                           ") must be divisible by num_groups (" + std::to_string(p.num_groups) + ")");
  }
  for (int l = 0; l < num_layers; ++l) {
    int64_t sum = 0;
    for (int e = 0; e < num_logical; ++e) {
      const int64_t w = load[static_cast<size_t>(l) * num_logical + e];
      if (w < 0) return InvalidArgument(layer_expert(l, e) + " is negative (" + std::to_string(w) + ")");
      if (w > kMaxLayerLoad - sum) {
        return InvalidArgument("loads of layer " + std::to_string(l) + " sum past 2^53 at " +
                               layer_expert(l, e));
      }
      sum += w;
    }
  }
  return OkStatus();
}

// One layer of the hierarchical algorithm (the global policy calls it with 1 group, 1 node).
// w: [num_logical]. Writes row `layer` of the placement.
void place_layer(const int64_t* w, int num_logical, int num_groups, int num_nodes, int layer,
                 ExpertPlacement* out) {
  const int num_replicas = out->num_replicas;
  const int group_size = num_logical / num_groups;
  const int groups_per_node = num_groups / num_nodes;
  const int experts_per_node = num_logical / num_nodes;
  const int slots_per_node = num_replicas / num_nodes;
  const int gpus_per_node = out->num_gpus / num_nodes;
  const int slots_per_gpu = num_replicas / out->num_gpus;

  // Step 1: groups -> nodes. "Node-major" order m: node n holds m in [n*experts_per_node, ...).
  std::vector<double> group_load(num_groups, 0.0);
  for (int g = 0; g < num_groups; ++g) {
    for (int j = 0; j < group_size; ++j) group_load[g] += static_cast<double>(w[g * group_size + j]);
  }
  const Packing groups = balanced_packing(group_load, num_nodes);
  std::vector<int32_t> node_major_to_log(num_logical);
  for (int g = 0; g < num_groups; ++g) {
    const int first = (groups.pack[g] * groups_per_node + groups.rank_in_pack[g]) * group_size;
    for (int j = 0; j < group_size; ++j) node_major_to_log[first + j] = g * group_size + j;
  }

  int32_t* phy_to_log = out->phy_to_log.data() + static_cast<size_t>(layer) * num_replicas;
  int32_t* phy_rank = out->phy_rank.data() + static_cast<size_t>(layer) * num_replicas;
  int32_t* counts = out->replica_count.data() + static_cast<size_t>(layer) * num_logical;
  for (int n = 0; n < num_nodes; ++n) {
    const int32_t* node_experts = node_major_to_log.data() + static_cast<size_t>(n) * experts_per_node;
    // Step 2: replicas inside the node.
    std::vector<int64_t> node_load(experts_per_node);
    for (int i = 0; i < experts_per_node; ++i) node_load[i] = w[node_experts[i]];
    const Replication rep = replicate_experts(node_load, slots_per_node);
    // Step 3: the node's replicas -> its GPUs.
    std::vector<double> replica_load(slots_per_node);
    for (int j = 0; j < slots_per_node; ++j) {
      const int i = rep.phy_to_log[j];
      replica_load[j] = static_cast<double>(node_load[i]) / rep.replica_count[i];
    }
    const Packing gpus = balanced_packing(replica_load, gpus_per_node);
    for (int j = 0; j < slots_per_node; ++j) {
      const int slot = n * slots_per_node + gpus.pack[j] * slots_per_gpu + gpus.rank_in_pack[j];
      phy_to_log[slot] = node_experts[rep.phy_to_log[j]];
      phy_rank[slot] = rep.phy_rank[j];
    }
    for (int i = 0; i < experts_per_node; ++i) counts[node_experts[i]] = rep.replica_count[i];
  }
}

void fill_log_to_phy(ExpertPlacement* p) {
  p->log_to_phy.assign(static_cast<size_t>(p->num_layers) * p->num_logical_experts * p->max_replicas, -1);
  for (int l = 0; l < p->num_layers; ++l) {
    for (int s = 0; s < p->num_replicas; ++s) {
      const size_t i = static_cast<size_t>(l) * p->num_replicas + s;
      const size_t e = static_cast<size_t>(l) * p->num_logical_experts + p->phy_to_log[i];
      p->log_to_phy[e * p->max_replicas + p->phy_rank[i]] = s;
    }
  }
}

}  // namespace

Packing balanced_packing(const std::vector<double>& weight, int num_packs) {
  const int n = static_cast<int>(weight.size());
  const int per_pack = n / num_packs;
  Packing out;
  out.pack.assign(n, -1);
  out.rank_in_pack.assign(n, 0);
  if (per_pack == 1) {  // nothing to balance: keep items where they are (no needless moves)
    std::iota(out.pack.begin(), out.pack.end(), 0);
    return out;
  }
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return weight[a] > weight[b]; });
  std::vector<double> pack_load(num_packs, 0.0);
  std::vector<int32_t> pack_items(num_packs, 0);
  for (const int32_t item : order) {
    int best = -1;
    for (int p = 0; p < num_packs; ++p) {
      if (pack_items[p] == per_pack) continue;
      if (best < 0 || pack_load[p] < pack_load[best]) best = p;  // strict: ties keep the lower index
    }
    out.pack[item] = best;
    out.rank_in_pack[item] = pack_items[best]++;
    pack_load[best] += weight[item];
  }
  return out;
}

Replication replicate_experts(const std::vector<int64_t>& load, int num_phy) {
  const int n = static_cast<int>(load.size());
  Replication out;
  out.phy_to_log.resize(num_phy);
  out.phy_rank.assign(num_phy, 0);
  out.replica_count.assign(n, 1);
  std::iota(out.phy_to_log.begin(), out.phy_to_log.begin() + n, 0);
  for (int s = n; s < num_phy; ++s) {
    int best = 0;
    for (int e = 1; e < n; ++e) {
      // load[e] / count[e] > load[best] / count[best], exactly; ties keep the lower index.
      const Int128 lhs = static_cast<Int128>(load[e]) * out.replica_count[best];
      const Int128 rhs = static_cast<Int128>(load[best]) * out.replica_count[e];
      if (lhs > rhs) best = e;
    }
    out.phy_to_log[s] = best;
    out.phy_rank[s] = out.replica_count[best]++;
  }
  return out;
}

StatusOr<ExpertPlacement> rebalance_experts(const std::vector<int64_t>& load, int num_layers,
                                            int num_logical_experts, const EplbParams& params) {
  bool hierarchical = false;
  DI_RETURN_IF_ERROR(validate(load, num_layers, num_logical_experts, params, &hierarchical));
  ExpertPlacement out;
  out.num_layers = num_layers;
  out.num_logical_experts = num_logical_experts;
  out.num_replicas = params.num_replicas;
  out.num_gpus = params.num_gpus;
  out.max_replicas = 1 + params.num_replicas - num_logical_experts;
  out.hierarchical = hierarchical;
  out.phy_to_log.assign(static_cast<size_t>(num_layers) * params.num_replicas, -1);
  out.phy_rank.assign(out.phy_to_log.size(), 0);
  out.replica_count.assign(static_cast<size_t>(num_layers) * num_logical_experts, 0);
  const int groups = hierarchical ? params.num_groups : 1;
  const int nodes = hierarchical ? params.num_nodes : 1;
  for (int l = 0; l < num_layers; ++l) {
    place_layer(load.data() + static_cast<size_t>(l) * num_logical_experts, num_logical_experts,
                groups, nodes, l, &out);
  }
  fill_log_to_phy(&out);
  return out;
}

StatusOr<ExpertPlacement> identity_placement(int num_layers, int num_logical_experts, int num_gpus) {
  if (num_layers < 1) return InvalidArgument("num_layers must be >= 1, got " + std::to_string(num_layers));
  if (num_logical_experts < 1) {
    return InvalidArgument("num_logical_experts must be >= 1, got " + std::to_string(num_logical_experts));
  }
  if (num_gpus < 1 || num_logical_experts % num_gpus != 0) {
    return InvalidArgument("num_gpus (" + std::to_string(num_gpus) +
                           ") must be >= 1 and divide num_logical_experts (" +
                           std::to_string(num_logical_experts) + ")");
  }
  ExpertPlacement out;
  out.num_layers = num_layers;
  out.num_logical_experts = num_logical_experts;
  out.num_replicas = num_logical_experts;
  out.num_gpus = num_gpus;
  out.max_replicas = 1;
  out.phy_to_log.resize(static_cast<size_t>(num_layers) * num_logical_experts);
  for (int l = 0; l < num_layers; ++l) {
    std::iota(out.phy_to_log.begin() + static_cast<size_t>(l) * num_logical_experts,
              out.phy_to_log.begin() + static_cast<size_t>(l + 1) * num_logical_experts, 0);
  }
  out.phy_rank.assign(out.phy_to_log.size(), 0);
  out.replica_count.assign(out.phy_to_log.size(), 1);
  fill_log_to_phy(&out);
  return out;
}

std::vector<double> gpu_loads(const ExpertPlacement& p, const std::vector<int64_t>& load) {
  std::vector<double> out(static_cast<size_t>(p.num_layers) * p.num_gpus, 0.0);
  const int per_gpu = p.slots_per_gpu();
  for (int l = 0; l < p.num_layers; ++l) {
    for (int s = 0; s < p.num_replicas; ++s) {
      const int e = p.logical_of(l, s);
      out[static_cast<size_t>(l) * p.num_gpus + s / per_gpu] +=
          static_cast<double>(load[static_cast<size_t>(l) * p.num_logical_experts + e]) / p.count_of(l, e);
    }
  }
  return out;
}

}  // namespace deepinfer::dist
