#include "dist/expert_parallel_moe.h"

#include <string>

namespace deepinfer::dist {

using backend::Tensor;

Status ExpertParallelContext::validate(int num_layers, int num_logical_experts) const {
  if (comm == nullptr) return InvalidArgument("expert parallel: no communicator");
  const ExpertPlacement& p = placement;
  if (p.num_layers != num_layers)
    return InvalidArgument("expert parallel: placement has " + std::to_string(p.num_layers) +
                           " layers, the model " + std::to_string(num_layers));
  if (p.num_logical_experts != num_logical_experts)
    return InvalidArgument("expert parallel: placement has " + std::to_string(p.num_logical_experts) +
                           " logical experts, the model " + std::to_string(num_logical_experts));
  if (p.num_gpus != comm->world_size())
    return InvalidArgument("expert parallel: placement is for " + std::to_string(p.num_gpus) +
                           " ranks, the communicator has " + std::to_string(comm->world_size()));
  if (p.num_gpus < 1 || p.num_replicas % p.num_gpus != 0 ||
      p.phy_to_log.size() != static_cast<size_t>(p.num_layers) * p.num_replicas)
    return InvalidArgument("expert parallel: malformed placement (slots not divisible by ranks)");
  for (int l = 0; l < num_layers; ++l) DI_RETURN_IF_ERROR(expert_map_for_layer(p, l).status());
  return OkStatus();
}

std::vector<int32_t> ExpertParallelContext::local_experts(int layer) const {
  const int spr = placement.slots_per_gpu();
  std::vector<int32_t> out(spr);
  for (int j = 0; j < spr; ++j) out[j] = placement.logical_of(layer, comm->rank() * spr + j);
  return out;
}

StatusOr<ExpertParallelMoe> ExpertParallelMoe::create(Communicator* comm, ExpertMap map,
                                                      ReplicaChoice choice,
                                                      ExpertLoadRecorder* recorder, int layer) {
  if (comm == nullptr) return InvalidArgument("ExpertParallelMoe: no communicator");
  if (map.world_size != comm->world_size())
    return InvalidArgument("ExpertParallelMoe: expert map is for " + std::to_string(map.world_size) +
                           " ranks, the communicator has " + std::to_string(comm->world_size()));
  if (map.world_size < 1 || map.num_slots % map.world_size != 0 || map.num_slots < map.num_logical)
    return InvalidArgument("ExpertParallelMoe: expert map slots (" + std::to_string(map.num_slots) +
                           ") not divisible by ranks or fewer than experts");
  ExpertParallelMoe m;
  m.comm_ = comm;
  m.map_ = std::move(map);
  m.choice_ = choice;
  m.recorder_ = recorder;
  m.layer_ = layer;
  return m;
}

std::vector<int32_t> ExpertParallelMoe::local_experts() const {
  const int spr = slots_per_rank();
  std::vector<int32_t> out(spr, -1);
  if (comm_ == nullptr) return out;
  const int rank = comm_->rank();
  for (int e = 0; e < map_.num_logical; ++e)
    for (int r = 0; r < map_.replica_count[e]; ++r) {
      const int32_t s = map_.log_to_phy[static_cast<size_t>(e) * map_.max_replicas + r];
      if (s / spr == rank) out[s % spr] = e;
    }
  return out;
}

Status ExpertParallelMoe::forward(backend::Backend& be, const backend::ExpertSet& local,
                                  const Tensor& x, const Tensor& ids, const Tensor& weights,
                                  float swiglu_limit, Tensor& out) const {
  if (comm_ == nullptr) return FailedPrecondition("ExpertParallelMoe: not created");
  DI_RETURN_IF_ERROR(backend::check_rank("expert_parallel_moe", "x", x, DType::kF32, 2));
  DI_RETURN_IF_ERROR(backend::check_rank("expert_parallel_moe", "ids", ids, DType::kI32, 2));
  const int64_t T = x.dim(0), H = x.dim(1), K = ids.dim(1);
  DI_RETURN_IF_ERROR(backend::check_tensor("expert_parallel_moe", "ids", ids, DType::kI32, {T, K}));
  DI_RETURN_IF_ERROR(backend::check_tensor("expert_parallel_moe", "weights", weights, DType::kF32, {T, K}));
  DI_RETURN_IF_ERROR(backend::check_tensor("expert_parallel_moe", "out", out, DType::kF32, {T, H}));
  const int spr = slots_per_rank();
  if (local.num_experts() != spr || static_cast<int64_t>(local.down.size()) != spr)
    return InvalidArgument("expert_parallel_moe: this rank holds " + std::to_string(local.num_experts()) +
                           " experts, the map gives it " + std::to_string(spr) + " slots");
  if (K < 1) return InvalidArgument("expert_parallel_moe: ids need at least one pick per token");
  const int W = comm_->world_size(), rank = comm_->rank();

  // 1. Plan: a slot for every (token, pick), the send order, this rank's first global token.
  std::vector<int32_t> topk(static_cast<size_t>(T * K));
  if (T > 0) {
    Tensor ids_h = Tensor::borrow(topk.data(), DType::kI32, {T, K});
    DI_RETURN_IF_ERROR(be.download(ids, ids_h));
  }
  DI_ASSIGN_OR_RETURN(std::vector<int64_t> counts, all_gather_count(*comm_, T));
  int64_t token_offset = 0;
  for (int r = 0; r < rank; ++r) token_offset += counts[r];
  DI_ASSIGN_OR_RETURN(DispatchPlan plan, plan_dispatch(topk, static_cast<int>(T), static_cast<int>(K),
                                                       map_, rank, token_offset, choice_));
  // EPLB statistics from the host ids above (plan_dispatch has range-checked them).
  if (recorder_ != nullptr && T > 0) DI_RETURN_IF_ERROR(recorder_->record(layer_, topk));
  const int64_t P = T * K;

  // 2. Send rows: the token of each pair, in send order.
  DI_ASSIGN_OR_RETURN(Tensor send, be.alloc(DType::kF32, {P, H}));
  if (P > 0) {
    std::vector<int32_t> src(P);
    for (int64_t p = 0; p < P; ++p) src[p] = static_cast<int32_t>(plan.send_pairs[p] / K);
    DI_ASSIGN_OR_RETURN(Tensor src_t, be.alloc(DType::kI32, {P}));
    DI_RETURN_IF_ERROR(be.upload(Tensor::borrow(src.data(), DType::kI32, {P}), src_t));
    DI_RETURN_IF_ERROR(be.gather_rows(x, src_t, send));
  }

  // 3. Counts, then rows.
  DI_ASSIGN_OR_RETURN(std::vector<int64_t> recv_expert_counts,
                      comm_->exchange_counts(plan.send_expert_counts, spr));
  DI_ASSIGN_OR_RETURN(ReceiveLayout layout, plan_receive(recv_expert_counts, W, spr));
  const int64_t N = layout.recv_offsets.back();
  DI_ASSIGN_OR_RETURN(Tensor recv, be.alloc(DType::kF32, {N, H}));
  DI_RETURN_IF_ERROR(comm_->all_to_all_v(send, plan.send_counts, recv, layout.recv_counts));

  // 4. Local experts, one pick of weight 1 per received row. A source's segment is ordered by
  //    local expert, so the local slot of each row follows from the counts.
  DI_ASSIGN_OR_RETURN(Tensor y, be.alloc(DType::kF32, {N, H}));
  if (N > 0) {
    std::vector<int32_t> slot(N);
    std::vector<float> one(N, 1.0f);
    int64_t at = 0;
    for (int s = 0; s < W; ++s)
      for (int j = 0; j < spr; ++j)
        for (int64_t c = 0; c < recv_expert_counts[static_cast<size_t>(s) * spr + j]; ++c)
          slot[at++] = j;
    DI_ASSIGN_OR_RETURN(Tensor slot_t, be.alloc(DType::kI32, {N, 1}));
    DI_ASSIGN_OR_RETURN(Tensor one_t, be.alloc(DType::kF32, {N, 1}));
    DI_RETURN_IF_ERROR(be.upload(Tensor::borrow(slot.data(), DType::kI32, {N, 1}), slot_t));
    DI_RETURN_IF_ERROR(be.upload(Tensor::borrow(one.data(), DType::kF32, {N, 1}), one_t));
    DI_RETURN_IF_ERROR(be.moe_experts(recv, slot_t, one_t, local, swiglu_limit, y));
  }

  // 5. Rows back (counts reversed), to pair order, combined in k order.
  DI_ASSIGN_OR_RETURN(Tensor back, be.alloc(DType::kF32, {P, H}));
  DI_RETURN_IF_ERROR(comm_->all_to_all_v(y, layout.recv_counts, back, plan.send_counts));
  if (P == 0) return OkStatus();
  std::vector<int32_t> pos(P);
  for (int64_t i = 0; i < P; ++i) pos[i] = static_cast<int32_t>(plan.pair_position[i]);
  DI_ASSIGN_OR_RETURN(Tensor pos_t, be.alloc(DType::kI32, {P}));
  DI_RETURN_IF_ERROR(be.upload(Tensor::borrow(pos.data(), DType::kI32, {P}), pos_t));
  DI_ASSIGN_OR_RETURN(Tensor slot_out, be.alloc(DType::kF32, {P, H}));
  DI_RETURN_IF_ERROR(be.gather_rows(back, pos_t, slot_out));
  return be.combine_slots(slot_out, weights, K, out);
}

}  // namespace deepinfer::dist
