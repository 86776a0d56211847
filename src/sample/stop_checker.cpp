#include "sample/stop_checker.h"

#include <algorithm>

namespace deepinfer::sample {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "";
}

TokenStopResult check_token_stop(const SamplingParams& params, std::span<const int32_t> output_token_ids,
                                 int64_t num_tokens, int32_t eos_token_id, int64_t max_model_len) {
  TokenStopResult result;
  const auto num_output = static_cast<int64_t>(output_token_ids.size());
  if (num_output > 0 && num_output >= params.min_tokens) {
    const int32_t last = output_token_ids.back();
    if (!params.ignore_eos && eos_token_id >= 0 && last == eos_token_id) {
      result.reason = FinishReason::kStop;
      result.stop_token = last;
      return result;
    }
    if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), last) !=
        params.stop_token_ids.end()) {
      result.reason = FinishReason::kStop;
      result.stop_token = last;
      return result;
    }
  }
  if ((params.max_tokens.has_value() && num_output >= *params.max_tokens) || num_tokens >= max_model_len) {
    result.reason = FinishReason::kLength;
  }
  return result;
}

StopStringMatcher::StopStringMatcher(const SamplingParams& params)
    : stops_(params.stop), include_stop_(params.include_stop_str_in_output) {}

size_t StopStringMatcher::held_back_length() const {
  if (include_stop_) return 0;  // everything up to and including a stop string is shown anyway
  size_t hold = 0;
  for (const std::string& s : stops_) {
    // Longest k < |s| with text_ ending in s[0, k).
    const size_t max_k = std::min(s.size() - 1, text_.size());
    for (size_t k = max_k; k > hold; --k) {
      if (std::string_view(text_).substr(text_.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

StopStringMatcher::Update StopStringMatcher::append(std::string_view new_text, bool stops_allowed) {
  Update update;
  if (stopped_) return update;
  const size_t old_size = text_.size();
  text_.append(new_text);
  // The stop string that completes first (smallest end), as a byte-by-byte stream would see it, so
  // the result does not depend on how the text was split into deltas. Same end -> earliest start
  // (the longer string); then the one listed first.
  size_t best_pos = std::string::npos, best_end = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& s : stops_) {
    if (!stops_allowed) break;
    const size_t from = old_size >= s.size() - 1 ? old_size - (s.size() - 1) : 0;
    const size_t pos = text_.find(s, from);
    if (pos == std::string::npos) continue;
    const size_t end = pos + s.size();
    if (best == nullptr || end < best_end || (end == best_end && pos < best_pos)) {
      best_pos = pos;
      best_end = end;
      best = &s;
    }
  }
  if (best != nullptr) {
    text_.resize(include_stop_ ? best_pos + best->size() : best_pos);
    stopped_ = true;
    update.stopped = true;
    update.stop_string = *best;
    if (text_.size() > emitted_) update.delta = text_.substr(emitted_);
    emitted_ = std::max(emitted_, text_.size());
    return update;
  }
  const size_t visible = text_.size() - held_back_length();
  if (visible > emitted_) {
    update.delta = text_.substr(emitted_, visible - emitted_);
    emitted_ = visible;
  }
  return update;
}

std::string StopStringMatcher::flush() {
  std::string rest;
  if (text_.size() > emitted_) rest = text_.substr(emitted_);
  emitted_ = text_.size();
  return rest;
}

namespace {

// Length of the prefix of `s` that ends on a complete UTF-8 sequence and not in U+FFFD (which a
// detokenizer emits for a byte sequence that may still complete with the next token).
size_t complete_utf8_prefix(const std::string& s) {
  size_t end = s.size();
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  while (end >= 3 && std::string_view(s).substr(end - 3, 3) == kReplacement) end -= 3;
  // Drop a trailing incomplete multi-byte sequence.
  size_t i = end;
  size_t continuation = 0;
  while (i > 0 && continuation < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++continuation;
  }
  if (i > 0) {
    const auto lead = static_cast<unsigned char>(s[i - 1]);
    size_t need = 0;
    if ((lead & 0xE0) == 0xC0) need = 1;
    else if ((lead & 0xF0) == 0xE0) need = 2;
    else if ((lead & 0xF8) == 0xF0) need = 3;
    if (need > 0 && continuation < need) end = i - 1;
  }
  return end;
}

}  // namespace

DetokenizingStopChecker::DetokenizingStopChecker(const SamplingParams& params, DetokenizeFn detokenize)
    : matcher_(params), detokenize_(std::move(detokenize)), min_tokens_(params.min_tokens) {}

StopStringMatcher::Update DetokenizingStopChecker::update(std::span<const int32_t> output_token_ids) {
  const std::string full = detokenize_(output_token_ids);
  const size_t ready = complete_utf8_prefix(full);
  if (ready <= fed_) return {};
  const bool stops_allowed = static_cast<int64_t>(output_token_ids.size()) >= min_tokens_;
  StopStringMatcher::Update u = matcher_.append(std::string_view(full).substr(fed_, ready - fed_), stops_allowed);
  fed_ = ready;
  return u;
}

}  // namespace deepinfer::sample
