// The attention block of one context-parallel prefill (docs/dist.md, "Context parallelism"):
// the same math as attention_forward (attention.cpp) for ONE sequence, but each rank computes
// only its own query rows (context_parallel_split.h). What a query needs from other rows — the
// kv rows of its window, the compressor and indexer-compressor inputs — is computed by the row's
// owner and all-gathered, so every rank updates its (full) copy of the sequence state with the
// whole chunk exactly as a single rank would, and leaves the layer with identical state.
#pragma once

#include <cstdint>
#include <span>

#include "dist/communicator.h"
#include "model/deepseek_v4/context_parallel_split.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::model::v4 {

// This rank's part of one context-parallel prefill.
struct ContextParallelStep {
  dist::Communicator* comm = nullptr;
  const ContextParallelSplit* split = nullptr;
  const RowGatherIndex* gather_index = nullptr;  // for split, this rank (optional)
  DeepseekV4State* state = nullptr;       // this rank's full copy of the sequence state
  int64_t past = 0;                        // tokens in the state before the chunk
  Tensor positions;                        // [n] I32 backend: positions of this rank's rows
  std::span<const int32_t> positions_host; // [n]
  // Work counters (added to): (query, key) pairs of this rank's attention calls, and
  // (query, index key) pairs its indexer scored.
  int64_t attention_pairs = 0;
  int64_t indexer_pairs = 0;
};

// x [n, H] (= rmsw(collapsed; input_layernorm)) of this rank's rows, y [n, H]. Collective.
Status attention_forward_context_parallel(backend::Backend& be, const Dims& d,
                                          const AttentionWeights& w, const RopeTable& rope,
                                          const Tensor& x, ContextParallelStep& step, int layer,
                                          Tensor& y);

}  // namespace deepinfer::model::v4
