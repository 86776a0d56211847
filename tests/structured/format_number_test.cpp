// Exactness of the number, format and metaschema rules of the JSON Schema compiler
// (docs/structured.md "Numbers", "Formats"): value-equal numerals, leap seconds (exhaustive),
// DFA minimization, RFC 5321 e-mail addresses, format assertion vs annotation, custom
// metaschemas, minProperties 1, maxProperties 0, `not` of types, `if` without `then`/`else`,
// `contains` alone;
// masks on the new lexemes against brute force.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "structured/automaton.h"
#include "structured/json_formats.h"
#include "structured/regex.h"
#include "test_util.h"

namespace deepinfer::structured::testing {
namespace {

bool accepts(const std::string& schema, const std::string& doc, JsonSchemaOptions opt = {}) {
  auto g = compile_json_schema(schema, opt);
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status().to_string();
  if (!g.ok()) return false;
  GrammarMatcher m(g->grammar, byte_vocab());
  return m.accept_bytes(doc) && m.can_terminate();
}

// --- numbers -----------------------------------------------------------------------------------

// Reference value of a JSON numeral as (negative, significant digits, exponent of the last
// significant digit); zero is {false, "", 0}. A different algorithm from expand_numeral.
struct Value {
  bool neg = false;
  std::string digits;
  long exp = 0;
  bool operator==(const Value&) const = default;
};

Value value_of(const std::string& s) {
  Value v;
  size_t i = 0;
  if (s[i] == '-') { v.neg = true; ++i; }
  std::string mant;
  long scale = 0;
  for (; i < s.size() && s[i] != 'e' && s[i] != 'E'; ++i) {
    if (s[i] == '.') { scale = -1; continue; }
    mant += s[i];
    if (scale < 0) --scale;
  }
  long frac = scale < 0 ? -scale - 1 : 0;
  long e = i < s.size() ? std::stol(s.substr(i + 1)) : 0;
  size_t nz = mant.find_first_not_of('0');
  if (nz == std::string::npos) return Value{};
  mant = mant.substr(nz);
  long exp = e - frac;
  while (mant.back() == '0') { mant.pop_back(); ++exp; }
  v.digits = mant;
  v.exp = exp;
  return v;
}

bool has_exponent(const std::string& s) { return s.find_first_of("eE") != std::string::npos; }

// Random numerals near a value: its digits with zeros added, signs flipped, one digit changed,
// exponent forms.
std::vector<std::string> variants(const std::string& plain, std::mt19937& rng) {
  std::vector<std::string> out = {plain};
  bool neg = plain[0] == '-';
  std::string body = neg ? plain.substr(1) : plain;
  size_t dot = body.find('.');
  std::string ip = dot == std::string::npos ? body : body.substr(0, dot);
  std::string fp = dot == std::string::npos ? "" : body.substr(dot + 1);
  std::string sign = neg ? "-" : "";
  for (int z = 1; z <= 3; ++z) out.push_back(sign + ip + "." + (fp.empty() ? "" : fp) + std::string(z, '0'));
  out.push_back((neg ? "" : "-") + body);
  out.push_back(sign + "0" + body);  // leading zero: not JSON
  out.push_back(sign + ip + "." + fp + "1");
  out.push_back(sign + ip + "e0");
  out.push_back(sign + ip + "0e-1");
  if (!fp.empty()) out.push_back(sign + ip + fp + "e-" + std::to_string(fp.size()));
  std::string changed = plain;
  size_t pos = std::uniform_int_distribution<size_t>(neg ? 1 : 0, plain.size() - 1)(rng);
  if (std::isdigit(static_cast<unsigned char>(changed[pos]))) {
    changed[pos] = static_cast<char>('0' + (changed[pos] - '0' + 1) % 10);
    out.push_back(changed);
  }
  return out;
}

bool is_json_number(const std::string& s) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  if (i == s.size()) return false;
  if (s[i] == '0') ++i;
  else if (s[i] >= '1' && s[i] <= '9') while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  else return false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    size_t d = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == d) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t d = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == d) return false;
  }
  return i == s.size();
}

