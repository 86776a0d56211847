// One forward step over a batch of sequences, flattened: the tokens of every sequence back to
// back (sequence i owns rows [begin, begin + len) of every [S, ...] activation). Row-wise work
// (projections, norms, MoE, hyper-connections) runs once over all rows; per-sequence state work
// (window, compressors, indexer, key lists) runs per slice, and attention is one call over
// every sequence's key list.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "model/deepseek_v4/state.h"

namespace deepinfer::model::v4 {

struct SeqSlice {
  int64_t begin = 0;               // first row in the flattened batch
  int64_t len = 0;                 // tokens of this sequence in the step
  int64_t past = 0;                // tokens consumed before the step (= first position)
  DeepseekV4State* state = nullptr;
};

struct StepBatch {
  std::vector<SeqSlice> seqs;
  std::span<const int32_t> tokens;          // [S] host
  Tensor positions;                         // [S] I32, backend memory
  std::span<const int32_t> positions_host;  // [S]
  // Fed tokens (SequenceInput::fed_ids): their rows of `tokens` hold 0; the ids are in fed_ids
  // (backend memory), fed_pairs = (row of fed_ids, row of the step) per fed token.
  const Tensor* fed_ids = nullptr;
  std::vector<std::pair<int32_t, int32_t>> fed_pairs;
};

}  // namespace deepinfer::model::v4
