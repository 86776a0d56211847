// The mask fast paths against brute force on a larger, BPE-like random vocabulary: plain-text
// tokens allowed en bloc (plain_mask + plain_depth), exits sharing one parser walk per
// (state vector, forest), and the trie index they rely on (plain lengths in bytes and code
// points, forest ids, token ranges).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "structured/compile.h"
#include "structured/plain_text.h"
#include "test_util.h"

namespace deepinfer::structured::testing {
namespace {

// Words, JSON punctuation, quotes and escapes, numbers, whitespace, complete and partial UTF-8,
// control bytes and a few duplicate byte strings (distinct ids).
std::vector<std::string> random_tokens(std::mt19937& rng, int n) {
  const std::vector<std::string> pieces = {
      "a", "e", "n", "s", "t", "ing", "name", "id", "x", "Q", " ", "  ", "\"", "\",", "\":", "\"}",
      "\"]", "{", "}", "[", "]", ",", ":", "0", "1", "9", "12", ".", "-", "+", "e", "E", "\\", "\\\"",
      "\\n", "\\u00", "\n", "\t", "\x01", "true", "false", "null", "@", "/", "\xc3\xa9", "\xe6\xad\xaa",
      "\xf0\x9f\x98\x80", "\xe6", "\xad", "\xaa\xe6", "\xc3", "\xa9", "_", "T", "Z", ":0",
      // U+2028, U+2029 (not ECMA `.`), their partial prefixes and a neighbour (U+2027).
      "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80", "\xe2", "\xa8", "\xe2\x80\xa7"};
  std::vector<std::string> toks;
  std::set<std::string> seen;
  while (static_cast<int>(toks.size()) < n) {
    std::string t;
    int parts = 1 + static_cast<int>(rng() % 4);
    for (int p = 0; p < parts; ++p) t += pieces[rng() % pieces.size()];
    if (t.size() > 24) continue;
    if (seen.insert(t).second || rng() % 50 == 0) toks.push_back(t);
  }
  return toks;
}

// Characters started: bytes that are not UTF-8 continuation bytes (a cut final character counts).
uint32_t code_points(const std::string& s) {
  uint32_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

struct Totals {
  uint64_t plain_masks = 0, ecma_masks = 0, cp_masks = 0, exits = 0, exit_reuses = 0, masks = 0;
};

void check_walks(const std::shared_ptr<CompiledGrammar>& g,
                 const std::shared_ptr<const TokenVocabulary>& vocab, int walks, int steps,
                 std::mt19937& rng, Totals* totals) {
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(g, vocab);
    std::vector<uint32_t> mask(vocab->bitmask_words());
    for (int s = 0; s < steps; ++s) {
      ASSERT_TRUE(m.fill_mask(mask.data(), mask.size()).ok());
      const MaskStats& st = m.last_mask_stats();
      ++totals->masks;
      totals->plain_masks += st.plain_depth > 0;
      totals->ecma_masks += st.plain_depth > 0 && plain_text::measure_class(st.plain_class) == plain_text::kEcmaDot;
      totals->cp_masks += st.plain_depth > 0 && plain_text::measure_counts_code_points(st.plain_class);
      totals->exits += st.exits;
      totals->exit_reuses += st.exit_reuses;
      auto expect = brute_force(m, *vocab);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
        bool bit = (mask[t >> 5] >> (t & 31)) & 1;
        ASSERT_EQ(bit, expect[t]) << "seed " << test_seed() << " walk " << w << " step " << s << " token "
                                  << t << " bytes '" << (t < vocab->num_tokens() ? vocab->token_bytes(t) : "<pad>")
                                  << "' plain_depth " << st.plain_depth << " class " << st.plain_class
                                  << " hit " << st.cache_hit;
        if (bit) allowed.push_back(t);
      }
      if (allowed.empty()) break;
      // Prefer long tokens now and then so strings get long and counted states run out.
      int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(pick));
      if (m.is_terminated()) break;
    }
  }
}

class FastPath : public ::testing::Test {
 protected:
  void SetUp() override {
    rng_.seed(test_seed());
    vocab_ = byte_vocab(random_tokens(rng_, 3000));
  }
  std::mt19937 rng_;
  std::shared_ptr<const TokenVocabulary> vocab_;
};

