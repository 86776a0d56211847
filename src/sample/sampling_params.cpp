#include "deepinfer/sampling_params.h"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

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

const char* StructuredOutputsParams::kind() const {
  if (json) return "json";
  if (regex) return "regex";
  if (grammar) return "grammar";
  if (json_object) return "json_object";
  return "";
}

Status StructuredOutputsParams::validate() const {
  std::vector<const char*> set;
  if (json) set.push_back("json");
  if (regex) set.push_back("regex");
  if (grammar) set.push_back("grammar");
  if (json_object) set.push_back("json_object");
  if (set.empty()) {
    return InvalidArgument(
        "SamplingParams.structured_outputs sets none of 'json', 'regex', 'grammar', 'json_object'; "
        "set exactly one");
  }
  if (set.size() > 1) {
    std::string names;
    for (size_t i = 0; i < set.size(); ++i) {
      if (i > 0) names += (i + 1 == set.size()) ? "' and '" : "', '";
      names += set[i];
    }
    return InvalidArgument("SamplingParams.structured_outputs sets '" + names +
                           "' (more than one); set exactly one");
  }
  auto empty = [](const char* field, const char* expected) {
    return InvalidArgument(std::string("SamplingParams.structured_outputs.") + field +
                           " is empty (expected " + expected + ")");
  };
  if (json && json->empty()) return empty("json", "JSON Schema text");
  if (regex && regex->empty()) return empty("regex", "a regular expression");
  if (grammar && grammar->empty()) return empty("grammar", "GBNF or Lark text");
  if (grammar_syntax != GrammarSyntax::kAuto && !grammar) {
    return InvalidArgument(
        "SamplingParams.structured_outputs.grammar_syntax is set but 'grammar' is not");
  }
  return OkStatus();
}

std::string StructuredOutputsParams::cache_key() const {
  std::string key = kind();
  key += '|';
  if (json || json_object) {
    key += lenient ? 'L' : 'S';
    key += whitespace == Whitespace::kCompact ? 'C' : 'F';
    key += format == Format::kAnnotation ? 'n' : 'a';
  }
  if (grammar) key += static_cast<char>('0' + static_cast<int>(grammar_syntax));
  key += '|';
  if (json) key += *json;
  if (regex) key += *regex;
  if (grammar) key += *grammar;
  return key;
}

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
  if (structured_outputs.has_value()) DI_RETURN_IF_ERROR(structured_outputs->validate());
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
