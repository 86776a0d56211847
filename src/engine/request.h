// Request: one sequence's lifecycle data, owned by the Scheduler. Plain bookkeeping, no tensors.
//
//   WAITING ──admit──► RUNNING ──stop/length──► FINISHED_STOPPED / FINISHED_LENGTH
//      ▲                  │ no room (preemption by recompute: blocks freed, num_computed_tokens = 0)
//      └── PREEMPTED ◄────┘        (requeued at the front; its prompt + outputs are recomputed)
//   any non-finished state ──abort──► FINISHED_ABORTED;  invalid at add ──► FINISHED_ERROR
//
// Tokens: [prompt_token_ids | output_token_ids]; num_tokens() = both. num_computed_tokens counts the
// leading tokens whose state is in the KV cache. A request with n > 1 is forked by the engine into
// n Requests with sequence_index 0..n-1 that share the seed (each has its own random stream).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "deepinfer/outputs.h"
#include "deepinfer/sampling_params.h"
#include "kv/kv_spec.h"
#include "sample/stop_checker.h"

namespace deepinfer::engine {

// Stands for a token sampled by a step still in flight (see Request::num_output_placeholders).
inline constexpr int32_t kPlaceholderToken = -1;

enum class RequestStatus {
  kWaiting,
  kRunning,
  kPreempted,  // back in the waiting queue after preemption (same as kWaiting for scheduling)
  kFinishedStopped,
  kFinishedLength,
  kFinishedAborted,
  kFinishedError,
};
const char* request_status_name(RequestStatus status);
bool is_finished(RequestStatus status);
sample::FinishReason finish_reason_of(RequestStatus status);  // kNone while not finished

struct Request {
  Request(std::string request_id, std::vector<int32_t> prompt_token_ids, SamplingParams params,
          int32_t eos_token_id = -1, int priority = 0)
      : request_id(std::move(request_id)),
        prompt_token_ids(std::move(prompt_token_ids)),
        params(std::move(params)),
        eos_token_id(eos_token_id),
        priority(priority) {}

  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> output_token_ids;
  SamplingParams params;
  int32_t eos_token_id = -1;      // < 0: none (the model's EOS from generation_config)
  int priority = 0;               // lower is served first (vLLM); only with the priority policy
  uint32_t sequence_index = 0;    // which of the n sequences of the user's request

  // Set by the scheduler on add_request.
  kv::RequestKey key = 0;         // handle in the KV cache
  uint64_t arrival_index = 0;     // FCFS order
  uint64_t seed = 0;              // params.seed, or derived from the engine seed and arrival_index

  RequestStatus status = RequestStatus::kWaiting;
  // Leading tokens whose state is in the cache or is being computed by a step in flight: the
  // scheduler advances it when it schedules a chunk (vLLM v1), not when the step returns.
  int64_t num_computed_tokens = 0;
  // Tokens being sampled by steps in flight, not yet appended to output_token_ids (async
  // scheduling: step N+1 is scheduled before step N's tokens are known). A chunk that reaches
  // such a position carries kPlaceholderToken there until the engine fills it in.
  int64_t num_output_placeholders = 0;
  int num_preemptions = 0;
  bool ready = true;  // false: not admitted until the engine says so (grammar compiling)
  std::optional<int32_t> stop_token;  // EOS / stop token id that finished it
  std::string stop_string;            // stop string that finished it (set by the engine)
  std::string error;                  // why it failed (kFinishedError)

  int64_t num_prompt_tokens() const { return static_cast<int64_t>(prompt_token_ids.size()); }
  int64_t num_output_tokens() const { return static_cast<int64_t>(output_token_ids.size()); }
  int64_t num_tokens() const { return num_prompt_tokens() + num_output_tokens(); }
  int64_t num_tokens_with_placeholders() const { return num_tokens() + num_output_placeholders; }
  int32_t token_at(int64_t position) const;  // over prompt then outputs
  bool finished() const { return is_finished(status); }
};

// The n sequences of one user request (params.n): n Requests that share prompt and params, with
// sequence_index 0..n-1 and ids "<id>" for n == 1, else "<id>#<k>" (the engine groups them back into
// one RequestOutput). With a seed they share it and differ by their random stream.
std::vector<std::unique_ptr<Request>> make_sequence_requests(const std::string& request_id,
                                                             const std::vector<int32_t>& prompt_token_ids,
                                                             const SamplingParams& params, int32_t eos_token_id = -1,
                                                             int priority = 0);

// What a batch front end (LLM::generate, a data-parallel rank) reports in place of a prompt that
// add_request refused: finished, one output with finish_reason "error", the reason in `error`.
RequestOutput refused_request_output(const std::string& request_id, const Status& status);

}  // namespace deepinfer::engine
