#include "tokenizer/stream_detokenizer.h"

#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

StatusOr<StreamDetokenizer> StreamDetokenizer::create(const Tokenizer& tok, bool skip_special_tokens) {
  if (!tok.decoder_spec().supported) {
    return Unimplemented("streaming detokenizer: this tokenizer's decoder chain is not supported");
  }
  return StreamDetokenizer(tok, skip_special_tokens);
}

std::string StreamDetokenizer::emit(std::string text) {
  // Strip decoder: up to strip_leading strip_chars at the very start of the output.
  const DecoderSpec& spec = tok_->decoder_spec();
  if (!started_) {
    size_t b = 0;
    while (stripped_ < spec.strip_leading && b < text.size() && text[b] == spec.strip_char) {
      ++b;
      ++stripped_;
    }
    text.erase(0, b);
    if (!text.empty()) {
      started_ = true;
    }
  }
  return text;
}

std::string StreamDetokenizer::flush_group() {
  if (group_n_ == 0) return "";
  std::string out;
  if (find_invalid_utf8(group_) == std::string::npos) {
    out = group_;
  } else {
    for (size_t k = 0; k < group_n_; ++k) out += "\xEF\xBF\xBD";
  }
  group_.clear();
  group_n_ = 0;
  return out;
}

std::string StreamDetokenizer::push(int32_t id) {
  if (id < 0 || id >= tok_->vocab_size()) return "";
  if (tok_->id_to_token(id).empty() && tok_->token_bytes(id).empty()) return "";
  if (skip_special_ && tok_->is_special(id)) return "";
  const DecoderSpec& spec = tok_->decoder_spec();
  const std::string& bytes = tok_->token_bytes(id);
  if (spec.byte_level) {
    first_token_ = false;
    pending_ += bytes;
    const size_t stable = utf8_stable_prefix(pending_);
    std::string text = utf8_lossy(std::string_view(pending_).substr(0, stable));
    pending_.erase(0, stable);
    return emit(std::move(text));
  }
  const std::string& tok = tok_->id_to_token(id);
  const bool is_byte_token = spec.byte_fallback && bytes.size() == 1 && tok.size() == 6 &&
                             tok.compare(0, 3, "<0x") == 0;
  if (is_byte_token) {
    first_token_ = false;
    group_ += bytes;
    ++group_n_;
    return "";
  }
  std::string text = flush_group();
  const std::string& rep = spec.metaspace_first_token_strip;
  if (first_token_ && !rep.empty() && tok.compare(0, rep.size(), rep) == 0 && !bytes.empty() &&
      bytes[0] == ' ') {
    text.append(bytes, 1, std::string::npos);  // Metaspace: first token's leading "▁" dropped
  } else {
    text += bytes;
  }
  first_token_ = false;
  return emit(std::move(text));
}

std::string StreamDetokenizer::finish() {
  std::string text;
  if (!pending_.empty()) {
    text = utf8_lossy(pending_);
    pending_.clear();
  }
  text += flush_group();
  return emit(std::move(text));
}

}  // namespace deepinfer::tokenizer