TEST(JsonNumbers, ConstAcceptsExactlyTheValueEqualPlainNumerals) {
  const uint32_t seed = test_seed();
  std::mt19937 rng(seed);
  // Schema values written as integers and as floats (shortest round trip of the double).
  std::vector<std::string> consts = {"0", "1", "-1", "9007199254740992", "1.0", "0.5", "-2.25", "0.1",
                                     "100", "1e2", "1.5e-3", "-0.0", "12345678901234567890", "1e21"};
  std::uniform_int_distribution<int> digit(0, 9);
  for (int k = 0; k < 6; ++k) {
    std::string ip = std::to_string(std::uniform_int_distribution<int>(0, 99999)(rng));
    std::string fp;
    for (int j = std::uniform_int_distribution<int>(0, 4)(rng); j > 0; --j) fp += static_cast<char>('0' + digit(rng));
    if (!fp.empty()) fp.back() = static_cast<char>('1' + digit(rng) % 9);
    consts.push_back((k % 2 ? "-" : "") + ip + (fp.empty() ? "" : "." + fp));
  }
  for (const auto& c : consts) {
    std::string schema = "{\"const\":" + c + "}";
    auto g = compile_json_schema(schema);
    ASSERT_TRUE(g.ok()) << schema;
    GrammarMatcher m(g->grammar, byte_vocab());
    // The schema value as a validator holds it: integers exactly, others as a double (whose
    // shortest round-trip form is the value compared).
    nlohmann::json parsed = nlohmann::json::parse(c);
    Value want = value_of(parsed.dump());
    std::string plain = expand_numeral(parsed.dump());
    ASSERT_FALSE(plain.empty()) << c;
    for (const auto& inst : variants(plain, rng)) {
      bool valid_json = is_json_number(inst);
      bool expect = valid_json && !has_exponent(inst) && value_of(inst) == want;
      bool got = m.accept_bytes(inst) && m.can_terminate();
      m.rollback(m.num_accepted());
      EXPECT_EQ(got, expect) << "seed " << seed << " const " << c << " instance " << inst;
      if (valid_json && has_exponent(inst) && value_of(inst) == want) {
        EXPECT_FALSE(got) << "exponent forms are outside the accepted language: " << inst;
      }
    }
  }
}

