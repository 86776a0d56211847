// `deepinfer generate --context-parallel-size N` (docs/dist.md "Context parallelism") and
// `--tensor-parallel-size N` (docs/dist.md "Tensor parallelism"): a replicated lockstep group —
// every rank runs every prompt in lockstep (CP: prefill chunks of at least
// --context-parallel-min-tokens tokens split over the ranks; TP: every rank holds a 1/N shard of
// the big matrices, partial sums all-reduced); the ranks' outputs must agree and rank 0's are printed. On the CPU the
// ranks are threads of this process (a test mode); on CUDA one process per GPU (rank r on cuda:r)
// over an NCCL group, launched here like --data-parallel-size (the hidden --dp-rank /
// --dp-results / --dp-nccl-id flags name the rank process). Registers no command: cmd_generate.cpp
// calls run_context_parallel.
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dist/launcher.h"
#include "engine/context_parallel_run.h"
#include "engine/expert_parallel_hook.h"  // new_nccl_group_id_hex, visible_gpu_count
#include "tools/deepinfer/generate_common.h"

namespace deepinfer::cli::gen {
namespace {

// One process per GPU (launch_rank_processes), every rank's outputs checked equal.
StatusOr<std::vector<engine::RankResult>> launch_cp_processes(int argc, char** argv, const EngineConfig& cfg) {
  DI_ASSIGN_OR_RETURN(std::string nccl_id, engine::new_nccl_group_id_hex());
  DI_ASSIGN_OR_RETURN(auto ranks, launch_rank_processes(argc, argv, cfg.device,
                                                        engine::lockstep_group_size(cfg), nccl_id,
                                                        engine::lockstep_group_name(cfg)));
  DI_RETURN_IF_ERROR(engine::check_ranks_agree(ranks));
  return ranks;
}

}  // namespace

int run_context_parallel(int argc, char** argv, EngineConfig cfg, const dist::ParallelFlags& parallel,
                         const RankFlags& rf, const std::vector<Item>& items,
                         const std::string& output, bool quiet) {
  const bool tp = parallel.context_parallel_size == 1;  // else context parallel
  const int W = tp ? parallel.tensor_parallel_size : parallel.context_parallel_size;
  (tp ? cfg.tensor_parallel_size : cfg.context_parallel_size) = W;
  const char* size_flag = tp ? "--tensor-parallel-size" : "--context-parallel-size";
  const bool on_cpu = cfg.device == "cpu" || cfg.device == "cpu-reference";
  if (rf.rank < 0) {  // the parent checks the flags (a rank process was checked by its launcher)
    const int gpus = !on_cpu && cfg.device.rfind("cuda", 0) == 0 ? engine::visible_gpu_count() : -1;
    Status st = tp ? dist::check_tensor_parallel_flags(parallel, cfg.device, gpus)
                   : dist::check_context_parallel_flags(parallel, cfg.device, gpus);
    if (!st.ok()) {
      std::fprintf(stderr, "deepinfer generate: %s\n", st.message().c_str());
      return 2;
    }
  }
  const engine::RankEncoder encode = rank_encoder(items);
  if (rf.rank >= 0) {  // a rank process started by launch_cp_processes
    if (rf.rank >= W || rf.results.empty()) {
      std::fprintf(stderr, "deepinfer generate: --dp-rank %d needs --dp-results and a rank below "
                           "%s %d (these flags are the launcher's)\n", rf.rank, size_flag, W);
      return 2;
    }
    (tp ? cfg.tensor_parallel_rank : cfg.context_parallel_rank) = rf.rank;
    engine::ContextParallelOptions cp;
    cp.nccl_unique_id_hex = rf.nccl_id;
    return finish_rank_process(engine::run_context_parallel_rank(cfg, cp, items.size(), encode),
                               engine::lockstep_group_name(cfg), rf.rank, W, rf.results);
  }
  auto ranks = on_cpu ? engine::run_context_parallel_in_threads(cfg, items.size(), encode)
                      : launch_cp_processes(argc, argv, cfg);
  if (!ranks.ok()) {
    std::fprintf(stderr, "deepinfer generate: %s\n", ranks.status().to_string().c_str());
    return 1;
  }
  engine::RankResult& r0 = ranks->front();
  std::vector<RequestOutput> outs(items.size());
  std::vector<int64_t> prompt_tokens(items.size(), 0);
  for (size_t j = 0; j < r0.indices.size(); ++j) {
    if (r0.indices[j] >= items.size()) continue;
    outs[r0.indices[j]] = std::move(r0.outputs[j]);
    prompt_tokens[r0.indices[j]] = r0.prompt_tokens[j];
  }
  double start = r0.start_time, end = r0.end_time, load = 0;
  for (const auto& rr : *ranks) {
    start = std::min(start, rr.start_time);
    end = std::max(end, rr.end_time);
    load = std::max(load, rr.load_s);
  }
  RunSummary summary;
  summary.model_dir = r0.model_dir;
  summary.load_s = load;
  summary.gen_s = end - start;
  const std::string where = on_cpu ? ", threads of one process (CPU test mode)" : ", one process per GPU";
  summary.ranks_line =
      tp ? std::to_string(W) + " tensor-parallel ranks (every rank runs every prompt with a 1/" +
               std::to_string(W) + " shard of the attention heads and expert widths)" + where +
               "; outputs equal on every rank"
         : std::to_string(W) + " context-parallel ranks (every rank runs every prompt, " +
               "prefill chunks of >= " + std::to_string(cfg.context_parallel_min_tokens) +
               " tokens split in blocks of " + std::to_string(cfg.context_parallel_block) + ")" + where +
               "; " + std::to_string(r0.stats.num_context_parallel_chunks) +
               " chunks split, outputs equal on every rank";
  summary.engine_line = std::to_string(r0.stats.num_steps) + " steps per rank, " +
                        std::to_string(r0.stats.num_preemptions) + " preemptions; kv per rank " +
                        r0.stats.kv_summary;
  return report(items, outs, prompt_tokens, output, quiet, summary);
}

}  // namespace deepinfer::cli::gen
