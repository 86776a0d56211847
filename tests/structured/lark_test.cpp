// Lark front end: the grammars in tests/data/structured/grammars accept their sample documents
// and reject clearly invalid mutations (driven byte by byte through the matcher, checking that
// the mask agrees with accept at every step); each construct; error messages.
//
// The accept/reject lists were cross-checked with Python Lark 1.3.1 (Earley,
// lexer="dynamic_complete") except where noted.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "structured/lark.h"
#include "structured/lark_regex.h"
#include "test_util.h"

namespace deepinfer::structured::testing {
namespace {

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::shared_ptr<CompiledGrammar> compile_ok(const std::string& text, const LarkOptions& opt = {}) {
  auto g = compile_lark(text, opt);
  EXPECT_TRUE(g.ok()) << g.status().to_string() << "\n" << text;
  return g.ok() ? g->grammar : nullptr;
}

// Feeds `doc` one byte at a time; at each step the byte's token must be set in the mask iff
// the matcher accepts it; at the end EOS must be in the mask iff the document is complete.
bool accepts(const std::shared_ptr<CompiledGrammar>& g, const std::string& doc) {
  auto vocab = byte_vocab();
  GrammarMatcher m(g, vocab);
  std::vector<uint32_t> mask(vocab->bitmask_words());
  for (unsigned char c : doc) {
    EXPECT_TRUE(m.fill_mask(mask.data(), mask.size()).ok());
    bool allowed = (mask[c >> 5] >> (c & 31)) & 1;
    bool ok = m.accept_token(c);
    EXPECT_EQ(allowed, ok) << "mask and accept disagree on byte " << int(c);
    if (!ok) return false;
  }
  EXPECT_TRUE(m.fill_mask(mask.data(), mask.size()).ok());
  int32_t eos = vocab->eos_ids()[0];
  bool eos_allowed = (mask[eos >> 5] >> (eos & 31)) & 1;
  EXPECT_EQ(eos_allowed, m.can_terminate());
  return m.can_terminate();
}

bool accepts(const std::string& grammar, const std::string& doc) {
  auto g = compile_ok(grammar);
  return g && accepts(g, doc);
}

struct Case { const char* file; std::vector<std::string> accept, reject; };

TEST(Lark, SampleDocuments) {
  std::string calc = read("tests/data/structured/grammars/calc.lark");
  std::string json = read("tests/data/structured/grammars/json.lark");
  std::string config = read("tests/data/structured/grammars/config.lark");
  std::string lark = read("tests/data/structured/grammars/lark.lark");
  ASSERT_FALSE(calc.empty() || json.empty() || config.empty() || lark.empty());
  std::vector<Case> cases = {
      {"calc.lark",
       {"x = 1 + 2*3;\n", "pow(2, -x) / (y - 4.5e3);", "  a=b;b=a;  # note\n", "POW(1,2)*_t1;"},
       {"x = ;", "1 + 2", "x == 1;", "pow(1);", "1 +* 2;", "x = 1; # c\n y", "Ab = 1;"}},
      {"json.lark",
       {"{\"a\": [1, -2.5e3, true, null, \"x\\\"y\"]}", "[]", " { } \n", "\"\\\\\"",
        "{\"k\": {\"n\": -0.5, \"m\": [[], {}]}}", "01"},
       {"{\"a\": [1,]}", "{'a': 1}", "{\"a\" 1}", "\"unterminated", "[1 2]", "tru", "\"a\"b\"",
        "{\"a\":1}}", "\"line\nbreak\""}},
      {"config.lark",
       {"[server]\nhost = example.org\nport: 8080\nenabled = YES\n",
        "\n# comment\n[colors]\nbg = #fff\nfg = #a0B1c2 ; note\nday = 2024-02-29\nname = 'x y'\n",
        "[a.b]\n\n[c]\n"},
       {"[server]\nhost\n", "[bad name!]\n", "[s]\nbg = \n", "[s]\nk = 'unterminated\n", "[s]\nk = v",
        "k = v\n[s]\n", "[s]\n1k = v\n"}},
      // Lark's grammar of Lark (from llguidance) accepts Lark grammars, itself included. Python
      // Lark rejects lark.lark itself: its STRING is `"` /.*?/ `"` and the lazy match stops at
      // the escaped quote in "\"", while here a terminal is its regular language (a warning).
      {"lark.lark",
       {calc, json, config, lark, "start: \"a\"i ~ 2..3 /b+/x\n", "%ignore WS\n?x.-1: [y] | z* -> w\n"},
       {"start: : \"a\"\n", "start: (\"a\"\n", "foo bar\n", "%bogus x\n", "Foo: \"x\"\n",
        "start: \"a\n", "start: a ~\n", "start: a ~ 1..\n"}},
  };
  for (const auto& c : cases) {
    std::string text = read(std::string("tests/data/structured/grammars/") + c.file);
    auto g = compile_lark(text);
    ASSERT_TRUE(g.ok()) << c.file << ": " << g.status().to_string();
    for (const auto& doc : c.accept) EXPECT_TRUE(accepts(g->grammar, doc)) << c.file << " should accept: " << doc;
    for (const auto& doc : c.reject) EXPECT_FALSE(accepts(g->grammar, doc)) << c.file << " should reject: " << doc;
  }
}

// Random constrained walks over the byte vocabulary: every byte taken is one the mask allows,
// and a finished document is accepted again by a fresh matcher (mask, accept and EOS agree).
TEST(Lark, RandomWalksStayInTheLanguage) {
  std::mt19937 rng(test_seed());
  SCOPED_TRACE("seed " + std::to_string(test_seed()));
  auto vocab = byte_vocab();
  std::vector<uint32_t> mask(vocab->bitmask_words());
  int32_t eos = vocab->eos_ids()[0];
  int finished = 0;
  for (const char* file : {"calc.lark", "json.lark", "config.lark"}) {
    auto g = compile_ok(read(std::string("tests/data/structured/grammars/") + file));
    ASSERT_TRUE(g);
    for (int walk = 0; walk < 20; ++walk) {
      GrammarMatcher m(g, vocab);
      std::string doc;
      while (!m.is_terminated() && doc.size() < 200) {
        ASSERT_TRUE(m.fill_mask(mask.data(), mask.size()).ok());
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < vocab->num_tokens(); ++t) {
          if ((mask[t >> 5] >> (t & 31)) & 1) allowed.push_back(t);
        }
        ASSERT_FALSE(allowed.empty()) << file << " dead end after: " << doc;
        // Prefer EOS once allowed half of the time, so walks finish.
        bool eos_ok = (mask[eos >> 5] >> (eos & 31)) & 1;
        int32_t t = eos_ok && rng() % 2 ? eos : allowed[rng() % allowed.size()];
        ASSERT_TRUE(m.accept_token(t)) << file << " rejected an allowed token " << t;
        if (t != eos) doc += static_cast<char>(t);
      }
      if (!m.is_terminated()) continue;
      ++finished;
      EXPECT_TRUE(accepts(g, doc)) << file << " generated: " << doc;
    }
  }
  EXPECT_GT(finished, 0);
}

TEST(Lark, LazyQuantifierWarns) {
  auto g = compile_lark(read("tests/data/structured/grammars/lark.lark"));
  ASSERT_TRUE(g.ok());
  ASSERT_FALSE(g->warnings.empty());
  EXPECT_NE(g->warnings[0].find("lazy quantifier"), std::string::npos) << g->warnings[0];
  auto calc = compile_lark(read("tests/data/structured/grammars/calc.lark"));
  ASSERT_TRUE(calc.ok());
  EXPECT_TRUE(calc->warnings.empty());
}

TEST(Lark, RulesAlternativesAndModifiers) {
  std::string g = "?start: a | b\n!a: \"x\" c\n_b: \"y\"\n    | \"z\"\nc.2: \"1\" | \"2\"\nb: _b -> bee\n";
  EXPECT_TRUE(accepts(g, "x1"));
  EXPECT_TRUE(accepts(g, "x2"));
  EXPECT_TRUE(accepts(g, "y"));
  EXPECT_TRUE(accepts(g, "z"));
  EXPECT_FALSE(accepts(g, "x"));
  EXPECT_FALSE(accepts(g, "x3"));
}

TEST(Lark, OperatorsAndRepetition) {
  std::string g = "start: \"a\"? \"b\"* \"c\"+ [\"d\"] (\"e\" | \"f\") ~ 2 \"g\" ~ 1..3\n";
  EXPECT_TRUE(accepts(g, "ceeg"));
  EXPECT_TRUE(accepts(g, "abbcccdefggg"));
  EXPECT_FALSE(accepts(g, "eeg"));         // c+ needs one
  EXPECT_FALSE(accepts(g, "ceg"));         // ~ 2
  EXPECT_FALSE(accepts(g, "ceegggg"));     // ~ 1..3
  EXPECT_FALSE(accepts(g, "aacefg"));      // a?
  // The same operators inside a terminal.
  std::string t = "start: T\nT: \"a\"? \"b\"* \"c\"+ [\"d\"] (\"e\" | \"f\") ~ 2 \"g\" ~ 1..3\n";
  EXPECT_TRUE(accepts(t, "abbcccdefggg"));
  EXPECT_FALSE(accepts(t, "ceegggg"));
}

TEST(Lark, StringsRangesAndCase) {
  std::string g = "start: \"Hello\"i \" \" LETTER+ \"\\t\\x41\\u00e9\"\nLETTER: \"a\"..\"z\"\n";
  EXPECT_TRUE(accepts(g, "hElLo abc\tA\xc3\xa9"));
  EXPECT_FALSE(accepts(g, "hello ABC\tA\xc3\xa9"));
  // Python's IGNORECASE also equates k and U+212A KELVIN SIGN, s and U+017F LONG S.
  EXPECT_TRUE(accepts("start: \"ks\"i\n", "\xe2\x84\xaa\xc5\xbf"));
  // Lark keeps unknown escapes: "\d" is a backslash and a d.
  EXPECT_TRUE(accepts("start: \"\\d\\\"\\\\\"\n", "\\d\"\\"));
}

TEST(Lark, RegexpsUsePythonSemantics) {
  // `.` excludes only \n (not \r); s makes it match \n; i and x flags.
  EXPECT_TRUE(accepts("start: /a.b/\n", "a\rb"));
  EXPECT_FALSE(accepts("start: /a.b/\n", "a\nb"));
  EXPECT_TRUE(accepts("start: /a.b/s\n", "a\nb"));
  EXPECT_TRUE(accepts("start: /ab+c/i\n", "AbBC"));
  EXPECT_TRUE(accepts("start: /a b # comment\n c/x\n", "abc"));
  // \d and \w are Unicode in Python 3 (str patterns); (?a:...) makes them ASCII.
  EXPECT_TRUE(accepts("start: /\\d+/\n", "1\xd9\xa3"));         // ARABIC-INDIC DIGIT THREE
  EXPECT_FALSE(accepts("start: /(?a:\\d+)/\n", "1\xd9\xa3"));
  EXPECT_TRUE(accepts("start: /\\w+/\n", "caf\xc3\xa9_1"));
  EXPECT_TRUE(accepts("start: /\\s/\n", "\x1c"));               // Python: \x1c is space
  // Python reads a `{` that is no quantifier as a literal; {,n} is 0..n.
  EXPECT_TRUE(accepts("start: /a{,2}x{/\n", "aax{"));
  EXPECT_FALSE(accepts("start: /a{,2}x{/\n", "aaax{"));
  // Escaped slash and classes with ] first.
  EXPECT_TRUE(accepts("start: /[]a]\\/[^\\]]/\n", "]/x"));
  // Named groups, non-capturing groups, comments, scoped flags, octal.
  EXPECT_TRUE(accepts("start: /(?P<x>a)(?:b|c)(?#note)(?i:d)\\101/\n", "acDA"));
}

TEST(Lark, RegexpRefusals) {
  struct R { const char* grammar; const char* what; };
  std::vector<R> refused = {
      {"start: /^a/\n", "anchor"},         {"start: /a$/\n", "anchor"},
      {"start: /a\\b/\n", "word boundary"}, {"start: /(?=a)a/\n", "lookahead"},
      {"start: /(?<!a)b/\n", "lookbehind"}, {"start: /(a)\\1/\n", "backreference"},
      {"start: /(?P<n>a)(?P=n)/\n", "backreference"}, {"start: /(?>a)/\n", "atomic"},
      {"start: /a*+/\n", "possessive"},     {"start: /\\N{DIGIT ONE}/\n", "named character"},
      {"start: /a/l\n", "'l'"},             {"start: /\\Aa/\n", "anchor"},
  };
  for (const auto& r : refused) {
    auto g = compile_lark(r.grammar);
    ASSERT_FALSE(g.ok()) << r.grammar;
    EXPECT_EQ(g.status().code(), StatusCode::kUnimplemented) << r.grammar;
    EXPECT_NE(g.status().message().find(r.what), std::string::npos) << g.status().message();
    EXPECT_NE(g.status().message().find("line 1, column 8"), std::string::npos) << g.status().message();
  }
  auto bad = compile_lark("start: A\nA: /a)/\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("unbalanced parenthesis"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("line 2, column 4"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("terminal 'A'"), std::string::npos) << bad.status().message();
}

TEST(Lark, TerminalsInlineTerminals) {
  std::string g = "start: ID (\",\" ID)*\nID: _HEAD _TAIL*\n_HEAD: LOWER | \"_\"\n_TAIL: _HEAD | \"0\"..\"9\"\nLOWER: \"a\"..\"z\"\n";
  EXPECT_TRUE(accepts(g, "a1,_b,c_9"));
  EXPECT_FALSE(accepts(g, "1a"));
  EXPECT_FALSE(accepts(g, "a,,b"));
}

TEST(Lark, IgnoreAllowsTextBetweenTokensOnly) {
  std::string g = "start: \"let\" NAME \"=\" INT \";\"\nNAME: /[a-z]+/\n%import common.INT\n"
                  "%import common.WS\n%import common.C_COMMENT\n%ignore WS\n%ignore C_COMMENT\n";
  EXPECT_TRUE(accepts(g, "let x=1;"));
  EXPECT_TRUE(accepts(g, "  let  /* a * b **/ x\n=\t12 ; /* end */ "));
  EXPECT_FALSE(accepts(g, "let x = 1 2;"));        // not inside INT
  EXPECT_FALSE(accepts(g, "le t x=1;"));           // not inside a literal
  EXPECT_FALSE(accepts(g, "let x=1; /* a */ */"));  // the comment ends at the first */
  // Lark matches ignored terminals greedily: a line comment runs to the end of the line, so
  // text after '#' is never read as tokens (a non-greedy lexeme could stop at "#," and accept
  // "1 * 2;"). Python Lark rejects these too.
  auto calc = compile_ok(read("tests/data/structured/grammars/calc.lark"));
  ASSERT_TRUE(calc);
  EXPECT_FALSE(accepts(calc, "1 #,* 2;"));
  EXPECT_FALSE(accepts(calc, "  #a=b;b=a;  # note\n"));
  EXPECT_TRUE(accepts(calc, "1 # c\n* 2; # end"));
  // An %ignore whose matches continue differently per accepting state (spaces or a comment in
  // one regexp) falls back to non-greedy ignoring, with a warning.
  auto mixed = compile_lark("start: \"a\" \"b\"\n%ignore /[ \\n]+|#[^\\n]*/\n");
  ASSERT_TRUE(mixed.ok()) << mixed.status().to_string();
  ASSERT_EQ(mixed->warnings.size(), 1u);
  EXPECT_NE(mixed->warnings[0].find("not cut greedily"), std::string::npos) << mixed->warnings[0];
  EXPECT_TRUE(accepts(mixed->grammar, " a #x\n b"));
  // Without %ignore, no whitespace at all.
  EXPECT_FALSE(accepts("start: \"a\" \"b\"\n%import common.WS\n", "a b"));
  // %ignore with an inline string/regexp.
  EXPECT_TRUE(accepts("start: \"a\" \"b\"\n%ignore \" \"\n%ignore /-+/\n", " a -- b-"));
}

TEST(Lark, CommonTerminals) {
  struct T { const char* name; std::vector<std::string> yes, no; };
  std::vector<T> terms = {
      {"SIGNED_NUMBER", {"1", "-2.5", "+.5e-3", "7.", "1E9"}, {"", "e5", "1e", "--1", "1.2.3"}},
      {"ESCAPED_STRING", {"\"\"", "\"a\\\"b\"", "\"\\\\\"", "\"caf\xc3\xa9\""}, {"\"a\"b\"", "\"a\\\"", "\"a\nb\""}},
      {"CNAME", {"_", "a1", "Foo_bar"}, {"1a", "a-b"}},
      {"WORD", {"abc", "ABc"}, {"a1"}},
      {"NEWLINE", {"\n", "\r\n\n"}, {"\r"}},
      {"WS_INLINE", {" \t "}, {"\n"}},
      {"HEXDIGIT", {"f", "A", "9"}, {"g"}},
      {"DECIMAL", {"1.5", ".5", "1."}, {"1", "."}},
      {"C_COMMENT", {"/**/", "/* a * / b **/"}, {"/* a */ b */", "/*/"}},
      {"SH_COMMENT", {"#", "# x"}, {"# x\n"}},
  };
  for (const auto& t : terms) {
    std::string g = std::string("start: X\n%import common.") + t.name + " -> X\n";
    for (const auto& y : t.yes) EXPECT_TRUE(accepts(g, y)) << t.name << " should accept " << y;
    for (const auto& n : t.no) EXPECT_FALSE(accepts(g, n)) << t.name << " should reject " << n;
  }
  EXPECT_TRUE(accepts("start: A B\n%import common (DIGIT, LETTER)\nA: DIGIT\nB: LETTER\n", "7q"));
}

TEST(Lark, StartRuleOverrideAndLeftRecursion) {
  std::string g = "start: \"s\"\nexpr: expr \"+\" \"1\" | \"1\"\n";
  LarkOptions opt;
  opt.start = "expr";
  auto c = compile_ok(g, opt);
  ASSERT_TRUE(c);
  EXPECT_TRUE(accepts(c, "1+1+1"));
  EXPECT_FALSE(accepts(c, "s"));
  opt.start = "nope";
  auto missing = compile_lark(g, opt);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'nope'"), std::string::npos);
}

TEST(Lark, OverrideAndExtend) {
  std::string g = "start: NUMBER | x\nx: \"a\"\n%import common.NUMBER\n%override NUMBER: /[0-9]+/\n%extend x: \"b\"\n";
  EXPECT_TRUE(accepts(g, "12"));
  EXPECT_FALSE(accepts(g, "1.5"));
  EXPECT_TRUE(accepts(g, "b"));
}

TEST(Lark, ErrorsNameTheProblem) {
  struct E { const char* grammar; StatusCode code; std::vector<const char*> parts; };
  std::vector<E> errors = {
      {"start: foo\n", StatusCode::kInvalidArgument, {"rule 'foo'", "not defined", "line 1, column 8"}},
      {"start: FOO\n", StatusCode::kInvalidArgument, {"terminal 'FOO'", "line 1, column 8"}},
      {"start: WS\n", StatusCode::kInvalidArgument, {"%import common.WS"}},
      {"x: \"a\"\n", StatusCode::kInvalidArgument, {"no start rule 'start'"}},
      {"start: \"a\"\nstart: \"b\"\n", StatusCode::kInvalidArgument, {"more than once", "line 2, column 1"}},
      {"start: \"a\n", StatusCode::kInvalidArgument, {"string literal", "line 1, column 8"}},
      {"start: (\"a\"\n", StatusCode::kInvalidArgument, {"expected ')'", "line 1"}},
      {"start: \"a\"\n  \"b\"\n", StatusCode::kInvalidArgument, {"line 2, column 3"}},
      {"start: A\nA: \"a\"*\n", StatusCode::kInvalidArgument, {"terminal 'A'", "empty string", "line 2"}},
      {"start: A\nA: \"a\" B\nB: A\n", StatusCode::kInvalidArgument, {"in terms of itself"}},
      {"start: A\nA: b\nb: \"x\"\n", StatusCode::kInvalidArgument, {"refers to rule 'b'", "line 2, column 4"}},
      {"start: \"\"\n", StatusCode::kInvalidArgument, {"empty string literal", "line 1, column 8"}},
      {"start: myRule\n", StatusCode::kInvalidArgument, {"mixes cases"}},
      {"start: \"a\" ~ 3..1\n", StatusCode::kInvalidArgument, {"m < n"}},
      {"start: \"b\"..\"a\"\n", StatusCode::kInvalidArgument, {"reversed"}},
      {"start: \"ab\"..\"c\"\n", StatusCode::kInvalidArgument, {"single characters"}},
      {"%ignore start\nstart: \"a\"\n", StatusCode::kInvalidArgument, {"%ignore needs terminals"}},
      {"start: \"a\"\n%bogus\n", StatusCode::kInvalidArgument, {"unknown directive '%bogus'", "line 2"}},
      {"start: \"a\"\n%import common.nothing\n", StatusCode::kInvalidArgument, {"only has terminals"}},
      {"start: \"a\"\n%import common.NOPE\n", StatusCode::kInvalidArgument, {"common.NOPE"}},
      {"start: \"a\"\n%override x: \"b\"\n", StatusCode::kInvalidArgument, {"cannot be overridden"}},
      {"start: sep{\"a\", \",\"}\n", StatusCode::kUnimplemented, {"template", "line 1, column 8"}},
      {"sep{x}: x\nstart: \"a\"\n", StatusCode::kUnimplemented, {"template", "line 1, column 1"}},
      {"start: A\n%declare A\n", StatusCode::kUnimplemented, {"%declare", "line 2, column 1"}},
      {"start: A\n%import python.NAME -> A\n", StatusCode::kUnimplemented, {"module 'python'"}},
      {"start: A\n%import .other.A\n", StatusCode::kUnimplemented, {"relative %import"}},
  };
  for (const auto& e : errors) {
    auto g = compile_lark(e.grammar);
    ASSERT_FALSE(g.ok()) << e.grammar;
    EXPECT_EQ(g.status().code(), e.code) << e.grammar << ": " << g.status().to_string();
    for (const char* p : e.parts) {
      EXPECT_NE(g.status().message().find(p), std::string::npos) << "'" << p << "' not in: " << g.status().message();
    }
    EXPECT_EQ(g.status().message().rfind("lark: ", 0), 0u) << g.status().message();
  }
}

// Python `re` conformance of the regexp dialect (tests/structured/make_lark_regex_fixture.py):
// the rust-regex corpus as Python reads it plus Python-specific cases, re.fullmatch as oracle.
// Each case is accepted with the same answer or refused (UNIMPLEMENTED / over the state limit);
// never answered differently, and never a syntax error for a pattern Python compiles.
TEST(LarkRegex, PythonConformance) {
  std::ifstream f("tests/data/structured/lark_regex_cases.jsonl");
  ASSERT_TRUE(f) << "missing tests/data/structured/lark_regex_cases.jsonl";
  auto vocab = byte_vocab();
  std::map<std::string, StatusOr<std::shared_ptr<CompiledGrammar>>> cache;
  int cases = 0, agree = 0, refused = 0;
  std::vector<std::string> wrong;
  std::map<std::string, int> refusals;  // by reason (cases, not patterns)
  std::string line;
  while (std::getline(f, line)) {
    auto c = OJson::parse(line);
    ++cases;
    std::string re = c["regex"], flags = c["flags"], text = c["text"];
    std::string key = flags + "/" + re;
    auto it = cache.find(key);
    if (it == cache.end()) {
      PyRegexFlags pf;
      pf.ignore_case = flags.find('i') != std::string::npos;
      pf.dotall = flags.find('s') != std::string::npos;
      pf.verbose = flags.find('x') != std::string::npos;
      pf.ascii = flags.find('a') != std::string::npos;
      Regex rx;
      StatusOr<std::shared_ptr<CompiledGrammar>> g = Internal("unset");
      auto root = parse_python_regex(re, pf, &rx, nullptr);
      if (!root.ok()) {
        g = root.status();
      } else {
        rx.root = *root;
        GrammarBuilder b;
        TerminalSpec spec;
        spec.name = "re";
        TerminalComponent comp;
        comp.regex = std::make_shared<Regex>(std::move(rx));
        spec.components.push_back(comp);
        int start = b.add_nonterminal("start");
        b.add_production(start, {GrammarBuilder::terminal_symbol(b.add_terminal(std::move(spec)))});
        g = CompiledGrammar::compile(std::move(b), start);
      }
      it = cache.emplace(key, std::move(g)).first;
    }
    const auto& g = it->second;
    bool full;
    if (g.ok()) {
      GrammarMatcher m(*g, vocab);
      full = m.accept_bytes(text) && m.can_terminate();
    } else if (g.status().message().find("matches no input") != std::string::npos) {
      full = false;  // an empty language is an answer too
    } else if (g.status().code() == StatusCode::kUnimplemented ||
               g.status().code() == StatusCode::kResourceExhausted) {
      ++refused;
      const std::string& msg = g.status().message();
      ++refusals[msg.substr(0, msg.find(" at position"))];
      continue;
    } else {
      wrong.push_back("/" + re + "/" + flags + " error: " + g.status().message());
      continue;
    }
    if (full == c["full"].get<bool>()) ++agree;
    else wrong.push_back("/" + re + "/" + flags + " on '" + text + "': got " + std::to_string(full));
  }
  std::cout << "[lark regex conformance] cases " << cases << ", agree " << agree << ", refused "
            << refused << ", disagree/error " << wrong.size() << "\n";
  for (const auto& [why, n] : refusals) std::cout << "  refused " << n << ": " << why << "\n";
  for (size_t i = 0; i < wrong.size() && i < 30; ++i) std::cout << "  " << wrong[i] << "\n";
  EXPECT_GT(cases, 3000);
  EXPECT_GT(agree, cases * 8 / 10);
  EXPECT_TRUE(wrong.empty());
}

TEST(Lark, PythonCaseTables) {
  // Spot checks of the generated tables against Python 3.11's re.
  EXPECT_TRUE(py_case_closure(CodepointSet::single(0x3C3), false).contains(0x3C2));  // σ ~ ς
  EXPECT_TRUE(py_case_closure(CodepointSet::single('k'), false).contains(0x212A));
  EXPECT_FALSE(py_case_closure(CodepointSet::single('k'), true).contains(0x212A));
  EXPECT_TRUE(py_digit(false).contains(0x0663));
  EXPECT_FALSE(py_digit(false).contains(0x00B2));  // superscript two is not \d in Python
  EXPECT_TRUE(py_space(false).contains(0x1C));
  EXPECT_FALSE(py_space(false).contains(0xFEFF));  // ECMA \s has it, Python's does not
}

}  // namespace
}  // namespace deepinfer::structured::testing
