// The compile-time and parser machinery added for mask/compile speed:
// - Dfa::build's process-wide memo: a hit returns tables equal to a fresh build (same regex
//   built under a different state limit, i.e. a different memo key), refusals are memoized and
//   still name the asking terminal;
// - the per-class subset construction: DFAs of random regexes agree with std::regex (ECMAScript)
//   on random strings;
// - EarleyParser's completion index (origin sets of >= 24 items): on a left-recursive grammar
//   with wide alternatives, the matcher accepts exactly what a recursive-descent reference does.
#include <gtest/gtest.h>

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "structured/automaton.h"
#include "structured/gbnf.h"
#include "structured/matcher.h"
#include "test_util.h"

namespace deepinfer::structured::testing {
namespace {

uint32_t seed_from_device() {
  uint32_t s = std::random_device{}();
  std::printf("seed %u\n", s);
  return s;
}

// Random regex over the alphabet {a, b, c} with classes, groups, alternation, bounded repeats and
// unbounded repeats of atoms.
std::string random_regex(std::mt19937& rng, int depth) {
  int kind = depth <= 0 ? static_cast<int>(rng() % 3) : static_cast<int>(rng() % 7);
  switch (kind) {
    case 0: return std::string(1, "abc"[rng() % 3]);
    case 1: return std::vector<std::string>{"[ab]", "[^a]", "[a-c]", "."}[rng() % 4];
    case 2: return "(?:" + random_regex(rng, depth - 1) + ")";
    case 3: return random_regex(rng, depth - 1) + random_regex(rng, depth - 1);
    case 4: return "(?:" + random_regex(rng, depth - 1) + "|" + random_regex(rng, depth - 1) + ")";
    case 5: {
      uint32_t lo = rng() % 3, hi = lo + rng() % 3;
      return "(?:" + random_regex(rng, depth - 1) + "){" + std::to_string(lo) + "," + std::to_string(hi) + "}";
    }
    // Unbounded repeats only over an atom: nested ones ((?:(?:a*)b*)*) send std::regex, the
    // oracle, into exponential backtracking (seen: 2 hangs in 40 runs).
    default: return "(?:" + random_regex(rng, 0) + ")" + std::string(1, "*+?"[rng() % 3]);
  }
}

TerminalSpec spec_for(const std::string& name, const std::string& pattern) {
  auto re = parse_regex(pattern);
  EXPECT_TRUE(re.ok()) << pattern << ": " << re.status().to_string();
  TerminalSpec spec;
  spec.name = name;
  TerminalComponent c;
  c.regex = std::make_shared<Regex>(std::move(*re));
  spec.components.push_back(c);
  return spec;
}

bool dfa_matches(const Dfa& d, const std::string& s) {
  uint32_t st = d.start();
  for (char ch : s) {
    if (st == Dfa::kDead) return false;
    st = d.next(st, static_cast<uint8_t>(ch));
  }
  return st != Dfa::kDead && d.accepting(st);
}

bool same_tables(const Dfa& a, const Dfa& b) {
  if (a.start() != b.start() || a.num_states() != b.num_states()) return false;
  for (int c = 0; c < 256; ++c) {
    if (a.byte_class(static_cast<uint8_t>(c)) != b.byte_class(static_cast<uint8_t>(c))) return false;
  }
  for (uint32_t s = 0; s < a.num_states(); ++s) {
    if (a.accepting(s) != b.accepting(s)) return false;
    for (int c = 0; c < 256; ++c) {
      if (a.next(s, static_cast<uint8_t>(c)) != b.next(s, static_cast<uint8_t>(c))) return false;
    }
  }
  return true;
}

TEST(DfaBuildMemo, HitEqualsFreshBuildAndAgreesWithStdRegex) {
  uint32_t seed = seed_from_device();
  std::mt19937 rng(seed);
  for (int iter = 0; iter < 60; ++iter) {
    std::string pattern = random_regex(rng, 4);
    TerminalSpec spec = spec_for("t" + std::to_string(iter), pattern);
    // Two limits never used elsewhere: two fresh builds (different memo keys), then a hit.
    const uint32_t limit_a = 900001 + iter * 2, limit_b = limit_a + 1;
    auto a = Dfa::build(spec, limit_a);
    auto b = Dfa::build(spec, limit_b);
    ASSERT_TRUE(a.ok() && b.ok()) << "seed " << seed << " " << pattern;
    uint64_t hits = Dfa::build_cache_hits();
    spec.name = "renamed";
    auto c = Dfa::build(spec, limit_a);
    ASSERT_TRUE(c.ok());
    EXPECT_GE(Dfa::build_cache_hits(), hits + 1) << "seed " << seed;
    EXPECT_TRUE(same_tables(*a, *b)) << "seed " << seed << " " << pattern;
    EXPECT_TRUE(same_tables(*a, *c)) << "seed " << seed << " " << pattern;
    // Language check against std::regex on random strings over {a, b, c, d}.
    std::regex ref("^(?:" + pattern + ")$", std::regex::ECMAScript);
    for (int k = 0; k < 200; ++k) {
      std::string s;
      for (uint32_t n = rng() % 8; n > 0; --n) s += "abcd"[rng() % 4];
      ASSERT_EQ(dfa_matches(*a, s), std::regex_match(s, ref))
          << "seed " << seed << " pattern " << pattern << " input '" << s << "'";
    }
  }
}

TEST(DfaBuildMemo, RefusalIsMemoizedAndNamesTheTerminal) {
  TerminalSpec spec = spec_for("first", "[ab]{40}c[ab]{40}");
  auto a = Dfa::build(spec, 20);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("terminal first:"), std::string::npos) << a.status().to_string();
  EXPECT_NE(a.status().message().find("20 DFA states"), std::string::npos) << a.status().to_string();
  uint64_t hits = Dfa::build_cache_hits();
  spec.name = "second";
  auto b = Dfa::build(spec, 20);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), a.status().code());
  EXPECT_NE(b.status().message().find("terminal second:"), std::string::npos) << b.status().to_string();
  EXPECT_GE(Dfa::build_cache_hits(), hits + 1);
}

