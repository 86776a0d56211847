#include "structured/matcher.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "structured/plain_depth.h"
#include "structured/plain_text.h"

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

Status GrammarMatcher::walk(uint32_t parent, CachedMask* record,
                            uint32_t skip_plain_len, int plain_cls, uint32_t* bits, const Collect* collect,
                            uint32_t level, uint32_t push, const uint64_t* first_bytes) {
  while (levels_.size() <= level) levels_.push_back(std::make_unique<WalkLevel>());
  WalkLevel& lv = *levels_[level];
  // The lexemes walked: the recorded frontier, or the scan items of the parser's top set.
  lv.dfas.clear();
  lv.states.clear();
  if (record) {
    for (const auto& f : frontier_) { lv.dfas.push_back(&grammar_->dfa(f.terminal)); lv.states.push_back(f.state); }
  } else {
    // Distinct (terminal, state) pairs of the top set's scan items; `expand` maps items to them.
    const std::vector<uint32_t>& scans = parser_.scan_items();
    lv.sorted.clear();
    for (uint32_t k = 0; k < scans.size(); ++k) {
      lv.sorted.push_back({static_cast<uint64_t>(parser_.item_terminal(scans[k])) << 32 |
                               parser_.item(scans[k]).dfa, k});
    }
    std::sort(lv.sorted.begin(), lv.sorted.end());
    lv.expand.resize(scans.size());
    for (size_t k = 0; k < lv.sorted.size(); ++k) {
      if (k == 0 || lv.sorted[k].first != lv.sorted[k - 1].first) {
        lv.dfas.push_back(&grammar_->dfa(static_cast<int>(lv.sorted[k].first >> 32)));
        lv.states.push_back(static_cast<uint32_t>(lv.sorted[k].first));
      }
      lv.expand[lv.sorted[k].second] = static_cast<uint32_t>(lv.dfas.size() - 1);
    }
    lv.scan_states.resize(scans.size());
  }
  const size_t m = lv.dfas.size();
  if (m == 0) return OkStatus();
  // A walk that skips every plain subtree visits exactly the skip trie's nodes (exits are
  // recorded by their index in the full trie).
  const TrieNode* trie = vocab_->trie().data();
  const uint32_t* orig = nullptr;
  if (record && parent == 0 && skip_plain_len >= vocab_->max_plain_len(plain_cls)) {
    const SkipTrie& st = vocab_->skip_trie(plain_cls);
    trie = st.nodes.data();
    orig = st.orig.data();
  }
  const int32_t* toks = vocab_->trie_tokens().data();
  // Per depth, the lexemes still alive: lexeme index and DFA state (sparse: below the first
  // bytes of a token usually one or two of many lexemes are left).
  const size_t depths = static_cast<size_t>(vocab_->max_token_len()) + 2;
  lv.idx.resize(depths * m);
  lv.sts.resize(depths * m);
  lv.cnt.resize(depths);
  lv.full.resize(m);
  uint32_t* idx = lv.idx.data();
  uint32_t* sts = lv.sts.data();
  uint32_t* cnt = lv.cnt.data();
  // Record walks over the full trie: per depth, the exit (index in record->exits) of the last
  // node visited there, or -1.
  if (record) lv.exit_at.assign(depths, -1);
  int32_t* exit_at = lv.exit_at.data();
  {
    uint32_t c = 0;
    for (size_t j = 0; j < m; ++j) {
      if (lv.states[j]) { idx[c] = static_cast<uint32_t>(j); sts[c] = lv.states[j]; ++c; }
    }
    cnt[0] = c;
  }
  const Dfa* const* dfas = lv.dfas.data();
  const uint64_t limit = options_.max_work_per_mask;
  uint64_t parser_work = parser_.work();
  uint64_t work = work_;
  auto set_tokens = [&](const TrieNode& n) {
    for (uint32_t t = n.tok_begin; t < n.tok_end; ++t) bits[toks[t] >> 5] |= 1u << (toks[t] & 31);
    if (collect) {
      for (uint32_t t = n.tok_begin; t < n.tok_end; ++t) collect->out->push_back(t - collect->base);
    }
  };
  // The full state vector (0 = dead) at depth rel, for exits.
  auto full_states = [&](size_t rel) {
    uint32_t* f = lv.full.data();
    std::fill(f, f + m, 0u);
    for (uint32_t k = 0; k < cnt[rel]; ++k) f[idx[rel * m + k]] = sts[rel * m + k];
    return f;
  };
  const uint32_t begin = parent + 1, end = trie[parent].subtree_end, base_depth = trie[parent].depth;
  // From the root of the full trie, a first byte is tested on the lexemes before its node is
  // touched: a dead one is skipped whole, exactly as the test below would (whether its
  // subtree is plain or not, a skipped subtree leaves `bits` as they are).
  const uint32_t* root_kids = nullptr;
  const uint8_t* root_bytes = nullptr;
  size_t root_k = 0, root_n = 0;
  if (parent == 0 && orig == nullptr) {
    root_kids = vocab_->root_children().data();
    root_bytes = vocab_->root_child_bytes().data();
    root_n = vocab_->root_children().size();
  }
  uint32_t i = begin;
  while (i < end) {
    if (root_kids) {
      while (root_k < root_n && root_kids[root_k] < i) ++root_k;
      if (root_k < root_n && root_kids[root_k] == i) {
        const uint8_t b = root_bytes[root_k];
        bool alive = false;
        for (uint32_t k = 0; k < cnt[0] && !alive; ++k) alive = dfas[idx[k]]->next(sts[k], b) != Dfa::kDead;
        if (!alive) {
          i = root_k + 1 < root_n ? root_kids[root_k + 1] : end;
          continue;
        }
      }
    }
    const TrieNode& n = trie[i];
    if (n.plain_len_of(plain_cls) <= skip_plain_len) { i = n.subtree_end; continue; }  // plain_mask covers it
    size_t rel = n.depth - base_depth;
    if (record && !orig) {
      // Child bytes of the exits (CachedMask::Exit::child_bytes): a visited node's byte goes to
      // its parent's set when the parent is an exit. Children skipped above hold only tokens
      // the plain mask allows already, so leaving their bytes out changes no mask.
      const int32_t pe = exit_at[rel - 1];
      if (pe >= 0) record->exits[pe].child_bytes[n.byte >> 6] |= 1ull << (n.byte & 63);
      exit_at[rel] = -1;
    }
    if (first_bytes && rel == 1 && !((first_bytes[n.byte >> 6] >> (n.byte & 63)) & 1)) {
      i = n.subtree_end;  // the caller's walk covers this subtree
      continue;
    }
    const uint32_t* pidx = idx + (rel - 1) * m;
    const uint32_t* pst = sts + (rel - 1) * m;
    const uint32_t pc = cnt[rel - 1];
    uint32_t* cidx = idx + rel * m;
    uint32_t* cst = sts + rel * m;
    uint32_t c = 0;
    bool accept = false;
    for (uint32_t k = 0; k < pc; ++k) {
      const Dfa* d = dfas[pidx[k]];
      uint32_t s = d->next(pst[k], n.byte);
      if (s) {
        cidx[c] = pidx[k];
        cst[c] = s;
        ++c;
        accept |= d->accepting(s);
      }
    }
    cnt[rel] = c;
    if (++work + parser_work > limit) {
      work_ = work;
      return ResourceExhausted("structured output: mask computation exceeded its work limit of " +
                               std::to_string(options_.max_work_per_mask) +
                               " steps for this request");
    }
    if (c == 0) { i = n.subtree_end; continue; }
    set_tokens(n);
    if (accept && n.subtree_end > i + 1) {
      const uint32_t* cur = full_states(rel);
      if (record) {
        bool inserted = false;
        const uint32_t vid = exit_dedup_.id(cur, m, &inserted);
        if (inserted) {
          dedup_offset_.push_back(static_cast<uint32_t>(record->exit_states.size()));
          record->exit_states.insert(record->exit_states.end(), cur, cur + m);
        }
        // Over the skip trie (plain subtrees left out) an exit's children are not all visited:
        // all 256 bits (no filtering); over the full trie they are filled as children are visited.
        const uint64_t init = orig ? ~0ull : 0ull;
        record->exits.push_back(CachedMask::Exit{orig ? orig[i] : i, dedup_offset_[vid], {init, init, init, init}});
        if (!orig) exit_at[rel] = static_cast<int32_t>(record->exits.size() - 1);
      } else {
        work_ = work;
        uint32_t child = push_id(push, cur, m);
        for (size_t k = 0; k < lv.expand.size(); ++k) lv.scan_states[k] = cur[lv.expand[k]];
        DI_RETURN_IF_ERROR(walk_below_exit(i, child, lv.scan_states.data(), bits, collect, level, false));
        work = work_;
        parser_work = parser_.work();
      }
    }
    // Walk on below an exit: the moved items alone (the set below, continued) allow what the
    // DFA states allow; walk_below_exit adds what the exit's new items allow.
    ++i;
  }
  work_ = work;
  return OkStatus();
}

