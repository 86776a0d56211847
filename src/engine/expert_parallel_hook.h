// The engine's expert-parallel hook (EngineConfig.enable_expert_parallel): the DeepSeek-V4 model
// runs its routed experts through dist::ExpertParallelMoe over a communicator (docs/dist.md).
// Internal to the engine.
//
//   world size 1, CPU backends:  dist::InProcessGroup(1).communicator(0)
//   world size 1, CUDA backend:  a one-rank NCCL group in dist::NcclBackendCommunicator on the
//                                backend's stream (builds with NCCL, di_dist_nccl_ep; otherwise
//                                Unimplemented)
//   world size W > 1 (attention data parallel, engine/data_parallel.h): the communicator the
//                                caller hands in (threads as ranks over dist::InProcessGroup on
//                                the CPU), or the NCCL group named by the launcher's unique id,
//                                joined as rank r on the backend's GPU
//
// The placement is the identity (expert e on rank e / (E / W)) unless the caller passes one
// (EPLB). The result owns the communicator it made (none when it borrows the caller's) and the
// context; the model borrows the communicator, so the engine keeps this object alive (declared
// before the model in Engine::Impl) until the model is gone, and the communicator borrows the
// backend (declared before this object).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "common/status.h"
#include "dist/communicator.h"
#include "dist/eplb.h"
#include "dist/eplb_controller.h"
#include "dist/expert_parallel_moe.h"
#include "dist/inprocess_comm.h"
#include "io/config.h"
#include "model/model.h"

namespace deepinfer::engine {

struct ExpertParallelRuntime {
  std::unique_ptr<dist::InProcessGroup> group;  // world size 1 on host backends: `comm` borrows it
  std::unique_ptr<dist::Communicator> comm;     // the communicator made here (null if borrowed)
  dist::ExpertParallelContext context;          // context.comm: `comm`, or the caller's
  // Live EPLB (ExpertParallelOptions::eplb): its placement and recorder are the context's; the
  // engine calls after_step() after every forward or idle pass (docs/dist.md "Live EPLB").
  std::unique_ptr<dist::EplbController> eplb;
};

struct ExpertParallelModel {
  std::unique_ptr<ExpertParallelRuntime> runtime;  // must outlive `model`
  std::unique_ptr<model::Model> model;
};

// Which group the rank joins (world size > 1) and where its experts are. All defaults: world
// size 1, a one-rank communicator made here, the identity placement.
struct ExpertParallelOptions {
  int world_size = 1;
  int rank = 0;
  dist::Communicator* comm = nullptr;  // borrowed; must outlive the model (rank/size must match)
  std::string nccl_unique_id_hex;      // CUDA, comm == nullptr, world_size > 1: join this group
  // Where the experts live ([layers, slots] over world_size GPUs); nullopt = identity. EPLB
  // placements come from dist::rebalance_experts (the model validates it against itself).
  std::optional<dist::ExpertPlacement> placement;
  // EPLB statistics (borrowed, optional; ExpertParallelContext::load_recorder). Live EPLB's
  // EplbController::after_step belongs after every forward-or-idle pass of the lockstep
  // (DataParallelStepper::step, engine/data_parallel.h) — see `eplb` below.
  dist::ExpertLoadRecorder* load_recorder = nullptr;
  // Live EPLB (EngineConfig.enable_eplb): a controller over the rank's communicator gives the
  // initial placement (`placement` and `load_recorder` must then be unset) and applies new ones
  // through DeepseekV4Model::apply_expert_placement.
  std::optional<dist::EplbOptions> eplb;
};

// Loads the model in `dir` (whose config is `config`) expert-parallel on `backend` (borrowed;
// `device` is the EngineConfig.device it was made from: "cuda:N" names the GPU the NCCL group
// joins). InvalidArgument when the model is not DeepSeek-V4 (naming the architecture) or the
// options do not fit (rank, world size, a communicator of another size), Unimplemented for
// DeepSeek-V4.1 and for a device backend in a build without NCCL.
StatusOr<ExpertParallelModel> load_model_expert_parallel(const std::string& dir,
                                                         const io::ModelConfig& config,
                                                         const std::string& device,
                                                         backend::Backend* backend,
                                                         const ExpertParallelOptions& options);
// World size 1, identity placement.
StatusOr<ExpertParallelModel> load_model_expert_parallel(const std::string& dir,
                                                         const io::ModelConfig& config,
                                                         const std::string& device,
                                                         backend::Backend* backend);

// A fresh NCCL unique id in hex (for the launcher's children), or Unimplemented in a build
// without NCCL. Call once per group, in the launching process.
StatusOr<std::string> new_nccl_group_id_hex();
// GPUs visible to this process (cudaGetDeviceCount, no context made); -1 when unknown (a build
// without NCCL: the caller counts another way).
int visible_gpu_count();

}  // namespace deepinfer::engine
