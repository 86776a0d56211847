// Added tokens (tokenizer.json "added_tokens"): found in the text before the model runs, with
// Hugging Face's leftmost-longest matching and the lstrip / rstrip / single_word flags. Tokens
// with normalized=false are matched in the raw text, normalized=true ones after normalization.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// One piece of text after added-token splitting: either an added token (id >= 0) or plain text.
struct TextSplit {
  size_t begin, end;
  int32_t token_id;  // -1 for plain text
};

class AddedTokenMatcher {
 public:
  // `tokens`: the patterns this matcher looks for (their `content`, already normalized when
  // matching happens on normalized text).
  void build(const std::vector<const AddedToken*>& tokens);
  bool empty() const { return patterns_.empty(); }
  // Splits text[0..size) into plain and token pieces (appended to `out`, offsets into `text`).
  void split(std::string_view text, std::vector<TextSplit>& out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t pattern = -1;                           // index into patterns_ ending here
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<Node> nodes_;
  std::vector<const AddedToken*> patterns_;
  bool first_byte_[256] = {};
};

}  // namespace deepinfer::tokenizer
