// One process per rank, launched by deepinfer itself (`deepinfer generate --data-parallel-size N`
// on CUDA): the parent fork/execs its own binary once per rank with hidden flags (rank, world
// size, the NCCL unique id in hex, device cuda:r), waits for all of them, and when one fails
// kills the others, so a failed rank never leaves its peers hanging in a collective.
//
// The children get the parent's environment plus `env` overrides (the launcher sets
// NCCL_NVLS_ENABLE=0: NVLink multicast stays off). Variables are passed through, never read
// here (src/common/env.h reads the environment).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace deepinfer::dist {

struct RankLaunch {
  std::vector<std::vector<std::string>> argv;               // [world_size]: argv[r][0] = program path
  std::vector<std::pair<std::string, std::string>> env;     // set (or replaced) in every child
  double kill_grace_s = 5.0;  // after SIGTERM to the survivors of a failure, SIGKILL after this
};

// Starts every rank, waits for all. OK when every child exits 0. Otherwise the first failure seen
// (exit code != 0, killed by a signal, exec failed: exit code 127) is returned as an Internal
// error naming the rank, after the other children were terminated (SIGTERM, then SIGKILL after
// kill_grace_s) and reaped. InvalidArgument for an empty argv; Internal when fork fails (the
// children already started are killed).
Status run_rank_processes(const RankLaunch& launch);

// This program's path (/proc/self/exe), for re-executing it as a rank.
StatusOr<std::string> self_executable_path();

}  // namespace deepinfer::dist
