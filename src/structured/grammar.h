// A context-free grammar whose terminals are byte-level DFAs (lexemes), built by the front ends
// (regex, JSON Schema, GBNF, Lark) and compiled into an immutable CompiledGrammar that the Earley
// parser runs on. Symbols: a nonterminal id n >= 0 is written as n, a terminal id t as ~t (< 0).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "structured/automaton.h"

namespace deepinfer::structured {

struct GrammarLimits {
  uint32_t max_dfa_states_per_terminal = 10000;
  uint64_t max_total_dfa_bytes = 256ull << 20;
  uint32_t max_productions = 2000000;
  uint32_t max_symbols = 8000000;  // sum of right-hand-side lengths
};

class GrammarBuilder {
 public:
  static int terminal_symbol(int t) { return ~t; }
  static bool is_terminal(int sym) { return sym < 0; }

  // Terminals are deduplicated by `spec.name`: equal names must mean equal languages.
  int add_terminal(TerminalSpec spec);
  int add_literal(const std::string& bytes);  // exact bytes (may be any bytes, not only UTF-8)
  StatusOr<int> add_regex(const std::string& pattern);  // full-match terminal, JSON-pattern dialect
  int add_nonterminal(std::string name);
  void add_production(int lhs, std::vector<int> rhs);
  int num_nonterminals() const { return static_cast<int>(nt_names_.size()); }
  const std::string& nonterminal_name(int n) const { return nt_names_[n]; }
  size_t num_productions() const { return prods_.size(); }

  // Helpers that create a fresh nonterminal.
  int seq(std::vector<int> rhs, const std::string& name = "seq");
  int alt(const std::vector<std::vector<int>>& alts, const std::string& name = "alt");
  int optional(int sym);
  int star(int sym);              // left-recursive
  int plus(int sym);
  int repeat(int sym, uint32_t min, uint32_t max, bool unbounded);

 private:
  friend class CompiledGrammar;
  std::vector<TerminalSpec> terminals_;
  std::unordered_map<std::string, int> terminal_index_;
  std::vector<std::string> nt_names_;
  std::vector<std::pair<int, std::vector<int>>> prods_;
};

class CompiledGrammar {
 public:
  // Compiles with `start` as the start nonterminal. Unproductive rules (those that derive no
  // string, e.g. from `false` schemas) are removed; errors if nothing is left.
  static StatusOr<std::shared_ptr<CompiledGrammar>> compile(GrammarBuilder builder, int start,
                                                            const GrammarLimits& limits = {});

  uint32_t num_productions() const { return static_cast<uint32_t>(prod_lhs_.size()); }
  int lhs(uint32_t prod) const { return prod_lhs_[prod]; }
  uint32_t rhs_len(uint32_t prod) const { return prod_off_[prod + 1] - prod_off_[prod]; }
  int rhs(uint32_t prod, uint32_t dot) const { return rhs_[prod_off_[prod] + dot]; }
  const std::vector<uint32_t>& prods_of(int nt) const { return prods_of_[nt]; }
  bool nullable(int nt) const { return nullable_[nt] != 0; }
  const Dfa& dfa(int terminal) const { return dfas_[terminal]; }
  const std::string& terminal_name(int t) const { return terminal_names_[t]; }
  uint32_t start_prod() const { return start_prod_; }
  int num_nonterminals() const { return static_cast<int>(prods_of_.size()); }
  int num_terminals() const { return static_cast<int>(dfas_.size()); }
  size_t dfa_memory_bytes() const;
  // For a terminal at rhs position (prod, dot): a superset (256 bits) of the first bytes of every
  // lexeme that can be scanned right after it ends: FIRST(rhs[dot+1..]) and, when that suffix is
  // nullable, FOLLOW(lhs) (bytes of a terminal: Dfa::live_bytes of its start state; nullable
  // terminals and nonterminals are skipped over). The Earley items created when such an item's
  // lexeme ends only scan lexemes in these sets, so a trie child whose byte is in none of them
  // cannot be taken by those items (GrammarMatcher::walk_exits skips such exits without a push).
  const uint64_t* next_bytes(uint32_t prod, uint32_t dot) const {
    return next_sets_.data() + 4 * static_cast<size_t>(next_idx_[prod_off_[prod] + dot]);
  }


 private:
  std::vector<int> prod_lhs_;
  std::vector<uint32_t> prod_off_;
  std::vector<int> rhs_;
  std::vector<std::vector<uint32_t>> prods_of_;
  std::vector<uint8_t> nullable_;
  std::vector<Dfa> dfas_;
  std::vector<std::string> terminal_names_;
  uint32_t start_prod_ = 0;
  std::vector<uint32_t> next_idx_;   // per rhs position: index of its set in next_sets_
  std::vector<uint64_t> next_sets_;  // distinct 256-bit sets, 4 words each
  void compute_next_bytes();
};

}  // namespace deepinfer::structured
