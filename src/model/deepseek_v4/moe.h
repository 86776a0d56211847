// The MoE block (deepseek-v4.md §7): router (sqrtsoftplus; correction bias for selection only;
// hash layers route by tid2eid[token]), clamped SwiGLU experts, one shared expert.
//
// Expert parallel (`ep` non-null): the router and the shared expert run on this rank's tokens as
// always; the routed experts go through dist::ExpertParallelMoe, `w.experts` holding only this
// rank's slots (weights.h). Bitwise the single-rank result (see dist/expert_parallel_moe.h).
#pragma once

#include <span>
#include <vector>

#include "dist/expert_parallel_moe.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::model::v4 {

// x [S, H] (= rmsw(collapsed; post_attention_layernorm)), token_ids [S] I32, y [S, H].
// hash_ids: on hash layers, tid2eid[token] [S, k] I32 in backend memory when the caller made it
// (moe_hash_ids; decode graphs upload it before a replay), else built here from token_ids.
// routed_out (session 12, may be null): y receives the shared expert only and *routed_out
// [S, H] the routed sum, not added (the caller's expand adds them: add's arithmetic).
Status moe_forward(backend::Backend& be, const Dims& d, const io::ScoringFunc scoring,
                   const MoeWeights& w, const Tensor& x, std::span<const int32_t> token_ids,
                   Tensor& y, const dist::ExpertParallelMoe* ep = nullptr,
                   const Tensor* hash_ids = nullptr, Tensor* routed_out = nullptr);
// out [S·k] (host) = tid2eid[token] per row of a hash layer; OutOfRange for a bad token id.
Status moe_hash_ids(const Dims& d, const MoeWeights& w, std::span<const int32_t> token_ids,
                    std::vector<int32_t>& out);

}  // namespace deepinfer::model::v4
