// StructuredOutputManager with the DeepSeek-V3 tokenizer's real vocabulary (128k tokens): specs
// compile off the calling thread; random logits go through the real Sampler with the manager's
// masks, and every accepted token is fed back until the grammar ends; the decoded text is then
// checked by independent validators (std::regex for regexes and the GBNF language, nlohmann JSON
// + the schema's rules for JSON Schema). Bad specs fail only their request with a message that
// names the keyword; identical specs compile once.
#include "engine/structured_outputs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::engine {
namespace {

using State = StructuredOutputState;

const tokenizer::Tokenizer& deepseek_tokenizer() {
  static std::unique_ptr<tokenizer::Tokenizer> tok = [] {
    auto t = tokenizer::Tokenizer::from_dir("tests/data/tokenizers/deepseek-v3");
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return t.ok() ? std::move(t).value() : nullptr;
  }();
  return *tok;
}

// One manager over the DeepSeek vocabulary, shared by the tests (the vocabulary is built once).
StructuredOutputManager& shared_manager() {
  static std::unique_ptr<StructuredOutputManager> m = [] {
    StructuredOutputOptions o;
    o.num_compile_threads = 2;
    o.num_mask_threads = 2;
    return StructuredOutputManager::for_tokenizer(deepseek_tokenizer(), -1, o);
  }();
  return *m;
}

size_t count_code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

const char* kPersonSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "age", "tags"],
  "additionalProperties": false
})";

// Structural check of a document against kPersonSchema; "" when valid, else what is wrong.
std::string check_person(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return "not JSON";
  if (!j.is_object()) return "not an object";
  for (const char* k : {"name", "age", "tags"}) {
    if (!j.contains(k)) return std::string("missing required '") + k + "'";
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "name" && it.key() != "age" && it.key() != "tags" && it.key() != "ok") {
      return "unexpected key '" + it.key() + "'";
    }
  }
  if (!j["name"].is_string()) return "name is not a string";
  const size_t len = count_code_points(j["name"].get<std::string>());
  if (len < 1 || len > 8) return "name has " + std::to_string(len) + " code points";
  // JSON Schema (draft 6 and later): a number with a zero fractional part is an integer, so
  // "5.0" and "-0.0" are integers too (docs/structured.md "Numbers").
  if (!j["age"].is_number() || std::floor(j["age"].get<double>()) != j["age"].get<double>()) {
    return "age is not an integer";
  }
  const double age = j["age"].get<double>();
  if (age < 0 || age > 150) return "age out of range";
  if (!j["tags"].is_array() || j["tags"].size() > 3) return "tags is not an array of <= 3";
  for (const auto& t : j["tags"]) {
    if (t != "red" && t != "green" && t != "blue") return "bad tag " + t.dump();
  }
  if (j.contains("ok") && !j["ok"].is_boolean()) return "ok is not a boolean";
  return "";
}

bool has_whitespace_outside_strings(const std::string& json_text) {
  bool in_string = false, escaped = false;
  for (char c : json_text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      return true;
    }
  }
  return false;
}

// expr := term (('+' | '-') term)* ; term := digit{1,3} | '(' expr ')'
bool parse_expr(const std::string& s, size_t& i, int depth);
bool parse_term(const std::string& s, size_t& i, int depth) {
  if (i < s.size() && s[i] == '(') {
    ++i;
    if (depth > 200 || !parse_expr(s, i, depth + 1)) return false;
    if (i >= s.size() || s[i] != ')') return false;
    ++i;
    return true;
  }
  size_t digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  return digits >= 1 && digits <= 3;
}
bool parse_expr(const std::string& s, size_t& i, int depth) {
  if (!parse_term(s, i, depth)) return false;
  while (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    ++i;
    if (!parse_term(s, i, depth)) return false;
  }
  return true;
}
bool parse_arithmetic(const std::string& s) {
  size_t i = 0;
  return parse_expr(s, i, 0) && i == s.size();
}

struct Spec {
  std::string name;
  StructuredOutputsParams params;
  std::function<std::string(const std::string&)> check;  // "" = valid
  // EOS gets a logit drawn from [lo, hi] (the others are N(0, 1)): high ends a document as soon
  // as the grammar allows it; lower lets unbounded grammars show their structure first.
  float eos_logit_lo = 8.0f, eos_logit_hi = 12.0f;
};

