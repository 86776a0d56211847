#include "engine/data_parallel_run.h"

#include <chrono>
#include <exception>
#include <memory>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "dist/inprocess_comm.h"
#include "engine/data_parallel.h"

namespace deepinfer::engine {

namespace {

double steady_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::vector<size_t> rank_prompt_indices(size_t num_prompts, int world_size, int rank) {
  std::vector<size_t> out;
  for (size_t i = static_cast<size_t>(rank); i < num_prompts; i += static_cast<size_t>(world_size)) out.push_back(i);
  return out;
}

Status run_rank_prompts(Engine& engine, const RankEncoder& encode, const RankGenerate& generate,
                        RankResult& res) {
  const size_t n = res.indices.size();
  std::vector<std::vector<int32_t>> ids(n);
  std::vector<SamplingParams> params(n);
  std::vector<std::string> errors(n);
  for (size_t j = 0; j < n; ++j) encode(engine, res.indices[j], &ids[j], &params[j], &errors[j]);
  std::vector<std::vector<int32_t>> run_ids;
  std::vector<SamplingParams> run_params;
  std::vector<size_t> run_slot;
  for (size_t j = 0; j < n; ++j) {
    if (!errors[j].empty()) continue;
    run_ids.push_back(ids[j]);
    run_params.push_back(params[j]);
    run_slot.push_back(j);
  }
  res.start_time = steady_seconds();
  DI_ASSIGN_OR_RETURN(auto outs, generate(run_ids, run_params));
  res.end_time = steady_seconds();
  res.outputs.resize(n);
  res.prompt_tokens.resize(n);
  for (size_t j = 0; j < n; ++j) {
    res.prompt_tokens[j] = static_cast<int64_t>(ids[j].size());
    if (errors[j].empty()) continue;
    RequestOutput& r = res.outputs[j];
    r.finished = true;
    r.error = errors[j];
    CompletionOutput c;
    c.finish_reason = "error";
    r.outputs.push_back(std::move(c));
  }
  for (size_t k = 0; k < run_slot.size(); ++k) res.outputs[run_slot[k]] = std::move(outs[k]);
  res.stats = engine.stats();
  return OkStatus();
}

StatusOr<RankResult> run_rank(const EngineConfig& config, const ExpertParallelOptions& ep,
                              size_t num_prompts, const RankEncoder& encode) {
  RankResult res;
  res.rank = config.data_parallel_rank;
  res.indices = rank_prompt_indices(num_prompts, config.data_parallel_size, res.rank);
  const double t_load = steady_seconds();
  DI_ASSIGN_OR_RETURN(auto engine, create_engine_rank(config, ep));
  res.load_s = steady_seconds() - t_load;
  res.model_dir = engine->model_dir();

  DI_RETURN_IF_ERROR(run_rank_prompts(
      *engine, encode,
      [&engine](const std::vector<std::vector<int32_t>>& ids, const std::vector<SamplingParams>& params) {
        return generate_on_rank(*engine, ids, params);
      },
      res));
  return res;
}

StatusOr<std::vector<RankResult>> run_ranks_in_threads(const EngineConfig& config, size_t num_prompts,
                                                       const RankEncoder& encode) {
  const int W = config.data_parallel_size;
  if (W < 1) return InvalidArgument("data_parallel_size must be >= 1, got " + std::to_string(W));
  std::unique_ptr<dist::InProcessGroup> group;
  std::vector<std::unique_ptr<dist::Communicator>> comms(static_cast<size_t>(W));
  if (config.enable_expert_parallel && W > 1) {
    group = std::make_unique<dist::InProcessGroup>(W);
    for (int r = 0; r < W; ++r) {
      DI_ASSIGN_OR_RETURN(comms[static_cast<size_t>(r)], group->communicator(r));
    }
  }
  std::vector<StatusOr<RankResult>> results(static_cast<size_t>(W), Internal("rank did not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < W; ++r) {
    threads.emplace_back([&, r] {
      EngineConfig c = config;
      c.data_parallel_rank = r;
      ExpertParallelOptions ep;
      ep.comm = comms[static_cast<size_t>(r)].get();
      StatusOr<RankResult> res = Internal("rank did not finish");
      try {
        res = run_rank(c, ep, num_prompts, encode);
      } catch (const std::exception& e) {
        res = Internal(std::string("exception: ") + e.what());
      }
      if (!res.ok() && group) group->abort();  // the peers stop instead of waiting for this rank
      results[static_cast<size_t>(r)] = std::move(res);
    });
  }
  for (auto& t : threads) t.join();
  // The rank that failed first is the one whose error is not the peers' kCancelled.
  for (int pass = 0; pass < 2; ++pass) {
    for (int r = 0; r < W; ++r) {
      const auto& res = results[static_cast<size_t>(r)];
      if (res.ok() || (pass == 0 && res.status().code() == StatusCode::kCancelled)) continue;
      return res.status().with_context("data parallel rank " + std::to_string(r) + " of " + std::to_string(W));
    }
  }
  std::vector<RankResult> out;
  for (auto& res : results) out.push_back(std::move(res).value());
  return out;
}

std::string rank_result_to_jsonl(const RankResult& res) {
  std::ostringstream os;
  for (size_t j = 0; j < res.indices.size(); ++j) {
    const RequestOutput& r = res.outputs[j];
    nlohmann::json seqs = nlohmann::json::array();
    for (const auto& c : r.outputs) {
      nlohmann::json lp = nlohmann::json::array();
      for (const auto& t : c.logprobs) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& [tid, l] : t.top_logprobs) top.push_back({tid, l});
        lp.push_back({{"token", t.token}, {"logprob", t.logprob}, {"rank", t.rank}, {"top", top}});
      }
      nlohmann::json sj{{"index", c.index}, {"text", c.text}, {"token_ids", c.token_ids},
                        {"finish_reason", c.finish_reason}, {"logprobs", lp}};
      if (c.stop_reason) sj["stop_reason"] = *c.stop_reason;
      seqs.push_back(sj);
    }
    nlohmann::json line{{"index", res.indices[j]},
                        {"request_id", r.request_id},
                        {"error", r.error},
                        {"prompt_tokens", res.prompt_tokens[j]},
                        {"outputs", seqs},
                        {"metrics", {{"arrival", r.metrics.arrival_time},
                                     {"first_token", r.metrics.first_token_time},
                                     {"finished", r.metrics.finished_time},
                                     {"preemptions", r.metrics.num_preemptions}}}};
    os << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  nlohmann::json s{{"rank", res.rank},
                   {"model_dir", res.model_dir},
                   {"load_s", res.load_s},
                   {"start_time", res.start_time},
                   {"end_time", res.end_time},
                   {"num_steps", res.stats.num_steps},
                   {"num_idle_steps", res.stats.num_idle_steps},
                   {"num_eplb_rebalances", res.stats.num_eplb_rebalances},
                   {"num_prompt_tokens", res.stats.num_prompt_tokens},
                   {"num_generated_tokens", res.stats.num_generated_tokens},
                   {"num_preemptions", res.stats.num_preemptions},
                   {"num_context_parallel_chunks", res.stats.num_context_parallel_chunks},
                   {"kv_summary", res.stats.kv_summary}};
  os << nlohmann::json{{"summary", s}}.dump() << "\n";
  return os.str();
}

StatusOr<RankResult> rank_result_from_jsonl(const std::string& text) {
  RankResult res;
  bool summary = false;
  std::istringstream is(text);
  std::string line;
  int ln = 0;
  try {
    while (std::getline(is, line)) {
      ++ln;
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line);
      if (j.contains("summary")) {
        const auto& s = j["summary"];
        res.rank = s.at("rank").get<int>();
        res.model_dir = s.at("model_dir").get<std::string>();
        res.load_s = s.at("load_s").get<double>();
        res.start_time = s.at("start_time").get<double>();
        res.end_time = s.at("end_time").get<double>();
        res.stats.num_steps = s.at("num_steps").get<int64_t>();
        res.stats.num_idle_steps = s.at("num_idle_steps").get<int64_t>();
        res.stats.num_eplb_rebalances = s.at("num_eplb_rebalances").get<int64_t>();
        res.stats.num_prompt_tokens = s.at("num_prompt_tokens").get<int64_t>();
        res.stats.num_generated_tokens = s.at("num_generated_tokens").get<int64_t>();
        res.stats.num_preemptions = s.at("num_preemptions").get<int64_t>();
        res.stats.num_context_parallel_chunks = s.value("num_context_parallel_chunks", int64_t{0});
        res.stats.kv_summary = s.at("kv_summary").get<std::string>();
        summary = true;
        continue;
      }
      RequestOutput r;
      r.request_id = j.at("request_id").get<std::string>();
      r.error = j.at("error").get<std::string>();
      r.finished = true;
      for (const auto& sj : j.at("outputs")) {
        CompletionOutput c;
        c.index = sj.at("index").get<int>();
        c.text = sj.at("text").get<std::string>();
        c.token_ids = sj.at("token_ids").get<std::vector<int32_t>>();
        c.finish_reason = sj.at("finish_reason").get<std::string>();
        if (sj.contains("stop_reason")) c.stop_reason = sj["stop_reason"].get<std::string>();
        for (const auto& t : sj.at("logprobs")) {
          TokenLogprobs lp;
          lp.token = t.at("token").get<int32_t>();
          lp.logprob = t.at("logprob").get<float>();
          lp.rank = t.at("rank").get<int>();
          for (const auto& e : t.at("top")) lp.top_logprobs.emplace_back(e.at(0).get<int32_t>(), e.at(1).get<float>());
          c.logprobs.push_back(std::move(lp));
        }
        r.outputs.push_back(std::move(c));
      }
      const auto& m = j.at("metrics");
      r.metrics.arrival_time = m.at("arrival").get<double>();
      r.metrics.first_token_time = m.at("first_token").get<double>();
      r.metrics.finished_time = m.at("finished").get<double>();
      r.metrics.num_preemptions = m.at("preemptions").get<int>();
      res.indices.push_back(j.at("index").get<size_t>());
      res.prompt_tokens.push_back(j.at("prompt_tokens").get<int64_t>());
      res.outputs.push_back(std::move(r));
    }
  } catch (const std::exception& e) {
    return InvalidArgument("rank results line " + std::to_string(ln) + ": " + e.what());
  }
  if (!summary) return InvalidArgument("rank results: no summary line (the rank did not finish)");
  return res;
}

}  // namespace deepinfer::engine
