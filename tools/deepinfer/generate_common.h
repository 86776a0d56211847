// What `deepinfer generate` shares between its single-rank run (cmd_generate.cpp) and its
// data-parallel run (cmd_generate_dp.cpp): the request items, their encoding and the report.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/engine.h"
#include "dist/parallel_config.h"
#include "engine/data_parallel_run.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli::gen {

// One request of the run: a --prompt, or an --input line.
struct Item {
  std::string prompt;
  std::vector<int32_t> ids;
  bool has_ids = false;
  nlohmann::json messages;
  SamplingParams params;
};

// Everything as token ids, so prompts, ids and chat messages share one batch. `tok` may be null
// (a model without tokenizer.json: token-id prompts only). Sets *error instead on failure.
void encode_item(const Item& item, const tokenizer::Tokenizer* tok, std::vector<int32_t>* ids,
                 std::string* error);

// What the summary prints besides the requests.
struct RunSummary {
  std::string model_dir;
  double load_s = 0, gen_s = 0;
  std::string engine_line;  // after "engine      "
  std::string ranks_line;   // data parallel only: after "ranks       "
};

// Prints (and writes to --output) every request in order, then the summary; the exit code.
// outs[i]: the output of items[i] (a failed one has .error set); prompt_tokens[i]: its length.
int report(const std::vector<Item>& items, std::vector<RequestOutput>& outs,
           const std::vector<int64_t>& prompt_tokens, const std::string& output, bool quiet,
           const RunSummary& summary);

// Hidden flags of a rank process started by the launcher (`deepinfer generate` re-executing
// itself once per GPU; see run_data_parallel).
struct RankFlags {
  int rank = -1;              // --dp-rank: this process is that rank
  std::string nccl_id;        // --dp-nccl-id: the group's NCCL unique id (hex), with EP
  std::string results;        // --dp-results: where the rank writes its RankResult (JSONL)
};

// --data-parallel-size N > 1 (docs/dist.md "Launcher"): prompt i runs on rank i % N. With
// --enable-expert-parallel the ranks shard the experts and step in lockstep; without it they are
// independent full replicas. On cuda one process per GPU (rank r on cuda:r); on the CPU the ranks
// are threads of this process (a test mode). A rank process (rf.rank >= 0) runs its share and
// writes its results for the parent. argc/argv: the command's (argv[0] = "deepinfer generate").
int run_data_parallel(int argc, char** argv, EngineConfig cfg, const dist::ParallelFlags& parallel,
                      const RankFlags& rf, const std::vector<Item>& items, const std::string& output,
                      bool quiet);

// --context-parallel-size N or --tensor-parallel-size N (cmd_generate_cp.cpp): every rank runs
// every prompt in lockstep; rank 0's outputs are printed.
int run_context_parallel(int argc, char** argv, EngineConfig cfg, const dist::ParallelFlags& parallel,
                         const RankFlags& rf, const std::vector<Item>& items,
                         const std::string& output, bool quiet);

// What the parallel runs share (cmd_generate_dp.cpp):
// a rank's encoder over the run's items;
engine::RankEncoder rank_encoder(const std::vector<Item>& items);
// the end of a rank process: prints the failure naming the group ("data parallel") and the rank,
// or writes the RankResult for the parent; the exit code;
int finish_rank_process(const StatusOr<engine::RankResult>& res, const std::string& group, int rank,
                        int world, const std::string& results_path);
// one process per GPU: re-executes this binary with the same arguments plus the rank's hidden
// flags (--dp-nccl-id when nccl_id is not empty) and --device cuda:r, NCCL_NVLS_ENABLE=0 in its
// environment; reads back every rank's results in rank order. A rank that fails stops the others
// (dist::run_rank_processes) and is named.
StatusOr<std::vector<engine::RankResult>> launch_rank_processes(int argc, char** argv,
                                                                const std::string& device, int world,
                                                                const std::string& nccl_id,
                                                                const std::string& group);

}  // namespace deepinfer::cli::gen
