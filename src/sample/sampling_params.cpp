#include "deepinfer/sampling_params.h"

#include <cmath>
#include <sstream>

namespace deepinfer {
namespace {

template <typename T>
Status field_error(const char* field, const char* range, T got) {
  std::ostringstream os;
  os << "SamplingParams." << field << " must be " << range << ", got " << got;
  return InvalidArgument(os.str());
}

bool finite(float v) { return std::isfinite(v); }

}  // namespace

Status SamplingParams::validate() const {
  if (n < 1) return field_error("n", "at least 1", n);
  if (!finite(repetition_penalty) || repetition_penalty <= 0.0f)
    return field_error("repetition_penalty", "a finite number > 0 (1 = off)", repetition_penalty);
  if (!finite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f)
    return field_error("presence_penalty", "in [-2, 2]", presence_penalty);
  if (!finite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f)
    return field_error("frequency_penalty", "in [-2, 2]", frequency_penalty);
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0) return field_error("logit_bias key (token id)", "a token id >= 0", token);
    if (!finite(bias) || bias < -100.0f || bias > 100.0f)
      return field_error("logit_bias value", "in [-100, 100]", bias);
  }
  if (!finite(temperature) || temperature < 0.0f)
    return field_error("temperature", "a finite number >= 0 (0 = greedy)", temperature);
  if (top_k < -1) return field_error("top_k", "0 or -1 (off) or at least 1", top_k);
  if (!finite(top_p) || top_p <= 0.0f || top_p > 1.0f) return field_error("top_p", "in (0, 1]", top_p);
  if (!finite(min_p) || min_p < 0.0f || min_p > 1.0f) return field_error("min_p", "in [0, 1]", min_p);
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) {
      return InvalidArgument("SamplingParams.stop[" + std::to_string(i) +
                             "] is an empty string; stop strings must be non-empty");
    }
  }
  if (!detokenize && !stop.empty()) {
    return InvalidArgument("SamplingParams.stop needs detokenize = true (stop strings are matched "
                           "on the output text)");
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0) return field_error("stop_token_ids entry", "a token id >= 0", id);
  }
  if (max_tokens.has_value() && *max_tokens < 1)
    return field_error("max_tokens", "at least 1 (or unset)", *max_tokens);
  if (min_tokens < 0) return field_error("min_tokens", "at least 0", min_tokens);
  if (max_tokens.has_value() && min_tokens > *max_tokens) {
    std::ostringstream os;
    os << "SamplingParams.min_tokens must be <= max_tokens (" << *max_tokens << "), got " << min_tokens;
    return InvalidArgument(os.str());
  }
  if (logprobs.has_value() && (*logprobs < 0 || *logprobs > kMaxLogprobs)) {
    return field_error("logprobs", "in [0, 20] (or unset)", *logprobs);
  }
  return OkStatus();
}

Status SamplingParams::validate_for_vocab(int64_t vocab_size) const {
  DI_RETURN_IF_ERROR(validate());
  for (const auto& [token, bias] : logit_bias) {
    if (token >= vocab_size) {
      return InvalidArgument("SamplingParams.logit_bias has token id " + std::to_string(token) +
                             ", outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
  }
  for (int32_t id : stop_token_ids) {
    if (id >= vocab_size) {
      return InvalidArgument("SamplingParams.stop_token_ids has token id " + std::to_string(id) +
                             ", outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
  }
  return OkStatus();
}

}  // namespace deepinfer
