#include "deepinfer/llm.h"

#include <unordered_map>

#include "engine/request.h"

namespace deepinfer {

StatusOr<std::unique_ptr<LLM>> LLM::create(const EngineConfig& config) {
  DI_ASSIGN_OR_RETURN(auto engine, Engine::create(config));
  return std::unique_ptr<LLM>(new LLM(std::move(engine)));
}

template <typename Prompt>
StatusOr<std::vector<RequestOutput>> LLM::run(const std::vector<Prompt>& prompts,
                                              const std::vector<SamplingParams>& params,
                                              const Progress& progress) {
  if (params.size() != prompts.size()) {
    return InvalidArgument("generate: " + std::to_string(prompts.size()) + " prompts but " +
                           std::to_string(params.size()) + " sampling parameter sets");
  }
  std::vector<RequestOutput> results(prompts.size());
  std::unordered_map<std::string, size_t> slot;
  size_t done = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = "llm-" + std::to_string(next_id_++);
    Status st = engine_->add_request(id, prompts[i], params[i]);
    if (!st.ok()) {  // this prompt fails alone; the others run
      results[i] = engine::refused_request_output(id, st);
      ++done;
      continue;
    }
    slot[id] = i;
  }
  while (engine_->has_unfinished_requests()) {
    DI_ASSIGN_OR_RETURN(auto outs, engine_->step());
    for (auto& o : outs) {
      auto it = slot.find(o.request_id);
      if (it == slot.end()) continue;
      results[it->second] = std::move(o);
      ++done;
    }
    if (progress) progress(done, prompts.size());
  }
  return results;
}

StatusOr<std::vector<RequestOutput>> LLM::generate(const std::vector<std::string>& prompts,
                                                   const SamplingParams& params,
                                                   const Progress& progress) {
  return run(prompts, std::vector<SamplingParams>(prompts.size(), params), progress);
}

StatusOr<std::vector<RequestOutput>> LLM::generate(
    const std::vector<std::vector<int32_t>>& prompt_token_ids, const SamplingParams& params,
    const Progress& progress) {
  return run(prompt_token_ids, std::vector<SamplingParams>(prompt_token_ids.size(), params),
             progress);
}

StatusOr<std::vector<RequestOutput>> LLM::generate(const std::vector<std::string>& prompts,
                                                   const std::vector<SamplingParams>& params,
                                                   const Progress& progress) {
  return run(prompts, params, progress);
}

StatusOr<std::vector<RequestOutput>> LLM::generate(
    const std::vector<std::vector<int32_t>>& prompt_token_ids,
    const std::vector<SamplingParams>& params, const Progress& progress) {
  return run(prompt_token_ids, params, progress);
}

}  // namespace deepinfer
