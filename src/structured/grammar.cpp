#include "structured/grammar.h"

#include <algorithm>
#include <array>
#include <map>


namespace deepinfer::structured {

int GrammarBuilder::add_terminal(TerminalSpec spec) {
  auto it = terminal_index_.find(spec.name);
  if (it != terminal_index_.end()) return it->second;
  int id = static_cast<int>(terminals_.size());
  terminal_index_.emplace(spec.name, id);
  terminals_.push_back(std::move(spec));
  return id;
}

int GrammarBuilder::add_literal(const std::string& bytes) {
  std::string name = "lit:" + bytes;
  auto it = terminal_index_.find(name);
  if (it != terminal_index_.end()) return it->second;
  auto re = std::make_shared<Regex>();
  if (decode_utf8(bytes).ok()) {
    re->root = re->add_literal(bytes);  // code points, re-encoded to the same UTF-8 bytes
  } else {
    // Not UTF-8 (front ends decode their input as UTF-8, so only ASCII-safe literals get here):
    // one class per byte.
    std::vector<int> kids;
    for (unsigned char c : bytes) kids.push_back(re->add_class(CodepointSet::single(c)));
    re->root = re->add_concat(std::move(kids));
  }
  TerminalSpec spec;
  spec.name = name;
  TerminalComponent comp;
  comp.regex = re;
  spec.components.push_back(comp);
  return add_terminal(std::move(spec));
}

StatusOr<int> GrammarBuilder::add_regex(const std::string& pattern) {
  std::string name = "re:" + pattern;
  auto it = terminal_index_.find(name);
  if (it != terminal_index_.end()) return it->second;
  DI_ASSIGN_OR_RETURN(Regex re, parse_regex(pattern));
  TerminalSpec spec;
  spec.name = name;
  TerminalComponent comp;
  comp.regex = std::make_shared<Regex>(std::move(re));
  spec.components.push_back(comp);
  return add_terminal(std::move(spec));
}

int GrammarBuilder::add_nonterminal(std::string name) {
  nt_names_.push_back(std::move(name));
  return static_cast<int>(nt_names_.size()) - 1;
}

void GrammarBuilder::add_production(int lhs, std::vector<int> rhs) {
  prods_.emplace_back(lhs, std::move(rhs));
}

int GrammarBuilder::seq(std::vector<int> rhs, const std::string& name) {
  int n = add_nonterminal(name);
  add_production(n, std::move(rhs));
  return n;
}

int GrammarBuilder::alt(const std::vector<std::vector<int>>& alts, const std::string& name) {
  int n = add_nonterminal(name);
  for (const auto& a : alts) add_production(n, a);
  return n;
}

int GrammarBuilder::optional(int sym) { return alt({{sym}, {}}, "opt"); }

int GrammarBuilder::star(int sym) {
  int n = add_nonterminal("star");
  add_production(n, {});
  add_production(n, {n, sym});
  return n;
}

int GrammarBuilder::plus(int sym) {
  int n = add_nonterminal("plus");
  add_production(n, {sym});
  add_production(n, {n, sym});
  return n;
}

int GrammarBuilder::repeat(int sym, uint32_t min, uint32_t max, bool unbounded) {
  std::vector<int> rhs(min, sym);
  if (unbounded) {
    rhs.push_back(star(sym));
  } else if (max > min) {
    // Nested optionals: (sym (sym (...)?)?)?
    int tail = -1;
    for (uint32_t i = min; i < max; ++i) {
      int n = add_nonterminal("rep");
      add_production(n, {});
      if (tail == -1) add_production(n, {sym}); else add_production(n, {sym, tail});
      tail = n;
    }
    rhs.push_back(tail);
  }
  return seq(std::move(rhs), "repeat");
}

StatusOr<std::shared_ptr<CompiledGrammar>> CompiledGrammar::compile(GrammarBuilder b, int start,
                                                                    const GrammarLimits& limits) {
  auto g = std::shared_ptr<CompiledGrammar>(new CompiledGrammar());
  if (b.prods_.size() > limits.max_productions) {
    return ResourceExhausted("grammar has " + std::to_string(b.prods_.size()) +
                             " productions (limit " + std::to_string(limits.max_productions) + ")");
  }
  size_t total_syms = 0;
  for (const auto& p : b.prods_) total_syms += p.second.size();
  if (total_syms > limits.max_symbols) {
    return ResourceExhausted("grammar has " + std::to_string(total_syms) + " symbols (limit " +
                             std::to_string(limits.max_symbols) + ")");
  }
  uint64_t dfa_bytes = 0;
  for (const auto& t : b.terminals_) {
    DI_ASSIGN_OR_RETURN(Dfa d, Dfa::build(t, std::max(limits.max_dfa_states_per_terminal, t.min_state_limit)));
    dfa_bytes += d.memory_bytes();
    if (dfa_bytes > limits.max_total_dfa_bytes) {
      return ResourceExhausted("grammar terminals exceed " +
                               std::to_string(limits.max_total_dfa_bytes >> 20) + " MiB of automata");
    }
    g->dfas_.push_back(std::move(d));
    g->terminal_names_.push_back(t.name);
  }
  int nt = b.num_nonterminals();
  // Productivity: a nonterminal is productive if some production has only productive symbols.
  std::vector<uint8_t> productive(nt + 1, 0);
  auto sym_productive = [&](int s) {
    return GrammarBuilder::is_terminal(s) ? !g->dfas_[~s].empty_language() : productive[s] != 0;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (const auto& p : b.prods_) {
      if (productive[p.first]) continue;
      bool ok = true;
      for (int s : p.second) ok = ok && sym_productive(s);
      if (ok) { productive[p.first] = 1; changed = true; }
    }
  }
  if (!productive[start]) {
    return InvalidArgument("the grammar matches no input at all (e.g. a `false` schema or "
                           "contradictory constraints)");
  }
  // Super start S' -> start, production 0.
  int super = nt;
  g->prods_of_.assign(nt + 1, {});
  g->prod_off_.push_back(0);
  auto emit = [&](int lhs, const std::vector<int>& rhs) {
    uint32_t id = static_cast<uint32_t>(g->prod_lhs_.size());
    g->prod_lhs_.push_back(lhs);
    g->rhs_.insert(g->rhs_.end(), rhs.begin(), rhs.end());
    g->prod_off_.push_back(static_cast<uint32_t>(g->rhs_.size()));
    g->prods_of_[lhs].push_back(id);
  };
  emit(super, {start});
  g->start_prod_ = 0;
  for (const auto& p : b.prods_) {
    bool ok = productive[p.first] != 0;
    for (int s : p.second) ok = ok && sym_productive(s);
    if (ok) emit(p.first, p.second);
  }
  // Nullable nonterminals (terminals whose start state accepts count as nullable symbols).
  g->nullable_.assign(nt + 1, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t p = 0; p < g->num_productions(); ++p) {
      int l = g->prod_lhs_[p];
      if (g->nullable_[l]) continue;
      bool all = true;
      for (uint32_t i = 0; i < g->rhs_len(p) && all; ++i) {
        int s = g->rhs(p, i);
        all = GrammarBuilder::is_terminal(s) ? g->dfas_[~s].accepting(g->dfas_[~s].start())
                                              : g->nullable_[s] != 0;
      }
      if (all) { g->nullable_[l] = 1; changed = true; }
    }
  }
  g->compute_next_bytes();
  return g;
}