std::vector<Spec> valid_specs() {
  std::vector<Spec> specs;
  {
    Spec s{"json schema (flexible whitespace)", {}, check_person};
    s.params.json = kPersonSchema;
    specs.push_back(s);
    s.name = "json schema (compact)";
    s.params.whitespace = StructuredOutputsParams::Whitespace::kCompact;
    s.check = [](const std::string& t) {
      std::string err = check_person(t);
      if (err.empty() && has_whitespace_outside_strings(t)) err = "whitespace in compact output";
      return err;
    };
    specs.push_back(s);
  }
  auto regex_spec = [](const std::string& name, const std::string& pattern) {
    Spec s{name, {}, nullptr};
    s.params.regex = pattern;
    s.check = [pattern](const std::string& t) {
      return std::regex_match(t, std::regex(pattern, std::regex::ECMAScript))
                 ? std::string()
                 : "no full match of " + pattern;
    };
    return s;
  };
  specs.push_back(regex_spec("regex email", R"([a-z]{1,10}@[a-z]{2,8}\.(com|org|net))"));
  specs.push_back(regex_spec("regex phone", R"(\(\d{3}\) \d{3}-\d{4})"));
  {
    Spec s{"gbnf list", {}, nullptr};
    s.params.grammar =
        "root ::= item (\",\" item)*\nitem ::= [a-z]{1,6} | [0-9]+ # words or numbers\n";
    s.check = [](const std::string& t) {
      static const std::regex re("([a-z]{1,6}|[0-9]+)(,([a-z]{1,6}|[0-9]+))*");
      return std::regex_match(t, re) ? std::string() : "not in the GBNF language";
    };
    s.eos_logit_lo = 1.0f;
    s.eos_logit_hi = 4.0f;
    specs.push_back(s);
  }
  {
    // Nested arithmetic (left recursion, parentheses): checked by a recursive-descent parser.
    Spec s{"gbnf arithmetic", {}, nullptr};
    s.params.grammar =
        "root ::= expr\n"
        "expr ::= expr (\"+\" | \"-\") term | term\n"
        "term ::= [0-9]{1,3} | \"(\" expr \")\"\n";
    s.check = [](const std::string& t) {
      return parse_arithmetic(t) ? std::string() : "not an expression";
    };
    s.eos_logit_lo = -1.0f;  // few operator tokens compete with EOS after a term
    s.eos_logit_hi = 1.0f;
    specs.push_back(s);
  }
#if __has_include("structured/lark.h")
  {
    // Lark, detected by GrammarSyntax::kAuto (no `::=`).
    Spec s{"lark pairs", {}, nullptr};
    s.params.grammar =
        "start: pair (\",\" pair)*\n"
        "pair: KEY \"=\" VALUE\n"
        "KEY: /[a-z]{1,5}/\n"
        "VALUE: /[0-9]{1,3}/\n";
    s.check = [](const std::string& t) {
      static const std::regex re("[a-z]{1,5}=[0-9]{1,3}(,[a-z]{1,5}=[0-9]{1,3})*");
      return std::regex_match(t, re) ? std::string() : "not in the Lark language";
    };
    s.eos_logit_lo = 1.0f;
    s.eos_logit_hi = 4.0f;
    specs.push_back(s);
  }
#endif
  return specs;
}

