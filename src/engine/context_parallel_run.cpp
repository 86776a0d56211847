#include "engine/context_parallel_run.h"

#include <chrono>
#include <exception>
#include <memory>
#include <thread>
#include <unordered_map>

#include "dist/inprocess_comm.h"
#include "engine/engine_impl.h"
#include "engine/request.h"

namespace deepinfer::engine {

using engine_internal::EngineAccess;

namespace {

double steady_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// LLM::generate in lockstep with the other ranks of the group: request ids "cp-<i>".
StatusOr<std::vector<RequestOutput>> generate_in_lockstep(Engine& engine, dist::Communicator& comm,
                                                          const std::string& group,
                                                          const std::vector<std::vector<int32_t>>& prompts,
                                                          const std::vector<SamplingParams>& params) {
  std::vector<RequestOutput> results(prompts.size());
  std::unordered_map<std::string, size_t> slot;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = "cp-" + std::to_string(i);
    Status st = engine.add_request(id, prompts[i], params[i]);
    if (!st.ok()) {  // this prompt fails alone (on every rank alike); the others run
      results[i] = refused_request_output(id, st);
      continue;
    }
    slot[id] = i;
  }
  for (int64_t step = 0;; ++step) {
    const bool has_work = engine.has_unfinished_requests();
    auto flags = dist::all_gather_count(comm, has_work ? 1 : 0);
    if (!flags.ok()) return flags.status().with_context(group + ": exchanging the ranks' work flags");
    for (int r = 0; r < comm.world_size(); ++r)
      if (((*flags)[r] != 0) != has_work)
        return FailedPrecondition(group + ": the ranks diverged at step " + std::to_string(step) +
                                  ": rank " + std::to_string(r) + (has_work ? " has no" : " has") +
                                  " unfinished requests, rank " + std::to_string(comm.rank()) +
                                  (has_work ? " has some" : " has none"));
    if (!has_work) break;
    DI_ASSIGN_OR_RETURN(auto outs, engine.step());
    for (auto& o : outs) {
      auto it = slot.find(o.request_id);
      if (it != slot.end()) results[it->second] = std::move(o);
    }
  }
  return results;
}

bool same_output(const RequestOutput& a, const RequestOutput& b) {
  if (a.error != b.error || a.outputs.size() != b.outputs.size()) return false;
  for (size_t k = 0; k < a.outputs.size(); ++k)
    if (a.outputs[k].token_ids != b.outputs[k].token_ids ||
        a.outputs[k].finish_reason != b.outputs[k].finish_reason)
      return false;
  return true;
}

}  // namespace

int lockstep_group_size(const EngineConfig& config) {
  return config.context_parallel_size > 1 ? config.context_parallel_size : config.tensor_parallel_size;
}

int lockstep_group_rank(const EngineConfig& config) {
  return config.context_parallel_size > 1 ? config.context_parallel_rank : config.tensor_parallel_rank;
}

std::string lockstep_group_name(const EngineConfig& config) {
  return config.context_parallel_size > 1 ? "context parallel" : "tensor parallel";
}

StatusOr<RankResult> run_context_parallel_rank(const EngineConfig& config,
                                               const ContextParallelOptions& cp,
                                               size_t num_prompts, const RankEncoder& encode) {
  RankResult res;
  res.rank = lockstep_group_rank(config);
  const std::string group = lockstep_group_name(config);
  for (size_t i = 0; i < num_prompts; ++i) res.indices.push_back(i);
  const double t_load = steady_seconds();
  DI_ASSIGN_OR_RETURN(auto engine, EngineAccess::create(config, nullptr, &cp));
  res.load_s = steady_seconds() - t_load;
  res.model_dir = engine->model_dir();
  auto& impl = EngineAccess::impl(*engine);
  ContextParallelRuntime* rt = impl.context_parallel ? impl.context_parallel.get() : impl.tensor_parallel.get();
  if (rt == nullptr || rt->comm == nullptr) return Internal(group + ": the engine has no group");

  DI_RETURN_IF_ERROR(run_rank_prompts(
      *engine, encode,
      [&](const std::vector<std::vector<int32_t>>& ids, const std::vector<SamplingParams>& params) {
        return generate_in_lockstep(*engine, *rt->comm, group, ids, params);
      },
      res));
  return res;
}

StatusOr<std::vector<RankResult>> run_context_parallel_in_threads(const EngineConfig& config,
                                                                  size_t num_prompts,
                                                                  const RankEncoder& encode) {
  const int W = lockstep_group_size(config);
  const std::string group_name = lockstep_group_name(config);
  if (W < 2)
    return InvalidArgument("context_parallel_size or tensor_parallel_size must be >= 2 here, got " +
                           std::to_string(W));
  dist::InProcessGroup group(W);
  std::vector<std::unique_ptr<dist::Communicator>> comms(static_cast<size_t>(W));
  for (int r = 0; r < W; ++r) {
    DI_ASSIGN_OR_RETURN(comms[static_cast<size_t>(r)], group.communicator(r));
  }
  std::vector<StatusOr<RankResult>> results(static_cast<size_t>(W), Internal("rank did not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < W; ++r) {
    threads.emplace_back([&, r] {
      EngineConfig c = config;
      (config.context_parallel_size > 1 ? c.context_parallel_rank : c.tensor_parallel_rank) = r;
      ContextParallelOptions cp;
      cp.comm = comms[static_cast<size_t>(r)].get();
      StatusOr<RankResult> res = Internal("rank did not finish");
      try {
        res = run_context_parallel_rank(c, cp, num_prompts, encode);
      } catch (const std::exception& e) {
        res = Internal(std::string("exception: ") + e.what());
      }
      if (!res.ok()) group.abort();  // the peers stop instead of waiting for this rank
      results[static_cast<size_t>(r)] = std::move(res);
    });
  }
  for (auto& t : threads) t.join();
  for (int pass = 0; pass < 2; ++pass) {  // the first failure is the one that is not kCancelled
    for (int r = 0; r < W; ++r) {
      const auto& res = results[static_cast<size_t>(r)];
      if (res.ok() || (pass == 0 && res.status().code() == StatusCode::kCancelled)) continue;
      return res.status().with_context(group_name + " rank " + std::to_string(r) + " of " + std::to_string(W));
    }
  }
  std::vector<RankResult> out;
  for (auto& res : results) out.push_back(std::move(res).value());
  DI_RETURN_IF_ERROR(check_ranks_agree(out));
  return out;
}

Status check_ranks_agree(const std::vector<RankResult>& ranks) {
  for (size_t r = 1; r < ranks.size(); ++r) {
    if (ranks[r].outputs.size() != ranks[0].outputs.size())
      return Internal("lockstep group: rank " + std::to_string(r) + " has " +
                      std::to_string(ranks[r].outputs.size()) + " outputs, rank 0 " +
                      std::to_string(ranks[0].outputs.size()));
    for (size_t i = 0; i < ranks[0].outputs.size(); ++i)
      if (!same_output(ranks[r].outputs[i], ranks[0].outputs[i]))
        return Internal("lockstep group: rank " + std::to_string(r) + " generated another output "
                        "than rank 0 for prompt " + std::to_string(i) +
                        " (the ranks must compute bitwise-identical logits)");
  }
  return OkStatus();
}

}  // namespace deepinfer::engine
