// JSON Schema compiler: exact enforcement, refusals naming keyword and pointer, lenient mode.
#include <gtest/gtest.h>

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

TEST(JsonSchema, TypesAndBounds) {
  const char* s = R"({"type":"integer","minimum":-5,"exclusiveMaximum":120})";
  for (const char* ok : {"-5", "0", "7", "119", "-1"}) EXPECT_TRUE(accepts(s, ok)) << ok;
  for (const char* bad : {"-6", "120", "1.5", "007", "1e2", "\"1\""}) EXPECT_FALSE(accepts(s, bad)) << bad;
  const char* n = R"({"type":"number","minimum":1,"maximum":3})";
  for (const char* ok : {"1", "2.75", "3", "3.000", "1.0"}) EXPECT_TRUE(accepts(n, ok)) << ok;
  for (const char* bad : {"0.999", "3.01", "-2", "4"}) EXPECT_FALSE(accepts(n, bad)) << bad;
  const char* pos = R"({"type":"number","exclusiveMinimum":0})";
  EXPECT_TRUE(accepts(pos, "0.001"));
  EXPECT_FALSE(accepts(pos, "0.000"));
  EXPECT_FALSE(accepts(pos, "-0.5"));
}

TEST(JsonSchema, StringsPatternAndLengthTogether) {
  const char* s = R"({"type":"string","pattern":"^[a-z]+$","minLength":2,"maxLength":4})";
  EXPECT_TRUE(accepts(s, "\"ab\""));
  EXPECT_TRUE(accepts(s, "\"abcd\""));
  EXPECT_FALSE(accepts(s, "\"a\""));      // minLength kept next to pattern
  EXPECT_FALSE(accepts(s, "\"abcde\""));  // maxLength kept next to pattern
  EXPECT_FALSE(accepts(s, "\"aB\""));
  // Unanchored pattern: a search, per ECMA-262.
  EXPECT_TRUE(accepts(R"({"type":"string","pattern":"b"})", "\"abc\""));
  // Length counts code points; escapes are decoded.
  EXPECT_TRUE(accepts(R"({"type":"string","maxLength":1})", "\"\xc3\xa9\""));
  EXPECT_TRUE(accepts(R"({"type":"string","maxLength":1})", "\"\\n\""));
  EXPECT_FALSE(accepts(R"({"type":"string","maxLength":1})", "\"ab\""));
  EXPECT_TRUE(accepts(R"({"type":"string","pattern":"^\\n$"})", "\"\\n\""));
}

TEST(JsonSchema, Formats) {
  const char* d = R"({"type":"string","format":"date"})";
  EXPECT_TRUE(accepts(d, "\"2024-02-29\""));
  EXPECT_FALSE(accepts(d, "\"2023-02-29\""));
  EXPECT_FALSE(accepts(d, "\"2024-13-01\""));
  const char* ip = R"({"format":"ipv4"})";
  EXPECT_TRUE(accepts(ip, "\"192.168.0.255\""));
  EXPECT_FALSE(accepts(ip, "\"256.1.1.1\""));
  EXPECT_TRUE(accepts(ip, "12")) << "format only constrains strings";
  EXPECT_TRUE(accepts(R"({"format":"uuid"})", "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_TRUE(accepts(R"({"format":"date-time"})", "\"2024-01-02T03:04:05.6+01:00\""));
  EXPECT_TRUE(accepts(R"({"format":"ipv6"})", "\"::1\""));
}

TEST(JsonSchema, ObjectsInSchemaOrder) {
  const char* s = R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}},
                      "required":["a"],"additionalProperties":false})";
  EXPECT_TRUE(accepts(s, R"({"b":1,"a":"x"})"));
  EXPECT_TRUE(accepts(s, R"({"a":"x"})"));
  EXPECT_TRUE(accepts(s, "{ \"a\" : \"x\" }"));
  EXPECT_FALSE(accepts(s, R"({"a":"x","b":1})")) << "schema order";
  EXPECT_FALSE(accepts(s, R"({"b":1})")) << "required";
  EXPECT_FALSE(accepts(s, R"({"a":"x","c":1})")) << "additionalProperties false";
  const char* extra = R"({"properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})";
  EXPECT_TRUE(accepts(extra, R"({"a":1,"z":true})"));
  EXPECT_FALSE(accepts(extra, R"({"a":1,"z":2})"));
  EXPECT_FALSE(accepts(extra, R"({"a":1,"a":true})")) << "a declared key is not an extra key";
  JsonSchemaOptions compact;
  compact.whitespace = JsonSchemaOptions::Whitespace::kCompact;
  EXPECT_FALSE(accepts(s, "{ \"a\":\"x\"}", compact));
  EXPECT_FALSE(accepts("{}", "1 ")) << "no whitespace after the root value";
}