TEST(JsonNumbers, SuiteCases) {
  const char* c = R"({"const":9007199254740992})";
  EXPECT_TRUE(accepts(c, "9007199254740992"));
  EXPECT_TRUE(accepts(c, "9007199254740992.0"));
  EXPECT_FALSE(accepts(c, "9007199254740991.0"));
  EXPECT_FALSE(accepts(c, "9007199254740993.0")) << "equal as doubles, not as values";
  EXPECT_FALSE(accepts(c, "9.007199254740992e+15")) << "exponent forms are not accepted";
  const char* i = R"({"type":"integer"})";
  EXPECT_TRUE(accepts(i, "12345678910111213141516171819202122232425262728293031"));
  EXPECT_TRUE(accepts(i, "-12345678910111213141516171819202122232425262728293031"));
  EXPECT_TRUE(accepts(i, "1.0"));
  EXPECT_TRUE(accepts(i, "-0.000"));
  EXPECT_FALSE(accepts(i, "1.5"));
  EXPECT_FALSE(accepts(i, "1.50"));
  EXPECT_FALSE(accepts(i, "1e2"));
  // Drafts 3/4: 1.0 is not an integer.
  const char* d4 = R"({"$schema":"http://json-schema.org/draft-04/schema#","type":"integer"})";
  EXPECT_TRUE(accepts(d4, "12"));
  EXPECT_FALSE(accepts(d4, "12.0"));
  EXPECT_FALSE(accepts(R"({"$schema":"http://json-schema.org/draft-04/schema#","type":"integer","enum":[1.0,2]})", "1.0"));
  EXPECT_TRUE(accepts(R"({"$schema":"http://json-schema.org/draft-04/schema#","type":"integer","enum":[1.0,2]})", "1"));
  EXPECT_TRUE(accepts(R"({"$schema":"http://json-schema.org/draft-04/schema#","enum":[1]})", "1.0"));
  // Bounded integers: zero fractions and -0 where 0 is in range.
  const char* b = R"({"type":"integer","minimum":-5,"maximum":5})";
  for (const char* ok : {"5.00", "-5.0", "-0", "-0.0", "0.0", "3"}) EXPECT_TRUE(accepts(b, ok)) << ok;
  for (const char* bad : {"6.0", "-6", "5.01", "0.5", "-0.1"}) EXPECT_FALSE(accepts(b, bad)) << bad;
  EXPECT_FALSE(accepts(R"({"type":"integer","minimum":1})", "-0"));
  // Enum members nested in arrays/objects compare by value too.
  const char* e = R"({"enum":[[1,{"a":0.5}]]})";
  EXPECT_TRUE(accepts(e, "[1.0,{\"a\":0.50}]"));
  EXPECT_FALSE(accepts(e, "[1.0,{\"a\":0.51}]"));
}

TEST(JsonNumbers, ExpandNumeral) {
  EXPECT_EQ(expand_numeral("1.5e-3"), "0.0015");
  EXPECT_EQ(expand_numeral("-9.007199254740992e+15"), "-9007199254740992");
  EXPECT_EQ(expand_numeral("00.100"), "0.1");
  EXPECT_EQ(expand_numeral("-0.0"), "-0");
  EXPECT_EQ(expand_numeral("1e400"), "");  // longer than the limit
  EXPECT_EQ(expand_numeral("1."), "");
  EXPECT_EQ(expand_numeral("abc"), "");
}

// --- leap seconds --------------------------------------------------------------------------------

// Runs the raw (not JSON-quoted) automaton of a format over s.
class FormatDfa {
 public:
  explicit FormatDfa(const std::string& format) {
    auto f = format_regex(format);
    EXPECT_TRUE(f.has_value());
    TerminalSpec spec;
    spec.name = "test-" + format;
    spec.minimize = true;
    spec.components.push_back({std::make_shared<Regex>(parse_regex(f->pattern).value()),
                               TerminalComponent::Mode::kFull, false, false});
    dfa_ = Dfa::build(spec, 100000).value();
  }
  bool matches(const std::string& s) const {
    uint32_t st = dfa_.start();
    for (unsigned char c : s) {
      st = dfa_.next(st, c);
      if (st == Dfa::kDead) return false;
    }
    return dfa_.accepting(st);
  }
  const Dfa& dfa() const { return dfa_; }

 private:
  Dfa dfa_;
};

std::string two(int v) { return std::string(1, static_cast<char>('0' + v / 10)) + static_cast<char>('0' + v % 10); }

TEST(Formats, LeapSecondsExactlyWhenUtcIs235960) {
  FormatDfa time("time");
  // The exact automaton must stay near its minimum (1,440 local times remembered from hh:mm to
  // the offset): ~11k states.
  EXPECT_LT(time.dfa().num_states(), 12000u);
  const uint32_t seed = test_seed();
  std::mt19937 rng(seed);
  int accepted = 0;
  // Every local hh:mm x every offset (both signs, hours 00-23, minutes 00-59), second 60.
  for (int t = 0; t < 1440; ++t) {
    std::string local = two(t / 60) + ":" + two(t % 60) + ":60";
    for (int sign = -1; sign <= 1; sign += 2) {
      for (int o = 0; o < 1440; ++o) {
        std::string s = local + (sign > 0 ? "+" : "-") + two(o / 60) + ":" + two(o % 60);
        bool utc_2359 = ((t - sign * o) % 1440 + 1440) % 1440 == 1439;
        bool got = time.matches(s);
        accepted += got;
        if (got != utc_2359) {
          ADD_FAILURE() << s << " expected " << utc_2359;
          return;
        }
      }
    }
    bool z = time.matches(local + "Z");
    EXPECT_EQ(z, t == 1439) << local << "Z";
    EXPECT_EQ(time.matches(local + ".123z"), t == 1439);
    // Seconds 00-59 at any offset; 61 never.
    int o = std::uniform_int_distribution<int>(0, 1439)(rng);
    std::string off = std::string(o % 2 ? "+" : "-") + two(o / 60) + ":" + two(o % 60);
    EXPECT_TRUE(time.matches(two(t / 60) + ":" + two(t % 60) + ":" + two(o % 60) + off)) << "seed " << seed;
    EXPECT_FALSE(time.matches(two(t / 60) + ":" + two(t % 60) + ":61" + off));
  }
  EXPECT_EQ(accepted, 2880);  // one '+' and one '-' offset per local time
  // With a fraction.
  EXPECT_TRUE(time.matches("15:59:60.123-08:00"));
  EXPECT_FALSE(time.matches("15:59:60.123+08:00"));
  EXPECT_TRUE(time.matches("00:00:60.5+00:01"));
  EXPECT_FALSE(time.matches("24:00:60Z"));
  EXPECT_FALSE(time.matches("23:59:60-24:00"));
}

TEST(Formats, DateTimeThroughTheMatcher) {
  const char* s = R"({"type":"string","format":"date-time"})";
  for (const char* ok : {"1998-12-31T23:59:60Z", "1998-12-31T15:59:60.123-08:00", "1963-06-19t08:30:06.283185z",
                         "2016-12-31T00:59:60+01:00", "1990-12-31T15:59:50.123-08:00"}) {
    EXPECT_TRUE(accepts(s, std::string("\"") + ok + "\"")) << ok;
  }
  for (const char* bad : {"1998-12-31T23:59:61Z", "1998-12-31T23:58:60Z", "1998-12-31T22:59:60Z",
                          "2016-12-31T24:59:60+01:00", "1998-12-31T15:59:60.123+08:00", "1990-02-31T15:59:59Z"}) {
    EXPECT_FALSE(accepts(s, std::string("\"") + bad + "\"")) << bad;
  }
  EXPECT_TRUE(accepts(R"({"format":"time"})", "\"23:59:60Z\""));
}

// --- minimization ----------------------------------------------------------------------------

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
    default: return "(?:" + random_regex(rng, depth - 1) + ")" + std::string(1, "*+?"[rng() % 3]);
  }
}

// Number of Myhill-Nerode classes among a DFA's states, by brute force (Moore's refinement over
// all 256 bytes through the public API; an independent implementation).
uint32_t equivalence_classes(const Dfa& d) {
  const uint32_t n = d.num_states();
  std::vector<uint32_t> cls(n);
  for (uint32_t s = 0; s < n; ++s) cls[s] = d.accepting(s) ? 1 : 0;
  for (uint32_t count = 0;;) {
    std::map<std::vector<uint32_t>, uint32_t> ids;
    std::vector<uint32_t> next(n);
    for (uint32_t s = 0; s < n; ++s) {
      std::vector<uint32_t> sig = {cls[s]};
      for (int b = 0; b < 256; ++b) sig.push_back(cls[d.next(s, static_cast<uint8_t>(b))]);
      next[s] = ids.emplace(sig, static_cast<uint32_t>(ids.size())).first->second;
    }
    cls.swap(next);
    if (ids.size() == count) return count;
    count = static_cast<uint32_t>(ids.size());
  }
}

TEST(Minimize, SameLanguageAndMinimal) {
  const uint32_t seed = test_seed();
  std::mt19937 rng(seed);
  for (int k = 0; k < 60; ++k) {
    std::string pattern = random_regex(rng, 5);
    bool json = k % 3 == 0, negated = k % 5 == 1;
    auto make = [&](bool minimize) {
      TerminalSpec spec;
      spec.name = "min-test";
      spec.minimize = minimize;
      spec.components.push_back({std::make_shared<Regex>(parse_regex(pattern).value()),
                                 TerminalComponent::Mode::kFull, json, false});
      if (negated) {
        spec.components.push_back({std::make_shared<Regex>(parse_regex("a(?:b|c)").value()),
                                   TerminalComponent::Mode::kSearch, json, true});
      }
      return Dfa::build(spec, 100000);
    };
    auto full = make(false), min = make(true);
    ASSERT_TRUE(full.ok() && min.ok()) << pattern;
    // Minimal: as many states as the unminimized DFA has equivalence classes (dead included).
    EXPECT_EQ(min->num_states(), equivalence_classes(*full)) << "seed " << seed << " " << pattern;
    EXPECT_EQ(equivalence_classes(*min), min->num_states()) << "seed " << seed << " " << pattern;
    // Same language on random strings (with quotes and escapes in JSON mode).
    const char* alphabet = json ? "abc\"\\nx" : "abcx\n";
    size_t alen = std::strlen(alphabet);
    for (int i = 0; i < 300; ++i) {
      std::string str;
      for (int j = static_cast<int>(rng() % 9); j > 0; --j) str += alphabet[rng() % alen];
      if (json && i % 2) str = "\"" + str + "\"";
      auto run = [&](const Dfa& d) {
        uint32_t st = d.start();
        for (unsigned char c : str) st = d.next(st, c);
        return d.accepting(st);
      };
      ASSERT_EQ(run(*full), run(*min)) << "seed " << seed << " " << pattern << " on " << str;
    }
  }
}

// Masks on the new lexemes (leap-second date-time/time, RFC 5321 e-mail, value-equal numbers)
// equal brute force on random walks over a vocabulary of their pieces.
TEST(Masks, NewLexemesMatchBruteForce) {
  const uint32_t seed = test_seed();
  std::mt19937 rng(seed);
  std::vector<std::string> pieces = {"0", "1", "2", "3", "5", "6", "9", "00", "12", "23", "59", "60", "19", "-", "+",
                                     ":", ".", "T", "t", "Z", "z", "\"", "@", "[", "]", "IPv6", ":60", ":59",
                                     "a", "b.", "x", " ", "\\\"", ",", "{", "}", "\"d\":", "\"e\":", "e", "-0",
                                     ".0", "1998-12-31T", "23:59", "15:59", "-08:00", "+00:01", "127.0.0.1", "::1"};
  std::vector<std::string> toks;
  std::set<std::string> seen;
  while (toks.size() < 1500) {
    std::string t;
    for (int p = 1 + static_cast<int>(rng() % 3); p > 0; --p) t += pieces[rng() % pieces.size()];
    if (seen.insert(t).second) toks.push_back(t);
  }
  auto vocab = byte_vocab(toks);
  int taken = 0;
  for (const char* schema : {R"({"type":"object","properties":{"d":{"type":"string","format":"date-time"},
                                 "e":{"type":"string","format":"time"}},"required":["d","e"],"additionalProperties":false})",
                             R"({"type":"array","items":{"type":"string","format":"email"},"minItems":1,"maxItems":3})",
                             R"({"type":"array","items":{"anyOf":[{"type":"integer","minimum":-5,"maximum":60},
                                 {"enum":[0.5,9007199254740992]}]},"maxItems":4})"}) {
    auto g = compile_json_schema(schema);
    ASSERT_TRUE(g.ok()) << schema << g.status().to_string();
    for (int w = 0; w < 8; ++w) {
      GrammarMatcher m(g->grammar, vocab);
      std::vector<uint32_t> mask(vocab->bitmask_words());
      for (int step = 0; step < 40; ++step) {
        ASSERT_TRUE(m.fill_mask(mask.data(), mask.size()).ok());
        auto expect = brute_force(m, *vocab);
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < vocab->vocab_size(); ++t) {
          bool bit = (mask[t >> 5] >> (t & 31)) & 1;
          ASSERT_EQ(bit, expect[t]) << "seed " << seed << " schema " << schema << " step " << step << " token '"
                                    << (t < vocab->num_tokens() ? vocab->token_bytes(t) : "<pad>") << "'";
          if (bit && !vocab->is_eos(t)) allowed.push_back(t);
        }
        if (allowed.empty()) break;
        ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]));
        ++taken;
      }
    }
  }
  EXPECT_GT(taken, 300) << "the walks went somewhere";
}

