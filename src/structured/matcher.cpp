#include "structured/matcher.h"

#include <algorithm>
#include <cstring>

namespace deepinfer::structured {
namespace {
constexpr uint32_t kEosStep = 0xFFFFFFFFu;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                               std::shared_ptr<const TokenVocabulary> vocab, MatcherOptions options)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), options_(options),
      parser_(grammar_.get()) {}

bool GrammarMatcher::can_terminate() const { return !terminated_ && parser_.can_finish(); }

bool GrammarMatcher::must_terminate() const {
  if (!can_terminate()) return false;
  for (uint32_t idx : parser_.scan_items()) {
    if (grammar_->dfa(parser_.item_terminal(idx)).has_successor(parser_.item(idx).dfa)) return false;
  }
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  uint32_t pushed = 0;
  for (char c : bytes) {
    if (!parser_.push_byte(static_cast<uint8_t>(c))) {
      parser_.pop_sets(pushed);
      return false;
    }
    ++pushed;
  }
  history_.push_back(pushed);
  return true;
}

bool GrammarMatcher::can_accept_bytes(std::string_view bytes) {
  if (!accept_bytes(bytes)) return false;
  rollback(1);
  return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (terminated_ || id < 0 || id >= vocab_->num_tokens()) return false;
  if (vocab_->is_eos(id)) {
    if (!parser_.can_finish()) return false;
    terminated_ = true;
    history_.push_back(kEosStep);
    return true;
  }
  if (vocab_->is_special(id) || vocab_->token_bytes(id).empty()) return false;
  return accept_bytes(vocab_->token_bytes(id));
}

void GrammarMatcher::rollback(int n) {
  for (int i = 0; i < n && !history_.empty(); ++i) {
    uint32_t h = history_.back();
    history_.pop_back();
    if (h == kEosStep) terminated_ = false; else parser_.pop_sets(h);
  }
}

Status GrammarMatcher::walk(uint32_t begin, uint32_t end, uint32_t base_depth, CachedMask* record,
                            uint32_t* bits) {
  // The lexemes walked: the recorded frontier, or the scan items of the parser's top set.
  std::vector<const Dfa*> dfas;
  std::vector<uint32_t> st;
  if (record) {
    for (const auto& f : frontier_) { dfas.push_back(&grammar_->dfa(f.first)); st.push_back(f.second); }
  } else {
    for (uint32_t idx : parser_.scan_items()) {
      dfas.push_back(&grammar_->dfa(parser_.item_terminal(idx)));
      st.push_back(parser_.item(idx).dfa);
    }
  }
  const size_t m = dfas.size();
  if (m == 0) return OkStatus();
  const auto& trie = vocab_->trie();
  const auto& toks = vocab_->trie_tokens();
  uint32_t i = begin;
  while (i < end) {
    const TrieNode& n = trie[i];
    size_t rel = n.depth - base_depth;
    if (st.size() < (rel + 1) * m) st.resize((rel + 1) * m);
    const uint32_t* prev = &st[(rel - 1) * m];
    uint32_t* cur = &st[rel * m];
    bool alive = false, accept = false;
    for (size_t j = 0; j < m; ++j) {
      uint32_t s = prev[j] ? dfas[j]->next(prev[j], n.byte) : 0;
      cur[j] = s;
      if (s) { alive = true; accept |= dfas[j]->accepting(s); }
    }
    if (++work_ + parser_.work() > options_.max_work_per_mask) {
      return ResourceExhausted("structured output: mask computation exceeded its work limit of " +
                               std::to_string(options_.max_work_per_mask) +
                               " steps for this request");
    }
    if (!alive) { i = n.subtree_end; continue; }
    for (uint32_t t = n.tok_begin; t < n.tok_end; ++t) bits[toks[t] >> 5] |= 1u << (toks[t] & 31);
    if (accept) {
      if (record) {
        record->exits.push_back({i, static_cast<uint32_t>(record->exit_states.size())});
        record->exit_states.insert(record->exit_states.end(), cur, cur + m);
      } else if (n.subtree_end > i + 1) {
        std::vector<uint32_t> states(cur, cur + m);
        if (parser_.push_scanned(states.data())) {
          Status s = walk(i + 1, n.subtree_end, n.depth, nullptr, bits);
          parser_.pop_sets(1);
          DI_RETURN_IF_ERROR(s);
        }
      }
      i = n.subtree_end;
      continue;
    }
    ++i;
  }
  return OkStatus();
}

