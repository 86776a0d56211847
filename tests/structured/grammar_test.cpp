// GBNF grammars from llama.cpp parse and accept sample documents (and reject near misses).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "structured/gbnf.h"
#include "test_util.h"

namespace deepinfer::structured::testing {
namespace {

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Case { const char* file; std::vector<std::string> accept, reject; };

TEST(Gbnf, SampleDocuments) {
  std::vector<Case> cases = {
      {"arithmetic.gbnf", {"1+2=3\n", "(x1 *2) = y\n", "a=b\nc=d\n"}, {"1+=2\n", "1+2=3", "A=1\n"}},
      {"list.gbnf", {"- milk\n- eggs\n", "- \xe2\x82\xac 3\n"}, {"- \n", "* milk\n", "- a\xe2\x80\xa8\n"}},
      {"json.gbnf", {"{\"a\": [1, 2.5e3, true, null, \"x\\n\"]}", "{}", "{\"k\": {\"n\": -0.5}}"},
       {"{\"a\": [1,]}", "{'a': 1}", "[1]", "{\"a\": 01}"}},
      {"json_arr.gbnf", {"[\n{\"a\": 1},\n\"s\"]", "[\n]"}, {"[1]", "[\n1,]"}},
      {"english.gbnf", {"Hello, world!", "a b\tc"}, {"", " leading", "caf\xc3\xa9"}},
  };
  for (const auto& c : cases) {
    std::string text = read(std::string("tests/data/structured/grammars/") + c.file);
    ASSERT_FALSE(text.empty()) << c.file;
    auto g = compile_gbnf(text);
    ASSERT_TRUE(g.ok()) << c.file << ": " << g.status().to_string();
    for (const auto& doc : c.accept) {
      GrammarMatcher m(*g, byte_vocab());
      EXPECT_TRUE(m.accept_bytes(doc) && m.can_terminate()) << c.file << " should accept: " << doc;
    }
    for (const auto& doc : c.reject) {
      GrammarMatcher m(*g, byte_vocab());
      EXPECT_FALSE(m.accept_bytes(doc) && m.can_terminate()) << c.file << " should reject: " << doc;
    }
  }
}

TEST(Gbnf, Features) {
  auto g = compile_gbnf("root ::= \"a\"{2,3} x? [\\x41-\\x43]+ # comment\nx ::= \"\\u00e9\" | .");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  GrammarMatcher m(*g, byte_vocab());
  EXPECT_TRUE(m.can_accept_bytes("aa\xc3\xa9" "AB"));
  EXPECT_TRUE(m.can_accept_bytes("aaaZC"));
  EXPECT_FALSE(m.can_accept_bytes("aaaaaA"));
}

TEST(Gbnf, ErrorsNameTheProblem) {
  auto undefined = compile_gbnf("root ::= foo");
  ASSERT_FALSE(undefined.ok());
  EXPECT_NE(undefined.status().message().find("'foo'"), std::string::npos);
  auto no_root = compile_gbnf("a ::= \"x\"");
  ASSERT_FALSE(no_root.ok());
  EXPECT_NE(no_root.status().message().find("root"), std::string::npos);
  auto bad = compile_gbnf("root ::= \"x");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 1"), std::string::npos);
  auto tok = compile_gbnf("root ::= <[1000]>");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kUnimplemented);
}

TEST(Gbnf, LeftRecursionWorks) {
  // Earley handles left recursion (llama.cpp's recursive descent refuses it).
  auto g = compile_gbnf("root ::= root \"+\" \"1\" | \"1\"");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  GrammarMatcher m(*g, byte_vocab());
  EXPECT_TRUE(m.accept_bytes("1+1+1") && m.can_terminate());
}

}  // namespace
}  // namespace deepinfer::structured::testing
