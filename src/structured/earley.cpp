#include "structured/earley.h"

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
    if (hash_count_ != n) {
      // (Re)build the table for this set when it first grows past the linear-scan size.
      if (hash_.size() < 4 * (n + 1)) hash_.assign(8 * (n + 1), kEmpty);
      else std::fill(hash_.begin(), hash_.end(), kEmpty);
      uint32_t mask = static_cast<uint32_t>(hash_.size()) - 1;
      (void)mask;
      for (uint32_t i = begin; i < items_.size(); ++i) {
        uint32_t h = item_hash(items_[i]) % hash_.size();
        while (hash_[h] != kEmpty) h = (h + 1) % hash_.size();
        hash_[h] = i;
      }
      hash_count_ = n;
    }
    if (hash_.size() < 2 * (n + 1)) {
      hash_count_ = 0;  // force a rebuild at the next add (table too full)
      for (uint32_t i = begin; i < items_.size(); ++i) if (items_[i] == it) return;
    } else {
      uint32_t h = item_hash(it) % hash_.size();
      while (hash_[h] != kEmpty) {
        if (items_[hash_[h]] == it) return;
        h = (h + 1) % hash_.size();
      }
      hash_[h] = static_cast<uint32_t>(items_.size());
      ++hash_count_;
    }
  }
  items_.push_back(it);
  ++work_;
}

bool EarleyParser::close_new_set() {
  uint32_t k = static_cast<uint32_t>(set_begin_.size()) - 1;
  uint32_t begin = set_begin_.back();
  ++generation_;  // prediction stamps are per created set, never reused after a pop
  std::vector<uint32_t> scans;
  for (uint32_t i = begin; i < items_.size(); ++i) {
    EarleyItem it = items_[i];
    uint32_t len = g_->rhs_len(it.prod);
    if (it.dot == len) {
      int lhs = g_->lhs(it.prod);
      uint32_t ob = set_begin_[it.origin];
      uint32_t oe = it.origin + 1 < set_begin_.size() ? set_begin_[it.origin + 1]
                                                      : static_cast<uint32_t>(items_.size());
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
  scan_idx_.push_back(std::move(scans));
  return true;
}

void EarleyParser::reset() {
  items_.clear();
  set_begin_.clear();
  scan_idx_.clear();
  std::fill(predicted_stamp_.begin(), predicted_stamp_.end(), 0);
  set_begin_.push_back(0);
  EarleyItem start{g_->start_prod(), 0, 0, 0};
  add(start);
  close_new_set();
}

bool EarleyParser::push_scanned(const uint32_t* new_states) {
  const std::vector<uint32_t>& scans = scan_idx_.back();
  set_begin_.push_back(static_cast<uint32_t>(items_.size()));
  for (size_t i = 0; i < scans.size(); ++i) {
    uint32_t st = new_states[i];
    if (st == Dfa::kDead) continue;
    EarleyItem it = items_[scans[i]];
    it.dfa = st;
    add(it);
    if (g_->dfa(item_terminal(scans[i])).accepting(st)) add(advanced(it));
  }
  if (items_.size() == set_begin_.back()) {
    set_begin_.pop_back();
    return false;
  }
  return close_new_set();
}

bool EarleyParser::push_byte(uint8_t b) {
  const std::vector<uint32_t>& scans = scan_idx_.back();
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
  for (uint32_t i = 0; i < n && set_begin_.size() > 1; ++i) {
    items_.resize(set_begin_.back());
    set_begin_.pop_back();
    scan_idx_.pop_back();
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
