// What the engine returns for a request, shaped like vLLM's RequestOutput / CompletionOutput.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;                                  // of the sampled token
  int rank = 0;                                          // 1 = the most likely token
  std::vector<std::pair<int32_t, float>> top_logprobs;   // (token, logprob), most likely first
};

struct CompletionOutput {
  int index = 0;                      // which of the request's n sequences
  std::string text;                   // detokenized output (truncated at a stop string)
  std::vector<int32_t> token_ids;     // generated tokens
  std::string finish_reason;          // "stop", "length", "abort", "error"; "" while running
  std::optional<std::string> stop_reason;  // the stop string, or the stop token id as text
  std::vector<TokenLogprobs> logprobs;     // when SamplingParams::logprobs is set
};

struct RequestMetrics {
  double arrival_time = 0;        // seconds (steady clock) when the request was added
  double first_token_time = 0;    // when its first output token was sampled (0 = none yet)
  double finished_time = 0;
  int num_preemptions = 0;
  double ttft() const { return first_token_time > 0 ? first_token_time - arrival_time : 0; }
};

struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  std::vector<CompletionOutput> outputs;  // one per sequence (n)
  bool finished = false;
  std::string error;                      // why the request failed (finish_reason "error")
  RequestMetrics metrics;
};

}  // namespace deepinfer