TEST(StructuredOutputs, RandomGenerationsAreValid) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  const tokenizer::Tokenizer& tok = deepseek_tokenizer();
  StructuredOutputManager& m = shared_manager();
  const int64_t V = tok.vocab_size();
  const int32_t eos = tok.eos_ids().at(0);
  const std::vector<Spec> specs = valid_specs();

  struct Run {
    std::string id;
    const Spec* spec;
    SamplingParams params;
    uint64_t seed;
    float eos_logit;
    std::vector<int32_t> tokens;
    bool done = false;
  };
  std::vector<Run> runs;
  for (int k = 0; k < 2; ++k) {
    for (const Spec& s : specs) {
      Run r{"gen-" + std::to_string(runs.size()), &s, {}, gen(), 0.0f, {}, false};
      r.params.temperature = k == 0 ? 1.0f : 0.7f;
      if (k == 1) r.params.top_k = 1000;
      r.params.structured_outputs = s.params;
      r.eos_logit = std::uniform_real_distribution<float>(s.eos_logit_lo, s.eos_logit_hi)(gen);
      ASSERT_TRUE(m.submit(r.id, s.params).ok());
      runs.push_back(std::move(r));
    }
  }
  for (const Run& r : runs) {
    const StructuredOutputStatus st = m.wait(r.id);
    ASSERT_EQ(st.state, State::kReady) << r.spec->name << ": " << st.error.to_string();
  }
  const size_t W = m.words_per_row();
  ASSERT_EQ(W, static_cast<size_t>((V + 31) / 32));

  std::normal_distribution<float> normal(0.0f, 1.0f);
  sample::Sampler sampler;
  constexpr int kMaxSteps = 600;
  for (int step = 0; step < kMaxSteps; ++step) {
    std::vector<Run*> active;
    for (Run& r : runs)
      if (!r.done) active.push_back(&r);
    if (active.empty()) break;
    std::vector<std::string> ids;
    for (Run* r : active) ids.push_back(r->id);
    std::vector<uint32_t> masks(ids.size() * W);
    // Alternate the synchronous and the background fill: both must give the same masks.
    std::vector<Status> fill = (step % 2 == 0) ? m.fill_masks(ids, masks.data())
                                               : m.fill_masks_async(ids, masks.data()).get();
    std::vector<float> logits(ids.size() * static_cast<size_t>(V));
    for (float& v : logits) v = normal(gen);
    std::vector<sample::SampleRow> rows(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_TRUE(fill[i].ok()) << active[i]->spec->name << ": " << fill[i].to_string();
      logits[i * V + eos] = active[i]->eos_logit;
      rows[i].params = &active[i]->params;
      rows[i].seed = active[i]->seed;
      rows[i].output_token_ids = active[i]->tokens;
      rows[i].eos_token_id = eos;
      rows[i].allowed_token_mask = std::span<const uint32_t>(masks).subspan(i * W, W);
    }
    auto sampled = sampler.sample(logits, V, rows);
    ASSERT_TRUE(sampled.ok()) << sampled.status().to_string();
    for (size_t i = 0; i < ids.size(); ++i) {
      Run& r = *active[i];
      const int32_t t = (*sampled)[i].token;
      const Status st = m.accept(r.id, t);
      ASSERT_TRUE(st.ok()) << r.spec->name << ": " << st.to_string();
      r.tokens.push_back(t);
      if (t == eos) {
        EXPECT_TRUE(m.is_terminated(r.id));
        r.done = true;
      } else {
        EXPECT_FALSE(m.is_terminated(r.id));
      }
    }
  }
  for (Run& r : runs) {
    ASSERT_TRUE(r.done) << r.spec->name << " did not end within " << kMaxSteps << " tokens";
    ASSERT_EQ(r.tokens.back(), eos);
    const std::vector<int32_t> body(r.tokens.begin(), r.tokens.end() - 1);
    std::string bytes;
    for (int32_t t : body) bytes += tok.token_bytes(t);
    const std::string text = tok.decode(body, /*skip_special_tokens=*/true);
    EXPECT_EQ(text, bytes) << r.spec->name;
    EXPECT_EQ(r.spec->check(text), "") << r.spec->name << " produced: " << text;
    std::printf("%-34s %3zu tokens: %s\n", r.spec->name.c_str(), r.tokens.size(),
                nlohmann::json(text).dump().c_str());
    // After EOS nothing more is accepted.
    EXPECT_EQ(m.accept(r.id, eos).code(), StatusCode::kInvalidArgument);
    m.release(r.id);
    EXPECT_FALSE(m.has(r.id));
  }
}

