// SchedulerOutput: what one step computes. Plain data handed from the Scheduler to the ModelRunner
// (which builds flattened device inputs from it) and back to Scheduler::update_from_output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/coordinator.h"

namespace deepinfer::engine {

// One request's share of the step: tokens [start_position, start_position + num_tokens).
struct ScheduledChunk {
  std::string request_id;
  kv::RequestKey key = 0;
  int64_t start_position = 0;       // = the request's num_computed_tokens before the step
  int64_t num_tokens = 0;           // > 0
  std::vector<int32_t> token_ids;   // [num_tokens] the tokens at those positions
  // The chunk ends at the request's last known token, so a token is sampled from its last row.
  bool samples = false;
  // First chunk since admission (new, or resumed after preemption): per-request state starts empty.
  bool is_first_chunk = false;
  // Sampling inputs for the rows that sample.
  uint64_t seed = 0;
  uint32_t sequence_index = 0;
  int64_t num_output_tokens = 0;    // output position of the token to sample
  kv::KvBlockTables block_tables;   // covering start_position + num_tokens tokens
};

struct SchedulerOutput {
  uint64_t step = 0;
  // Running requests first (in running order), then requests admitted this step (in admission order).
  std::vector<ScheduledChunk> chunks;
  int64_t total_num_scheduled_tokens = 0;
  std::vector<std::string> preempted_request_ids;  // in preemption order; their state is gone
  // Requests finished or aborted since the previous step: the runner drops their cached inputs.
  std::vector<std::string> finished_request_ids;

  bool empty() const { return chunks.empty(); }
};

}  // namespace deepinfer::engine
