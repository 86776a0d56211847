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
  uint32_t tok_end;      // the subtree's deeper tokens follow: trie_tokens[tok_end, ...)
  uint16_t depth;        // root = 0
  uint8_t byte;
  // Per plain measure (plain_text.h: kJson / kEcmaDot in bytes, then the same in code points):
  // when every token of this subtree is plain text of the measure's class, the longest one's
  // length in the measure's unit; otherwise kNotPlain. A mask walk skips such a subtree when
  // plain_mask(d, measure) covers it.
  uint16_t plain_lens[4];
  static constexpr uint16_t kNotPlain = 0xFFFF;
  uint16_t plain_len_of(int measure) const { return plain_lens[measure]; }
};

// The trie without its plain subtrees (of one plain class): what a walk that skips every plain
// subtree visits, as a trie of its own in DFS order (subtree_end indexes `nodes`; depth, byte and
// token ranges are the full trie's), and per node its index in the full trie.
struct SkipTrie {
  std::vector<TrieNode> nodes;
  std::vector<uint32_t> orig;
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
  // Bits of the plain-text tokens (of plain measure m, plain_text.h: a class and bytes or code
  // points) of length at most d ([bitmask_words]).
  const uint32_t* plain_mask(uint32_t d, int m = 0) const {
    if (d > max_plain_len_[m]) d = max_plain_len_[m];
    return plain_masks_[m].data() + static_cast<size_t>(d) * bitmask_words();
  }
  // How many tokens plain_mask(d, m) holds.
  uint32_t plain_count(uint32_t d, int m = 0) const {
    if (d > max_plain_len_[m]) d = max_plain_len_[m];
    return plain_counts_[m][d];
  }
  uint32_t max_plain_len(int m = 0) const { return max_plain_len_[m]; }
  // The trie less every plain subtree of measure m's class (see SkipTrie; both units of one
  // class have the same plain subtrees).
  const SkipTrie& skip_trie(int m) const { return skip_trie_[m & 1]; }
  uint32_t max_token_len() const { return max_token_len_; }  // trie depth
  // The root's children (ascending trie indices) and their bytes: a walk from the root tests a
  // first byte against its lexemes here before it touches the child's node (the ~250 root
  // children lie scattered over the whole trie, one cache miss each, and most are dead).
  const std::vector<uint32_t>& root_children() const { return root_children_; }
  const std::vector<uint8_t>& root_child_bytes() const { return root_child_bytes_; }
  // Equal ids <=> equal forests below the two nodes (same child bytes, token counts and shapes
  // all the way down), so a walk below one maps onto the other by token offset from tok_end.
  uint32_t forest_id(uint32_t node) const { return forest_id_[node]; }
  // Mask cache shared by every grammar on this vocabulary (mask_cache.h); opaque here.
  struct MaskCache;
  MaskCache& mask_cache() const { return *mask_cache_; }
  ~TokenVocabulary();
  uint32_t num_forests() const { return num_forests_; }

 private:
  void index_trie();  // plain_len, plain masks, skip tries, forest ids
  void index_plain(int cls);

  std::vector<std::string> bytes_;
  std::vector<uint8_t> special_;
  std::vector<int32_t> eos_;
  int32_t vocab_size_ = 0;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  std::vector<uint32_t> plain_masks_[4];  // per measure: [max_plain_len_ + 1][bitmask_words]
  std::vector<uint32_t> plain_counts_[4];  // per measure: [max_plain_len_ + 1]
  uint32_t max_plain_len_[4] = {0, 0, 0, 0};
  SkipTrie skip_trie_[2];
  uint32_t max_token_len_ = 0;
  std::vector<uint32_t> root_children_;
  std::vector<uint8_t> root_child_bytes_;
  std::vector<uint32_t> forest_id_;    // per trie node
  uint32_t num_forests_ = 0;
  std::unique_ptr<MaskCache> mask_cache_;
};

}  // namespace deepinfer::structured
