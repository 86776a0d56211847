// Token masks: a token is allowed iff feeding its bytes keeps the matcher alive (brute force over
// a vocabulary with multi-byte tokens, partial UTF-8 tokens and specials); EOS only where the
// grammar can end; rollback restores the exact state.
#include <gtest/gtest.h>

#include <random>

#include "structured/compile.h"
#include "test_util.h"

namespace deepinfer::structured::testing {
namespace {

std::vector<std::string> tricky_tokens() {
  return {"\",", "\"}", "\":\"", "\"]}", "{\"", "\":", "true", "tr", "null,", "12", "3.", ".5", "e+",
          "\\n", "\\\"", "\\u00", "ab", "name", "\"name\":", "\xe6\xad", "\xaa", "\xc3", "\xa9\"", "  ",
          " \"", "}", "]", ",\"", "--", "-1", "01", "ok\"", "x\"}", "[\"", "[]", "{}", "0,", "1]"};
}

void check_random_walks(const std::shared_ptr<CompiledGrammar>& g, int walks, int steps) {
  auto vocab = byte_vocab(tricky_tokens());
  std::mt19937 rng(test_seed());
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(g, vocab);
    std::vector<uint32_t> mask(vocab->bitmask_words() + 1);
    for (int s = 0; s < steps; ++s) {
      ASSERT_TRUE(m.fill_mask(mask.data(), mask.size()).ok());
      auto expect = brute_force(m, *vocab);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
        bool bit = (mask[t >> 5] >> (t & 31)) & 1;
        ASSERT_EQ(bit, expect[t]) << "seed " << test_seed() << " walk " << w << " step " << s
                                  << " token " << t << " bytes '" << (t < vocab->num_tokens() ? vocab->token_bytes(t) : "<pad>") << "'";
        if (bit) allowed.push_back(t);
      }
      // Padding bits beyond the vocabulary are never set.
      for (size_t t = vocab->vocab_size(); t < mask.size() * 32; ++t) ASSERT_FALSE((mask[t >> 5] >> (t & 31)) & 1);
      if (allowed.empty()) break;
      int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(pick));
      if (m.is_terminated()) break;
    }
  }
}

TEST(Mask, JsonSchemaMatchesBruteForce) {
  auto g = compile_json_schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":5},
    "n":{"type":"integer","minimum":-3,"maximum":120},"tags":{"type":"array","items":{"enum":["ab","x\"y",null]},"maxItems":3},
    "ok":{"type":"boolean"}},"required":["name"],"additionalProperties":false})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  check_random_walks(g->grammar, 30, 40);
}

TEST(Mask, AnyJsonMatchesBruteForce) {
  auto g = compile_any_json(false);
  ASSERT_TRUE(g.ok());
  check_random_walks(*g, 30, 30);
}

TEST(Mask, RegexWithUnicodeMatchesBruteForce) {
  auto g = compile_regex("(\\u6b6a|\\u00e9)+[a-c]{0,3}\\d?");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  check_random_walks(*g, 20, 10);
}

TEST(Mask, PartialUtf8TokensCombine) {
  auto g = compile_regex("\\u6b6a");  // bytes e6 ad aa
  ASSERT_TRUE(g.ok());
  auto vocab = byte_vocab(tricky_tokens());
  GrammarMatcher m(*g, vocab);
  int32_t first = 256 + 19, second = 256 + 20;  // "\xe6\xad", "\xaa"
  ASSERT_EQ(vocab->token_bytes(first), "\xe6\xad");
  EXPECT_TRUE(m.accept_token(first));
  EXPECT_FALSE(m.can_terminate());
  EXPECT_TRUE(m.accept_token(second));
  EXPECT_TRUE(m.can_terminate());
}

TEST(Mask, SpecialAndEosTokens) {
  auto g = compile_regex("ab?");
  ASSERT_TRUE(g.ok());
  auto vocab = byte_vocab();
  int32_t eos = vocab->eos_ids()[0], special = eos + 1;
  GrammarMatcher m(*g, vocab);
  EXPECT_FALSE(m.accept_token(eos)) << "EOS before the grammar can end";
  EXPECT_FALSE(m.accept_token(special));
  EXPECT_FALSE(m.accept_token(vocab->vocab_size() - 1)) << "padding id";
  ASSERT_TRUE(m.accept_token('a'));
  std::vector<uint32_t> mask(vocab->bitmask_words());
  ASSERT_TRUE(m.fill_mask(mask.data(), mask.size()).ok());
  EXPECT_TRUE((mask[eos >> 5] >> (eos & 31)) & 1);
  EXPECT_FALSE((mask[special >> 5] >> (special & 31)) & 1);
  ASSERT_TRUE(m.accept_token('b'));
  EXPECT_TRUE(m.must_terminate());
  ASSERT_TRUE(m.accept_token(eos));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token('a'));
  m.rollback(1);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.can_terminate());
}

TEST(Mask, RollbackRestoresExactState) {
  auto g = compile_any_json(true);
  ASSERT_TRUE(g.ok());
  auto vocab = byte_vocab(tricky_tokens());
  std::mt19937 rng(test_seed());
  for (int trial = 0; trial < 20; ++trial) {
    GrammarMatcher m(*g, vocab);
    std::vector<uint32_t> before(vocab->bitmask_words()), after(vocab->bitmask_words());
    std::vector<std::vector<uint32_t>> masks;
    std::vector<int32_t> taken;
    for (int s = 0; s < 25; ++s) {
      ASSERT_TRUE(m.fill_mask(before.data(), before.size()).ok());
      masks.push_back(before);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab->num_tokens(); ++t) {
        if (((before[t >> 5] >> (t & 31)) & 1) && !vocab->is_eos(t)) allowed.push_back(t);
      }
      if (allowed.empty()) break;
      int32_t t = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(t));
      taken.push_back(t);
    }
    // Roll back a random number of steps, then compare masks with those recorded.
    int n = 1 + static_cast<int>(rng() % taken.size());
    m.rollback(n);
    ASSERT_EQ(m.num_accepted(), static_cast<int>(taken.size()) - n);
    ASSERT_TRUE(m.fill_mask(after.data(), after.size()).ok());
    EXPECT_EQ(after, masks[taken.size() - n]) << "seed " << test_seed();
    // Replaying the same tokens is accepted again.
    for (size_t i = taken.size() - n; i < taken.size(); ++i) ASSERT_TRUE(m.accept_token(taken[i]));
  }
}

TEST(Mask, WorkLimitFailsTheRequestNotTheProcess) {
  auto g = compile_any_json(false);
  ASSERT_TRUE(g.ok());
  MatcherOptions opt;
  opt.max_work_per_mask = 10;
  GrammarMatcher m(*g, byte_vocab(tricky_tokens()), opt);
  std::vector<uint32_t> mask(m.num_accepted() + 20);
  Status s = m.fill_mask(mask.data(), mask.size());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("work limit"), std::string::npos);
}

TEST(Mask, BitmaskTooSmallIsAnError) {
  auto g = compile_regex("a");
  auto vocab = byte_vocab();
  GrammarMatcher m(*g, vocab);
  std::vector<uint32_t> mask(2);
  EXPECT_EQ(m.fill_mask(mask.data(), mask.size()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepinfer::structured::testing
