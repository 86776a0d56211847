// Earley recognizer over bytes whose terminals are DFAs (lexemes). An item waiting on a terminal
// carries the terminal's DFA state, so the parser moves inside a lexeme with one table lookup
// per byte and only runs completion/prediction when a lexeme can end. The chart is a stack of
// Earley sets (one per accepted byte, or per "exit" during a mask walk); popping sets is the
// rollback. Nullable symbols are handled as in Aycock & Horspool (predicting a nullable symbol
// also advances over it). Nullable terminals (e.g. bounded whitespace) work the same way.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "structured/grammar.h"

namespace deepinfer::structured {

struct EarleyItem {
  uint32_t prod;
  uint32_t dot;
  uint32_t origin;  // index of the set where the production was predicted
  uint32_t dfa;     // DFA state when rhs[dot] is a terminal, else 0
  bool operator==(const EarleyItem& o) const {
    return prod == o.prod && dot == o.dot && origin == o.origin && dfa == o.dfa;
  }
};

class EarleyParser {
 public:
  explicit EarleyParser(const CompiledGrammar* g);

  void reset();  // chart = { closure(S' -> . start) }
  uint32_t num_sets() const { return static_cast<uint32_t>(set_begin_.size()); }
  // Advances by one byte; false (and no change) if the byte is not allowed.
  bool push_byte(uint8_t b);
  // Pushes the set reached when each scan item of the top set moved to new_states[i] (0 = died),
  // in the order of scan_items(). False (and no change) when the new set is empty.
  bool push_scanned(const uint32_t* new_states);
  void pop_sets(uint32_t n);
  // Scan items of the top set: items whose next symbol is a terminal.
  const std::vector<uint32_t>& scan_items() const { return scan_idx_[set_begin_.size() - 1]; }
  const EarleyItem& item(uint32_t idx) const { return items_[idx]; }
  int item_terminal(uint32_t idx) const;
  // Items of the top set below this index are the scan items of the set under it moved by
  // push_scanned (their copies with the new DFA states); the rest (completions, predictions) are
  // new. A scan item at or past it is a "new" one. Only for sets made by push_scanned/push_byte.
  uint32_t copy_end() const { return copy_end_[set_begin_.size() - 1]; }
  bool can_finish() const;  // the input so far is a complete sentence
  // The items of set k are item(set_begin(k)) .. item(set_end(k) - 1).
  uint32_t set_begin(uint32_t k) const { return set_begin_[k]; }
  uint32_t set_end(uint32_t k) const {
    return k + 1 < set_begin_.size() ? set_begin_[k + 1] : static_cast<uint32_t>(items_.size());
  }
  // A stamp unique to this creation of set k (never reused after a pop, 64 bits: no wrap). Sets
  // 0..k are unchanged since a moment iff set k's stamp is the same (the chart is a stack).
  uint64_t set_stamp(uint32_t k) const { return set_gen_[k]; }
  uint64_t work() const { return work_; }
  void reset_work() { work_ = 0; }

 private:
  void add(const EarleyItem& it);
  EarleyItem advanced(const EarleyItem& it) const;
  bool close_new_set();

  const CompiledGrammar* g_;
  std::vector<EarleyItem> items_;
  std::vector<uint32_t> set_begin_;
  std::vector<uint32_t> copy_end_;  // per set, see copy_end()
  // Per set: indices of scan items. Entries past num_sets() are kept (their capacity is reused),
  // in a deque so that references stay valid while sets are pushed.
  std::deque<std::vector<uint32_t>> scan_idx_;
  // Completion index of a closed set: (nonterminal after the dot, item index) sorted, built on
  // the first completion into a set of at least kIndexedSet items; valid while gen matches the
  // set's creation stamp (set_gen_), so a popped and re-pushed set never sees a stale index.
  struct WaitIndex {
    uint64_t gen = 0;
    std::vector<std::pair<int, uint32_t>> by_symbol;
  };
  std::vector<WaitIndex> wait_;
  std::vector<uint64_t> set_gen_;  // per set: generation_ when it was closed
  std::vector<uint64_t> predicted_stamp_;         // per nonterminal: generation_ when predicted
  std::vector<uint32_t> hash_;                     // open addressing over the set being built
  uint32_t hash_count_ = 0;  // items of the set being built that are in hash_ (0: none)
  uint32_t hash_size_ = 0;   // the power-of-two prefix of hash_ in use
  uint64_t generation_ = 0;
  uint64_t work_ = 0;
};

}  // namespace deepinfer::structured