TEST(JsonSchema, ArraysAndTuples) {
  const char* s = R"({"prefixItems":[{"type":"integer"},{"type":"string"}],"items":{"type":"boolean"},
                      "minItems":1,"maxItems":3})";
  EXPECT_TRUE(accepts(s, "[1]"));
  EXPECT_TRUE(accepts(s, R"([1,"a",true])"));
  EXPECT_FALSE(accepts(s, "[]"));
  EXPECT_FALSE(accepts(s, R"([1,"a",true,false])"));
  EXPECT_FALSE(accepts(s, R"(["a"])"));
  EXPECT_FALSE(accepts(R"({"items":false})", "[1]"));
  EXPECT_TRUE(accepts(R"({"items":false})", "[]"));
}

TEST(JsonSchema, AllOfIsIntersectedExactly) {
  const char* s = R"({"allOf":[{"type":"integer","minimum":0},{"maximum":10},{"not_a_keyword":1}]})";
  EXPECT_TRUE(accepts(s, "10"));
  EXPECT_FALSE(accepts(s, "11"));
  EXPECT_FALSE(accepts(s, "-1"));
  const char* props = R"({"allOf":[{"properties":{"a":{"type":"integer"}}},{"properties":{"a":{"minimum":5}}}]})";
  EXPECT_TRUE(accepts(props, R"({"a":6})"));
  EXPECT_FALSE(accepts(props, R"({"a":4})"));
  // additionalProperties of one branch applies to keys declared only in another.
  const char* ap = R"({"allOf":[{"properties":{"a":true}},{"properties":{"b":true},"additionalProperties":false}]})";
  EXPECT_TRUE(accepts(ap, R"({"b":1})"));
  EXPECT_FALSE(accepts(ap, R"({"a":1})"));
}

TEST(JsonSchema, AnyOfOneOfAndRefs) {
  const char* s = R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
     "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],
     "additionalProperties":false}},"$ref":"#/$defs/node"})";
  EXPECT_TRUE(accepts(s, R"({"v":1,"next":{"v":2,"next":null}})"));
  EXPECT_FALSE(accepts(s, R"({"v":1,"next":{"v":"x","next":null}})"));
  const char* one = R"({"oneOf":[{"type":"string"},{"type":"integer"}]})";
  EXPECT_TRUE(accepts(one, "3"));
  auto overlap = compile_json_schema(R"({"oneOf":[{"type":"number"},{"type":"integer"}]})");
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.status().message().find("'oneOf' at #/oneOf"), std::string::npos) << overlap.status().message();
  const char* tagged = R"({"type":"object","oneOf":[{"properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k"]},
                                    {"properties":{"k":{"const":"b"}},"required":["k"]}]})";
  EXPECT_TRUE(accepts(tagged, R"({"k":"a","x":1})"));
}

TEST(JsonSchema, RefusalsNameKeywordAndPointer) {
  auto r = compile_json_schema(R"({"properties":{"a/b":{"not":{"type":"string","minLength":1}}}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("'not' at #/properties/a~1b/not"), std::string::npos) << r.status().message();
  auto la = compile_json_schema(R"J({"type":"string","pattern":"a(?=b)"})J");
  ASSERT_FALSE(la.ok());
  EXPECT_NE(la.status().message().find("lookahead"), std::string::npos);
  EXPECT_NE(la.status().message().find("position 1"), std::string::npos) << la.status().message();
  auto br = compile_json_schema(R"({"type":"string","pattern":"(a)\\1"})");
  ASSERT_FALSE(br.ok());
  EXPECT_NE(br.status().message().find("backreference"), std::string::npos);
  auto fmt = compile_json_schema(R"({"type":"string","format":"color"})");
  ASSERT_FALSE(fmt.ok());
  EXPECT_NE(fmt.status().message().find("'format'"), std::string::npos);
  auto remote = compile_json_schema(R"({"$ref":"http://example.com/x.json"})");
  ASSERT_FALSE(remote.ok());
  EXPECT_NE(remote.status().message().find("'$ref'"), std::string::npos);
}

TEST(JsonSchema, LenientWarnsOncePerKeyword) {
  JsonSchemaOptions opt;
  opt.lenient = true;
  auto r = compile_json_schema(R"({"properties":{"a":{"not":{"minLength":1}},"b":{"not":{"maxLength":1}},"c":{"uniqueItems":true}}})", opt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->warnings.size(), 2u);
  EXPECT_NE(r->warnings[0].find("'not'"), std::string::npos);
  EXPECT_NE(r->warnings[1].find("'uniqueItems'"), std::string::npos);
}

TEST(JsonSchema, FalseSchemaMatchesNothing) {
  auto r = compile_json_schema("false");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("matches no input"), std::string::npos);
  EXPECT_FALSE(compile_json_schema("{bad json").ok());
}

}  // namespace
}  // namespace deepinfer::structured::testing
