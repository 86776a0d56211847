// The KV compressor of CSA/HCA layers (and of the Lightning indexer), incremental over chunks
// (deepseek-v4.md §5.2 pooling, §6.3 update algorithm).
#pragma once

#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::model::v4 {

// The raw projections of attention inputs x [S, H] (every row of a step at once):
// kv, gate [S, coff·d].
Status compressor_project(backend::Backend& be, const CompressorWeights& w, const Tensor& x,
                          Tensor& kv, Tensor& gate);

// Consumes one sequence's chunk, given as its rows of the raw projections kv, gate [S, coff·d]:
// appends them to the tail, pools every window that closes (position bias per slot, CSA overlap
// with the previous window), then weighted RMSNorm and rope at position w·m, and appends the new
// entries to the state.
Status compressor_update(backend::Backend& be, const Dims& d, const CompressorWeights& w,
                         const RopeTable& rope, const Tensor& kv, const Tensor& gate,
                         DeepseekV4State& state, int layer, CompressorKind kind);

}  // namespace deepinfer::model::v4
