// The model's vocabulary as the grammar sees it: per token id its exact bytes (byte-level BPE
// already decoded; a token may be part of a UTF-8 character), whether it is special (never
// produced by a grammar), and the EOS ids (allowed only where the grammar can end). The
// vocabulary size is the logits width (ids past the real tokens are padding: never allowed).
// Normal tokens are stored in a byte trie laid out in DFS order for mask walks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace deepinfer::structured {

struct TrieNode {
  uint32_t subtree_end;  // index one past the last node of this subtree
  uint32_t tok_begin;    // tokens ending here: trie_tokens[tok_begin, tok_end)
  uint32_t tok_end;
  uint16_t depth;        // root = 0
  uint8_t byte;
};

class TokenVocabulary {
 public:
  // token_bytes.size() <= vocab_size; ids in [token_bytes.size(), vocab_size) are padding.
  static StatusOr<std::shared_ptr<const TokenVocabulary>> create(
      std::vector<std::string> token_bytes, std::vector<uint8_t> is_special,
      std::vector<int32_t> eos_ids, int32_t vocab_size = -1);

  int32_t vocab_size() const { return vocab_size_; }
  int32_t num_tokens() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& token_bytes(int32_t id) const { return bytes_[id]; }
  bool is_special(int32_t id) const { return special_[id] != 0; }
  bool is_eos(int32_t id) const;
  const std::vector<int32_t>& eos_ids() const { return eos_; }
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  size_t bitmask_words() const { return (static_cast<size_t>(vocab_size_) + 31) / 32; }

 private:
  std::vector<std::string> bytes_;
  std::vector<uint8_t> special_;
  std::vector<int32_t> eos_;
  int32_t vocab_size_ = 0;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
};

}  // namespace deepinfer::structured
