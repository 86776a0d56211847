#include "structured/earley.h"

#include <algorithm>

namespace deepinfer::structured {
namespace {

inline uint32_t item_hash(const EarleyItem& it) {
  uint64_t h = it.prod * 0x9E3779B97F4A7C15ull;
  h ^= (it.dot + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2));
  h ^= (it.origin * 0xC2B2AE3D27D4EB4Full + (h << 6) + (h >> 2));
  h ^= (it.dfa * 0x165667B19E3779F9ull + (h << 6) + (h >> 2));
  return static_cast<uint32_t>(h ^ (h >> 29));
}

constexpr uint32_t kEmpty = 0xFFFFFFFFu;
constexpr uint32_t kIndexedSet = 24;  // origin sets at least this large get a completion index

}  // namespace

EarleyParser::EarleyParser(const CompiledGrammar* g) : g_(g) {
  predicted_stamp_.assign(g_->num_nonterminals(), 0);
  hash_.assign(64, kEmpty);
  reset();
}

int EarleyParser::item_terminal(uint32_t idx) const {
  const EarleyItem& it = items_[idx];
  return ~g_->rhs(it.prod, it.dot);
}

EarleyItem EarleyParser::advanced(const EarleyItem& it) const {
  EarleyItem n{it.prod, it.dot + 1, it.origin, 0};
  if (n.dot < g_->rhs_len(n.prod)) {
    int s = g_->rhs(n.prod, n.dot);
    if (GrammarBuilder::is_terminal(s)) n.dfa = g_->dfa(~s).start();
  }
  return n;
}

void EarleyParser::add(const EarleyItem& it) {
  uint32_t begin = set_begin_.back();
  uint32_t n = static_cast<uint32_t>(items_.size()) - begin;
  if (n < 16) {
    for (uint32_t i = begin; i < items_.size(); ++i) if (items_[i] == it) return;
  } else {
    // Open addressing over the set being built, in a power-of-two prefix of hash_ sized to the
    // set (at most half full), rebuilt when the set first passes the linear-scan size or fills it.
    if (hash_count_ != n || hash_size_ < 2 * (n + 1)) {
      uint32_t size = 64;
      while (size < 4 * (n + 1)) size <<= 1;
      if (hash_.size() < size) hash_.resize(size);
      std::fill(hash_.begin(), hash_.begin() + size, kEmpty);
      hash_size_ = size;
      for (uint32_t i = begin; i < items_.size(); ++i) {
        uint32_t h = item_hash(items_[i]) & (size - 1);
        while (hash_[h] != kEmpty) h = (h + 1) & (size - 1);
        hash_[h] = i;
      }
      hash_count_ = n;
    }
    const uint32_t mask = hash_size_ - 1;
    uint32_t h = item_hash(it) & mask;
    while (hash_[h] != kEmpty) {
      if (items_[hash_[h]] == it) return;
      h = (h + 1) & mask;
    }
    hash_[h] = static_cast<uint32_t>(items_.size());
    ++hash_count_;
  }
  items_.push_back(it);
  ++work_;
}