TEST_F(FastPath, TrieIndexMatchesBruteForce) {
  const auto& trie = vocab_->trie();
  const auto& toks = vocab_->trie_tokens();
  auto is_plain_cls = [](const std::string& s, int cls) {
    uint8_t r = plain_text::kStart;
    for (char c : s) r = plain_text::step(r, static_cast<uint8_t>(c), cls);
    return r != plain_text::kDead;
  };
  auto is_plain = [&](const std::string& s) { return is_plain_cls(s, plain_text::kJson); };
  // The ECMA class is the JSON class less the texts holding U+2028 or U+2029 (a partial prefix
  // of them at the end stays plain).
  for (int32_t t = 0; t < vocab_->num_tokens(); ++t) {
    const std::string& b = vocab_->token_bytes(t);
    bool has_sep = b.find("\xe2\x80\xa8") != std::string::npos || b.find("\xe2\x80\xa9") != std::string::npos;
    ASSERT_EQ(is_plain_cls(b, plain_text::kEcmaDot), is_plain(b) && !has_sep) << "token " << t;
  }
  std::vector<std::string> path(trie.size());
  std::vector<uint32_t> stack;
  std::map<uint32_t, std::vector<std::string>> forest_suffixes;  // forest id -> suffix list
  for (uint32_t i = 1; i < trie.size(); ++i) {
    while (!stack.empty() && trie[stack.back()].subtree_end <= i) stack.pop_back();
    path[i] = (stack.empty() ? std::string() : path[stack.back()]) + static_cast<char>(trie[i].byte);
    stack.push_back(i);
  }
  // The root's children index (session 7): every depth-1 node, ascending, with its byte.
  {
    std::vector<uint32_t> kids;
    std::vector<uint8_t> kid_bytes;
    for (uint32_t i = 1; i < trie.size(); ++i) {
      if (trie[i].depth == 1) { kids.push_back(i); kid_bytes.push_back(trie[i].byte); }
    }
    EXPECT_EQ(vocab_->root_children(), kids);
    EXPECT_EQ(vocab_->root_child_bytes(), kid_bytes);
    EXPECT_GT(kids.size(), 10u);
  }
  for (uint32_t i = 1; i < trie.size(); ++i) {
    const TrieNode& n = trie[i];
    // The subtree's tokens: this node's, then [tok_end, end of the last descendant).
    uint32_t last = n.tok_end;
    for (uint32_t j = i + 1; j < n.subtree_end; ++j) last = std::max(last, trie[j].tok_end);
    uint32_t max_len = 0, max_cps = 0;
    bool all_plain = true, all_ecma = true;
    std::vector<std::string> suffixes;
    for (uint32_t t = n.tok_begin; t < last; ++t) {
      const std::string& b = vocab_->token_bytes(toks[t]);
      ASSERT_EQ(b.compare(0, path[i].size(), path[i]), 0) << "token outside its subtree";
      all_plain &= is_plain(b);
      all_ecma &= is_plain_cls(b, plain_text::kEcmaDot);
      max_len = std::max<uint32_t>(max_len, static_cast<uint32_t>(b.size()));
      max_cps = std::max<uint32_t>(max_cps, code_points(b));
      if (t >= n.tok_end) suffixes.push_back(b.substr(path[i].size()));
    }
    EXPECT_EQ(n.plain_len_of(0), all_plain ? max_len : TrieNode::kNotPlain) << "node " << i;
    EXPECT_EQ(n.plain_len_of(1), all_ecma ? max_len : TrieNode::kNotPlain) << "node " << i;
    EXPECT_EQ(n.plain_len_of(2), all_plain ? max_cps : TrieNode::kNotPlain) << "node " << i;
    EXPECT_EQ(n.plain_len_of(3), all_ecma ? max_cps : TrieNode::kNotPlain) << "node " << i;
    auto ins = forest_suffixes.emplace(vocab_->forest_id(i), suffixes);
    if (!ins.second) { EXPECT_EQ(ins.first->second, suffixes) << "forest " << vocab_->forest_id(i); }
  }
  for (int m = 0; m < plain_text::kNumMeasures; ++m) {
    const int cls = plain_text::measure_class(m);
    for (uint32_t d = 0; d <= vocab_->max_plain_len(m) + 1; ++d) {
      const uint32_t* pm = vocab_->plain_mask(d, m);
      uint32_t count = 0;
      for (int32_t t = 0; t < vocab_->vocab_size(); ++t) {
        bool expect = false;
        if (t < vocab_->num_tokens() && !vocab_->is_special(t) && !vocab_->is_eos(t) &&
            is_plain_cls(vocab_->token_bytes(t), cls)) {
          const std::string& b = vocab_->token_bytes(t);
          expect = (plain_text::measure_counts_code_points(m) ? code_points(b) : b.size()) <= d;
        }
        count += expect;
        ASSERT_EQ(static_cast<bool>((pm[t >> 5] >> (t & 31)) & 1), expect)
            << "measure " << m << " d " << d << " token " << t;
      }
      ASSERT_EQ(vocab_->plain_count(d, m), count) << "measure " << m << " d " << d;
    }
  }
  for (int cls = 0; cls < plain_text::kNumClasses; ++cls) {
    // The skip trie: exactly the nodes outside plain subtrees, in order, with their fields and
    // subtree ends mapped (a node's skip-trie subtree holds the skip-trie nodes of its subtree).
    const SkipTrie& st = vocab_->skip_trie(cls);
    std::vector<uint32_t> expect_nodes;
    for (uint32_t i = 0; i < trie.size(); ++i) {
      if (trie[i].plain_len_of(cls) == TrieNode::kNotPlain) expect_nodes.push_back(i);
    }
    ASSERT_EQ(st.orig, expect_nodes) << "class " << cls;
    ASSERT_EQ(st.nodes.size(), expect_nodes.size());
    for (uint32_t k = 0; k < st.nodes.size(); ++k) {
      const TrieNode& a = st.nodes[k];
      const TrieNode& b = trie[st.orig[k]];
      ASSERT_EQ(a.byte, b.byte);
      ASSERT_EQ(a.depth, b.depth);
      ASSERT_EQ(a.tok_begin, b.tok_begin);
      ASSERT_EQ(a.tok_end, b.tok_end);
      uint32_t end = k + 1;
      while (end < st.nodes.size() && st.orig[end] < b.subtree_end) ++end;
      ASSERT_EQ(a.subtree_end, end) << "class " << cls << " skip node " << k;
    }
  }
}

