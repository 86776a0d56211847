// Engine::Impl: the engine's state, shared by engine.cpp (create, requests, outputs) and
// engine_step.cpp (the step pipeline: schedule, masks, forward, sample, update). Internal header.
#pragma once

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "deepinfer/engine.h"
#include "engine/context_parallel.h"
#include "engine/expert_parallel_hook.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/step_executor.h"
#include "engine/structured_outputs.h"
#include "kv/coordinator.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "sample/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace engine_internal {

inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// One sequence of a user request, tracked from add to finish.
struct Sequence {
  std::string parent_id;
  int index = 0;
  sample::DetokenizingStopChecker checker;
  std::vector<TokenLogprobs> logprobs;
  double first_token_time = 0;
};

// A user request: its n sequences and what has been reported.
struct Group {
  std::vector<int32_t> prompt_token_ids;
  std::vector<std::optional<CompletionOutput>> done;  // per sequence index
  int num_done = 0;
  RequestMetrics metrics;
};

}  // namespace engine_internal

struct Engine::Impl {
  EngineConfig config;
  std::string model_dir;
  std::unique_ptr<backend::Backend> backend;
  // enable_expert_parallel: the communicator and context the model borrows (after the backend
  // it borrows, before the model: destroyed after the model, before the backend). At
  // data_parallel_size > 1 the communicator may be the caller's (engine/data_parallel.h).
  std::unique_ptr<engine::ExpertParallelRuntime> expert_parallel;
  // context_parallel_size > 1: the group's communicator (outlives the model that borrows it).
  std::unique_ptr<engine::ContextParallelRuntime> context_parallel;
  // tensor_parallel_size > 1: the group's communicator (outlives the sharded model that borrows it).
  std::unique_ptr<engine::ContextParallelRuntime> tensor_parallel;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<kv::KvCacheCoordinator> kv;
  std::unique_ptr<engine::Scheduler> scheduler;
  std::unique_ptr<engine::ModelRunner> runner;
  std::unique_ptr<engine::StepExecutor> executor;  // after runner: destroyed (joined) first
  // Structured outputs: made at the first constrained request (needs the tokenizer).
  std::unique_ptr<engine::StructuredOutputManager> structured;
  std::vector<std::string> awaiting_grammar;  // scheduler ids held back while their grammar compiles
  // Masks of the constrained rows of the step in flight, filled while its forward runs.
  struct MaskJob {
    std::vector<std::string> ids;    // one per constrained sampling row
    std::vector<uint32_t> masks;     // [ids.size(), words]
    size_t words = 0;
    std::future<std::vector<Status>> statuses;
  };
  std::optional<MaskJob> mask_job;   // after `structured`: destroyed (waited for) first
  std::vector<std::string> deferred_grammar_releases;  // while a mask job may read them
  sample::Sampler sampler;
  int32_t eos_token_id = -1;
  std::unordered_map<std::string, engine_internal::Sequence> sequences;  // by internal (scheduler) request id
  std::map<std::string, engine_internal::Group> groups;                  // by user request id
  std::vector<RequestOutput> pending_outputs;           // finished outside step() (aborts)
  EngineStats stats;
  // data_parallel_size > 1 with expert parallelism: the ranks step in lockstep (the MoE layers
  // are collectives; engine/data_parallel.h). The group communicator, else nullptr.
  dist::Communicator* lockstep_comm = nullptr;

  void finish_sequence(std::unique_ptr<engine::Request> request, std::vector<RequestOutput>* out);
  // Schedules a step; the model state of requests it preempted is dropped (after the forward in
  // flight, if any).
  engine::SchedulerOutput schedule();
  // Starts filling the grammar masks of `step`'s constrained rows, then launches its forward.
  void launch(engine::SchedulerOutput step);
  // Sampling rows for the backend, or none (the host sampler).
  std::vector<backend::SampleRowParams> device_sample_rows(
      const engine::SchedulerOutput& step) const;
  // Queues `next` behind the step in flight, its placeholders fed from that step's ids on the
  // device; false (nothing launched) when it cannot.
  bool launch_fed(engine::SchedulerOutput& next);
  // Requests whose grammar compiled join the scheduling; a compile error fails only its request.
  void poll_grammars(std::vector<RequestOutput>* outputs);
  void release_grammar(const std::string& id);
  // Fails a live request (same key) with `error`; no-op if it is gone.
  void fail_request(const std::string& id, kv::RequestKey key, const std::string& error,
                    std::vector<std::unique_ptr<engine::Request>>* finished);
  // Step N's forward is done: sample its rows and apply the tokens to the scheduler (token stops).
  // Requests that finished go to `finished`; `sampled` gets the chunks that received a token.
  void sample_and_update(const engine::StepResult& done,
                         std::vector<std::unique_ptr<engine::Request>>* finished,
                         std::vector<size_t>* sampled);
  // Fails every still-running request of `step` with `error` (a forward or sampler failure).
  void fail_step(const engine::SchedulerOutput& step, const Status& error,
                 std::vector<std::unique_ptr<engine::Request>>* finished);
  // Stop strings of the chunks that got a token in `step` (detokenizes their new output).
  void check_stop_strings(const engine::SchedulerOutput& step, const std::vector<size_t>& sampled,
                          std::vector<std::unique_ptr<engine::Request>>* finished);
  // Output text in the context of the prompt's last tokens, as vLLM's incremental detokenizer
  // does: decode(context + ids) minus decode(context). Decoding the output alone would lose what
  // a decoder does at the start of a text (e.g. SentencePiece drops the first token's space).
  std::string detokenize(std::span<const int32_t> context, std::span<const int32_t> ids,
                         bool skip_special) const {
    if (!tokenizer) return std::string();
    std::vector<int32_t> all(context.begin(), context.end());
    all.insert(all.end(), ids.begin(), ids.end());
    const std::string prefix = tokenizer->decode(context, skip_special);
    std::string text = tokenizer->decode(all, skip_special);
    if (text.compare(0, prefix.size(), prefix) == 0) return text.substr(prefix.size());
    return tokenizer->decode(ids, skip_special);
  }
};

namespace engine_internal {

// What the engine-internal data-parallel code (engine/data_parallel.h) may reach: Engine is a
// friend of this struct only.
struct EngineAccess {
  static Engine::Impl& impl(Engine& e) { return *e.impl_; }
  // Engine::create with expert-parallel options (`ep` may be null: EngineConfig decides) and, at
  // context_parallel_size > 1 or tensor_parallel_size > 1, the group (`cp`; engine/context_parallel.h).
  static StatusOr<std::unique_ptr<Engine>> create(const EngineConfig& config,
                                                  const engine::ExpertParallelOptions* ep,
                                                  const engine::ContextParallelOptions* cp = nullptr);
};

}  // namespace engine_internal
}  // namespace deepinfer