bool EarleyParser::close_new_set() {
  uint32_t k = static_cast<uint32_t>(set_begin_.size()) - 1;
  uint32_t begin = set_begin_.back();
  ++generation_;  // prediction stamps are per created set, never reused after a pop
  if (scan_idx_.size() <= k) scan_idx_.resize(k + 1);
  if (set_gen_.size() <= k) set_gen_.resize(k + 1, 0);
  if (wait_.size() <= k) wait_.resize(k + 1);
  set_gen_[k] = generation_;
  std::vector<uint32_t>& scans = scan_idx_[k];
  scans.clear();
  for (uint32_t i = begin; i < items_.size(); ++i) {
    EarleyItem it = items_[i];
    uint32_t len = g_->rhs_len(it.prod);
    if (it.dot == len) {
      int lhs = g_->lhs(it.prod);
      uint32_t ob = set_begin_[it.origin];
      uint32_t oe = it.origin + 1 < set_begin_.size() ? set_begin_[it.origin + 1]
                                                      : static_cast<uint32_t>(items_.size());
      if (it.origin != k && oe - ob >= kIndexedSet) {
        // A closed origin set: its items waiting on `lhs`, in item order, from the index.
        WaitIndex& w = wait_[it.origin];
        if (w.gen != set_gen_[it.origin]) {
          w.gen = set_gen_[it.origin];
          w.by_symbol.clear();
          for (uint32_t j = ob; j < oe; ++j) {
            const EarleyItem& x = items_[j];
            if (x.dot < g_->rhs_len(x.prod)) {
              int s = g_->rhs(x.prod, x.dot);
              if (!GrammarBuilder::is_terminal(s)) w.by_symbol.emplace_back(s, j);
            }
          }
          std::sort(w.by_symbol.begin(), w.by_symbol.end());
        }
        auto r = std::lower_bound(w.by_symbol.begin(), w.by_symbol.end(),
                                  std::pair<int, uint32_t>(lhs, 0));
        for (; r != w.by_symbol.end() && r->first == lhs; ++r) add(advanced(items_[r->second]));
        continue;
      }
      for (uint32_t j = ob; j < oe; ++j) {
        const EarleyItem& w = items_[j];
        if (w.dot < g_->rhs_len(w.prod) && g_->rhs(w.prod, w.dot) == lhs) add(advanced(w));
        if (it.origin == k) oe = static_cast<uint32_t>(items_.size());
      }
      continue;
    }
    int s = g_->rhs(it.prod, it.dot);
    if (GrammarBuilder::is_terminal(s)) {
      scans.push_back(i);
      const Dfa& d = g_->dfa(~s);
      if (it.dfa == d.start() && d.accepting(it.dfa)) add(advanced(it));
    } else {
      if (predicted_stamp_[s] != generation_) {
        predicted_stamp_[s] = generation_;
        for (uint32_t p : g_->prods_of(s)) {
          EarleyItem n{p, 0, k, 0};
          if (g_->rhs_len(p) > 0) {
            int s0 = g_->rhs(p, 0);
            if (GrammarBuilder::is_terminal(s0)) n.dfa = g_->dfa(~s0).start();
          }
          add(n);
        }
      }
      if (g_->nullable(s)) add(advanced(it));
    }
  }
  hash_count_ = 0;
  if (items_.size() == begin) {
    set_begin_.pop_back();
    return false;
  }
  return true;
}

void EarleyParser::reset() {
  items_.clear();
  set_begin_.clear();
  copy_end_.assign(1, 0);
  hash_count_ = 0;
  std::fill(predicted_stamp_.begin(), predicted_stamp_.end(), 0);
  set_begin_.push_back(0);
  EarleyItem start{g_->start_prod(), 0, 0, 0};
  add(start);
  close_new_set();
}

bool EarleyParser::push_scanned(const uint32_t* new_states) {
  const std::vector<uint32_t>& scans = scan_idx_[set_begin_.size() - 1];
  set_begin_.push_back(static_cast<uint32_t>(items_.size()));
  // The moved items first (see copy_end()), then what their accepting states complete.
  for (size_t i = 0; i < scans.size(); ++i) {
    uint32_t st = new_states[i];
    if (st == Dfa::kDead) continue;
    EarleyItem it = items_[scans[i]];
    it.dfa = st;
    add(it);
  }
  if (items_.size() == set_begin_.back()) {
    set_begin_.pop_back();
    return false;
  }
  const uint32_t k = static_cast<uint32_t>(set_begin_.size()) - 1;
  if (copy_end_.size() <= k) copy_end_.resize(k + 1);
  copy_end_[k] = static_cast<uint32_t>(items_.size());
  for (size_t i = 0; i < scans.size(); ++i) {
    uint32_t st = new_states[i];
    if (st == Dfa::kDead || !g_->dfa(item_terminal(scans[i])).accepting(st)) continue;
    EarleyItem it = items_[scans[i]];
    it.dfa = st;
    add(advanced(it));
  }
  return close_new_set();
}

bool EarleyParser::push_byte(uint8_t b) {
  const std::vector<uint32_t>& scans = scan_idx_[set_begin_.size() - 1];
  std::vector<uint32_t> states(scans.size());
  bool any = false;
  for (size_t i = 0; i < scans.size(); ++i) {
    states[i] = g_->dfa(item_terminal(scans[i])).next(items_[scans[i]].dfa, b);
    any |= states[i] != Dfa::kDead;
  }
  if (!any) return false;
  return push_scanned(states.data());
}

void EarleyParser::pop_sets(uint32_t n) {
  hash_count_ = 0;
  for (uint32_t i = 0; i < n && set_begin_.size() > 1; ++i) {
    items_.resize(set_begin_.back());
    set_begin_.pop_back();
  }
}

bool EarleyParser::can_finish() const {
  uint32_t begin = set_begin_.back();
  for (uint32_t i = begin; i < items_.size(); ++i) {
    const EarleyItem& it = items_[i];
    if (it.prod == g_->start_prod() && it.dot == 1 && it.origin == 0) return true;
  }
  return false;
}

}  // namespace deepinfer::structured
