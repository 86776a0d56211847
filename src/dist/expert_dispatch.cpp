#include "dist/expert_dispatch.h"

#include <string>

namespace deepinfer::dist {
namespace {

Status validate_map(const ExpertMap& m) {
  if (m.num_logical < 1) return InvalidArgument("expert map: num_logical must be >= 1");
  if (m.world_size < 1) return InvalidArgument("expert map: world_size must be >= 1");
  if (m.num_slots < m.num_logical || m.num_slots % m.world_size != 0) {
    return InvalidArgument("expert map: num_slots (" + std::to_string(m.num_slots) +
                           ") must be >= num_logical and divisible by world_size (" +
                           std::to_string(m.world_size) + ")");
  }
  if (m.max_replicas < 1 ||
      m.log_to_phy.size() != static_cast<size_t>(m.num_logical) * m.max_replicas ||
      m.replica_count.size() != static_cast<size_t>(m.num_logical)) {
    return InvalidArgument("expert map: log_to_phy / replica_count sizes do not match num_logical");
  }
  for (int e = 0; e < m.num_logical; ++e) {
    const int c = m.replica_count[e];
    if (c < 1 || c > m.max_replicas) {
      return InvalidArgument("expert map: replica_count[" + std::to_string(e) + "] = " +
                             std::to_string(c) + " outside [1, max_replicas]");
    }
    for (int r = 0; r < c; ++r) {
      const int s = m.log_to_phy[static_cast<size_t>(e) * m.max_replicas + r];
      if (s < 0 || s >= m.num_slots) {
        return InvalidArgument("expert map: log_to_phy[" + std::to_string(e) + "][" +
                               std::to_string(r) + "] = " + std::to_string(s) + " is not a slot");
      }
    }
  }
  return OkStatus();
}

std::vector<int64_t> prefix_sums(const std::vector<int64_t>& counts) {
  std::vector<int64_t> out(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) out[i + 1] = out[i] + counts[i];
  return out;
}

}  // namespace

StatusOr<ExpertMap> expert_map_for_layer(const ExpertPlacement& p, int layer) {
  if (layer < 0 || layer >= p.num_layers) {
    return OutOfRange("layer " + std::to_string(layer) + " outside [0, " +
                      std::to_string(p.num_layers) + ")");
  }
  ExpertMap m;
  m.num_logical = p.num_logical_experts;
  m.num_slots = p.num_replicas;
  m.world_size = p.num_gpus;
  m.max_replicas = p.max_replicas;
  const size_t row = static_cast<size_t>(layer) * p.num_logical_experts;
  m.log_to_phy.assign(p.log_to_phy.begin() + row * p.max_replicas,
                      p.log_to_phy.begin() + (row + p.num_logical_experts) * p.max_replicas);
  m.replica_count.assign(p.replica_count.begin() + row,
                         p.replica_count.begin() + row + p.num_logical_experts);
  DI_RETURN_IF_ERROR(validate_map(m));
  return m;
}

StatusOr<DispatchPlan> plan_dispatch(const std::vector<int32_t>& topk_ids, int num_tokens, int top_k,
                                     const ExpertMap& map, int source_rank, int64_t token_offset,
                                     ReplicaChoice choice) {
  DI_RETURN_IF_ERROR(validate_map(map));
  if (num_tokens < 0) return InvalidArgument("num_tokens must be >= 0, got " + std::to_string(num_tokens));
  if (top_k < 1) return InvalidArgument("top_k must be >= 1, got " + std::to_string(top_k));
  if (topk_ids.size() != static_cast<size_t>(num_tokens) * top_k) {
    return InvalidArgument("topk_ids has " + std::to_string(topk_ids.size()) +
                           " entries, expected num_tokens * top_k = " +
                           std::to_string(static_cast<int64_t>(num_tokens) * top_k));
  }
  if (source_rank < 0 || source_rank >= map.world_size) {
    return InvalidArgument("source_rank " + std::to_string(source_rank) + " outside [0, " +
                           std::to_string(map.world_size) + ")");
  }
  if (token_offset < 0) return InvalidArgument("token_offset must be >= 0");

  DispatchPlan plan;
  plan.world_size = map.world_size;
  plan.slots_per_rank = map.slots_per_rank();
  plan.num_tokens = num_tokens;
  plan.top_k = top_k;
  const int spr = plan.slots_per_rank;
  const size_t num_pairs = topk_ids.size();

  // 1. A slot for every pair, and how many pairs each slot gets.
  plan.pair_slot.resize(num_pairs);
  std::vector<int64_t> slot_counts(map.num_slots, 0);
  for (int t = 0; t < num_tokens; ++t) {
    for (int k = 0; k < top_k; ++k) {
      const size_t pair = static_cast<size_t>(t) * top_k + k;
      const int e = topk_ids[pair];
      if (e < 0 || e >= map.num_logical) {
        return InvalidArgument("topk_ids[" + std::to_string(t) + "][" + std::to_string(k) + "] = " +
                               std::to_string(e) + " outside [0, " + std::to_string(map.num_logical) + ")");
      }
      const int32_t* replicas = map.log_to_phy.data() + static_cast<size_t>(e) * map.max_replicas;
      const int count = map.replica_count[e];
      int slot = -1;
      if (choice == ReplicaChoice::kPreferLocal) {
        for (int r = 0; r < count && slot < 0; ++r) {
          if (replicas[r] / spr == source_rank) slot = replicas[r];
        }
      }
      if (slot < 0) slot = replicas[(token_offset + t) % count];
      plan.pair_slot[pair] = slot;
      ++slot_counts[slot];
    }
  }

  // 2. Send order = counting sort by slot (slot order is (dest rank, local expert) order);
  //    pairs of one slot stay in pair-id order (t, then k).
  plan.send_expert_counts = slot_counts;  // [world_size, slots_per_rank] is [num_slots] row-major
  plan.send_counts.assign(map.world_size, 0);
  for (int s = 0; s < map.num_slots; ++s) plan.send_counts[s / spr] += slot_counts[s];
  plan.send_offsets = prefix_sums(plan.send_counts);
  std::vector<int64_t> next = prefix_sums(slot_counts);
  plan.send_pairs.resize(num_pairs);
  plan.pair_position.resize(num_pairs);
  for (size_t pair = 0; pair < num_pairs; ++pair) {
    const int64_t pos = next[plan.pair_slot[pair]]++;
    plan.send_pairs[pos] = static_cast<int32_t>(pair);
    plan.pair_position[pair] = pos;
  }
  return plan;
}

StatusOr<ReceiveLayout> plan_receive(const std::vector<int64_t>& recv_expert_counts, int world_size,
                                     int slots_per_rank) {
  if (world_size < 1) return InvalidArgument("world_size must be >= 1, got " + std::to_string(world_size));
  if (slots_per_rank < 1) {
    return InvalidArgument("slots_per_rank must be >= 1, got " + std::to_string(slots_per_rank));
  }
  if (recv_expert_counts.size() != static_cast<size_t>(world_size) * slots_per_rank) {
    return InvalidArgument("recv_expert_counts has " + std::to_string(recv_expert_counts.size()) +
                           " entries, expected world_size * slots_per_rank = " +
                           std::to_string(static_cast<int64_t>(world_size) * slots_per_rank));
  }
  ReceiveLayout out;
  out.world_size = world_size;
  out.slots_per_rank = slots_per_rank;
  out.recv_counts.assign(world_size, 0);
  std::vector<int64_t> expert_counts(slots_per_rank, 0);
  for (int src = 0; src < world_size; ++src) {
    for (int j = 0; j < slots_per_rank; ++j) {
      const int64_t c = recv_expert_counts[static_cast<size_t>(src) * slots_per_rank + j];
      if (c < 0) {
        return InvalidArgument("recv_expert_counts[" + std::to_string(src) + "][" + std::to_string(j) +
                               "] is negative (" + std::to_string(c) + ")");
      }
      out.recv_counts[src] += c;
      expert_counts[j] += c;
    }
  }
  out.recv_offsets = prefix_sums(out.recv_counts);
  out.expert_offsets = prefix_sums(expert_counts);
  out.recv_to_grouped.resize(out.recv_offsets.back());
  std::vector<int64_t> next(out.expert_offsets.begin(), out.expert_offsets.end() - 1);
  int64_t recv = 0;
  for (int src = 0; src < world_size; ++src) {  // sources in order, so grouped keeps (src, arrival)
    for (int j = 0; j < slots_per_rank; ++j) {
      const int64_t c = recv_expert_counts[static_cast<size_t>(src) * slots_per_rank + j];
      for (int64_t i = 0; i < c; ++i) out.recv_to_grouped[recv++] = next[j]++;
    }
  }
  return out;
}

std::vector<float> gather_send_rows(const DispatchPlan& plan, const std::vector<float>& x, int hidden) {
  std::vector<float> out(plan.send_pairs.size() * hidden);
  for (size_t p = 0; p < plan.send_pairs.size(); ++p) {
    const size_t t = static_cast<size_t>(plan.send_pairs[p] / plan.top_k);
    for (int h = 0; h < hidden; ++h) out[p * hidden + h] = x[t * hidden + h];
  }
  return out;
}

std::vector<float> scatter_rows(const std::vector<float>& src, const std::vector<int64_t>& perm, int hidden) {
  std::vector<float> out(src.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    for (int h = 0; h < hidden; ++h) out[perm[i] * hidden + h] = src[i * hidden + h];
  }
  return out;
}

std::vector<float> gather_rows(const std::vector<float>& src, const std::vector<int64_t>& perm, int hidden) {
  std::vector<float> out(perm.size() * hidden);
  for (size_t i = 0; i < perm.size(); ++i) {
    for (int h = 0; h < hidden; ++h) out[i * hidden + h] = src[perm[i] * hidden + h];
  }
  return out;
}

StatusOr<std::vector<float>> combine_rows(const DispatchPlan& plan, const std::vector<float>& y,
                                          const std::vector<float>& weights, int hidden) {
  const size_t num_pairs = static_cast<size_t>(plan.num_tokens) * plan.top_k;
  if (hidden < 1) return InvalidArgument("hidden must be >= 1");
  if (y.size() != num_pairs * hidden) {
    return InvalidArgument("combine input has " + std::to_string(y.size()) + " values, expected " +
                           std::to_string(num_pairs * hidden) + " ([num_tokens * top_k, hidden])");
  }
  if (weights.size() != num_pairs) {
    return InvalidArgument("routing weights have " + std::to_string(weights.size()) +
                           " values, expected num_tokens * top_k = " + std::to_string(num_pairs));
  }
  std::vector<float> out(static_cast<size_t>(plan.num_tokens) * hidden, 0.0f);
  for (int t = 0; t < plan.num_tokens; ++t) {
    for (int k = 0; k < plan.top_k; ++k) {
      const size_t pair = static_cast<size_t>(t) * plan.top_k + k;
      const size_t row = static_cast<size_t>(plan.pair_position[pair]);
      for (int h = 0; h < hidden; ++h) out[static_cast<size_t>(t) * hidden + h] += weights[pair] * y[row * hidden + h];
    }
  }
  return out;
}

}  // namespace deepinfer::dist