// --- e-mail --------------------------------------------------------------------------------------

TEST(Formats, EmailRfc5321) {
  const char* s = R"({"type":"string","format":"email"})";
  auto q = [](const std::string& v) { return json_quote(v); };
  for (const char* ok : {"joe.bloggs@example.com", "te~st@example.com", "\"joe bloggs\"@example.com",
                         "\"joe..bloggs\"@example.com", "\"joe@bloggs\"@example.com", "joe.bloggs@[127.0.0.1]",
                         "joe.bloggs@[IPv6:::1]", "\"a\\\"b\"@x.y", "\"\"@example.com", "a@b.c.d.e.f.g",
                         "x@[IPv6:2001:db8::8a2e:370:7334]", "x@[IPv6:::ffff:192.168.0.1]", "a@xn--x"}) {
    EXPECT_TRUE(accepts(s, q(ok))) << ok;
  }
  for (const char* bad : {"2962", ".test@example.com", "test.@example.com", "te..st@example.com",
                          "joe.bloggs@invalid=domain.com", "joe.bloggs@[127.0.0.300]",
                          "user1@oceania.org, user2@oceania.org",
                          "\"Winston Smith\" <winston.smith@recdep.minitrue> (Records Department)",
                          "@example.com", "joe.bloggs@", "joe bloggs@example.com", "\"a\"b\"@x",
                          "\"a\\\"@x", "x@[IPv6:1.2.3.4]", "x@[::1]", "x@[IPv4:1.2.3.4]", "x@-a.com", "x@a-.com",
                          "\"a\xc3\xa9\"@x.y", "\"a\tb\"@x.y"}) {
    EXPECT_FALSE(accepts(s, q(bad))) << bad;
  }
}

