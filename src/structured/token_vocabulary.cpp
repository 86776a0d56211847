#include "structured/token_vocabulary.h"

#include <algorithm>
#include <numeric>
#include <string_view>
#include <unordered_map>

#include "structured/mask_cache.h"
#include "structured/plain_text.h"

namespace deepinfer::structured {

bool TokenVocabulary::is_eos(int32_t id) const {
  return std::find(eos_.begin(), eos_.end(), id) != eos_.end();
}

TokenVocabulary::~TokenVocabulary() = default;

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
  trie.push_back({0, 0, 0, 0, 0, {0, 0, 0, 0}});
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
      trie.push_back({0, tok, tok, static_cast<uint16_t>(d + 1), static_cast<uint8_t>(s[d]), {0, 0, 0, 0}});
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
  v->index_trie();
  v->mask_cache_ = std::make_unique<MaskCache>();
  return std::shared_ptr<const TokenVocabulary>(v);
}

void TokenVocabulary::index_plain(int cls) {
  const uint32_t n = static_cast<uint32_t>(trie_.size());
  // Plain-text state and length in code points (characters started) per node (from the root).
  std::vector<uint8_t> pstate(n, plain_text::kDead);
  std::vector<uint16_t> cps(n, 0);
  pstate[0] = plain_text::kStart;
  std::vector<uint32_t> parent_stack;
  for (uint32_t i = 1; i < n; ++i) {
    while (!parent_stack.empty() && trie_[parent_stack.back()].subtree_end <= i) parent_stack.pop_back();
    uint32_t parent = parent_stack.empty() ? 0 : parent_stack.back();
    pstate[i] = plain_text::step(pstate[parent], trie_[i].byte, cls);
    cps[i] = static_cast<uint16_t>(cps[parent] + (pstate[parent] == plain_text::kStart ? 1 : 0));
    parent_stack.push_back(i);
  }
  for (int unit = 0; unit < 2; ++unit) {  // bytes, code points
    const int m = cls + unit * plain_text::kCodePoints;
    auto len_of = [&](uint32_t i) -> uint16_t& { return trie_[i].plain_lens[m]; };
    auto node_len = [&](uint32_t i) -> uint32_t { return unit == 0 ? trie_[i].depth : cps[i]; };
    // Bottom-up: the subtree's longest plain token (every node of a trie path is a token prefix,
    // and lengths grow along a path, so the deepest nodes decide).
    len_of(0) = TrieNode::kNotPlain;  // the root's tokens are everything
    for (uint32_t i = n; i-- > 1;) {
      TrieNode& node = trie_[i];
      uint32_t len = pstate[i] == plain_text::kDead ? TrieNode::kNotPlain : node_len(i);
      for (uint32_t c = i + 1; c < node.subtree_end && len != TrieNode::kNotPlain; c = trie_[c].subtree_end) {
        len = len_of(c) == TrieNode::kNotPlain ? TrieNode::kNotPlain : std::max<uint32_t>(len, len_of(c));
      }
      if (len >= TrieNode::kNotPlain) len = TrieNode::kNotPlain;
      len_of(i) = static_cast<uint16_t>(len);
    }
    // Plain-token masks (and counts) by length.
    uint32_t& max_len = max_plain_len_[m];
    max_len = 0;
    for (uint32_t i = 1; i < n; ++i) {
      if (pstate[i] != plain_text::kDead && trie_[i].tok_end > trie_[i].tok_begin) {
        max_len = std::max<uint32_t>(max_len, node_len(i));
      }
    }
    const size_t words = bitmask_words();
    std::vector<uint32_t>& masks = plain_masks_[m];
    std::vector<uint32_t>& counts = plain_counts_[m];
    masks.assign((max_len + 1) * words, 0);
    counts.assign(max_len + 1, 0);
    for (uint32_t i = 1; i < n; ++i) {
      if (pstate[i] == plain_text::kDead) continue;
      uint32_t* row = masks.data() + node_len(i) * words;
      counts[node_len(i)] += trie_[i].tok_end - trie_[i].tok_begin;
      for (uint32_t t = trie_[i].tok_begin; t < trie_[i].tok_end; ++t) {
        row[trie_tokens_[t] >> 5] |= 1u << (trie_tokens_[t] & 31);
      }
    }
    for (uint32_t d = 1; d <= max_len; ++d) {
      counts[d] += counts[d - 1];
      for (size_t w = 0; w < words; ++w) masks[d * words + w] |= masks[(d - 1) * words + w];
    }
  }
  auto len_of = [&](uint32_t i) -> uint16_t& { return trie_[i].plain_lens[cls]; };
  // The skip trie: the nodes that are not roots of (or inside) plain subtrees, in DFS order.
  SkipTrie& st = skip_trie_[cls];
  st.nodes.clear();
  st.orig.clear();
  std::vector<uint32_t> open;  // skip-trie indices of the nodes whose subtree is being copied
  for (uint32_t i = 0; i < n;) {
    while (!open.empty() && trie_[st.orig[open.back()]].subtree_end <= i) {
      st.nodes[open.back()].subtree_end = static_cast<uint32_t>(st.nodes.size());
      open.pop_back();
    }
    if (len_of(i) != TrieNode::kNotPlain) { i = trie_[i].subtree_end; continue; }
    open.push_back(static_cast<uint32_t>(st.nodes.size()));
    st.nodes.push_back(trie_[i]);
    st.orig.push_back(i);
    ++i;
  }
  while (!open.empty()) {
    st.nodes[open.back()].subtree_end = static_cast<uint32_t>(st.nodes.size());
    open.pop_back();
  }
}

void TokenVocabulary::index_trie() {
  const uint32_t n = static_cast<uint32_t>(trie_.size());
  max_token_len_ = 0;
  for (const TrieNode& t : trie_) max_token_len_ = std::max<uint32_t>(max_token_len_, t.depth);
  for (int cls = 0; cls < plain_text::kNumClasses; ++cls) index_plain(cls);
  root_children_.clear();
  root_child_bytes_.clear();
  for (uint32_t c = 1; c < n && c < trie_[0].subtree_end; c = trie_[c].subtree_end) {
    root_children_.push_back(c);
    root_child_bytes_.push_back(trie_[c].byte);
  }
  // Forest ids, bottom-up: a node's forest is the list of (byte, token count, forest) of its
  // children.
  forest_id_.assign(n, 0);
  std::unordered_map<std::string, uint32_t> ids;
  ids.emplace(std::string(), 0);
  std::string sig;
  for (uint32_t i = n; i-- > 0;) {
    sig.clear();
    for (uint32_t c = i + 1; c < trie_[i].subtree_end; c = trie_[c].subtree_end) {
      uint32_t rec[3] = {trie_[c].byte, trie_[c].tok_end - trie_[c].tok_begin, forest_id_[c]};
      sig.append(reinterpret_cast<const char*>(rec), sizeof(rec));
    }
    auto it = ids.emplace(sig, static_cast<uint32_t>(ids.size())).first;
    forest_id_[i] = it->second;
  }
  num_forests_ = static_cast<uint32_t>(ids.size());
}

}  // namespace deepinfer::structured
