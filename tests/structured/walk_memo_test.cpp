// Session 8 fast paths of GrammarMatcher::walk_exits, checked against the paths they shortcut:
// - walks below the top set's exits kept across masks (keyed by the top set's skeleton and the
//   states pushed; MatcherOptions::keep_exit_walks), which must survive accepts, speculative
//   excursions and rollbacks (set stamps);
// - exits skipped without a push when no child byte meets CompiledGrammar::next_bytes of the
//   lexemes ending there, and exits skipped when no child byte meets the pushed set's new scan
//   bytes.
// On random walks (random tokens, random excursions of 1-3 tokens rolled back, random real
// rollbacks) every mask of a long-lived matcher must equal the mask of a fresh matcher with
// keep_exit_walks off that replays the same tokens, and brute force (a token is allowed iff its
// bytes can be fed) on every third step; the fast paths must have been taken.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "structured/gbnf.h"
#include "test_util.h"

namespace deepinfer::structured::testing {
namespace {

// Tokens rich in string bodies, closing quotes followed by JSON punctuation, whitespace runs and
// digits (where numbers end at every digit prefix).
std::vector<std::string> memo_tokens(std::mt19937& rng, int n) {
  const std::vector<std::string> pieces = {
      "a", "b", "xy", "name", "id", "\"", "\",", "\"}", "\"]", "\":", "\":\"", "\\\"", "\\n", " ",
      "  ", "\n", "\n  ", "0", "1", "12", "7", ".", "e", "-", "{", "}", "[", "]", ",", ":",
      "true", "null", "\xc3\xa9", "\xe2\x82\xac", "_", "Z"};
  std::vector<std::string> toks;
  std::set<std::string> seen;
  while (static_cast<int>(toks.size()) < n) {
    std::string t;
    int parts = 1 + static_cast<int>(rng() % 4);
    for (int p = 0; p < parts; ++p) t += pieces[rng() % pieces.size()];
    if (t.size() > 16) continue;
    if (seen.insert(t).second) toks.push_back(t);
  }
  return toks;
}

std::vector<uint32_t> mask_of(GrammarMatcher& m, const TokenVocabulary& v) {
  std::vector<uint32_t> mask(v.bitmask_words());
  Status st = m.fill_mask(mask.data(), mask.size());
  EXPECT_TRUE(st.ok()) << st.to_string();
  return mask;
}

std::vector<int32_t> allowed_of(const std::vector<uint32_t>& mask, const TokenVocabulary& v) {
  std::vector<int32_t> out;
  for (int32_t t = 0; t < v.vocab_size(); ++t) {
    if (((mask[t >> 5] >> (t & 31)) & 1) && !v.is_eos(t)) out.push_back(t);
  }
  return out;
}

struct Totals {
  uint64_t masks = 0, reuses = 0, groups = 0, pushes = 0, excursions = 0, rollbacks = 0;
};

void check(const std::shared_ptr<CompiledGrammar>& g, const std::shared_ptr<const TokenVocabulary>& vocab,
           int walks, int steps, std::mt19937& rng, Totals* tot, const std::string& what) {
  MatcherOptions off;
  off.keep_exit_walks = false;
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(g, vocab);  // keeps its walks for the whole walk
    std::vector<int32_t> accepted;
    auto expect_fresh = [&](const std::vector<uint32_t>& mask, const std::vector<int32_t>& path,
                            const std::string& where) {
      GrammarMatcher fresh(g, vocab, off);
      for (int32_t t : path) ASSERT_TRUE(fresh.accept_token(t));
      ASSERT_EQ(mask_of(fresh, *vocab), mask)
          << what << ": seed " << test_seed() << " walk " << w << " " << where << " after "
          << path.size() << " tokens";
    };
    for (int s = 0; s < steps; ++s) {
      std::vector<uint32_t> mask = mask_of(m, *vocab);
      ++tot->masks;
      tot->reuses += m.last_mask_stats().exit_reuses;
      tot->groups += m.last_mask_stats().exit_groups;
      tot->pushes += m.last_mask_stats().top_pushes;
      expect_fresh(mask, accepted, "step " + std::to_string(s));
      if (s % 3 == 0) {
        auto expect = brute_force(m, *vocab);
        for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
          ASSERT_EQ(static_cast<bool>((mask[t >> 5] >> (t & 31)) & 1), expect[t])
              << what << ": seed " << test_seed() << " walk " << w << " step " << s << " token "
              << t << " '" << (t < vocab->num_tokens() ? vocab->token_bytes(t) : "<pad>") << "'";
        }
      }
      std::vector<int32_t> allowed = allowed_of(mask, *vocab);
      if (allowed.empty()) break;
      // A speculative excursion of 1-3 tokens, its masks checked, then rolled back.
      if (rng() % 2 == 0) {
        std::vector<int32_t> path = accepted;
        std::vector<uint32_t> cur = mask;
        int k = 1 + static_cast<int>(rng() % 3), pushed = 0;
        for (int j = 0; j < k; ++j) {
          std::vector<int32_t> a = allowed_of(cur, *vocab);
          if (a.empty()) break;
          int32_t t = a[rng() % a.size()];
          ASSERT_TRUE(m.accept_token(t));
          path.push_back(t);
          ++pushed;
          cur = mask_of(m, *vocab);
          expect_fresh(cur, path, "excursion");
        }
        m.rollback(pushed);
        ++tot->excursions;
        ASSERT_EQ(mask_of(m, *vocab), mask) << what << ": seed " << test_seed() << " after excursion";
      }
      // Now and then roll real tokens back (the next tokens then differ from the old ones).
      if (accepted.size() >= 2 && rng() % 6 == 0) {
        int k = 1 + static_cast<int>(rng() % 2);
        m.rollback(k);
        accepted.resize(accepted.size() - k);
        ++tot->rollbacks;
        continue;
      }
      int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(pick));
      accepted.push_back(pick);
    }
  }
}

