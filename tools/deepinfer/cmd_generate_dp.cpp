// `deepinfer generate --data-parallel-size N` (generate_common.h, docs/dist.md "Launcher"): the
// ranks as threads (CPU) or one process per GPU (CUDA), their results merged in prompt order.
// Registers no command: the generate command (cmd_generate.cpp) calls run_data_parallel.
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dist/launcher.h"
#include "engine/data_parallel_run.h"
#include "engine/expert_parallel_hook.h"  // new_nccl_group_id_hex
#include "tools/deepinfer/generate_common.h"

namespace deepinfer::cli::gen {

StatusOr<std::vector<engine::RankResult>> launch_rank_processes(int argc, char** argv,
                                                                const std::string& device, int world,
                                                                const std::string& nccl_id,
                                                                const std::string& group) {
  DI_ASSIGN_OR_RETURN(std::string exe, dist::self_executable_path());
  std::string tmpl = (std::filesystem::temp_directory_path() / "deepinfer-ranks-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return Internal("cannot create a temporary directory for the ranks' results");
  const std::filesystem::path dir(tmpl);
  dist::RankLaunch launch;
  launch.env = {{"NCCL_NVLS_ENABLE", "0"}};  // NVLink multicast stays off
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> a = {exe, "generate"};
    for (int i = 1; i < argc; ++i) a.emplace_back(argv[i]);
    a.insert(a.end(), {"--device", dist::rank_device(device, r), "--dp-rank", std::to_string(r),
                       "--dp-results", (dir / ("rank" + std::to_string(r) + ".jsonl")).string()});
    if (!nccl_id.empty()) a.insert(a.end(), {"--dp-nccl-id", nccl_id});
    launch.argv.push_back(std::move(a));
  }
  Status st = dist::run_rank_processes(launch);
  std::vector<engine::RankResult> ranks;
  for (int r = 0; st.ok() && r < world; ++r) {
    std::ifstream f(dir / ("rank" + std::to_string(r) + ".jsonl"));
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto res = engine::rank_result_from_jsonl(text);
    if (!res.ok()) st = res.status().with_context(group + " rank " + std::to_string(r));
    else ranks.push_back(std::move(res).value());
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!st.ok()) return st;
  return ranks;
}

engine::RankEncoder rank_encoder(const std::vector<Item>& items) {
  return [&items](const Engine& e, size_t i, std::vector<int32_t>* ids, SamplingParams* p,
                  std::string* error) {
    *p = items[i].params;
    encode_item(items[i], e.tokenizer(), ids, error);
  };
}

int finish_rank_process(const StatusOr<engine::RankResult>& res, const std::string& group, int rank,
                        int world, const std::string& results_path) {
  if (!res.ok()) {
    std::fprintf(stderr, "deepinfer generate: %s rank %d of %d: %s\n", group.c_str(), rank, world,
                 res.status().to_string().c_str());
    return 1;
  }
  std::ofstream f(results_path);
  f << engine::rank_result_to_jsonl(*res);
  f.close();
  if (!f) {
    std::fprintf(stderr, "deepinfer generate: rank %d cannot write '%s'\n", rank, results_path.c_str());
    return 1;
  }
  return 0;
}


int run_data_parallel(int argc, char** argv, EngineConfig cfg, const dist::ParallelFlags& parallel,
                      const RankFlags& rf, const std::vector<Item>& items, const std::string& output,
                      bool quiet) {
  const int W = parallel.data_parallel_size;
  cfg.data_parallel_size = W;
  cfg.enable_expert_parallel = parallel.enable_expert_parallel;
  const engine::RankEncoder encode = rank_encoder(items);
  if (rf.rank >= 0) {
    if (rf.rank >= W || rf.results.empty()) {
      std::fprintf(stderr, "deepinfer generate: --dp-rank %d needs --dp-results and a rank below "
                           "--data-parallel-size %d (these flags are the launcher's)\n", rf.rank, W);
      return 2;
    }
    cfg.data_parallel_rank = rf.rank;
    engine::ExpertParallelOptions ep;
    ep.nccl_unique_id_hex = rf.nccl_id;
    return finish_rank_process(engine::run_rank(cfg, ep, items.size(), encode), "data parallel",
                               rf.rank, W, rf.results);
  }
  const bool on_cpu = cfg.device == "cpu" || cfg.device == "cpu-reference";
  StatusOr<std::vector<engine::RankResult>> ranks = Internal("not run");
  if (on_cpu) {
    ranks = engine::run_ranks_in_threads(cfg, items.size(), encode);
  } else {
    std::string nccl_id;  // the experts' group; replicas need none
    if (cfg.enable_expert_parallel) {
      auto id = engine::new_nccl_group_id_hex();
      if (!id.ok()) {
        std::fprintf(stderr, "deepinfer generate: --enable-expert-parallel over %d GPUs: %s\n", W,
                     id.status().to_string().c_str());
        return 1;
      }
      nccl_id = *id;
    }
    ranks = launch_rank_processes(argc, argv, cfg.device, W, nccl_id, "data parallel");
  }
  if (!ranks.ok()) {
    std::fprintf(stderr, "deepinfer generate: %s\n", ranks.status().to_string().c_str());
    return 1;
  }
  std::vector<RequestOutput> outs(items.size());
  std::vector<int64_t> prompt_tokens(items.size(), 0);
  RunSummary summary;
  double start = 0, end = 0;
  int64_t preemptions = 0, rebalances = 0;
  std::string per_rank_prompts, per_rank_steps, per_rank_idle;
  for (size_t r = 0; r < ranks->size(); ++r) {
    engine::RankResult& rr = (*ranks)[r];
    for (size_t j = 0; j < rr.indices.size(); ++j) {
      if (rr.indices[j] >= items.size()) continue;
      outs[rr.indices[j]] = std::move(rr.outputs[j]);
      prompt_tokens[rr.indices[j]] = rr.prompt_tokens[j];
    }
    start = r == 0 ? rr.start_time : std::min(start, rr.start_time);
    end = r == 0 ? rr.end_time : std::max(end, rr.end_time);
    summary.load_s = std::max(summary.load_s, rr.load_s);
    preemptions += rr.stats.num_preemptions;
    rebalances = std::max(rebalances, rr.stats.num_eplb_rebalances);  // the same on every rank
    const std::string sep = r == 0 ? "" : "/";
    per_rank_prompts += sep + std::to_string(rr.indices.size());
    per_rank_steps += sep + std::to_string(rr.stats.num_steps);
    per_rank_idle += sep + std::to_string(rr.stats.num_idle_steps);
  }
  summary.model_dir = ranks->empty() ? cfg.model : ranks->front().model_dir;
  summary.gen_s = end - start;
  summary.ranks_line = std::to_string(W) + " data-parallel ranks" +
                       (cfg.enable_expert_parallel ? " sharing the experts (expert parallel, lockstep)"
                                                   : " (independent replicas)") +
                       (on_cpu ? ", threads of one process (CPU test mode)" : ", one process per GPU") +
                       "; prompts per rank " + per_rank_prompts;
  summary.engine_line = "steps per rank " + per_rank_steps +
                        (cfg.enable_expert_parallel ? " (idle " + per_rank_idle + ")" : std::string()) +
                        ", " + std::to_string(preemptions) + " preemptions" +
                        (cfg.enable_eplb ? ", " + std::to_string(rebalances) + " EPLB rebalances"
                                         : std::string()) +
                        "; kv per rank " +
                        (ranks->empty() ? std::string() : ranks->front().stats.kv_summary);
  return report(items, outs, prompt_tokens, output, quiet, summary);
}

}  // namespace deepinfer::cli::gen
