// How many blocks of each kind a memory budget buys.
//
// The budget is `--kv-cache-memory` bytes on the CPU, or gpu_memory_utilization x the device memory
// left after weights and workspace on a GPU (measured by the engine, ARCHITECTURE.md §3.4).
//
// Two kinds are bounded per running sequence, so they are sized for max_num_seqs sequences first:
//   tail   : one block per sequence                      -> max_num_seqs blocks
//   window : with a sliding window, a sequence holds at most ceil((W-1+retention)/B)+1 blocks between
//            steps, plus its chunk's rows during a step; so max_num_seqs*(ceil((W-1+ret)/B)+2)
//            + ceil(max_num_batched_tokens/B) blocks always suffice — the window never forces a
//            preemption.
// What is left goes to the kinds that grow with the context (CSA, HCA; window rows too under full
// attention), split in proportion to what one max_model_len sequence needs of each, so the pools
// run out together. A budget that cannot hold the fixed part plus one max_model_len sequence is an
// error that says what is needed.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "kv/coordinator.h"
#include "kv/kv_spec.h"

namespace deepinfer::kv {

struct KvBudget {
  int64_t budget_bytes = 0;
  int64_t max_model_len = 0;
  int max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
};

struct KvPoolPlan {
  KvPoolSizes sizes;
  std::array<int64_t, kNumStateKinds> bytes_per_block{};
  int64_t total_bytes = 0;      // sum over kinds of blocks x bytes per block (<= budget)
  std::string summary() const;  // "window 40 x 16384 B, csa 12 x 40960 B, ... = N B"
};

StatusOr<KvPoolPlan> plan_kv_pools(const KvModelDims& dims, const KvCacheConfig& config, const KvBudget& budget);

}  // namespace deepinfer::kv