uint32_t GrammarMatcher::frontier_plain_depth(TokenVocabulary::MaskCache& slot, int cls,
                                              bool* no_longer) {
  // `cls` is a plain measure (plain_text.h): a class, and bytes or code points.
  *no_longer = false;
  // Plain tokens of at most d bytes are all allowed, with no exit, when every lexeme stays
  // quiet (never accepts) for d bytes of plain text and one stays alive and quiet for d bytes.
  const uint32_t cap = vocab_->max_plain_len(cls);
  auto depth = [&](auto& memo, const FrontierEntry& f,
                   bool stop_at_dead) {
    std::pair<uint64_t, uint32_t> key(f.content, f.state);
    {
      std::lock_guard<std::mutex> lock(slot.mu);
      auto it = memo.find(key);
      if (it != memo.end()) return it->second;
    }
    uint32_t d = plain_depth(grammar_->dfa(f.terminal), f.state, stop_at_dead, cap, 4096, cls);
    std::lock_guard<std::mutex> lock(slot.mu);
    memo.emplace(key, d);
    return d;
  };
  uint32_t alive = 0;
  for (const auto& f : frontier_) alive = std::max(alive, depth(slot.plain_alive[cls], f, true));
  uint32_t d = alive;
  for (const auto& f : frontier_) {
    if (d == 0) break;
    d = std::min(d, depth(slot.plain_quiet[cls], f, false));
  }
  // Plain tokens longer than d: none is allowed (and none reaches an exit) when every lexeme
  // dies on every plain text of d + 1 bytes. Checked for small frontiers (bounded work).
  if (d < cap && frontier_.size() <= 8) {
    bool all = true;
    for (const auto& f : frontier_) {
      std::tuple<uint64_t, uint32_t, uint32_t> key(f.content, f.state, d + 1);
      bool dies;
      {
        std::lock_guard<std::mutex> lock(slot.mu);
        auto it = slot.plain_dies[cls].find(key);
        if (it != slot.plain_dies[cls].end()) { all &= it->second; if (!all) break; continue; }
      }
      // Code points: a counted string with k characters left needs ~k levels of ~10 pairs.
      const uint32_t max_work = plain_text::measure_counts_code_points(cls) ? 60000 : 20000;
      dies = plain_dies_by(grammar_->dfa(f.terminal), f.state, d + 1, max_work, cls);
      {
        std::lock_guard<std::mutex> lock(slot.mu);
        slot.plain_dies[cls].emplace(key, dies);
      }
      all &= dies;
      if (!all) break;
    }
    *no_longer = all;
  }
  return d;
}

