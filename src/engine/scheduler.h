// Scheduler: continuous batching as bookkeeping (STYLE.md 3-4). Each step it decides which requests
// run and how many of their tokens, within a token budget and a sequence cap, admitting a request
// only when the KV cache can hold its next chunk, and preempting (by recompute) when it cannot.
// It never touches a tensor; there are no prefill/decode phases — a request simply has
// num_tokens() - num_computed_tokens tokens left to compute (vLLM v1).
//
// One step:
//   SchedulerOutput out = scheduler.schedule();
//   ... runner executes `out`, sampler draws one token per chunk with `samples` ...
//   auto finished = scheduler.update_from_output(out, sampled_token_ids);
//
// Async scheduling (vLLM v1): schedule() may run again while the previous step is in flight.
// Scheduled tokens count as computed when scheduled, and each sampling chunk leaves an output
// placeholder, so the next schedule() gives a decoding request its next position with
// kPlaceholderToken as the token. After the previous step's update_from_output,
// fill_placeholders(&next) puts the real tokens in and drops requests that finished meanwhile:
//   SchedulerOutput n0 = schedule();            launch(n0)
//   SchedulerOutput n1 = schedule();            (while n0 runs)
//   update_from_output(n0, tokens0);  fill_placeholders(&n1);  launch(n1)  ...
//
// Policy (see docs/engine.md):
//  1. Running requests, in running order: each gets min(remaining, budget left, max_model_len -
//     computed) tokens. If the cache has no room, the lowest-priority running request (FCFS: the
//     last admitted; priority policy: largest (priority, arrival)) is preempted — its blocks freed,
//     num_computed_tokens reset to 0, requeued at the front of the waiting queue — and the
//     allocation retried; if the victim is the request itself, it waits.
//  2. Only if nothing was preempted this step: waiting requests in queue order (FCFS; or by
//     (priority, arrival)), while budget and max_num_seqs allow and the cache can hold their first
//     chunk. The first one that does not fit stops admission (no overtaking: FCFS stays FCFS).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/request.h"
#include "engine/scheduler_output.h"
#include "kv/coordinator.h"

namespace deepinfer::engine {

enum class SchedulingPolicy { kFcfs, kPriority };

struct SchedulerConfig {
  int max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;  // token budget of one step
  int64_t max_model_len = 4096;
  bool enable_chunked_prefill = true;     // off: a prompt is scheduled whole or not at all
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  uint64_t seed = 0;                      // engine seed; requests without a seed derive theirs from it
  int64_t vocab_size = 0;                 // > 0: token ids in params/prompts are checked against it

  Status validate() const;
};

class Scheduler {
 public:
  // `kv` must outlive the scheduler.
  Scheduler(const SchedulerConfig& config, kv::KvCacheCoordinator* kv);

  // Checks the request (id unique and non-empty, params valid, prompt non-empty, within
  // max_model_len and the vocabulary, able to fit the cache) and queues it. A bad request is not
  // queued; the Status says which request and what was wrong. Other requests are unaffected.
  Status add_request(std::unique_ptr<Request> request);

  SchedulerOutput schedule();

  // Applies a completed step. `sampled_token_ids[i]` is the token drawn for `output.chunks[i]`
  // (ignored for chunks that do not sample). Replaces the request's placeholder by the token,
  // checks token stops (EOS, stop ids, max_tokens, max_model_len), frees out-of-window blocks, and
  // returns the requests that finished (ownership passes to the caller). Chunks of requests
  // finished or aborted meanwhile are skipped; a request preempted meanwhile keeps its token.
  std::vector<std::unique_ptr<Request>> update_from_output(const SchedulerOutput& output,
                                                           std::span<const int32_t> sampled_token_ids);

  // Async scheduling: `next` was scheduled while the step before it was in flight; that step's
  // update_from_output has now run. Drops the chunks of requests that finished or were aborted
  // meanwhile (their slots are already free) and replaces every kPlaceholderToken by the sampled
  // token. With synchronous scheduling there is nothing to do.
  void fill_placeholders(SchedulerOutput* next) const;

  // Ends a request from outside: abort (client gone) or a stop string found by the detokenizer
  // (reason kStop). Returns the request, or nullptr if no such unfinished request exists.
  std::unique_ptr<Request> finish_request(const std::string& request_id, sample::FinishReason reason);
  std::unique_ptr<Request> abort_request(const std::string& request_id) {
    return finish_request(request_id, sample::FinishReason::kAbort);
  }

  // A waiting request that is not ready (e.g. its structured-output grammar is still compiling) is
  // not admitted; requests behind it are. Returns false for an unknown id.
  bool set_ready(const std::string& request_id, bool ready);

  const Request* get_request(const std::string& request_id) const;
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  bool has_unfinished_requests() const { return !waiting_.empty() || !running_.empty(); }
  // Request ids in queue order.
  std::vector<std::string> waiting_ids() const;
  std::vector<std::string> running_ids() const;
  uint64_t num_preemptions() const { return num_preemptions_; }
  const SchedulerConfig& config() const { return config_; }

  // For tests: every running request holds KV tables covering exactly its computed tokens (which
  // include the scheduled ones until their step is applied), waiting ones hold none, no table belongs to an
  // unknown request, the cache passes its integrity check, and the caps hold.
  Status check_invariants() const;

 private:
  Request* pick_victim();
  void preempt(Request* victim);
  std::deque<Request*>::iterator next_waiting();
  std::unique_ptr<Request> remove(Request* request);  // from queues and the id map; frees its blocks
  ScheduledChunk make_chunk(const Request& request, int64_t num_tokens, bool first) const;
  // Its in-flight token will end it (max_tokens or max_model_len): nothing more to schedule.
  bool will_finish_by_length(const Request& request) const;

  SchedulerConfig config_;
  kv::KvCacheCoordinator* kv_;
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;  // unfinished requests
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;
  std::vector<std::string> finished_since_last_step_;
  uint64_t next_arrival_ = 0;
  uint64_t next_step_ = 0;
  uint64_t num_preemptions_ = 0;
};

}  // namespace deepinfer::engine