void CompiledGrammar::compute_next_bytes() {
  using Set = std::array<uint64_t, 4>;
  const int nnt = num_nonterminals();
  auto or_into = [](Set& a, const uint64_t* b) {
    bool changed = false;
    for (int w = 0; w < 4; ++w) {
      uint64_t n = a[w] | b[w];
      changed |= n != a[w];
      a[w] = n;
    }
    return changed;
  };
  auto sym_nullable = [&](int s) {
    return GrammarBuilder::is_terminal(s) ? dfas_[~s].accepting(dfas_[~s].start()) : nullable_[s] != 0;
  };
  // FIRST bytes of nonterminals (least fixpoint).
  std::vector<Set> first(nnt, Set{0, 0, 0, 0});
  auto sym_first = [&](int s) -> const uint64_t* {
    return GrammarBuilder::is_terminal(s) ? dfas_[~s].live_bytes(dfas_[~s].start()) : first[s].data();
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t p = 0; p < num_productions(); ++p) {
      for (uint32_t i = 0; i < rhs_len(p); ++i) {
        int s = rhs(p, i);
        changed |= or_into(first[lhs(p)], sym_first(s));
        if (!sym_nullable(s)) break;
      }
    }
  }
  // suffix[k] = FIRST(rhs[k..end of its production]) and whether that suffix is nullable.
  std::vector<Set> suffix(rhs_.size() + 1, Set{0, 0, 0, 0});
  std::vector<uint8_t> suffix_nullable(rhs_.size() + 1, 1);
  for (uint32_t p = 0; p < num_productions(); ++p) {
    const uint32_t b = prod_off_[p], e = prod_off_[p + 1];
    for (uint32_t k = e; k-- > b;) {
      int s = rhs_[k];
      Set cur{0, 0, 0, 0};
      or_into(cur, sym_first(s));
      bool nul = sym_nullable(s);
      if (nul && k + 1 < e) or_into(cur, suffix[k + 1].data());
      suffix[k] = cur;
      suffix_nullable[k] = nul && (k + 1 == e || suffix_nullable[k + 1]);
    }
  }
  // FOLLOW bytes of nonterminals (least fixpoint); nothing follows the start.
  std::vector<Set> follow(nnt, Set{0, 0, 0, 0});
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t p = 0; p < num_productions(); ++p) {
      const uint32_t b = prod_off_[p], e = prod_off_[p + 1];
      for (uint32_t k = b; k < e; ++k) {
        int s = rhs_[k];
        if (GrammarBuilder::is_terminal(s)) continue;
        if (k + 1 < e) changed |= or_into(follow[s], suffix[k + 1].data());
        if (k + 1 == e || suffix_nullable[k + 1]) changed |= or_into(follow[s], follow[lhs(p)].data());
      }
    }
  }
  // Per terminal position: FIRST(rest) + (rest nullable ? FOLLOW(lhs) : {}), deduplicated.
  std::map<Set, uint32_t> ids;
  next_idx_.assign(rhs_.size(), 0);
  next_sets_.clear();
  auto intern = [&](const Set& x) {
    auto it = ids.find(x);
    if (it != ids.end()) return it->second;
    uint32_t id = static_cast<uint32_t>(ids.size());
    ids.emplace(x, id);
    next_sets_.insert(next_sets_.end(), x.begin(), x.end());
    return id;
  };
  intern(Set{0, 0, 0, 0});
  for (uint32_t p = 0; p < num_productions(); ++p) {
    const uint32_t b = prod_off_[p], e = prod_off_[p + 1];
    for (uint32_t k = b; k < e; ++k) {
      if (!GrammarBuilder::is_terminal(rhs_[k])) continue;
      Set x{0, 0, 0, 0};
      if (k + 1 < e) or_into(x, suffix[k + 1].data());
      if (k + 1 == e || suffix_nullable[k + 1]) or_into(x, follow[lhs(p)].data());
      next_idx_[k] = intern(x);
    }
  }
}

size_t CompiledGrammar::dfa_memory_bytes() const {
  size_t n = 0;
  for (const auto& d : dfas_) n += d.memory_bytes();
  return n;
}


}  // namespace deepinfer::structured