class WalkMemo : public ::testing::Test {
 protected:
  void SetUp() override {
    rng_.seed(test_seed());
    vocab_ = byte_vocab(memo_tokens(rng_, 2000));
  }
  std::mt19937 rng_;
  std::shared_ptr<const TokenVocabulary> vocab_;
};

TEST_F(WalkMemo, JsonStringsInNestedObjectsAndArrays) {
  auto g = compile_json_schema(R"({"type":"object","properties":{
      "name":{"type":"string"},"id":{"type":"string","maxLength":6},
      "tags":{"type":"array","items":{"type":"string","pattern":"^[a-z_]*$"}},
      "n":{"type":"integer"},"x":{"type":"number"},
      "inner":{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"boolean"},
                                             "list":{"type":"array","items":{"type":"object",
                                               "properties":{"id":{"type":"string"}}}}}}}})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Totals tot;
  check(g->grammar, vocab_, 8, 50, rng_, &tot, "json");
  EXPECT_GT(tot.masks, 0u);
  // Deterministic: inside a string the second mask reuses the first one's closing-quote walks.
  GrammarMatcher m(g->grammar, vocab_);
  ASSERT_TRUE(m.accept_bytes("{\"name\":\"ab"));
  std::vector<uint32_t> first = mask_of(m, *vocab_);
  EXPECT_GT(m.last_mask_stats().exit_walks, 0u);
  ASSERT_TRUE(m.accept_bytes("x"));
  std::vector<uint32_t> second = mask_of(m, *vocab_);
  EXPECT_GT(m.last_mask_stats().exit_reuses, 0u);
  EXPECT_EQ(m.last_mask_stats().exit_walks, 0u);
  auto expect = brute_force(m, *vocab_);
  for (int32_t t = 0; t < vocab_->vocab_size(); ++t) {
    ASSERT_EQ(static_cast<bool>((second[t >> 5] >> (t & 31)) & 1), expect[t]) << "token " << t;
  }
}