std::shared_ptr<const CachedMask> GrammarMatcher::frontier_mask(Status* status) {
  frontier_key_.clear();
  for (const auto& f : frontier_) {
    frontier_key_.append(reinterpret_cast<const char*>(&f.content), sizeof(f.content));
    frontier_key_.append(reinterpret_cast<const char*>(&f.state), sizeof(f.state));
  }
  auto& slot = vocab_->mask_cache();
  {
    std::lock_guard<std::mutex> lock(slot.mu);
    auto it = slot.entries.find(frontier_key_);
    if (it != slot.entries.end()) {
      stats_.cache_hit = true;
      return it->second;
    }
  }
  auto entry = std::make_shared<CachedMask>();
  // The plain measure (plain_text.h) that allows the most plain tokens. Code points first: JSON
  // Schema counts characters (maxLength), so for a counted string with k characters left every
  // plain text of k + 1 characters kills it (no_longer: every plain subtree is skipped), while
  // in bytes the depth is k and k + 1 bytes may be fewer characters; for other lexemes the two
  // units agree. Then kEcmaDot (ECMA `.` dies on U+2028/U+2029: under kJson the depth of a
  // `pattern` built on `.` is 2 bytes), then bytes. A measure whose longer plain texts all kill
  // the frontier (no_longer) skips every plain subtree and ends the search.
  auto full = [&](uint32_t depth, int m, bool nl) { return nl || depth >= vocab_->max_plain_len(m); };
  bool no_longer = false;
  int cls = plain_text::kJson + plain_text::kCodePoints;
  uint32_t d = frontier_plain_depth(slot, cls, &no_longer);
  for (int m : {plain_text::kEcmaDot + plain_text::kCodePoints, plain_text::kJson}) {
    if (full(d, cls, no_longer)) break;
    bool nl = false;
    uint32_t dm = frontier_plain_depth(slot, m, &nl);
    if (nl || vocab_->plain_count(dm, m) > vocab_->plain_count(d, cls)) {
      d = dm;
      cls = m;
      no_longer = nl;
    }
  }
  stats_.plain_depth = d;
  stats_.plain_class = cls;
  entry->plain_depth = d;
  entry->plain_class = cls;
  const size_t words = vocab_->bitmask_words();
  const uint32_t* plain = vocab_->plain_mask(d, cls);
  record_bits_.assign(plain, plain + words);
  exit_dedup_.clear();
  dedup_offset_.clear();
  // Skip plain subtrees whose tokens plain_mask(d) covers, or all of them (see no_longer).
  uint32_t skip = no_longer ? TrieNode::kNotPlain - 1u : d;
  *status = walk(0, entry.get(), skip, cls, record_bits_.data(), nullptr, 0, 0, nullptr);
  if (!status->ok()) return nullptr;
  // The patch: words that differ from the plain mask (compared 64 bytes at a time; most agree).
  for (size_t w0 = 0; w0 < words; w0 += 16) {
    const size_t w1 = std::min(words, w0 + 16);
    if (std::memcmp(record_bits_.data() + w0, plain + w0, (w1 - w0) * 4) == 0) continue;
    for (size_t w = w0; w < w1; ++w) {
      if (record_bits_[w] != plain[w]) entry->patch.emplace_back(static_cast<uint32_t>(w), record_bits_[w]);
    }
  }
  // Grouped by state vector, so that a mask pushes each vector's set once (walk_exits).
  std::stable_sort(entry->exits.begin(), entry->exits.end(),
                   [](const CachedMask::Exit& a, const CachedMask::Exit& b) {
                     return a.states_offset < b.states_offset;
                   });
  std::lock_guard<std::mutex> lock(slot.mu);
  if (slot.bytes + entry->bytes() > options_.max_cache_bytes) {
    slot.entries.clear();
    slot.bytes = 0;
  }
  slot.bytes += entry->bytes();
  slot.entries.emplace(frontier_key_, entry);
  return entry;
}

