// vLLM's parallelism flags (`--tensor-parallel-size`, `--data-parallel-size`,
// `--enable-expert-parallel`) and what this build can do with them. Pure bookkeeping, so the
// launcher's answers are unit-tested on the CPU.
//
// DeepSeek-V4 is served attention-data-parallel with the experts sharded over the same ranks
// (world size = data_parallel_size; tensor parallelism is not implemented). One process per GPU,
// launched by deepinfer itself with NCCL — that launch is not built yet, so a world size above 1
// is an error naming what is missing; it is never ignored.
#pragma once

#include <string>

#include "common/status.h"

namespace deepinfer::dist {

struct ParallelFlags {
  int tensor_parallel_size = 1;
  int data_parallel_size = 1;
  bool enable_expert_parallel = false;
  int world_size() const { return tensor_parallel_size * data_parallel_size; }
};

// OK when the flags describe one rank: the plain path, or with --enable-expert-parallel the
// expert-parallel MoE path at world size 1 (EngineConfig.enable_expert_parallel; the engine checks
// that the model is DeepSeek-V4). Otherwise InvalidArgument (sizes < 1) or Unimplemented /
// FailedPrecondition naming what is missing: tensor parallelism, GPUs (`available_gpus`: devices
// this machine has, -1 when unknown; `device` the --device value), or the multi-process launch.
Status check_parallel_flags(const ParallelFlags& flags, const std::string& device, int available_gpus);

}  // namespace deepinfer::dist
