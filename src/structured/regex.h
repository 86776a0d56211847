// Regular expressions in the JSON Schema `pattern` dialect (ECMA-262 with the `u` flag, minus
// lookaround and backreferences), parsed to an AST over Unicode code points.
//
// Supported: literals, `.` (any code point but \n \r \u2028 \u2029), classes `[...]` / `[^...]`
// with ranges, escapes \d \D \w \W \s \S \t \n \r \v \f \0 \cX \xHH \uHHHH \u{H..} and escaped
// syntax characters, groups `(...)`, `(?:...)`, `(?<name>...)`, alternation, quantifiers
// `* + ? {m} {m,} {m,n}` (lazy `?` suffix accepted: it does not change the language), anchors
// `^` `$` anywhere (non-multiline). Refused with the construct and its position: lookahead,
// lookbehind, backreferences, \b \B, \p{..} property classes, flags groups.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "structured/codepoint_set.h"

namespace deepinfer::structured {

struct RegexNode {
  enum class Kind { kEmpty, kClass, kConcat, kAlt, kRepeat, kBegin, kEnd };
  Kind kind = Kind::kEmpty;
  CodepointSet cls;        // kClass
  std::vector<int> kids;   // kConcat, kAlt, kRepeat (one kid)
  uint32_t min = 0, max = 0;
  bool unbounded = false;  // kRepeat: {min,}
};

struct Regex {
  std::vector<RegexNode> nodes;
  int root = -1;

  int add(RegexNode n) { nodes.push_back(std::move(n)); return static_cast<int>(nodes.size()) - 1; }
  int add_class(CodepointSet s) { RegexNode n; n.kind = RegexNode::Kind::kClass; n.cls = std::move(s); return add(std::move(n)); }
  int add_concat(std::vector<int> kids) { RegexNode n; n.kind = RegexNode::Kind::kConcat; n.kids = std::move(kids); return add(std::move(n)); }
  int add_alt(std::vector<int> kids) { RegexNode n; n.kind = RegexNode::Kind::kAlt; n.kids = std::move(kids); return add(std::move(n)); }
  int add_repeat(int kid, uint32_t min, uint32_t max, bool unbounded) {
    RegexNode n; n.kind = RegexNode::Kind::kRepeat; n.kids = {kid}; n.min = min; n.max = max; n.unbounded = unbounded;
    return add(std::move(n));
  }
  int add_literal(std::string_view utf8);  // a sequence of single-code-point classes
};

// Parses `pattern`. Errors name the construct and its code-point position.
StatusOr<Regex> parse_regex(std::string_view pattern);

// Decodes UTF-8; errors on invalid input.
StatusOr<std::vector<uint32_t>> decode_utf8(std::string_view s);

// ECMA-262 character classes.
CodepointSet ecma_digit();
CodepointSet ecma_word();
CodepointSet ecma_space();
CodepointSet ecma_dot();  // all but line terminators

}  // namespace deepinfer::structured
