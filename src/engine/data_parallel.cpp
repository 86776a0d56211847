#include "engine/data_parallel.h"

#include <string>
#include <unordered_map>

#include "dist/communicator.h"
#include "engine/engine_impl.h"
#include "engine/request.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::engine {

using engine_internal::EngineAccess;

StatusOr<std::unique_ptr<Engine>> create_engine_rank(const EngineConfig& config,
                                                     const ExpertParallelOptions& ep) {
  return EngineAccess::create(config, &ep);
}

DataParallelStepper::DataParallelStepper(Engine* engine) : engine_(engine) {
  comm_ = EngineAccess::impl(*engine).lockstep_comm;
}

StatusOr<std::vector<RequestOutput>> DataParallelStepper::step(bool* done) {
  *done = false;
  const bool has_work = engine_->has_unfinished_requests();
  if (!lockstep()) {
    if (!has_work) {
      *done = true;
      return std::vector<RequestOutput>{};
    }
    return engine_->step();
  }
  auto& m = EngineAccess::impl(*engine_);  // Engine::Impl (private: reached through EngineAccess)
  auto flags = dist::all_gather_count(*comm_, has_work ? 1 : 0);
  if (!flags.ok()) return flags.status().with_context("data parallel: exchanging the ranks' work flags");
  bool any = false;
  for (int64_t f : *flags) any = any || f != 0;
  if (!any) {
    *done = true;
    return std::vector<RequestOutput>{};
  }
  std::vector<RequestOutput> outputs;
  const int64_t forwards_before = m.stats.num_steps;  // +1 per forward (synchronous scheduling)
  if (has_work) {
    DI_ASSIGN_OR_RETURN(outputs, engine_->step());
  }
  if (m.stats.num_steps == forwards_before) {
    auto* v4 = dynamic_cast<model::v4::DeepseekV4Model*>(m.model.get());
    if (v4 == nullptr) return Internal("data parallel: the lockstep model is not DeepSeek-V4");
    Status st = v4->expert_parallel_idle_step();
    if (!st.ok()) return st.with_context("data parallel rank " + std::to_string(comm_->rank()) + ": idle step");
    ++m.stats.num_idle_steps;
    if (m.expert_parallel && m.expert_parallel->eplb) {  // the idle pass counts as a step too
      Status e = m.expert_parallel->eplb->after_step();
      if (!e.ok()) return e.with_context("EPLB after an idle step");
      m.stats.num_eplb_rebalances = m.expert_parallel->eplb->num_rebalances();
    }
  } else if (m.stats.num_steps != forwards_before + 1) {
    return Internal("data parallel: one engine step ran " +
                    std::to_string(m.stats.num_steps - forwards_before) +
                    " forwards (the lockstep needs at most one: is async scheduling on?)");
  }
  return outputs;
}

StatusOr<std::vector<RequestOutput>> generate_on_rank(Engine& engine,
                                                      const std::vector<std::vector<int32_t>>& prompts,
                                                      const std::vector<SamplingParams>& params,
                                                      const RankProgress& progress) {
  if (params.size() != prompts.size()) {
    return InvalidArgument("generate_on_rank: " + std::to_string(prompts.size()) + " prompts but " +
                           std::to_string(params.size()) + " sampling parameter sets");
  }
  const std::string prefix = "dp" + std::to_string(engine.config().data_parallel_rank) + "-";
  std::vector<RequestOutput> results(prompts.size());
  std::unordered_map<std::string, size_t> slot;
  size_t finished = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::string id = prefix + std::to_string(i);
    Status st = engine.add_request(id, prompts[i], params[i]);
    if (!st.ok()) {  // this prompt fails alone; the others run
      results[i] = refused_request_output(id, st);
      ++finished;
      continue;
    }
    slot[id] = i;
  }
  DataParallelStepper stepper(&engine);
  for (;;) {
    bool done = false;
    DI_ASSIGN_OR_RETURN(auto outs, stepper.step(&done));
    if (done) break;
    for (auto& o : outs) {
      auto it = slot.find(o.request_id);
      if (it == slot.end()) continue;
      results[it->second] = std::move(o);
      ++finished;
    }
    if (progress) progress(finished, prompts.size());
  }
  return results;
}

}  // namespace deepinfer::engine
