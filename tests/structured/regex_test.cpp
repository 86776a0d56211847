#include <gtest/gtest.h>
#include "structured/compile.h"
#include "test_util.h"
namespace deepinfer::structured::testing {
namespace {
bool full_match(const std::string& pattern, const std::string& text) {
  auto g = compile_regex(pattern);
  EXPECT_TRUE(g.ok()) << pattern << ": " << g.status().to_string();
  if (!g.ok()) return false;
  GrammarMatcher m(*g, byte_vocab());
  return m.accept_bytes(text) && m.can_terminate();
}
TEST(Regex, Basics) {
  EXPECT_TRUE(full_match("abc", "abc"));
  EXPECT_FALSE(full_match("abc", "abcd"));
  EXPECT_TRUE(full_match("a{2,3}", "aaa"));
  EXPECT_FALSE(full_match("a{2,3}", "aaaa"));
  EXPECT_TRUE(full_match("(ab|cd)+e?", "abcdab"));
  EXPECT_TRUE(full_match("\\d+\\.\\d*", "12."));
  EXPECT_FALSE(full_match(".", "\n"));
  EXPECT_TRUE(full_match("[^a-c]", "\xc3\xa9"));
  EXPECT_TRUE(full_match("\\u00e9", "\xc3\xa9"));
  EXPECT_TRUE(full_match("^ab$", "ab"));
  EXPECT_FALSE(compile_regex("a^b").ok());  // empty language
}
}  // namespace
}  // namespace deepinfer::structured::testing

#include <fstream>
#include <iostream>

namespace deepinfer::structured::testing {
namespace {

// rust-regex corpus cases with Python `re` as the oracle (tests/structured/make_regex_fixture.py):
// compile_regex must agree with re.fullmatch, and a JSON Schema `pattern` with re.search.
// Regexes refused by our dialect are counted, never mis-answered.
TEST(RegexConformance, RustRegexCorpus) {
  std::ifstream f("tests/data/structured/regex_conformance.jsonl");
  ASSERT_TRUE(f) << "missing tests/data/structured/regex_conformance.jsonl";
  std::string line;
  int cases = 0, refused = 0, agree = 0;
  std::vector<std::string> wrong;
  auto vocab = byte_vocab();
  while (std::getline(f, line)) {
    auto c = OJson::parse(line);
    ++cases;
    std::string re = c["regex"], text = c["text"];
    auto g = compile_regex(re);
    auto js = compile_json_schema(OJson{{"type", "string"}, {"pattern", re}}.dump());
    if (!g.ok() || !js.ok()) {
      // An empty language is an answer too (e.g. "a^b"): it accepts nothing.
      bool empty_full = !g.ok() && g.status().message().find("matches no input") != std::string::npos;
      bool empty_search = !js.ok() && js.status().message().find("matches no input") != std::string::npos;
      if ((g.ok() || empty_full) && (js.ok() || empty_search)) {
        bool full = g.ok() && [&] { GrammarMatcher m(*g, vocab); return m.accept_bytes(text) && m.can_terminate(); }();
        bool search = js.ok() && [&] { GrammarMatcher m(js->grammar, vocab); return m.accept_bytes(json_quote(text)) && m.can_terminate(); }();
        if (full == c["full"].get<bool>() && search == c["search"].get<bool>()) ++agree;
        else wrong.push_back(c["source"].get<std::string>() + " /" + re + "/ on '" + text + "'");
        continue;
      }
      ++refused;
      continue;
    }
    GrammarMatcher m(*g, vocab);
    bool full = m.accept_bytes(text) && m.can_terminate();
    GrammarMatcher ms(js->grammar, vocab);
    bool search = ms.accept_bytes(json_quote(text)) && ms.can_terminate();
    if (full == c["full"].get<bool>() && search == c["search"].get<bool>()) {
      ++agree;
    } else {
      wrong.push_back(c["source"].get<std::string>() + " /" + re + "/ on '" + text + "' full=" +
                      std::to_string(full) + " search=" + std::to_string(search));
    }
  }
  std::cout << "[regex conformance] cases " << cases << ", agree " << agree << ", refused "
            << refused << ", disagree " << wrong.size() << "\n";
  for (size_t i = 0; i < wrong.size() && i < 20; ++i) std::cout << "  " << wrong[i] << "\n";
  EXPECT_GT(cases, 300);
  EXPECT_TRUE(wrong.empty());
}

}  // namespace
}  // namespace deepinfer::structured::testing
