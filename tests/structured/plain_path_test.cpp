// The three ways plain_depth / plain_dies_by answer (plain_depth.h, PlainPath) must agree on
// every question: kSearch (the breadth-first searches, here unbounded, so exact), kTable (the
// exact per-automaton tables) and kAuto (session 7: a lookup when the table exists, else a probe
// search within a small budget, else the table or the search). Random JSON-string lexemes
// (counted strings, character-class repeats, ECMA `.`, multi-byte and cut characters,
// U+2028), every plain measure (both classes, bytes and code points), both stop rules, and
// plain_dies_by at several lengths. kAuto is asked first, mostly with this thread's tables
// dropped (forget_plain_tables), so that its probes are taken, and when they run out of budget
// the table is built and used.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "structured/automaton.h"
#include "structured/plain_depth.h"
#include "structured/plain_text.h"
#include "structured/regex.h"

namespace deepinfer::structured::testing {
namespace {

uint32_t seed_from_device() {
  uint32_t s = std::random_device{}();
  std::printf("seed %u\n", s);
  return s;
}

std::string random_atom(std::mt19937& rng) {
  static const std::vector<std::string> atoms = {
      "a", "b", "\\.", "-", "\u00e9", "\u20ac", "\U0001F600", ".", "[a-z]", "[^\"]", "\\w", "[\\w.:-]",
      "\\u2028", "\\s", "[0-9]", "x", "[\u00e0-\u00ff]", "[^a]"};
  return atoms[rng() % atoms.size()];
}

// A random string-content regex: sequences, alternations and counted / unbounded repeats.
std::string random_content(std::mt19937& rng, int depth) {
  const int kind = depth <= 0 ? 0 : static_cast<int>(rng() % 5);
  switch (kind) {
    case 0: return random_atom(rng);
    case 1: return random_content(rng, depth - 1) + random_content(rng, depth - 1);
    case 2: return "(?:" + random_content(rng, depth - 1) + "|" + random_content(rng, depth - 1) + ")";
    case 3: {
      const uint32_t lo = rng() % 4, hi = lo + rng() % 30;
      return "(?:" + random_content(rng, depth - 1) + "){" + std::to_string(lo) + "," + std::to_string(hi) + "}";
    }
    default: return "(?:" + random_content(rng, depth - 1) + ")" + std::string(1, "*+?"[rng() % 3]);
  }
}

TEST(PlainPath, AutoTableAndSearchAgree) {
  const uint32_t seed = seed_from_device();
  std::mt19937 rng(seed);
  int automata = 0, questions = 0, deep = 0, dying = 0, long_runs = 0;
  for (int iter = 0; iter < 60; ++iter) {
    std::string pattern = "^" + random_content(rng, 3) + "$";
    if (iter % 6 == 0) pattern = "^.{0," + std::to_string(rng() % 160) + "}$";      // counted
    if (iter % 6 == 1) pattern = "^[\\w.:-]{" + std::to_string(rng() % 5) + ",}$";  // class run
    auto re = parse_regex(pattern);
    ASSERT_TRUE(re.ok()) << pattern << ": " << re.status().to_string() << " seed " << seed;
    TerminalSpec spec;
    spec.name = "p" + std::to_string(iter);
    TerminalComponent c;
    c.regex = std::make_shared<Regex>(std::move(*re));
    c.json_string = true;
    // A raw lexeme that runs on every plain text and ends only at a '"' (never plain), with
    // 290-360 states (a table-sized automaton with long plain runs).
    if (iter % 6 == 2) {
      auto raw = parse_regex("^(?:[ -~]|\\u00e9){0," + std::to_string(70 + rng() % 18) + "}\"$");
      ASSERT_TRUE(raw.ok()) << raw.status().to_string();
      c.regex = std::make_shared<Regex>(std::move(*raw));
      c.json_string = false;
    }
    c.mode = (rng() % 2) ? TerminalComponent::Mode::kFull : TerminalComponent::Mode::kSearch;
    spec.components.push_back(c);
    auto dfa = Dfa::build(spec, 1500);
    if (!dfa.ok()) continue;  // over the state limit: nothing to ask
    ++automata;
    const Dfa& d = *dfa;
    std::vector<uint32_t> states;
    for (uint32_t s = 1; s < d.num_states(); ++s) states.push_back(s);
    std::shuffle(states.begin(), states.end(), rng);
    if (states.size() > 16) states.resize(16);
    const uint32_t cap = 1 + rng() % 200, unbounded = 1u << 30;
    for (int m = 0; m < plain_text::kNumMeasures; ++m) {
      // kAuto first (probes, then the table once one runs out), then the other two.
      std::vector<uint32_t> autod;
      std::vector<bool> auto_dies;
      const uint32_t ks[] = {1, 2, 3, 7, 20, 90, cap + 1};
      // Default probe budgets, or tiny ones (the probes then run out on most questions).
      const bool tiny = rng() % 2;
      set_plain_probe_budgets(tiny ? 4 : 256, tiny ? 8 : 1024);
      for (uint32_t s : states) {
        // Without a table, each question probes first (then builds the table if the probe runs
        // out); the next question of the same state then finds the table.
        for (bool stop_at_dead : {true, false}) {
          forget_plain_tables();
          autod.push_back(plain_depth(d, s, stop_at_dead, cap, unbounded, m, PlainPath::kAuto));
        }
        for (uint32_t k : ks) {
          if (k % 2) forget_plain_tables();
          auto_dies.push_back(plain_dies_by(d, s, k, unbounded, m, PlainPath::kAuto));
        }
      }
      size_t a = 0, b = 0;
      for (uint32_t s : states) {
        for (bool stop_at_dead : {true, false}) {
          const uint32_t ref = plain_depth(d, s, stop_at_dead, cap, unbounded, m, PlainPath::kSearch);
          const uint32_t tab = plain_depth(d, s, stop_at_dead, cap, unbounded, m, PlainPath::kTable);
          ASSERT_EQ(tab, ref) << pattern << " state " << s << " measure " << m << " stop_at_dead "
                              << stop_at_dead << " seed " << seed;
          ASSERT_EQ(autod[a], ref) << pattern << " state " << s << " measure " << m << " stop_at_dead "
                                   << stop_at_dead << " seed " << seed;
          ++a;
          ++questions;
          deep += ref > 0;
          long_runs += ref >= 10;
        }
        for (uint32_t k : ks) {
          const bool ref = plain_dies_by(d, s, k, unbounded, m, PlainPath::kSearch);
          const bool tab = plain_dies_by(d, s, k, unbounded, m, PlainPath::kTable);
          ASSERT_EQ(tab, ref) << pattern << " state " << s << " k " << k << " measure " << m << " seed " << seed;
          ASSERT_EQ(auto_dies[b], ref) << pattern << " state " << s << " k " << k << " measure " << m
                                       << " seed " << seed;
          ++b;
          ++questions;
          dying += ref;
        }
      }
    }
  }
  set_plain_probe_budgets(256, 1024);
  std::printf("automata %d questions %d nonzero depths %d (>= 10: %d) dying %d\n", automata, questions, deep,
              long_runs, dying);
  EXPECT_GE(automata, 30) << "seed " << seed;
  EXPECT_GT(long_runs, 0) << "seed " << seed;
  EXPECT_GT(deep, 0) << "seed " << seed;
  EXPECT_GT(dying, 0) << "seed " << seed;
}

}  // namespace
}  // namespace deepinfer::structured::testing