TEST(StructuredOutputs, BadSpecsFailOnlyTheirRequestWithTheKeyword) {
  StructuredOutputManager& m = shared_manager();
  StructuredOutputsParams bad_schema, bad_regex, bad_gbnf, good;
  bad_schema.json = R"({"type":"object","properties":{"a":{"not":{"type":"string","minLength":1}}}})";
  bad_regex.regex = "a(?=b)";
  bad_gbnf.grammar = "root ::= missing";
  good.regex = "[0-9]{2}";
  ASSERT_TRUE(m.submit("bad-schema", bad_schema).ok());
  ASSERT_TRUE(m.submit("bad-regex", bad_regex).ok());
  ASSERT_TRUE(m.submit("bad-gbnf", bad_gbnf).ok());
  ASSERT_TRUE(m.submit("good", good).ok());

  StructuredOutputStatus s = m.wait("bad-schema");
  ASSERT_EQ(s.state, State::kFailed);
  EXPECT_EQ(s.error.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.error.message().find("keyword 'not'"), std::string::npos) << s.error.message();
  EXPECT_NE(s.error.message().find("structured_outputs.json"), std::string::npos)
      << s.error.message();
  EXPECT_NE(s.error.message().find("request 'bad-schema'"), std::string::npos) << s.error.message();
  s = m.wait("bad-regex");
  ASSERT_EQ(s.state, State::kFailed);
  EXPECT_NE(s.error.message().find("lookahead"), std::string::npos) << s.error.message();
  s = m.wait("bad-gbnf");
  ASSERT_EQ(s.state, State::kFailed);
  EXPECT_NE(s.error.message().find("missing"), std::string::npos) << s.error.message();
  ASSERT_EQ(m.wait("good").state, State::kReady);

  // A batch mixing failed and good requests: only the failed rows fail (and are all zeros).
  const std::vector<std::string> ids = {"bad-schema", "good", "never-submitted", "good"};
  const size_t W = m.words_per_row();
  std::vector<uint32_t> masks(ids.size() * W, 0xdeadbeefu);
  const std::vector<Status> st = m.fill_masks(ids, masks.data());
  EXPECT_EQ(st[0].code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(st[1].ok()) << st[1].to_string();
  EXPECT_EQ(st[2].code(), StatusCode::kNotFound);
  EXPECT_EQ(st[3].code(), StatusCode::kInvalidArgument);  // the same request twice
  EXPECT_TRUE(std::all_of(masks.begin(), masks.begin() + W, [](uint32_t w) { return w == 0; }));
  // "good" allows exactly the digit tokens of one or two digits... at least "0".."9" and no letter.
  const tokenizer::Tokenizer& tok = deepseek_tokenizer();
  auto allowed = [&](size_t row, int32_t t) {
    return (masks[row * W + (t >> 5)] >> (t & 31)) & 1u;
  };
  for (char c = '0'; c <= '9'; ++c) {
    auto id = tok.token_to_id(std::string(1, c));
    ASSERT_TRUE(id.has_value());
    EXPECT_TRUE(allowed(1, *id)) << c;
  }
  EXPECT_FALSE(allowed(1, *tok.token_to_id("a")));
  EXPECT_FALSE(allowed(1, tok.eos_ids()[0]));  // "" is not a full match yet
  // accept on a failed request returns its error; the good one goes on.
  EXPECT_EQ(m.accept("bad-schema", 15).code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(m.accept("good", *tok.token_to_id("4")).ok());
  EXPECT_EQ(m.accept("good", *tok.token_to_id("a")).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(m.accept("good", *tok.token_to_id("2")).ok());
  EXPECT_TRUE(m.must_terminate("good"));
  EXPECT_TRUE(m.accept("good", tok.eos_ids()[0]).ok());
  EXPECT_TRUE(m.is_terminated("good"));
  for (const char* id : {"bad-schema", "bad-regex", "bad-gbnf", "good"}) m.release(id);
  EXPECT_EQ(m.status("good").error.code(), StatusCode::kNotFound);
}

// grammar_syntax picks the parser; kAuto reads `::=` as GBNF and anything else as Lark.
TEST(StructuredOutputs, GrammarSyntax) {
  StructuredOutputManager& m = shared_manager();
  using Syntax = StructuredOutputsParams::GrammarSyntax;
  StructuredOutputsParams gbnf_as_lark;
  gbnf_as_lark.grammar = "root ::= \"x\"";
  gbnf_as_lark.grammar_syntax = Syntax::kLark;
  StructuredOutputsParams lark_as_gbnf;
  lark_as_gbnf.grammar = "start: \"x\"";
  lark_as_gbnf.grammar_syntax = Syntax::kGbnf;
  StructuredOutputsParams gbnf_auto;
  gbnf_auto.grammar = "root ::= \"x\" # a comment: with a colon";
  ASSERT_TRUE(m.submit("syntax-1", gbnf_as_lark).ok());
  ASSERT_TRUE(m.submit("syntax-2", lark_as_gbnf).ok());
  ASSERT_TRUE(m.submit("syntax-3", gbnf_auto).ok());
  StructuredOutputStatus s1 = m.wait("syntax-1");
  ASSERT_EQ(s1.state, State::kFailed);
#if __has_include("structured/lark.h")
  EXPECT_NE(s1.error.message().find("structured_outputs.grammar (Lark)"), std::string::npos)
      << s1.error.message();
  StructuredOutputsParams lark_auto;
  lark_auto.grammar = "start: \"x\"";
  ASSERT_TRUE(m.submit("syntax-4", lark_auto).ok());
  EXPECT_EQ(m.wait("syntax-4").state, State::kReady) << m.wait("syntax-4").error.to_string();
  m.release("syntax-4");
#else
  EXPECT_EQ(s1.error.code(), StatusCode::kUnimplemented);
#endif
  StructuredOutputStatus s2 = m.wait("syntax-2");
  ASSERT_EQ(s2.state, State::kFailed);
  EXPECT_NE(s2.error.message().find("structured_outputs.grammar (GBNF)"), std::string::npos)
      << s2.error.message();
  EXPECT_EQ(m.wait("syntax-3").state, State::kReady) << m.wait("syntax-3").error.to_string();
  for (const char* id : {"syntax-1", "syntax-2", "syntax-3"}) m.release(id);
}

TEST(StructuredOutputs, IdenticalSpecsCompileOnce) {
  StructuredOutputManager& m = shared_manager();
  StructuredOutputsParams a, b;
  a.json = R"({"type":"array","items":{"type":"integer"},"maxItems":4,"description":"cache test"})";
  b.regex = "cache-test-[a-f]{4}";
  const StructuredOutputStats before = m.stats();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(m.submit("cache-a" + std::to_string(i), a).ok());
    ASSERT_TRUE(m.submit("cache-b" + std::to_string(i), b).ok());
  }
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(m.wait("cache-a" + std::to_string(i)).state, State::kReady);
    EXPECT_EQ(m.wait("cache-b" + std::to_string(i)).state, State::kReady);
  }
  const StructuredOutputStats after = m.stats();
  EXPECT_EQ(after.num_compiles - before.num_compiles, 2);
  EXPECT_EQ(after.num_cache_hits - before.num_cache_hits, 8);
  // Each request has its own matcher: advancing one does not move the other.
  const tokenizer::Tokenizer& tok = deepseek_tokenizer();
  ASSERT_TRUE(m.accept("cache-a0", *tok.token_to_id("[")).ok());
  EXPECT_EQ(m.accept("cache-a1", *tok.token_to_id("1")).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.accept("cache-a1", *tok.token_to_id("[")).ok());
  // The same id cannot be submitted twice until released; after release it can.
  EXPECT_EQ(m.submit("cache-a0", a).code(), StatusCode::kInvalidArgument);
  for (int i = 0; i < 5; ++i) {
    m.release("cache-a" + std::to_string(i));
    m.release("cache-b" + std::to_string(i));
  }
  ASSERT_TRUE(m.submit("cache-a0", a).ok());
  EXPECT_EQ(m.wait("cache-a0").state, State::kReady);
  EXPECT_EQ(m.stats().num_compiles - before.num_compiles, 2);  // still cached
  m.release("cache-a0");
  // Invalid params are refused at submit, naming the field.
  StructuredOutputsParams none;
  EXPECT_EQ(
      m.submit("x", none).message(),
      "request 'x': SamplingParams.structured_outputs sets none of 'json', 'regex', 'grammar', "
      "'json_object'; set exactly one");
}

TEST(StructuredOutputs, RollbackRestoresMasks) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  StructuredOutputManager& m = shared_manager();
  StructuredOutputsParams p;
  p.json_object = true;
  ASSERT_TRUE(m.submit("rb", p).ok());
  ASSERT_EQ(m.wait("rb").state, State::kReady);
  const size_t W = m.words_per_row();
  const std::vector<std::string> ids = {"rb"};
  std::vector<std::vector<uint32_t>> history;
  std::vector<uint32_t> mask(W);
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(m.fill_masks(ids, mask.data())[0].ok());
    history.push_back(mask);
    std::vector<int32_t> allowed;
    const int32_t eos = deepseek_tokenizer().eos_ids()[0];
    for (size_t t = 0; t < W * 32; ++t) {
      if (((mask[t >> 5] >> (t & 31)) & 1u) && static_cast<int32_t>(t) != eos) {
        allowed.push_back(static_cast<int32_t>(t));
      }
    }
    if (allowed.empty()) break;  // only EOS is left
    const int32_t t = allowed[gen() % allowed.size()];
    ASSERT_TRUE(m.accept("rb", t).ok());
  }
  if (history.size() == 40) {  // ran out of steps after accepting a 40th token: its mask too
    ASSERT_TRUE(m.fill_masks(ids, mask.data())[0].ok());
    history.push_back(mask);
  }
  const int n = static_cast<int>(history.size()) - 1;  // tokens accepted
  EXPECT_GE(n, 1);
  std::printf("json_object: %d tokens accepted, then rolled back one by one\n", n);
  for (int k = n; k >= 0; --k) {
    if (k < n) {
      ASSERT_TRUE(m.rollback("rb", 1).ok());
    }
    ASSERT_TRUE(m.fill_masks(ids, mask.data())[0].ok());
    EXPECT_EQ(mask, history[static_cast<size_t>(k)]) << "after rolling back to step " << k;
  }
  EXPECT_EQ(m.rollback("rb", 1).code(), StatusCode::kInvalidArgument);
  m.release("rb");
}

