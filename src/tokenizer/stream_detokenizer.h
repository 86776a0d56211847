// Streaming detokenizer: feed generated ids one at a time, get the new text for each. The text
// never contains a broken UTF-8 sequence, and the concatenation of all pieces (plus finish())
// equals tokenizer.decode(all ids, skip_special_tokens) exactly.
//
// Byte-level BPE: bytes are held back only while they are a valid-but-incomplete character.
// Byte fallback ("<0xAB>" tokens): Hugging Face decodes a run of byte tokens as one group and
// turns the whole group into U+FFFD per byte if it is not valid UTF-8, so a run is held until a
// non-byte token (or finish()) closes it. Metaspace/Strip: the leading space of the whole output
// is dropped as the decoder does.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

class StreamDetokenizer {
 public:
  // Fails (Unimplemented) for decoder chains that the streaming rules do not cover.
  static StatusOr<StreamDetokenizer> create(const Tokenizer& tok, bool skip_special_tokens);

  // Text that became final with this token (possibly empty).
  std::string push(int32_t id);
  // Flushes held bytes (an incomplete tail becomes U+FFFD like the full decode does).
  std::string finish();

 private:
  StreamDetokenizer(const Tokenizer& tok, bool skip) : tok_(&tok), skip_special_(skip) {}
  std::string emit(std::string text);
  std::string flush_group();

  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;    // byte-level: bytes not yet emitted
  std::string group_;      // byte fallback: the open run of byte tokens
  size_t group_n_ = 0;
  int stripped_ = 0;       // leading strip characters already considered
  bool started_ = false;   // some non-empty text has been emitted
  bool first_token_ = true;  // no (non-skipped) token pushed yet
};

}  // namespace deepinfer::tokenizer
