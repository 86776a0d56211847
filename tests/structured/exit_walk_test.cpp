// Masks walk on past exits (EarleyParser::copy_end, GrammarMatcher::new_scan_bytes): at a trie
// node where a lexeme can end, the walk keeps stepping the DFA states of the moved items and the
// pushed set is walked only on children whose byte a *new* scan item takes. These tests drive
// grammars whose lexemes end and go on (whitespace runs, numbers, adjacent nullable lexemes,
// %ignore) on a random vocabulary rich in such tokens, and compare every mask with brute force
// (the definition: a token is allowed iff its bytes can be fed); rollback must restore masks.
// They also check Dfa::live_bytes against the transition table, and that the JSON emitter's
// `{}` / `[]` allow one whitespace gap of at most max_whitespace bytes (no adjacent gaps).
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "structured/gbnf.h"
#include "structured/lark.h"
#include "test_util.h"

namespace deepinfer::structured::testing {
namespace {

// Tokens made of whitespace runs, digits, number punctuation, JSON punctuation and words.
std::vector<std::string> exit_heavy_tokens(std::mt19937& rng, int n) {
  const std::vector<std::string> pieces = {
      " ", "  ", "    ", "\n", "\n  ", "\t", "\r\n", "0", "1", "7", "12", "9", ".", "e", "E", "-",
      "+", "\"", "\",", "\":", "{", "}", "[", "]", ",", ":", "(", ")", "a", "name", "x", "true",
      "null", "\xc3\xa9", "_"};
  std::vector<std::string> toks;
  std::set<std::string> seen;
  while (static_cast<int>(toks.size()) < n) {
    std::string t;
    int parts = 1 + static_cast<int>(rng() % 5);
    for (int p = 0; p < parts; ++p) t += pieces[rng() % pieces.size()];
    if (t.size() > 20) continue;
    if (seen.insert(t).second) toks.push_back(t);
  }
  return toks;
}

struct Totals {
  uint64_t masks = 0, exits = 0, exit_walks = 0, rollbacks = 0;
};

std::vector<uint32_t> mask_of(GrammarMatcher& m, const TokenVocabulary& v) {
  std::vector<uint32_t> mask(v.bitmask_words());
  EXPECT_TRUE(m.fill_mask(mask.data(), mask.size()).ok());
  return mask;
}

void check_walks(const std::shared_ptr<CompiledGrammar>& g,
                 const std::shared_ptr<const TokenVocabulary>& vocab, int walks, int steps,
                 std::mt19937& rng, Totals* totals, const std::string& what) {
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(g, vocab);
    std::vector<uint32_t> prev_mask;
    for (int s = 0; s < steps; ++s) {
      std::vector<uint32_t> mask = mask_of(m, *vocab);
      const MaskStats& st = m.last_mask_stats();
      ++totals->masks;
      totals->exits += st.exits;
      totals->exit_walks += st.exit_walks;
      auto expect = brute_force(m, *vocab);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
        bool bit = (mask[t >> 5] >> (t & 31)) & 1;
        ASSERT_EQ(bit, expect[t]) << what << ": seed " << test_seed() << " walk " << w << " step "
                                  << s << " token " << t << " bytes '"
                                  << (t < vocab->num_tokens() ? vocab->token_bytes(t) : "<pad>")
                                  << "' hit " << st.cache_hit;
        if (bit && !vocab->is_eos(t)) allowed.push_back(t);
      }
      if (allowed.empty()) break;
      // Now and then accept, roll back and check that the mask comes back bit for bit.
      if (s > 0 && rng() % 5 == 0) {
        int32_t probe = allowed[rng() % allowed.size()];
        ASSERT_TRUE(m.accept_token(probe));
        m.rollback(1);
        ++totals->rollbacks;
        ASSERT_EQ(mask_of(m, *vocab), mask) << what << ": seed " << test_seed() << " rollback";
      }
      // Prefer whitespace/number continuations half the time so runs get long.
      int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(pick));
    }
  }
}

class ExitWalk : public ::testing::Test {
 protected:
  void SetUp() override {
    rng_.seed(test_seed());
    vocab_ = byte_vocab(exit_heavy_tokens(rng_, 2500));
  }
  std::mt19937 rng_;
  std::shared_ptr<const TokenVocabulary> vocab_;
};

TEST_F(ExitWalk, JsonOptionalMembersAndNumbersMatchBruteForce) {
  auto g = compile_json_schema(R"({"type":"object","properties":{
      "n":{"type":"number"},"i":{"type":"integer","minimum":-50,"maximum":1200},
      "list":{"type":"array","items":{"type":"number"}},
      "pair":{"type":"array","prefixItems":[{"type":"integer"},{"type":"boolean"}],"maxItems":2},
      "inner":{"type":"object","properties":{"a":{"type":"null"},"x":{"type":"integer"}}},
      "name":{"type":"string","maxLength":5}}})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Totals totals;
  check_walks(g->grammar, vocab_, 10, 40, rng_, &totals, "json");
  EXPECT_GT(totals.exits, 0u);
  EXPECT_GT(totals.exit_walks, 0u);
  EXPECT_GT(totals.rollbacks, 0u);
}

