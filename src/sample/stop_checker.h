// When does a sequence stop, and what text does the user see.
//
// Two independent parts, so the sampler does not depend on a tokenizer:
//  * check_token_stop(): decisions made from token ids alone — stop_token_ids, EOS (unless
//    ignore_eos), max_tokens, max_model_len; min_tokens delays the token-based stops.
//  * StopStringMatcher: fed the output text incrementally (whatever the detokenizer produced for the
//    new tokens), it finds stop strings — also ones that span token boundaries — truncates the text
//    (the stop string is excluded unless include_stop_str_in_output) and, for streaming, holds back
//    exactly the trailing text that could still become the start of a stop string.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/sampling_params.h"

namespace deepinfer::sample {

enum class FinishReason {
  kNone = 0,
  kStop,    // EOS, a stop token id or a stop string ("stop" in OpenAI/vLLM outputs)
  kLength,  // max_tokens or max_model_len ("length")
  kAbort,   // aborted by the client ("abort")
  kError,   // the request failed (invalid params, prompt too long, ...) ("error")
};
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error", ""

struct TokenStopResult {
  FinishReason reason = FinishReason::kNone;
  std::optional<int32_t> stop_token;  // the EOS / stop token id that ended the sequence
  bool finished() const { return reason != FinishReason::kNone; }
};

// Call after appending the newest token to `output_token_ids`. `num_tokens` = prompt + output.
// Order: stop tokens first (EOS unless ignore_eos, then stop_token_ids) — skipped while
// output < min_tokens — then length (max_tokens, then num_tokens >= max_model_len). So a stop token
// drawn as the last allowed token reports "stop", as OpenAI does.
TokenStopResult check_token_stop(const SamplingParams& params, std::span<const int32_t> output_token_ids,
                                 int64_t num_tokens, int32_t eos_token_id, int64_t max_model_len);

class StopStringMatcher {
 public:
  explicit StopStringMatcher(const SamplingParams& params);

  struct Update {
    std::string delta;        // text that may be shown now (streaming)
    bool stopped = false;     // a stop string was found; `delta` ends the output
    std::string stop_string;  // which one (when stopped)
  };

  // Appends newly detokenized text. After a stop, further calls return empty updates. With
  // `stops_allowed` false (fewer than min_tokens outputs so far) stop strings completing inside this
  // text are ignored, as in vLLM's stop checker; they are never matched later either.
  Update append(std::string_view new_text, bool stops_allowed = true);
  // The sequence ended for another reason (EOS, length): release the held-back text.
  std::string flush();

  // The output text so far, truncated at a stop string, including any held-back tail.
  const std::string& text() const { return text_; }
  // Bytes of text() already handed out through append()/flush().
  size_t emitted() const { return emitted_; }
  bool stopped() const { return stopped_; }

 private:
  size_t held_back_length() const;

  std::vector<std::string> stops_;
  bool include_stop_ = false;
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

// Adapter for detokenizers that can only decode a whole id sequence: call with the full output ids
// after each step; it decodes them and feeds the new suffix to the matcher. Text that ends in an
// incomplete UTF-8 sequence (or U+FFFD from one) is not fed until it completes. Stop strings count
// only once params.min_tokens outputs exist.
class DetokenizingStopChecker {
 public:
  using DetokenizeFn = std::function<std::string(std::span<const int32_t>)>;
  DetokenizingStopChecker(const SamplingParams& params, DetokenizeFn detokenize);
  StopStringMatcher::Update update(std::span<const int32_t> output_token_ids);
  StopStringMatcher& matcher() { return matcher_; }

 private:
  StopStringMatcher matcher_;
  DetokenizeFn detokenize_;
  int min_tokens_ = 0;
  size_t fed_ = 0;  // bytes of the decoded text already given to the matcher
};

}  // namespace deepinfer::sample
