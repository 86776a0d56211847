// Context-parallel prefill of one long prompt over the ranks of a dist::Communicator
// (docs/dist.md, "Context parallelism"):
//
//   // on every rank r (its own model, backend and state; all ranks the same prompt):
//   auto state = model->new_sequence_state();
//   ContextParallelInput in{prompt, state.get()};
//   DI_ASSIGN_OR_RETURN(ContextParallelResult out, model->prefill_context_parallel(comm, in));
//   // out.logits [1, V] (or [S, V]) on every rank; *state holds the whole prompt on every rank,
//   // so any rank (or all, in lockstep with EP) continues with model->forward() decode steps.
//
// Each rank computes the per-token work (q path, attention, output projection, MoE,
// hyper-connections) for its own rows only (serpentine blocks, context_parallel_split.h, so
// attention work is balanced); the rows other queries need (window kv, compressor inputs) are
// all-gathered per layer and every rank keeps the full sequence state. On the CPU backend the
// logits and the state are bitwise those of the single-rank DeepseekV4Model::forward (every op is
// row-wise batch invariant and each query sees the same keys in the same order).
#pragma once

#include <cstdint>
#include <span>

#include "backend/backend.h"
#include "model/model.h"

namespace deepinfer::model::v4 {

struct ContextParallelInput {
  std::span<const int32_t> tokens;  // [S] the same prompt chunk on every rank
  SequenceState* state = nullptr;   // this rank's state of the sequence (the same num_tokens on
                                    // every rank); advanced by S on success
  bool all_logits = false;          // logits of every row (else only of the last one)
  int64_t block = 1;                // rows per dealt block (the same on every rank)
};

struct ContextParallelResult {
  Tensor logits;                    // host [R, V]; R = S (all_logits) or 1, rows in prompt order
  int64_t own_tokens = 0;           // rows this rank computed
  int64_t attention_pairs = 0;      // Σ over layers of this rank's (query, key) attention pairs
  int64_t indexer_pairs = 0;        // Σ over CSA layers of (query, index key) pairs scored
};

}  // namespace deepinfer::model::v4