// --- format assertion vs annotation, metaschemas ------------------------------------------------

TEST(Formats, AnnotationModeConstrainsNothing) {
  JsonSchemaOptions ann;
  ann.format = JsonSchemaOptions::Format::kAnnotation;
  EXPECT_FALSE(accepts(R"({"format":"date"})", "\"06/19/1963\""));
  EXPECT_TRUE(accepts(R"({"format":"date"})", "\"06/19/1963\"", ann));
  EXPECT_TRUE(accepts(R"({"format":"date","maxLength":3})", "\"abc\"", ann));
  EXPECT_FALSE(accepts(R"({"format":"date","maxLength":3})", "\"abcd\"", ann)) << "other keywords still hold";
  // Unknown formats: refused when asserted, nothing when annotations.
  auto refused = compile_json_schema(R"({"format":"int32"})");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("keyword 'format'"), std::string::npos);
  EXPECT_TRUE(accepts(R"({"format":"int32"})", "\"x\"", ann));
  EXPECT_TRUE(accepts(R"({"enum":["a","b"],"format":"email"})", "\"a\"", ann));
  EXPECT_FALSE(compile_json_schema(R"({"enum":["a","b"],"format":"email"})").ok());
}

TEST(Formats, HostnameIsRefusedWhenAssertedAndASubsetWhenLenient) {
  auto g = compile_json_schema(R"({"type":"string","format":"hostname"})");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(g.status().message().find("keyword 'format' at #/format"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("A-labels"), std::string::npos);
  JsonSchemaOptions lenient;
  lenient.lenient = true;
  auto l = compile_json_schema(R"({"type":"string","format":"hostname"})", lenient);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->warnings.size(), 1u);
  EXPECT_TRUE(accepts(R"({"type":"string","format":"hostname"})", "\"www.example.com\"", lenient));
  EXPECT_FALSE(accepts(R"({"type":"string","format":"hostname"})", "\"xn--4dbc5h\"", lenient));
  EXPECT_FALSE(accepts(R"({"type":"string","format":"hostname"})", "\"-a.com\"", lenient));
  JsonSchemaOptions ann;
  ann.format = JsonSchemaOptions::Format::kAnnotation;
  EXPECT_TRUE(accepts(R"({"type":"string","format":"hostname"})", "\"xn--4dbc5h\"", ann));
}