TEST_F(WalkMemo, AnyJson) {
  auto g = compile_any_json(false);
  ASSERT_TRUE(g.ok());
  Totals tot;
  check(*g, vocab_, 8, 50, rng_, &tot, "any json");
  EXPECT_GT(tot.masks, 0u);
}

TEST_F(WalkMemo, AmbiguousGbnf) {
  // Ambiguous: a word may end at any letter and `item` repeats with nullable separators, so the
  // top set holds items equal but for their DFA states, and equal skeletons recur at different
  // positions with different origins.
  auto g = compile_gbnf(R"G(root ::= "[" ws list? ws "]"
list ::= item | list sep item
sep ::= ws "," ws | ws
item ::= "\"" [a-z_ ]* "\"" | word | [0-9]+
word ::= [a-z]+ | [a-z]+ "_" word
ws ::= [ \n]*)G");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Totals tot;
  check(*g, vocab_, 8, 40, rng_, &tot, "gbnf");
  EXPECT_GT(tot.masks, 0u);
}

TEST(WalkMemoGrammar, NextBytesCoverWhatFollows) {
  // next_bytes holds only bytes some lexeme starts with; that it covers every byte a lexeme
  // after the ending one can start with is what the masks below check (an exit skipped wrongly
  // loses the tokens below it, which brute force and the fresh matcher would allow).
  auto g = compile_gbnf(R"G(root ::= a ("," a)* tail?
a ::= [0-9]+ | "(" root ")" | "x" ws
tail ::= ";" | ws "!"
ws ::= [ ]*)G");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const CompiledGrammar& cg = **g;
  for (uint32_t p = 0; p < cg.num_productions(); ++p) {
    for (uint32_t d = 0; d < cg.rhs_len(p); ++d) {
      int s = cg.rhs(p, d);
      if (!GrammarBuilder::is_terminal(s)) continue;
      const uint64_t* nb = cg.next_bytes(p, d);
      auto has = [&](uint8_t b) { return (nb[b >> 6] >> (b & 63)) & 1; };
      // No set may claim a byte no lexeme of the grammar starts with.
      for (int b = 0; b < 256; ++b) {
        if (!has(static_cast<uint8_t>(b))) continue;
        EXPECT_NE(std::string("0123456789,();x !").find(static_cast<char>(b)), std::string::npos)
            << "byte " << b << " in next_bytes of production " << p << " dot " << d;
      }
    }
  }
  // And a mask check on that grammar with a byte vocabulary plus multi-byte tokens.
  auto vocab = byte_vocab({"1,", "12", ",(", "x ", "x,", " !", ";", "))", "1)", "x)", "0;", "( x"});
  std::mt19937 rng(test_seed());
  Totals tot;
  check(*g, vocab, 6, 30, rng, &tot, "next_bytes gbnf");
  EXPECT_GT(tot.masks, 0u);
  // Deterministic: in a JSON array of integers, after "[1" the digit runs below can end the
  // integer (one lexeme), but no child of theirs starts what may follow it (',' ']' white
  // space), so their groups need no push.
  auto ints = compile_json_schema(R"({"type":"array","items":{"type":"integer"}})");
  ASSERT_TRUE(ints.ok()) << ints.status().to_string();
  auto digits = byte_vocab({"12", "123", "1234", "99", "990"});
  GrammarMatcher m(ints->grammar, digits);
  ASSERT_TRUE(m.accept_bytes("[1"));
  std::vector<uint32_t> mask = mask_of(m, *digits);
  EXPECT_GT(m.last_mask_stats().exit_groups, m.last_mask_stats().top_pushes);
  auto expect = brute_force(m, *digits);
  for (int32_t t = 0; t < digits->vocab_size(); ++t) {
    ASSERT_EQ(static_cast<bool>((mask[t >> 5] >> (t & 31)) & 1), expect[t]) << "token " << t;
  }
}

}  // namespace
}  // namespace deepinfer::structured::testing
