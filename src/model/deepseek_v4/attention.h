// The attention block of all three V4 layer types (deepseek-v4.md §4–§6): low-rank q with
// per-head RMS, one shared K=V head, partial interleaved rope, window keys + compressed entries
// (all visible HCA entries, or the CSA indexer's top-k) in one softmax with per-head sinks,
// inverse rope of the output, grouped output projection. Updates the layer's state.
#pragma once

#include <span>

#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::model::v4 {

// x [S, H] (= rmsw(collapsed; input_layernorm)) for all S rows of the step, y [S, H]. Each
// sequence's state is read (window, entries) and updated (window, compressors); positions of
// sequence i's rows are past_i .. past_i + len_i − 1.
Status attention_forward(backend::Backend& be, const Dims& d, const AttentionWeights& w,
                         const RopeTable& rope, const Tensor& x, const StepBatch& batch, int layer,
                         Tensor& y);

}  // namespace deepinfer::model::v4