// Reference recognizer for  list ::= item | list "," item ;
//   item ::= "a0" | ... | "a29" | "[" "]" | "[" list "]"
struct Reference {
  const std::string& s;
  size_t p = 0;
  bool item() {
    if (p < s.size() && s[p] == 'a') {
      size_t q = p + 1, n = 0;
      while (q < s.size() && s[q] >= '0' && s[q] <= '9' && n < 2) { ++q; ++n; }
      if (n == 0) return false;
      int v = std::stoi(s.substr(p + 1, n));
      if (v > 29 || (n == 2 && s[p + 1] == '0')) return false;
      p = q;
      return true;
    }
    if (p < s.size() && s[p] == '[') {
      ++p;
      if (p < s.size() && s[p] == ']') { ++p; return true; }
      if (!list()) return false;
      if (p < s.size() && s[p] == ']') { ++p; return true; }
      return false;
    }
    return false;
  }
  bool list() {
    if (!item()) return false;
    while (p < s.size() && s[p] == ',') {
      ++p;
      if (!item()) return false;
    }
    return true;
  }
  bool accepts() { return list() && p == s.size(); }
};

std::string random_list(std::mt19937& rng, int depth) {
  std::string out;
  for (uint32_t n = 1 + rng() % 3; n > 0; --n) {
    if (!out.empty()) out += ",";
    if (depth > 0 && rng() % 3 == 0) out += "[" + (rng() % 4 == 0 ? std::string() : random_list(rng, depth - 1)) + "]";
    else out += "a" + std::to_string(rng() % 30);
  }
  return out;
}

TEST(EarleyCompletionIndex, WideLeftRecursiveGrammarMatchesReference) {
  std::string gbnf = "root ::= list\nlist ::= item | list \",\" item\nitem ::= \"[\" \"]\" | \"[\" list \"]\"";
  for (int i = 0; i < 30; ++i) gbnf += " | \"a" + std::to_string(i) + "\"";
  auto g = compile_gbnf(gbnf + "\n");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  uint32_t seed = seed_from_device();
  std::mt19937 rng(seed);
  int accepted = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::string s = random_list(rng, 4);
    // Mutate half of them: drop, duplicate or replace one byte.
    if (rng() % 2 && !s.empty()) {
      size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s.erase(at, 1); break;
        case 1: s.insert(at, 1, s[at]); break;
        default: s[at] = "a0,[]9x"[rng() % 7]; break;
      }
    }
    GrammarMatcher m(*g, byte_vocab());
    bool ours = m.accept_bytes(s) && m.can_terminate();
    Reference ref{s};
    bool want = ref.accepts();
    accepted += want;
    ASSERT_EQ(ours, want) << "seed " << seed << " input '" << s << "'";
    // Along accepted strings, masks (multi-byte tokens included) equal brute force.
    if (want && iter % 4 == 0) {
      auto vocab = byte_vocab({"a1", "a2", "a29", ",a", "],", "[[", "],[", "a0]", "a3,a"});
      GrammarMatcher walk(*g, vocab);
      std::vector<uint32_t> mask(vocab->bitmask_words());
      for (size_t i = 0; i <= s.size(); ++i) {
        ASSERT_TRUE(walk.fill_mask(mask.data(), mask.size()).ok());
        std::vector<bool> expect = brute_force(walk, *vocab);
        for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
          ASSERT_EQ(((mask[t >> 5] >> (t & 31)) & 1) != 0, expect[t])
              << "seed " << seed << " input '" << s << "' prefix " << i << " token " << t;
        }
        if (i < s.size()) {
          ASSERT_TRUE(walk.accept_bytes(std::string(1, s[i])));
        }
      }
    }
  }
  EXPECT_GT(accepted, 100) << "seed " << seed;
}

}  // namespace
}  // namespace deepinfer::structured::testing