// A tiny vocabulary (256 single bytes + many lowercase words) and a small work limit: a regex whose
// mask walks every word exceeds the limit and fails only its own request.
TEST(StructuredOutputs, WorkLimitFailsOnlyThatRequest) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  std::set<std::string> words;
  while (words.size() < 4000) {
    std::string w;
    for (int i = 0, n = 2 + static_cast<int>(gen() % 5); i < n; ++i)
      w += static_cast<char>('a' + gen() % 26);
    words.insert(w);
  }
  bytes.insert(bytes.end(), words.begin(), words.end());
  bytes.push_back("<eos>");
  std::vector<uint8_t> special(bytes.size(), 0);
  special.back() = 1;
  const int32_t eos = static_cast<int32_t>(bytes.size()) - 1;
  StructuredOutputOptions o;
  o.matcher.max_work_per_mask = 1000;
  StructuredOutputManager m(
      [&] { return structured::TokenVocabulary::create(bytes, special, {eos}); }, o);
  StructuredOutputsParams heavy, light;
  heavy.regex = "[a-z]+";  // every word is allowed: the walk visits > 4000 trie nodes
  light.regex = "0|1";
  ASSERT_TRUE(m.submit("heavy", heavy).ok());
  ASSERT_TRUE(m.submit("light", light).ok());
  ASSERT_EQ(m.wait("heavy").state, State::kReady);
  ASSERT_EQ(m.wait("light").state, State::kReady);
  const size_t W = m.words_per_row();
  std::vector<uint32_t> masks(2 * W);
  const std::vector<std::string> ids = {"heavy", "light"};
  const std::vector<Status> st = m.fill_masks(ids, masks.data());
  EXPECT_EQ(st[0].code(), StatusCode::kResourceExhausted) << st[0].to_string();
  EXPECT_TRUE(st[1].ok()) << st[1].to_string();
  EXPECT_EQ(m.status("heavy").state, State::kFailed);
  EXPECT_EQ(m.status("heavy").error.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(m.status("light").state, State::kReady);
  // The light mask: exactly tokens "0" and "1".
  for (int32_t t = 0; t < static_cast<int32_t>(bytes.size()); ++t) {
    const bool on = (masks[W + (t >> 5)] >> (t & 31)) & 1u;
    EXPECT_EQ(on, t == '0' || t == '1') << "token " << t;
  }
}

