// Running the ranks of a replicated lockstep group: a context-parallel generation
// (EngineConfig.context_parallel_size > 1; engine/context_parallel.h has the engine side) or a
// tensor-parallel one (EngineConfig.tensor_parallel_size > 1; the sharded model of
// model/deepseek_v4/tensor_parallel.h). The config says which; the group size W and this rank are
// the fields of that one (lockstep_group_size / lockstep_group_rank). Every rank runs ALL the prompts — the same requests, in the same order, with the same
// config — and steps in lockstep; the outputs are the same on every rank (rank 0's are printed).
//
//   CPU (--device cpu | cpu-reference): run_context_parallel_in_threads — W threads of one
//     process over dist::InProcessGroup, each its own engine and backend (a test mode: CI runs
//     the whole CP path this way). The ranks' outputs are compared: any difference is an error.
//   CUDA: one process per GPU (dist/launcher.h, tools/deepinfer/cmd_generate_cp.cpp); each child
//     calls run_context_parallel_rank with the launcher's NCCL id and writes its RankResult.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "deepinfer/engine.h"
#include "engine/context_parallel.h"
#include "engine/data_parallel_run.h"  // RankResult, RankEncoder

namespace deepinfer::engine {

// The group the config asks for: context_parallel_size when > 1, else tensor_parallel_size (1:
// no group); its rank field; a name for messages ("context parallel", "tensor parallel").
int lockstep_group_size(const EngineConfig& config);
int lockstep_group_rank(const EngineConfig& config);
std::string lockstep_group_name(const EngineConfig& config);

// Rank lockstep_group_rank(config) of lockstep_group_size(config): creates its engine with
// `cp` (the group's communicator or NCCL id, for either kind of group), encodes every prompt (indices 0..num_prompts-1) and generates until no rank has work.
// Each step the ranks all-gather "I have unfinished requests"; ranks that disagree fail together
// with FailedPrecondition (they diverged) instead of leaving one waiting in a collective.
StatusOr<RankResult> run_context_parallel_rank(const EngineConfig& config,
                                               const ContextParallelOptions& cp,
                                               size_t num_prompts, const RankEncoder& encode);

// Every rank as a thread of this process (host devices) over one dist::InProcessGroup; results
// in rank order. A failing rank aborts the group (its peers stop with kCancelled) and the error
// names it; ranks whose outputs differ (token ids, finish reasons) are an Internal error.
StatusOr<std::vector<RankResult>> run_context_parallel_in_threads(const EngineConfig& config,
                                                                  size_t num_prompts,
                                                                  const RankEncoder& encode);

// OK when every rank's outputs equal rank 0's (token ids, finish reasons, errors); else Internal
// naming the first prompt and rank that differ.
Status check_ranks_agree(const std::vector<RankResult>& ranks);

}  // namespace deepinfer::engine
