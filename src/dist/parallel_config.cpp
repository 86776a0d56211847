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
  if (world == 1) return OkStatus();  // the engine hook takes --enable-expert-parallel at one rank
  const std::string dp = "--data-parallel-size " + std::to_string(world);
  if (device == "cpu" || device == "cpu-reference") return OkStatus();  // threads as ranks
  if (device == "cuda") {
    if (available_gpus >= 0 && available_gpus < world) {
      return FailedPrecondition(dp + " needs " + std::to_string(world) +
                                " GPUs (one process per GPU), this machine has " +
                                std::to_string(available_gpus));
    }
    return OkStatus();
  }
  if (device.rfind("cuda:", 0) == 0) {
    return InvalidArgument(dp + " with --device " + device +
                           ": rank r runs on cuda:r, so pass --device cuda");
  }
  return InvalidArgument(dp + ": --device " + device +
                         " is neither a GPU (cuda) nor the CPU (cpu, cpu-reference)");
}

std::string rank_device(const std::string& device, int rank) {
  if (device == "cuda") return "cuda:" + std::to_string(rank);
  return device;
}

}  // namespace deepinfer::dist