// Past max_cached_grammars the oldest finished entries are dropped; a dropped spec compiles again.
TEST(StructuredOutputs, CacheIsBounded) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  bytes.push_back("<eos>");
  std::vector<uint8_t> special(bytes.size(), 0);
  special.back() = 1;
  StructuredOutputOptions o;
  o.max_cached_grammars = 2;
  StructuredOutputManager m(
      [&] { return structured::TokenVocabulary::create(bytes, special, {256}); }, o);
  auto submit_wait = [&](const std::string& id, const std::string& regex) {
    StructuredOutputsParams p;
    p.regex = regex;
    ASSERT_TRUE(m.submit(id, p).ok());
    ASSERT_EQ(m.wait(id).state, State::kReady);
    m.release(id);
  };
  submit_wait("a", "a+");
  submit_wait("b", "b+");
  submit_wait("a2", "a+");  // cached
  EXPECT_EQ(m.stats().num_compiles, 2);
  EXPECT_EQ(m.stats().num_cache_hits, 1);
  submit_wait("c", "c+");   // evicts "a+" (the oldest)
  submit_wait("b2", "b+");  // still cached
  EXPECT_EQ(m.stats().num_compiles, 3);
  submit_wait("a3", "a+");  // compiles again
  EXPECT_EQ(m.stats().num_compiles, 4);
  EXPECT_EQ(m.stats().num_cache_hits, 2);
  EXPECT_EQ(m.num_requests(), 0u);
}

