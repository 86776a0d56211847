// Attention data parallelism in the engine (docs/dist.md "Attention data parallelism"): W engines,
// one per rank, each with its own requests, batch and cache. Engine-internal API.
//
// With expert parallelism (EngineConfig.enable_expert_parallel) the ranks shard the routed
// experts and every MoE layer is a collective over the group's communicator, so the ranks must
// run the same number of forward passes. The lockstep protocol (DataParallelStepper::step):
//
//   1. every rank all-gathers one integer, "I have unfinished requests" (all_gather_count on the
//      MoE communicator, so it is ordered with the MoE collectives);
//   2. no rank has work: every rank returns done, together;
//   3. a rank with work runs one Engine::step() (synchronous scheduling: at most one forward);
//      a rank that ran no forward (no work, or its step scheduled nothing) runs the model's
//      expert_parallel_idle_step() instead: every MoE layer's collectives with zero tokens.
//
// So each iteration is exactly one forward-or-idle pass on every rank. Async scheduling is off in
// this mode (Engine::create turns it off and logs it): the next step's forward would run on the
// worker thread while the engine thread exchanges the flags. An error on one rank leaves the
// group unusable (its peers wait in the next collective): the caller tears the group down
// (InProcessGroup::abort for threads; the launcher kills the other processes).
//
// Without expert parallelism the ranks are independent full replicas (vLLM's data parallel
// without EP for a dense model): no communicator, no lockstep; step() is Engine::step().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "deepinfer/engine.h"
#include "engine/expert_parallel_hook.h"

namespace deepinfer::engine {

// Rank config.data_parallel_rank of config.data_parallel_size. With enable_expert_parallel and a
// world size above 1, `ep` says how the rank reaches the others: ep.comm (borrowed, rank and size
// must match the config; threads as ranks over dist::InProcessGroup on the CPU), or
// ep.nccl_unique_id_hex (CUDA: joins that NCCL group on config.device). ep.placement: where the
// experts live (nullopt = identity). ep.world_size/rank are taken from the config.
StatusOr<std::unique_ptr<Engine>> create_engine_rank(const EngineConfig& config,
                                                     const ExpertParallelOptions& ep);

class DataParallelStepper {
 public:
  explicit DataParallelStepper(Engine* engine);  // borrowed
  // True when this engine is one rank of an expert-parallel group (world size > 1).
  bool lockstep() const { return comm_ != nullptr; }

  // One step of the group (see the protocol above). Sets *done (and steps nothing) when no rank
  // has work; in lockstep every rank gets done on the same call. Outputs: this rank's requests
  // that finished in the step.
  StatusOr<std::vector<RequestOutput>> step(bool* done);

 private:
  Engine* engine_;
  dist::Communicator* comm_ = nullptr;
};

// LLM::generate on one rank: adds the prompts (request ids "dp<rank>-<i>"), steps the group until
// no rank has work and returns the outputs in prompt order. A prompt the engine refuses gets an
// output with finish_reason "error" and the message (the others run). Every rank of a lockstep
// group must call it (a rank with no prompts too: it runs idle steps).
using RankProgress = std::function<void(size_t done, size_t total)>;
StatusOr<std::vector<RequestOutput>> generate_on_rank(Engine& engine,
                                                      const std::vector<std::vector<int32_t>>& prompts,
                                                      const std::vector<SamplingParams>& params,
                                                      const RankProgress& progress = {});

}  // namespace deepinfer::engine
