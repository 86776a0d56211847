#include "dist/parallel_config.h"

namespace deepinfer::dist {

Status check_parallel_flags(const ParallelFlags& f, const std::string& device, int available_gpus) {
  if (f.tensor_parallel_size < 1)
    return InvalidArgument("--tensor-parallel-size must be >= 1, got " + std::to_string(f.tensor_parallel_size));
  if (f.data_parallel_size < 1)
    return InvalidArgument("--data-parallel-size must be >= 1, got " + std::to_string(f.data_parallel_size));
  if (f.tensor_parallel_size > 1)
    return Unimplemented("--tensor-parallel-size " + std::to_string(f.tensor_parallel_size) +
                         ": tensor parallelism is not implemented; DeepSeek-V4 runs attention data "
                         "parallel with sharded experts (--data-parallel-size N --enable-expert-parallel)");
  const int world = f.world_size();
  if (world > 1) {
    const std::string need = "--data-parallel-size " + std::to_string(world) + " needs " +
                             std::to_string(world) + " GPUs (one process per GPU)";
    if (device.rfind("cuda", 0) != 0)
      return FailedPrecondition(need + ", and --device " + device + " is not a GPU");
    if (available_gpus >= 0 && available_gpus < world)
      return FailedPrecondition(need + ", this machine has " + std::to_string(available_gpus));
    return Unimplemented(need + ": the multi-process launch (fork/exec per rank, NCCL group, "
                         "NCCL_NVLS_ENABLE=0) is not built yet; see docs/dist.md");
  }
  // World size 1 with --enable-expert-parallel runs: the engine loads the model with a one-rank
  // communicator and the identity placement (EngineConfig.enable_expert_parallel).
  return OkStatus();
}

}  // namespace deepinfer::dist