// Several client threads at once (each on its own requests), with two compile workers and two
// mask threads: every submit compiles or hits the cache, every mask fills, every token drawn from
// a mask is accepted; 4 distinct specs compile 4 times in all. (For ThreadSanitizer runs.)
TEST(StructuredOutputs, ConcurrentClients) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  for (const char* w : {"ab", "abc", "12", "123", "{\"", "\":", "true", "null"}) bytes.push_back(w);
  bytes.push_back("<eos>");
  const int32_t eos = static_cast<int32_t>(bytes.size()) - 1;
  std::vector<uint8_t> special(bytes.size(), 0);
  special.back() = 1;
  StructuredOutputOptions o;
  o.num_compile_threads = 2;
  o.num_mask_threads = 2;
  StructuredOutputManager m(
      [&] { return structured::TokenVocabulary::create(bytes, special, {eos}); }, o);
  const std::vector<std::string> regexes = {"[a-c]{1,6}", "[0-9]{2,5}", "(ab|12)+x", "t?null"};
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int c = 0; c < 4; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937 gen(static_cast<unsigned>(c) * 7919u + 1u);
      for (int k = 0; k < 10; ++k) {
        const std::string id = "c" + std::to_string(c) + "-" + std::to_string(k);
        StructuredOutputsParams p;
        p.regex = regexes[(c + k) % regexes.size()];
        if (!m.submit(id, p).ok() || m.wait(id).state != State::kReady) {
          ++errors;
          continue;
        }
        const size_t W = m.words_per_row();
        std::vector<uint32_t> mask(W);
        for (int step = 0; step < 12 && !m.is_terminated(id); ++step) {
          const std::vector<std::string> ids = {id};
          const auto st = (step % 2) ? m.fill_masks_async(ids, mask.data()).get()
                                     : m.fill_masks(ids, mask.data());
          if (!st[0].ok()) {
            ++errors;
            break;
          }
          std::vector<int32_t> allowed;
          for (int32_t t = 0; t <= eos; ++t) {
            if ((mask[t >> 5] >> (t & 31)) & 1u) allowed.push_back(t);
          }
          if (allowed.empty() || !m.accept(id, allowed[gen() % allowed.size()]).ok()) {
            ++errors;
            break;
          }
        }
        m.release(id);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(m.num_requests(), 0u);
  EXPECT_EQ(m.stats().num_compiles, 4);
}

TEST(StructuredOutputs, VocabularyFailureFailsEveryRequest) {
  StructuredOutputManager m([]() -> StatusOr<std::shared_ptr<const structured::TokenVocabulary>> {
    return NotFound("tokenizer.json missing");
  });
  StructuredOutputsParams p;
  p.regex = "a";
  ASSERT_TRUE(m.submit("r", p).ok());
  const StructuredOutputStatus s = m.wait("r");
  ASSERT_EQ(s.state, State::kFailed);
  EXPECT_NE(s.error.message().find("building the token vocabulary"), std::string::npos)
      << s.error.message();
  EXPECT_NE(s.error.message().find("tokenizer.json missing"), std::string::npos)
      << s.error.message();
}

}  // namespace
}  // namespace deepinfer::engine
