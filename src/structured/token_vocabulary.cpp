#include "structured/token_vocabulary.h"

#include <algorithm>
#include <numeric>

namespace deepinfer::structured {

bool TokenVocabulary::is_eos(int32_t id) const {
  return std::find(eos_.begin(), eos_.end(), id) != eos_.end();
}

StatusOr<std::shared_ptr<const TokenVocabulary>> TokenVocabulary::create(
    std::vector<std::string> token_bytes, std::vector<uint8_t> is_special,
    std::vector<int32_t> eos_ids, int32_t vocab_size) {
  auto v = std::shared_ptr<TokenVocabulary>(new TokenVocabulary());
  if (is_special.size() != token_bytes.size()) {
    return InvalidArgument("TokenVocabulary: is_special has " + std::to_string(is_special.size()) +
                           " entries for " + std::to_string(token_bytes.size()) + " tokens");
  }
  if (vocab_size < 0) vocab_size = static_cast<int32_t>(token_bytes.size());
  if (vocab_size < static_cast<int32_t>(token_bytes.size())) {
    return InvalidArgument("TokenVocabulary: vocab_size " + std::to_string(vocab_size) +
                           " is smaller than the number of tokens " +
                           std::to_string(token_bytes.size()));
  }
  for (int32_t e : eos_ids) {
    if (e < 0 || e >= static_cast<int32_t>(token_bytes.size())) {
      return InvalidArgument("TokenVocabulary: EOS id " + std::to_string(e) + " out of range");
    }
  }
  v->bytes_ = std::move(token_bytes);
  v->special_ = std::move(is_special);
  v->eos_ = std::move(eos_ids);
  v->vocab_size_ = vocab_size;
  // Trie over normal, non-empty, non-EOS tokens.
  std::vector<int32_t> order;
  for (int32_t i = 0; i < static_cast<int32_t>(v->bytes_.size()); ++i) {
    if (!v->special_[i] && !v->bytes_[i].empty() && !v->is_eos(i)) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return v->bytes_[a] < v->bytes_[b] || (v->bytes_[a] == v->bytes_[b] && a < b);
  });
  auto& trie = v->trie_;
  trie.push_back({0, 0, 0, 0, 0});
  std::vector<uint32_t> path{0};  // node index per depth
  std::string prev;
  for (int32_t id : order) {
    const std::string& s = v->bytes_[id];
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < s.size() && prev[lcp] == s[lcp]) ++lcp;
    // Close nodes deeper than the common prefix.
    while (path.size() > lcp + 1) {
      trie[path.back()].subtree_end = static_cast<uint32_t>(trie.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      uint32_t tok = static_cast<uint32_t>(v->trie_tokens_.size());
      trie.push_back({0, tok, tok, static_cast<uint16_t>(d + 1), static_cast<uint8_t>(s[d])});
      path.push_back(static_cast<uint32_t>(trie.size() - 1));
    }
    TrieNode& node = trie[path.back()];
    if (node.tok_begin == node.tok_end && node.tok_end != v->trie_tokens_.size()) {
      node.tok_begin = node.tok_end = static_cast<uint32_t>(v->trie_tokens_.size());
    }
    v->trie_tokens_.push_back(id);
    node.tok_end = static_cast<uint32_t>(v->trie_tokens_.size());
    prev = s;
  }
  while (!path.empty()) {
    trie[path.back()].subtree_end = static_cast<uint32_t>(trie.size());
    path.pop_back();
  }
  return std::shared_ptr<const TokenVocabulary>(v);
}

}  // namespace deepinfer::structured
