#include "dist/parallel_config.h"

namespace deepinfer::dist {

namespace {

// A replicated group of n ranks (`flag` names it, e.g. "--context-parallel-size 2") on `device`.
Status check_group_device(const std::string& flag, int n, const std::string& device, int available_gpus) {
  if (device == "cpu" || device == "cpu-reference") return OkStatus();  // threads as ranks
  if (device == "cuda") {
    if (available_gpus >= 0 && available_gpus < n)
      return FailedPrecondition(flag + " needs " + std::to_string(n) +
                                " GPUs (one process per GPU), this machine has " +
                                std::to_string(available_gpus));
    return OkStatus();
  }
  if (device.rfind("cuda:", 0) == 0)
    return InvalidArgument(flag + " with --device " + device + ": rank r runs on cuda:r, so pass --device cuda");
  return InvalidArgument(flag + ": --device " + device +
                         " is neither a GPU (cuda) nor the CPU (cpu, cpu-reference)");
}

}  // namespace

Status check_parallel_flags(const ParallelFlags& f, const std::string& device, int available_gpus) {
  if (f.tensor_parallel_size < 1)
    return InvalidArgument("--tensor-parallel-size must be >= 1, got " + std::to_string(f.tensor_parallel_size));
  if (f.data_parallel_size < 1)
    return InvalidArgument("--data-parallel-size must be >= 1, got " + std::to_string(f.data_parallel_size));
  if (f.tensor_parallel_size > 1) return check_tensor_parallel_flags(f, device, available_gpus);
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

Status check_context_parallel_flags(const ParallelFlags& f, const std::string& device,
                                    int available_gpus) {
  const int cp = f.context_parallel_size;
  const std::string flag = "--context-parallel-size " + std::to_string(cp);
  if (cp < 1) return InvalidArgument("--context-parallel-size must be >= 1, got " + std::to_string(cp));
  if (cp == 1) return OkStatus();
  if (f.data_parallel_size > 1)
    return InvalidArgument(flag + " with --data-parallel-size " + std::to_string(f.data_parallel_size) +
                           ": context parallelism cannot be combined with data parallelism yet");
  if (f.enable_expert_parallel)
    return InvalidArgument(flag + " with --enable-expert-parallel: not supported (each "
                           "context-parallel rank holds all the experts)");
  if (f.tensor_parallel_size > 1)
    return InvalidArgument(flag + " with --tensor-parallel-size " + std::to_string(f.tensor_parallel_size) +
                           ": not supported");
  return check_group_device(flag, cp, device, available_gpus);
}

Status check_tensor_parallel_flags(const ParallelFlags& f, const std::string& device, int available_gpus) {
  const int tp = f.tensor_parallel_size;
  if (tp < 1) return InvalidArgument("--tensor-parallel-size must be >= 1, got " + std::to_string(tp));
  if (tp == 1) return OkStatus();
  const std::string flag = "--tensor-parallel-size " + std::to_string(tp);
  if (f.data_parallel_size > 1)
    return InvalidArgument(flag + " with --data-parallel-size " + std::to_string(f.data_parallel_size) +
                           ": tensor parallelism cannot be combined with data parallelism yet");
  if (f.enable_expert_parallel)
    return InvalidArgument(flag + " with --enable-expert-parallel: not supported (the tensor-parallel "
                           "ranks shard every expert's intermediate dim instead)");
  if (f.context_parallel_size > 1)
    return InvalidArgument(flag + " with --context-parallel-size " + std::to_string(f.context_parallel_size) +
                           ": not supported");
  return check_group_device(flag, tp, device, available_gpus);
}

std::string rank_device(const std::string& device, int rank) {
  if (device == "cuda") return "cuda:" + std::to_string(rank);
  return device;
}

}  // namespace deepinfer::dist