Status GrammarMatcher::fill_mask(uint32_t* bitmask, size_t num_words) {
  if (num_words < vocab_->bitmask_words()) {
    return InvalidArgument("fill_mask: bitmask has " + std::to_string(num_words) +
                           " words, the vocabulary needs " +
                           std::to_string(vocab_->bitmask_words()));
  }
  stats_ = MaskStats();
  auto set_eos = [&] {
    for (int32_t e : vocab_->eos_ids()) bitmask[e >> 5] |= 1u << (e & 31);
  };
  if (terminated_) {
    std::memset(bitmask, 0, num_words * 4);
    set_eos();
    return OkStatus();
  }
  work_ = 0;
  parser_.reset_work();
  // Frontier of the top set (a copy: pushing sets below may reallocate the parser's lists).
  const std::vector<uint32_t> scans = parser_.scan_items();
  frontier_.clear();
  for (uint32_t idx : scans) {
    int term = parser_.item_terminal(idx);
    frontier_.push_back({grammar_->dfa(term).content_id(), parser_.item(idx).dfa, term});
  }
  std::sort(frontier_.begin(), frontier_.end());
  frontier_.erase(std::unique(frontier_.begin(), frontier_.end()), frontier_.end());
  stats_.frontier = static_cast<uint32_t>(frontier_.size());
  scan_to_frontier_.resize(scans.size());
  for (size_t i = 0; i < scans.size(); ++i) {
    int term = parser_.item_terminal(scans[i]);
    FrontierEntry p{grammar_->dfa(term).content_id(), parser_.item(scans[i]).dfa, term};
    scan_to_frontier_[i] = static_cast<uint32_t>(
        std::lower_bound(frontier_.begin(), frontier_.end(), p) - frontier_.begin());
  }
  const size_t words = vocab_->bitmask_words();
  Status status;
  if (!frontier_.empty()) {
    auto cached = frontier_mask(&status);
    if (cached) {
      std::memcpy(bitmask, vocab_->plain_mask(cached->plain_depth, cached->plain_class), words * 4);
      for (const auto& [w, v] : cached->patch) bitmask[w] = v;
      if (num_words > words) std::memset(bitmask + words, 0, (num_words - words) * 4);
      status = walk_exits(*cached, scans, bitmask);
    }
  } else {
    std::memset(bitmask, 0, num_words * 4);
  }
  stats_.trie_nodes = work_;
  stats_.parser_items = parser_.work();
  DI_RETURN_IF_ERROR(status);
  if (parser_.can_finish()) set_eos();
  return OkStatus();
}

}  // namespace deepinfer::structured