TEST_F(ExitWalk, AnyJsonMatchesBruteForce) {
  auto g = compile_any_json(false);
  ASSERT_TRUE(g.ok());
  Totals totals;
  check_walks(*g, vocab_, 10, 40, rng_, &totals, "any json");
  EXPECT_GT(totals.exit_walks, 0u);
}

TEST_F(ExitWalk, GbnfAdjacentNullableLexemesMatchBruteForce) {
  // Two unbounded whitespace lexemes side by side around a nullable list, and numbers that end
  // and go on: the pushed sets hold items that take the same bytes as the moved ones.
  auto g = compile_gbnf(R"G(root ::= "[" ws items? ws "]" ws
items ::= num (ws "," ws num)*
num ::= "-"? [0-9]+ ("." [0-9]+)? ([eE] [0-9]+)?
ws ::= [ \t\n]*)G");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Totals totals;
  check_walks(*g, vocab_, 10, 40, rng_, &totals, "gbnf");
  EXPECT_GT(totals.exit_walks, 0u);
}

TEST_F(ExitWalk, LarkIgnoredWhitespaceMatchesBruteForce) {
  auto g = compile_lark(R"L(start: "(" expr ")" | expr
expr: NUMBER (("+" | ",") NUMBER)* | NAME
NAME: /[a-z_]+/
%import common.NUMBER
%import common.WS
%ignore WS)L");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Totals totals;
  check_walks(g->grammar, vocab_, 10, 40, rng_, &totals, "lark");
  EXPECT_GT(totals.exit_walks, 0u);
}

TEST(ExitWalkDfa, LiveBytesMatchTransitions) {
  std::vector<std::shared_ptr<CompiledGrammar>> grammars;
  grammars.push_back(compile_any_json(false).value());
  grammars.push_back(compile_json_schema(R"({"type":"string","format":"email"})").value().grammar);
  grammars.push_back(compile_gbnf("root ::= [a-c]+ \"\\xff\" | [\\x00-\\x1f]{2,4}").value());
  size_t checked = 0;
  for (const auto& g : grammars) {
    for (int t = 0; t < g->num_terminals(); ++t) {
      const Dfa& d = g->dfa(t);
      for (uint32_t s = 0; s < d.num_states(); ++s) {
        const uint64_t* lb = d.live_bytes(s);
        for (int b = 0; b < 256; ++b) {
          bool bit = (lb[b >> 6] >> (b & 63)) & 1;
          ASSERT_EQ(bit, d.next(s, static_cast<uint8_t>(b)) != Dfa::kDead)
              << "terminal " << g->terminal_name(t) << " state " << s << " byte " << b;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 256u * 10);
}

TEST(ExitWalkJson, EmptyContainersHaveOneWhitespaceGap) {
  auto vocab = byte_vocab();
  auto accepts = [&](const std::string& schema, const std::string& text) {
    auto g = compile_json_schema(schema);
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    GrammarMatcher m(g->grammar, vocab);
    return m.accept_bytes(text) && m.can_terminate();
  };
  const std::string obj = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"null"}}})";
  const std::string arr = R"({"type":"array","items":{"type":"integer"}})";
  const std::string ws32(32, ' '), ws33(33, ' '), mixed = " \t\n\r \n";
  EXPECT_TRUE(accepts(obj, "{}"));
  EXPECT_TRUE(accepts(obj, "{" + ws32 + "}"));
  EXPECT_FALSE(accepts(obj, "{" + ws33 + "}"));
  EXPECT_TRUE(accepts(obj, "{" + mixed + "\"b\"" + mixed + ":" + mixed + "null" + ws32 + "}"));
  EXPECT_TRUE(accepts(obj, "{" + ws32 + "\"a\":1," + ws32 + "\"b\":null" + ws32 + "}"));
  EXPECT_FALSE(accepts(obj, "{" + ws33 + "\"a\":1}"));
  EXPECT_TRUE(accepts(arr, "[]"));
  EXPECT_TRUE(accepts(arr, "[" + ws32 + "]"));
  EXPECT_FALSE(accepts(arr, "[" + ws33 + "]"));
  EXPECT_TRUE(accepts(arr, "[" + ws32 + "1" + mixed + "," + mixed + "2" + ws32 + "]"));
  EXPECT_FALSE(accepts(arr, "[1" + ws33 + "]"));
  // A required member: the object is never empty.
  EXPECT_FALSE(accepts(R"({"type":"object","required":["a"]})", "{" + ws32 + "}"));
  // Compact mode: no whitespace anywhere.
  JsonSchemaOptions compact;
  compact.whitespace = JsonSchemaOptions::Whitespace::kCompact;
  auto g = compile_json_schema(obj, compact);
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(g->grammar, vocab);
  EXPECT_FALSE(m.accept_bytes("{ }"));
  EXPECT_TRUE(m.accept_bytes("{}"));
}

}  // namespace
}  // namespace deepinfer::structured::testing