TEST(Metaschema, CustomMetaschemasAreRefused) {
  auto g = compile_json_schema(
      R"({"$schema":"http://localhost:1234/draft2020-12/metaschema-no-validation.json","minimum":10})");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("keyword '$schema' at #/$schema"), std::string::npos) << g.status().message();
  for (const char* uri : {"https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-07/schema#",
                          "http://json-schema.org/draft-04/schema", "https://json-schema.org/draft/2019-09/schema",
                          "http://json-schema.org/draft-06/schema#", "http://json-schema.org/schema#"}) {
    EXPECT_TRUE(compile_json_schema(std::string("{\"$schema\":\"") + uri + "\",\"type\":\"integer\"}").ok()) << uri;
  }
  JsonSchemaOptions lenient;
  lenient.lenient = true;
  auto l = compile_json_schema(R"({"$schema":"http://example.com/my-meta","type":"integer"})", lenient);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->warnings.size(), 1u);
}

TEST(Objects, MinPropertiesOneMeansNonEmpty) {
  JsonSchemaOptions compact;
  compact.whitespace = JsonSchemaOptions::Whitespace::kCompact;
  for (const auto& opt : {JsonSchemaOptions{}, compact}) {
    const char* s = R"({"type":"object","minProperties":1})";
    EXPECT_FALSE(accepts(s, "{}", opt));
    EXPECT_TRUE(accepts(s, R"({"a":1})", opt));
    EXPECT_TRUE(accepts(s, R"({"a":1,"b":[]})", opt));
    const char* closed = R"({"properties":{"a":{},"b":{}},"additionalProperties":false,"minProperties":1})";
    EXPECT_FALSE(accepts(closed, "{}", opt));
    EXPECT_TRUE(accepts(closed, R"({"b":2})", opt));
    EXPECT_TRUE(accepts(closed, R"({"a":1,"b":2})", opt));
    EXPECT_FALSE(accepts(closed, R"({"c":1})", opt));
    EXPECT_TRUE(accepts(closed, "12", opt)) << "minProperties only constrains objects";
    EXPECT_TRUE(accepts(R"({"required":["a"],"minProperties":1})", R"({"a":1})", opt));
  }
  EXPECT_FALSE(accepts(R"({"type":"object","minProperties":1})", "{ }"));
  auto two = compile_json_schema(R"({"type":"object","minProperties":2})");
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("keyword 'minProperties'"), std::string::npos);
  EXPECT_FALSE(compile_json_schema(R"({"type":"object","properties":{},"additionalProperties":false,"minProperties":1})").ok())
      << "no object can have a property: matches no input";
}

TEST(Objects, MaxPropertiesZeroMeansEmpty) {
  const char* s = R"({"maxProperties":0})";
  EXPECT_TRUE(accepts(s, "{}"));
  EXPECT_TRUE(accepts(s, "{ }"));
  EXPECT_FALSE(accepts(s, R"({"a":1})"));
  EXPECT_TRUE(accepts(s, "[1]"));
  EXPECT_FALSE(accepts(R"({"type":["object","null"],"maxProperties":0,"required":["a"]})", "{}"));
  EXPECT_TRUE(accepts(R"({"type":["object","null"],"maxProperties":0,"required":["a"]})", "null"));
}

TEST(Combinators, NotAndIfWithoutEffect) {
  // `not` with a boolean or a type-only schema: the complement of the types.
  EXPECT_FALSE(compile_json_schema(R"({"not":true})").ok()) << "matches no input";
  EXPECT_TRUE(accepts(R"({"not":false})", "[1,{}]"));
  const char* not_num = R"({"not":{"type":"number","description":"x"}})";
  EXPECT_TRUE(accepts(not_num, "\"1\""));
  EXPECT_TRUE(accepts(not_num, "null"));
  EXPECT_FALSE(accepts(not_num, "1"));
  EXPECT_FALSE(accepts(not_num, "1.5"));
  const char* forbidden = R"({"properties":{"foo":{"not":{}},"bar":{}}})";
  EXPECT_TRUE(accepts(forbidden, R"({"bar":1})"));
  EXPECT_FALSE(accepts(forbidden, R"({"foo":1,"bar":1})"));
  EXPECT_TRUE(accepts(R"({"type":["string","null"],"not":{"type":"null"}})", "\"a\""));
  EXPECT_FALSE(accepts(R"({"type":["string","null"],"not":{"type":"null"}})", "null"));
  // Still refused: the complement of integer alone, and anything beyond types.
  for (const char* s : {R"({"not":{"type":"integer"}})", R"({"not":{"type":"string","minLength":2}})",
                        R"({"not":{"not":{}}})"}) {
    auto g = compile_json_schema(s);
    ASSERT_FALSE(g.ok()) << s;
    EXPECT_NE(g.status().message().find("keyword 'not'"), std::string::npos) << g.status().message();
  }
  // `if` alone, `then` / `else` alone: no effect.
  EXPECT_TRUE(accepts(R"({"if":{"const":0}})", "1"));
  EXPECT_TRUE(accepts(R"({"then":{"const":0}})", "1"));
  EXPECT_TRUE(accepts(R"({"else":{"const":0},"type":"integer"})", "1"));
  auto g = compile_json_schema(R"({"if":{"const":0},"then":{"const":1}})");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("keyword 'if'"), std::string::npos) << g.status().message();
}

