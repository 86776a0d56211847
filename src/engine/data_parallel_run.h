// Running the ranks of a data-parallel generation (engine/data_parallel.h has the engine side):
// the prompts are split round robin by index (prompt i runs on rank i % W), each rank runs its
// share to completion (in lockstep with the others under expert parallelism) and reports its
// outputs with their global indices, so the caller prints them in prompt order.
//
//   CPU (--device cpu | cpu-reference): run_ranks_in_threads — W threads of one process, each with
//     its own engine and backend, over dist::InProcessGroup. A test mode (CI runs the whole DP
//     path this way), not a transport.
//   CUDA: one process per GPU (dist/launcher.h); each child calls run_rank and sends its
//     RankResult to the parent as JSONL (rank_result_to_jsonl / rank_result_from_jsonl).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "deepinfer/engine.h"
#include "engine/expert_parallel_hook.h"

namespace deepinfer::engine {

struct RankResult {
  int rank = 0;
  std::vector<size_t> indices;          // global prompt indices this rank ran, ascending
  std::vector<RequestOutput> outputs;   // [indices.size()]
  std::vector<int64_t> prompt_tokens;   // [indices.size()]
  EngineStats stats;
  std::string model_dir;
  double load_s = 0;                    // engine creation (model load) on this rank
  double start_time = 0, end_time = 0;  // steady-clock seconds around the generation
};

// Prompt `index` on this rank, once its engine (and tokenizer) exists: fill *ids and *params, or
// set *error (the prompt then gets an "error" output; the others run).
using RankEncoder = std::function<void(const Engine& engine, size_t index, std::vector<int32_t>* ids,
                                       SamplingParams* params, std::string* error)>;

// The prompt indices of `rank`: rank, rank + W, rank + 2W, ... below num_prompts.
std::vector<size_t> rank_prompt_indices(size_t num_prompts, int world_size, int rank);

// The prompts of res.indices on one rank's engine: encodes each (a prompt that fails to encode
// gets an "error" output in its slot), runs the others through `generate` (every rank calls it,
// one with no runnable prompt too: the group steps together) and fills res's outputs,
// prompt_tokens, start/end times and stats.
using RankGenerate = std::function<StatusOr<std::vector<RequestOutput>>(
    const std::vector<std::vector<int32_t>>& ids, const std::vector<SamplingParams>& params)>;
Status run_rank_prompts(Engine& engine, const RankEncoder& encode, const RankGenerate& generate,
                        RankResult& res);

// Rank config.data_parallel_rank of config.data_parallel_size: creates its engine
// (create_engine_rank with `ep`), encodes its prompts and generates until the group is done.
StatusOr<RankResult> run_rank(const EngineConfig& config, const ExpertParallelOptions& ep,
                              size_t num_prompts, const RankEncoder& encode);

// Every rank of config.data_parallel_size as a thread of this process (host devices): over one
// dist::InProcessGroup when config.enable_expert_parallel, else independent replicas. Results in
// rank order. When a rank fails the group is aborted (its peers stop with kCancelled instead of
// waiting) and the error names the rank.
StatusOr<std::vector<RankResult>> run_ranks_in_threads(const EngineConfig& config, size_t num_prompts,
                                                       const RankEncoder& encode);

// A RankResult as JSONL (one line per output, then one summary line) and back.
std::string rank_result_to_jsonl(const RankResult& result);
StatusOr<RankResult> rank_result_from_jsonl(const std::string& text);

}  // namespace deepinfer::engine