std::shared_ptr<const CachedMask> GrammarMatcher::frontier_mask(Status* status) {
  std::string key(reinterpret_cast<const char*>(frontier_.data()),
                  frontier_.size() * sizeof(frontier_[0]));
  auto& slot = grammar_->cache_slot(vocab_.get());
  {
    std::lock_guard<std::mutex> lock(slot.mu);
    auto it = slot.entries.find(key);
    if (it != slot.entries.end()) return it->second;
  }
  auto entry = std::make_shared<CachedMask>();
  entry->bits.assign(vocab_->bitmask_words(), 0);
  *status = walk(1, static_cast<uint32_t>(vocab_->trie().size()), 0, entry.get(), entry->bits.data());
  if (!status->ok()) return nullptr;
  std::lock_guard<std::mutex> lock(slot.mu);
  if (slot.bytes + entry->bytes() > options_.max_cache_bytes) {
    slot.entries.clear();
    slot.bytes = 0;
  }
  slot.bytes += entry->bytes();
  slot.entries.emplace(std::move(key), entry);
  return entry;
}

Status GrammarMatcher::fill_mask(uint32_t* bitmask, size_t num_words) {
  if (num_words < vocab_->bitmask_words()) {
    return InvalidArgument("fill_mask: bitmask has " + std::to_string(num_words) +
                           " words, the vocabulary needs " +
                           std::to_string(vocab_->bitmask_words()));
  }
  std::memset(bitmask, 0, num_words * 4);
  auto set_eos = [&] {
    for (int32_t e : vocab_->eos_ids()) bitmask[e >> 5] |= 1u << (e & 31);
  };
  if (terminated_) { set_eos(); return OkStatus(); }
  work_ = 0;
  parser_.reset_work();
  // Frontier of the top set (a copy: pushing sets below may reallocate the parser's lists).
  const std::vector<uint32_t> scans = parser_.scan_items();
  frontier_.clear();
  for (uint32_t idx : scans) frontier_.emplace_back(parser_.item_terminal(idx), parser_.item(idx).dfa);
  std::sort(frontier_.begin(), frontier_.end());
  frontier_.erase(std::unique(frontier_.begin(), frontier_.end()), frontier_.end());
  scan_to_frontier_.resize(scans.size());
  for (size_t i = 0; i < scans.size(); ++i) {
    std::pair<int, uint32_t> p(parser_.item_terminal(scans[i]), parser_.item(scans[i]).dfa);
    scan_to_frontier_[i] = static_cast<uint32_t>(
        std::lower_bound(frontier_.begin(), frontier_.end(), p) - frontier_.begin());
  }
  if (!frontier_.empty()) {
    Status status;
    auto cached = frontier_mask(&status);
    if (!cached) return status;
    std::memcpy(bitmask, cached->bits.data(), cached->bits.size() * 4);
    std::vector<uint32_t> states(scans.size());
    const auto& trie = vocab_->trie();
    for (const auto& ex : cached->exits) {
      const TrieNode& n = trie[ex.node];
      if (n.subtree_end == ex.node + 1) continue;  // no longer tokens below this exit
      for (size_t i = 0; i < scans.size(); ++i) {
        states[i] = cached->exit_states[ex.states_offset + scan_to_frontier_[i]];
      }
      if (!parser_.push_scanned(states.data())) continue;
      Status s = walk(ex.node + 1, n.subtree_end, n.depth, nullptr, bitmask);
      parser_.pop_sets(1);
      DI_RETURN_IF_ERROR(s);
    }
  }
  if (parser_.can_finish()) set_eos();
  return OkStatus();
}

}  // namespace deepinfer::structured
