#include "engine/request.h"

#include <algorithm>

#include "common/check.h"

namespace deepinfer::engine {

const char* request_status_name(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting: return "WAITING";
    case RequestStatus::kRunning: return "RUNNING";
    case RequestStatus::kPreempted: return "PREEMPTED";
    case RequestStatus::kFinishedStopped: return "FINISHED_STOPPED";
    case RequestStatus::kFinishedLength: return "FINISHED_LENGTH";
    case RequestStatus::kFinishedAborted: return "FINISHED_ABORTED";
    case RequestStatus::kFinishedError: return "FINISHED_ERROR";
  }
  return "?";
}

bool is_finished(RequestStatus status) {
  return status == RequestStatus::kFinishedStopped || status == RequestStatus::kFinishedLength ||
         status == RequestStatus::kFinishedAborted || status == RequestStatus::kFinishedError;
}

sample::FinishReason finish_reason_of(RequestStatus status) {
  switch (status) {
    case RequestStatus::kFinishedStopped: return sample::FinishReason::kStop;
    case RequestStatus::kFinishedLength: return sample::FinishReason::kLength;
    case RequestStatus::kFinishedAborted: return sample::FinishReason::kAbort;
    case RequestStatus::kFinishedError: return sample::FinishReason::kError;
    default: return sample::FinishReason::kNone;
  }
}

int32_t Request::token_at(int64_t position) const {
  DI_CHECK(position >= 0 && position < num_tokens()) << "position " << position << " of " << num_tokens();
  return position < num_prompt_tokens() ? prompt_token_ids[static_cast<size_t>(position)]
                                        : output_token_ids[static_cast<size_t>(position - num_prompt_tokens())];
}

std::vector<std::unique_ptr<Request>> make_sequence_requests(const std::string& request_id,
                                                             const std::vector<int32_t>& prompt_token_ids,
                                                             const SamplingParams& params, int32_t eos_token_id,
                                                             int priority) {
  std::vector<std::unique_ptr<Request>> out;
  const int n = std::max(1, params.n);
  for (int k = 0; k < n; ++k) {
    std::string id = request_id;
    if (n > 1) {
      id += '#';
      id += std::to_string(k);
    }
    auto r = std::make_unique<Request>(std::move(id), prompt_token_ids, params, eos_token_id, priority);
    r->sequence_index = static_cast<uint32_t>(k);
    out.push_back(std::move(r));
  }
  return out;
}

RequestOutput refused_request_output(const std::string& request_id, const Status& status) {
  RequestOutput r;
  r.request_id = request_id;
  r.finished = true;
  r.error = status.to_string();
  CompletionOutput c;
  c.finish_reason = "error";
  r.outputs.push_back(std::move(c));
  return r;
}

}  // namespace deepinfer::engine
