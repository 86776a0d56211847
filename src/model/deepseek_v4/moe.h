// The MoE block (deepseek-v4.md §7): router (sqrtsoftplus; correction bias for selection only;
// hash layers route by tid2eid[token]), clamped SwiGLU experts, one shared expert.
#pragma once

#include <span>

#include "model/deepseek_v4/weights.h"

namespace deepinfer::model::v4 {

// x [S, H] (= rmsw(collapsed; post_attention_layernorm)), token_ids [S] I32, y [S, H].
Status moe_forward(backend::Backend& be, const Dims& d, const io::ScoringFunc scoring,
                   const MoeWeights& w, const Tensor& x, std::span<const int32_t> token_ids,
                   Tensor& y);

}  // namespace deepinfer::model::v4
