// GrammarMatcher, part 2: the parser walks below exits (walk_exits, walk_below_exit), the memos
// that serve them within a mask and across masks (skeleton_id, top_memo_), and the byte
// filters that skip exits without a push or a walk. Part 1 (matcher.cpp): accept/rollback,
// the frontier walk and its cache, fill_mask.
#include <algorithm>
#include <cstring>

#include "structured/matcher.h"
#include "structured/plain_text.h"

namespace deepinfer::structured {
namespace {

// The exit memos' slot hash (splitmix64's finalizer). Keys are (push id << 32 | forest id); a
// plain multiply-shift left the low index bits a function of the forest alone, so tables of up
// to 4,096 slots probed one cluster per forest.
inline size_t memo_hash(uint64_t key) {
  key ^= key >> 30;
  key *= 0xBF58476D1CE4E5B9ull;
  key ^= key >> 27;
  key *= 0x94D049BB133111EBull;
  return static_cast<size_t>(key ^ (key >> 31));
}

}  // namespace

uint32_t GrammarMatcher::push_id(uint32_t parent, const uint32_t* states, size_t n) {
  push_key_.resize(n + 1);
  push_key_[0] = parent;
  std::memcpy(push_key_.data() + 1, states, n * sizeof(uint32_t));
  return push_ids_.id(push_key_.data(), n + 1) + 1;  // (ids < kTopBit: never a top-level id)
}

Status GrammarMatcher::walk_below_exit(uint32_t node, uint32_t child_id, const uint32_t* scan_states,
                                       uint32_t* bits, const Collect* collect, uint32_t level,
                                       bool pushed, uint32_t* first_out, uint32_t* last_out) {
  const TrieNode& n = vocab_->trie()[node];
  const int32_t* toks = vocab_->trie_tokens().data();
  uint64_t key = (static_cast<uint64_t>(child_id) << 32) | vocab_->forest_id(node);
  if (const ExitMemo::Slot* hit = exit_memo_.find(key)) {
    ++stats_.exit_reuses;
    for (uint32_t k = hit->first; k < hit->last; ++k) {
      int32_t t = toks[n.tok_end + memo_tokens_[k]];
      bits[t >> 5] |= 1u << (t & 31);
    }
    if (collect) {
      for (uint32_t k = hit->first; k < hit->last; ++k) {
        collect->out->push_back(n.tok_end + memo_tokens_[k] - collect->base);
      }
    }
    if (first_out) { *first_out = hit->first; *last_out = hit->last; }
    return OkStatus();
  }
  ++stats_.exit_walks;
  while (levels_.size() <= level + 1) levels_.push_back(std::make_unique<WalkLevel>());
  std::vector<uint32_t>& local = levels_[level + 1]->collected;
  local.clear();
  if (pushed || parser_.push_scanned(scan_states)) {
    uint64_t first[4];
    new_scan_bytes(first);
    // Only children whose byte a new item takes need this set (most exits have none).
    const auto& trie = vocab_->trie();
    bool any = false;
    for (uint32_t j = node + 1; j < n.subtree_end && !any; j = trie[j].subtree_end) {
      any = (first[trie[j].byte >> 6] >> (trie[j].byte & 63)) & 1;
    }
    Status s;
    if (any) {
      Collect c{&local, n.tok_end};
      s = walk(node, nullptr, 0, plain_text::kJson, bits, &c, level + 1, child_id, first);
    }
    if (!pushed) parser_.pop_sets(1);
    DI_RETURN_IF_ERROR(s);
  }
  uint32_t first = static_cast<uint32_t>(memo_tokens_.size());
  memo_tokens_.insert(memo_tokens_.end(), local.begin(), local.end());
  exit_memo_.insert(key, first, static_cast<uint32_t>(memo_tokens_.size()));
  if (first_out) { *first_out = first; *last_out = static_cast<uint32_t>(memo_tokens_.size()); }
  if (collect) {
    for (uint32_t r : local) collect->out->push_back(n.tok_end + r - collect->base);
  }
  return OkStatus();
}

void GrammarMatcher::ExitMemo::clear() {
  if (++stamp == 0) {  // wrapped: forget every slot for real
    for (Slot& sl : slots) sl.stamp = 0;
    stamp = 1;
  }
  count = 0;
}

const GrammarMatcher::ExitMemo::Slot* GrammarMatcher::ExitMemo::find(uint64_t key) const {
  if (slots.empty()) return nullptr;
  const size_t mask = slots.size() - 1;
  for (size_t h = memo_hash(key) & mask;; h = (h + 1) & mask) {
    const Slot& sl = slots[h];
    if (sl.stamp != stamp) return nullptr;
    if (sl.key == key) return &sl;
  }
}

void GrammarMatcher::ExitMemo::insert(uint64_t key, uint32_t first, uint32_t last) {
  if (2 * (count + 1) > slots.size()) {  // grow (at most half full), keeping this mask's slots
    std::vector<Slot> old = std::move(slots);
    slots.assign(std::max<size_t>(64, old.size() * 2), Slot{0, 0, 0, 0});
    uint32_t s = stamp;
    stamp = 1;
    count = 0;
    for (const Slot& sl : old) if (sl.stamp == s) insert(sl.key, sl.first, sl.last);
  }
  const size_t mask = slots.size() - 1;
  size_t h = memo_hash(key) & mask;
  while (slots[h].stamp == stamp && slots[h].key != key) h = (h + 1) & mask;
  if (slots[h].stamp != stamp) ++count;
  slots[h] = Slot{key, stamp, first, last};
}

void GrammarMatcher::new_scan_bytes(uint64_t out[4]) const {
  out[0] = out[1] = out[2] = out[3] = 0;
  const uint32_t copy_end = parser_.copy_end();
  for (uint32_t idx : parser_.scan_items()) {
    if (idx < copy_end) continue;
    const uint64_t* b = grammar_->dfa(parser_.item_terminal(idx)).live_bytes(parser_.item(idx).dfa);
    for (int w = 0; w < 4; ++w) out[w] |= b[w];
  }
}

uint32_t GrammarMatcher::skeleton_id() {
  const uint32_t t = parser_.num_sets() - 1;
  const uint32_t b = parser_.set_begin(t), e = parser_.set_end(t);
  constexpr uint32_t kSelf = 0xFFFFFFFFu;
  uint32_t max_origin = kSelf;  // the largest origin below t (kSelf: none)
  for (uint32_t i = b; i < e; ++i) {
    uint32_t o = parser_.item(i).origin;
    if (o != t && (max_origin == kSelf || o > max_origin)) max_origin = o;
  }
  const uint64_t stamp = max_origin == kSelf ? 0 : parser_.set_stamp(max_origin);
  skel_key_.clear();
  auto put = [&](uint32_t v) { skel_key_.push_back(v); };
  put(max_origin);
  put(static_cast<uint32_t>(stamp));
  put(static_cast<uint32_t>(stamp >> 32));
  for (uint32_t i = b; i < e; ++i) {
    const EarleyItem& it = parser_.item(i);
    put(it.prod);
    put(it.dot);
    put(it.origin == t ? kSelf : it.origin);
  }
  return skel_ids_.id(skel_key_.data(), skel_key_.size());
}

void GrammarMatcher::trim_top_memo() {
  // Bounds: ~8 MB of skeleton keys, 2^16 top-level push ids, 2^22 token offsets (16 MB).
  if (skel_ids_.key_words() <= (2u << 20) && top_ids_.size() <= (1u << 16) &&
      top_ids_.key_words() <= (2u << 20) && top_tokens_.size() <= (1u << 22)) {
    return;
  }
  skel_ids_.clear();
  top_ids_.clear();
  top_first_.clear();
  top_memo_.clear();
  top_tokens_.clear();
}

Status GrammarMatcher::walk_exits(const CachedMask& cached, const std::vector<uint32_t>& scans,
                                  uint32_t* bits) {
  // Exits grouped by their state vector: one push serves every exit of a group that is not
  // memoized already. Walks below the top set's exits are also kept across masks (top_memo_).
  exit_memo_.clear();
  memo_tokens_.clear();
  push_ids_.clear();
  stats_.exits = static_cast<uint32_t>(cached.exits.size());
  if (cached.exits.empty()) return OkStatus();
  if (!options_.keep_exit_walks) {
    skel_ids_.clear();
    top_ids_.clear();
    top_first_.clear();
    top_memo_.clear();
    top_tokens_.clear();
  }
  trim_top_memo();
  const uint32_t skel = skeleton_id();
  stats_.top_items = parser_.set_end(parser_.num_sets() - 1) - parser_.set_begin(parser_.num_sets() - 1);
  exit_scan_states_.resize(scans.size() + 1);
  const int32_t* toks = vocab_->trie_tokens().data();
  const TrieNode* trie = vocab_->trie().data();
  // The cached exits are sorted by state vector (frontier_mask). Per group (state vector): its
  // top-level push id, and the bytes the pushed set's new scan items take (top_first_, kept
  // with the id; computed by pushing once). An exit none of whose children starts with such a
  // byte adds nothing (walk_below_exit would walk no child); the others are looked up in
  // top_memo_ and walked on a miss.
  // Before any of that, a group is skipped when no exit's children meet the grammar's
  // over-approximation of those bytes (CompiledGrammar::next_bytes of the scan items whose
  // lexeme can end there): e.g. the digit prefixes where a number may end, whose children are
  // digits, need no push.
  scan_next_.resize(scans.size());
  scan_dfa_.resize(scans.size());
  for (size_t i = 0; i < scans.size(); ++i) {
    const EarleyItem& it = parser_.item(scans[i]);
    scan_next_[i] = grammar_->next_bytes(it.prod, it.dot);
    scan_dfa_[i] = &grammar_->dfa(parser_.item_terminal(scans[i]));
  }
  auto meets = [](const uint64_t* a, const uint64_t* b) {
    return ((a[0] & b[0]) | (a[1] & b[1]) | (a[2] & b[2]) | (a[3] & b[3])) != 0;
  };
  bool pushed = false;         // the set of `pushed_offset` is on the parser
  uint32_t pushed_offset = 0;
  Status status;
  const auto& exits = cached.exits;
  // keep_exit_walks off: no kept walks and no byte filters (every group pushed, every exit
  // walked through walk_below_exit's own check), the reference the fast paths are tested on.
  const bool fast = options_.keep_exit_walks;
  for (size_t g0 = 0, g1 = 0; g0 < exits.size() && status.ok(); g0 = g1) {
    const uint32_t offset = exits[g0].states_offset;
    for (g1 = g0; g1 < exits.size() && exits[g1].states_offset == offset; ++g1) {}
    ++stats_.exit_groups;
    uint64_t over[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < scans.size(); ++i) {
      const uint32_t st = cached.exit_states[offset + scan_to_frontier_[i]];
      if (st == Dfa::kDead || !scan_dfa_[i]->accepting(st)) continue;
      for (int w = 0; w < 4; ++w) over[w] |= scan_next_[i][w];
    }
    bool any = !fast;
    for (size_t e = g0; e < g1 && !any; ++e) any = meets(over, exits[e].child_bytes);
    if (!any) continue;
    // Key: (skeleton, the scan states pushed).
    exit_scan_states_[0] = skel;
    for (size_t i = 0; i < scans.size(); ++i) {
      exit_scan_states_[i + 1] = cached.exit_states[offset + scan_to_frontier_[i]];
    }
    const uint32_t child = kTopBit | top_ids_.id(exit_scan_states_.data(), scans.size() + 1);
    const uint32_t slot = child & ~kTopBit;
    if (top_first_.size() <= slot) top_first_.resize(slot + 1, TopFirst{});
    if (!top_first_[slot].known) {
      if (pushed) parser_.pop_sets(1);
      pushed = parser_.push_scanned(exit_scan_states_.data() + 1);
      pushed_offset = offset;
      ++stats_.top_pushes;
      TopFirst& tf = top_first_[slot];
      tf.known = true;
      if (pushed) new_scan_bytes(tf.bytes); else tf.bytes[0] = tf.bytes[1] = tf.bytes[2] = tf.bytes[3] = 0;
    }
    uint64_t first[4];
    std::memcpy(first, top_first_[slot].bytes, sizeof(first));
    for (size_t e = g0; e < g1; ++e) {
      const CachedMask::Exit& ex = exits[e];
      if (fast && !meets(first, ex.child_bytes)) continue;  // no child the new items take (or it dies)
      const uint64_t key = (static_cast<uint64_t>(child) << 32) | vocab_->forest_id(ex.node);
      if (const ExitMemo::Slot* hit = top_memo_.find(key)) {
        ++stats_.exit_reuses;
        const uint32_t te = trie[ex.node].tok_end;
        for (uint32_t k = hit->first; k < hit->last; ++k) {
          int32_t t = toks[te + top_tokens_[k]];
          bits[t >> 5] |= 1u << (t & 31);
        }
        continue;
      }
      bool memoized = exit_memo_.find(key) != nullptr;
      if (!memoized && (!pushed || pushed_offset != offset)) {
        if (pushed) parser_.pop_sets(1);
        pushed = parser_.push_scanned(exit_scan_states_.data() + 1);
        pushed_offset = offset;
        ++stats_.top_pushes;
        if (!pushed) break;  // (not reached: `first` is empty for a set that dies)
      }
      uint32_t f0 = 0, f1 = 0;
      status = walk_below_exit(ex.node, child, nullptr, bits, nullptr, 0, !memoized, &f0, &f1);
      if (!status.ok()) break;
      const uint32_t tf = static_cast<uint32_t>(top_tokens_.size());
      top_tokens_.insert(top_tokens_.end(), memo_tokens_.begin() + f0, memo_tokens_.begin() + f1);
      top_memo_.insert(key, tf, static_cast<uint32_t>(top_tokens_.size()));
    }
  }
  if (pushed) parser_.pop_sets(1);
  return status;
}

}  // namespace deepinfer::structured