TEST_F(FastPath, JsonSchemaStringsMatchBruteForce) {
  auto g = compile_json_schema(R"({"type":"object","properties":{
      "short":{"type":"string","maxLength":4},"long":{"type":"string","minLength":2,"maxLength":30},
      "free":{"type":"string"},"pat":{"type":"string","pattern":"^[a-z ]+$"},
      "list":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":3},
      "any":{"anyOf":[{"type":"string","maxLength":6},{"type":"string","format":"date"},{"type":"integer"}]},
      "e":{"enum":["name","nam\"e","x"]}},
      "required":["short","long","free","pat","list","any","e"],"additionalProperties":false})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Totals totals;
  check_walks(g->grammar, vocab_, 12, 60, rng_, &totals);
  // The fast paths were exercised (strings are plain-text states; quotes close them at exits).
  EXPECT_GT(totals.plain_masks, 0u);
  EXPECT_GT(totals.exits, 0u);
  EXPECT_GT(totals.exit_reuses, 0u);
}

TEST_F(FastPath, CountedStringsInCodePointsMatchBruteForce) {
  // maxLength (and a counted ECMA `.` pattern) with multi-byte and cut characters in the
  // vocabulary: k characters left cap the byte depth at k while k + 1 bytes may be fewer
  // characters, so these masks take the code-point measures; tokens of k + 1 or more characters,
  // and cut characters at the budget's end, must stay exact.
  auto g = compile_json_schema(R"({"type":"object","properties":{
      "a":{"type":"string","maxLength":3},"b":{"type":"string","minLength":1,"maxLength":9},
      "c":{"type":"string","maxLength":20},"d":{"type":"string","pattern":"^.{2,7}$"},
      "e":{"type":"string","maxLength":5,"pattern":"^[^x]*$"}},
      "required":["a","b","c","d","e"],"additionalProperties":false})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Totals totals;
  check_walks(g->grammar, vocab_, 16, 60, rng_, &totals);
  EXPECT_GT(totals.cp_masks, 0u);
  EXPECT_GT(totals.exits, 0u);
}

TEST_F(FastPath, EcmaDotPatternsMatchBruteForce) {
  // ECMA `.` excludes U+2028/U+2029: these strings use the kEcmaDot plain class (otherwise
  // their plain depth is 2 bytes), and the tokens holding a separator must stay exact.
  auto g = compile_json_schema(R"({"type":"object","properties":{
      "dot":{"type":"string","pattern":"^.+$"},"mid":{"type":"string","pattern":"^a.*b"},
      "cnt":{"type":"string","pattern":"^.{0,9}$"},"free":{"type":"string","pattern":"x."}},
      "required":["dot","mid","cnt","free"],"additionalProperties":false})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Totals totals;
  check_walks(g->grammar, vocab_, 12, 60, rng_, &totals);
  EXPECT_GT(totals.ecma_masks, 0u);
  EXPECT_GT(totals.exits, 0u);
}

TEST_F(FastPath, AnyJsonMatchesBruteForce) {
  auto g = compile_any_json(false);
  ASSERT_TRUE(g.ok());
  Totals totals;
  check_walks(*g, vocab_, 10, 50, rng_, &totals);
  EXPECT_GT(totals.plain_masks, 0u);
}

TEST_F(FastPath, RegexMatchesBruteForce) {
  // A search-free regex whose lexeme accepts inside plain text: plain_depth must stay 0 or
  // short where an accepting state is reachable on plain bytes.
  auto g = compile_regex("(name|[a-z ]{2,9})(\\u00e9|\"x\"){1,3}[ -~]{0,20}");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  Totals totals;
  check_walks(*g, vocab_, 12, 30, rng_, &totals);
}

}  // namespace
}  // namespace deepinfer::structured::testing
