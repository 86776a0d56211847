// The engine's expert-parallel hook (EngineConfig.enable_expert_parallel) at world size 1: the
// DeepSeek-V4 model runs its routed experts through dist::ExpertParallelMoe over a one-rank
// communicator with the identity placement (docs/dist.md). Internal to the engine.
//
//   CPU backends (host memory):  dist::InProcessGroup(1).communicator(0)
//   CUDA backend:                a one-rank NCCL group in dist::NcclBackendCommunicator on the
//                                backend's stream (builds with NCCL, di_dist_nccl_ep; otherwise
//                                Unimplemented)
//
// The result owns the communicator and the context; the model borrows the communicator, so the
// engine keeps this object alive (declared before the model in Engine::Impl) until the model is
// gone, and the communicator borrows the backend (declared before this object).
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "common/status.h"
#include "dist/communicator.h"
#include "dist/expert_parallel_moe.h"
#include "dist/inprocess_comm.h"
#include "io/config.h"
#include "model/model.h"

namespace deepinfer::engine {

struct ExpertParallelRuntime {
  std::unique_ptr<dist::InProcessGroup> group;  // host backends: the one-rank group `comm` borrows
  std::unique_ptr<dist::Communicator> comm;     // world size 1
  dist::ExpertParallelContext context;          // identity placement over `comm`
};

struct ExpertParallelModel {
  std::unique_ptr<ExpertParallelRuntime> runtime;  // must outlive `model`
  std::unique_ptr<model::Model> model;
};

// Loads the model in `dir` (whose config is `config`) expert-parallel at world size 1 on
// `backend` (borrowed; `device` is the EngineConfig.device it was made from: "cuda:N" names the
// GPU the NCCL group joins). InvalidArgument when the model is not DeepSeek-V4 (naming the
// architecture), Unimplemented for DeepSeek-V4.1 and for a device backend in a build without NCCL.
StatusOr<ExpertParallelModel> load_model_expert_parallel(const std::string& dir,
                                                         const io::ModelConfig& config,
                                                         const std::string& device,
                                                         backend::Backend* backend);

}  // namespace deepinfer::engine