TEST(Arrays, ContainsAlone) {
  const char* s = R"({"type":"array","items":{"type":"integer"},"contains":{"minimum":5}})";
  EXPECT_TRUE(accepts(s, "[5]"));
  EXPECT_TRUE(accepts(s, "[1,2,7]"));
  EXPECT_TRUE(accepts(s, "[9, 1, 6]"));
  EXPECT_TRUE(accepts(s, "[ 1 , 5 ]"));
  EXPECT_FALSE(accepts(s, "[]"));
  EXPECT_FALSE(accepts(s, "[1,2,4]"));
  EXPECT_FALSE(accepts(s, "[1,\"x\",7]")) << "items still hold";
  EXPECT_TRUE(accepts(R"({"contains":{"const":"a"}})", R"([1,{"b":2},"a",null])"));
  EXPECT_TRUE(accepts(R"({"contains":{"const":"a"}})", "\"not an array\""));
  EXPECT_FALSE(accepts(R"({"contains":{"const":"a"}})", R"([1,"b"])"));
  EXPECT_FALSE(accepts(R"({"type":["array","null"],"contains":false})", "[1]"));
  EXPECT_TRUE(accepts(R"({"type":["array","null"],"contains":false})", "null"));
  // Drafts 3/4 have no `contains`.
  EXPECT_TRUE(accepts(R"({"$schema":"http://json-schema.org/draft-04/schema#","contains":{"const":"a"}})", "[1]"));
  // Refused next to what it cannot be combined with.
  for (const char* r : {R"({"contains":{"const":1},"maxItems":3})", R"({"contains":{"const":1},"minItems":2})",
                        R"({"contains":{"const":1},"prefixItems":[{}]})", R"({"allOf":[{"contains":{"const":1}},{"contains":{"const":2}}]})",
                        R"({"contains":{"const":1},"minContains":2})"}) {
    auto g = compile_json_schema(r);
    ASSERT_FALSE(g.ok()) << r;
    EXPECT_NE(g.status().message().find("ontains'"), std::string::npos) << g.status().message();
  }
}

}  // namespace
}  // namespace deepinfer::structured::testing
