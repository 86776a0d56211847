// vLLM's parallelism flags (`--tensor-parallel-size`, `--data-parallel-size`,
// `--enable-expert-parallel`) and what this build can do with them. Pure bookkeeping, so the
// launcher's answers are unit-tested on the CPU.
//
// DeepSeek-V4 is served attention-data-parallel with the experts sharded over the same ranks
// (world size = data_parallel_size), or tensor parallel (--tensor-parallel-size N: every rank
// holds a 1/N shard of the big matrices and runs every token; docs/dist.md "Tensor parallelism"). `deepinfer generate`
// launches one process per GPU itself (NCCL group; dist/launcher.h); on the CPU the ranks run as
// threads of one process over the in-process communicator (a test mode, not a transport).
#pragma once

#include <string>

#include "common/status.h"

namespace deepinfer::dist {

struct ParallelFlags {
  int tensor_parallel_size = 1;
  int data_parallel_size = 1;
  bool enable_expert_parallel = false;
  int world_size() const { return tensor_parallel_size * data_parallel_size; }
  int context_parallel_size = 1;  // --context-parallel-size (checked by check_context_parallel_flags)
};

// OK when the flags can run on `device`:
//  - one rank: the plain path, or with --enable-expert-parallel the expert-parallel MoE path at
//    world size 1 (the engine checks that the model is DeepSeek-V4);
//  - data parallel size N > 1 (with or without --enable-expert-parallel): on `cuda` with at least
//    N GPUs (`available_gpus`: devices this machine has, -1 when unknown), one process per GPU,
//    rank r on cuda:r; on `cpu` / `cpu-reference`, N threads in one process (test mode).
//  - tensor parallel size N > 1: check_tensor_parallel_flags.
// Otherwise InvalidArgument (sizes < 1, --device cuda:N with N > 1 ranks) or FailedPrecondition
// (too few GPUs), naming what is wrong.
Status check_parallel_flags(const ParallelFlags& flags, const std::string& device, int available_gpus);

// --context-parallel-size N > 1 (docs/dist.md "Context parallelism"): OK on `cuda` with at least
// N GPUs (one process per GPU, rank r on cuda:r; `available_gpus` -1 = unknown) or on `cpu` /
// `cpu-reference` (N threads, test mode). InvalidArgument when combined with
// --data-parallel-size > 1, --enable-expert-parallel or --tensor-parallel-size > 1, for sizes < 1
// and for --device cuda:K; FailedPrecondition for too few GPUs. N = 1: OK (nothing to check).
Status check_context_parallel_flags(const ParallelFlags& flags, const std::string& device,
                                    int available_gpus);

// --tensor-parallel-size N > 1 (docs/dist.md "Tensor parallelism"): OK on `cuda` with at least
// N GPUs (one process per GPU, rank r on cuda:r; `available_gpus` -1 = unknown) or on `cpu` /
// `cpu-reference` (N threads, test mode). InvalidArgument when combined with
// --data-parallel-size > 1, --enable-expert-parallel or --context-parallel-size > 1, for sizes < 1
// and for --device cuda:K; FailedPrecondition for too few GPUs. N = 1: OK (nothing to check).
Status check_tensor_parallel_flags(const ParallelFlags& f, const std::string& device, int available_gpus);

// The device of rank `rank` of a data-parallel run on `device` ("cuda" -> "cuda:<rank>"; the CPU
// devices are shared by the threads).
std::string rank_device(const std::string& device, int rank);

}  // namespace deepinfer::dist
