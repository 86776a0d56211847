// The KV compressor of CSA/HCA layers (and of the Lightning indexer), incremental over chunks
// (deepseek-v4.md §5.2 pooling, §6.3 update algorithm).
#pragma once

#include <span>

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
// `later` and `closes` (optional, together): when the chunk fits in the open window (a decode
// step), its rows go straight into the tail through `later` (the caller flushes it: one copy_many
// for every sequence of a step) and *closes says whether the window is now full; the caller then
// pools every full tail of the step at once with compressor_pool_tails, after the flush. The
// entries are those of the general path (the same rows in the same order, the same row-wise ops);
// a decode step's update was six copies per sequence and compressor, and a closing window five
// more launches per sequence.
Status compressor_update(backend::Backend& be, const Dims& d, const CompressorWeights& w,
                         const RopeTable& rope, const Tensor& kv, const Tensor& gate,
                         DeepseekV4State& state, int layer, CompressorKind kind,
                         CopyList* later = nullptr, bool* closes = nullptr);

// Pools the full tail (m rows) of `kind` at `layer` of every state in `states` — one window each,
// CSA overlap per state — and appends each one's entry to its state: compressor_slots per state,
// then one softmax_pool, RMSNorm and rope over all of them.
Status compressor_pool_tails(backend::Backend& be, const Dims& d, const CompressorWeights& w,
                             const RopeTable& rope, std::span<DeepseekV4State* const> states,
                             int layer, CompressorKind kind);

}  // namespace deepinfer::model::v4
