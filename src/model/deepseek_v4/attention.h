// The attention block of all three V4 layer types (deepseek-v4.md §4–§6): low-rank q with
// per-head RMS, one shared K=V head, partial interleaved rope, window keys + compressed entries
// (all visible HCA entries, or the CSA indexer's top-k) in one softmax with per-head sinks,
// inverse rope of the output, grouped output projection. Updates the layer's state.
#pragma once

#include <span>

#include "model/deepseek_v4/indexer.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::model::v4 {

// x [S, H] (= rmsw(collapsed; input_layernorm)) for all S rows of the step, y [S, H]. Each
// sequence's state is read (window, entries) and updated (window, compressors); positions of
// sequence i's rows are past_i .. past_i + len_i − 1.
// The three parts of attention_forward, for a caller that runs the row-wise parts apart from the
// per-sequence part (decode steps replayed as CUDA graphs, model.cpp):
// attention_project: every projection of x over all rows, q/kv normalised and roped (no state).
struct AttentionProjections {
  Tensor q_res;                // [S, Rq] after q_norm (also the indexer's input)
  Tensor q;                    // [S, nH·D] normalised and roped
  Tensor kv;                   // [S, D] normalised and roped (key = value)
  Tensor ckv, cgate, ikv, igate;  // compressor projections (compressed layers; ikv/igate CSA)
  IndexerProjections iproj;       // CSA: q_idx [S, nI·cI], head_w [S, nI]
};
Status attention_project(backend::Backend& be, const Dims& d, const AttentionWeights& w,
                         const RopeTable& rope, const Tensor& x, const Tensor& positions,
                         AttentionProjections& p);
// attention_core: compressors, indexer, key lists, the attention op into o [S, nH, D] and the
// window update (reads and updates every sequence's state; host-built lists).
Status attention_core(backend::Backend& be, const Dims& d, const AttentionWeights& w,
                      const RopeTable& rope, const Tensor& x, const StepBatch& batch, int layer,
                      AttentionProjections& p, Tensor& o);
// attention_output: o de-rotated in place, then y = wo_b · wo_a(o) (no state).
Status attention_output(backend::Backend& be, const Dims& d, const AttentionWeights& w,
                        const RopeTable& rope, const Tensor& positions, Tensor& o, Tensor& y);

Status attention_forward(backend::Backend& be, const Dims& d, const AttentionWeights& w,
                         const RopeTable& rope, const Tensor& x, const StepBatch& batch, int layer,
                         Tensor& y);

}  // namespace deepinfer::model::v4
