// Lark grammar text -> syntax tree (no semantics yet; lark.cpp lowers it). Follows Lark's own
// grammar (lark/grammars/lark.lark): one definition per line, alternatives continue on a new
// line that starts with `|`, comments `//` and `#`. String and regexp escapes are processed as
// Lark does (\n \r \t \f \xHH \uHHHH \UHHHHHHHH are decoded, \\ and \" unescaped, any other
// backslash kept).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace deepinfer::structured::lark {

struct Expr {
  enum class Kind { kAlt, kSeq, kRepeat, kString, kRegexp, kRange, kName };
  Kind kind = Kind::kSeq;
  std::vector<Expr> kids;           // kAlt, kSeq, kRepeat (one kid)
  uint32_t min = 0, max = 0;        // kRepeat
  bool unbounded = false;           // kRepeat
  std::string text;                 // kString: decoded UTF-8; kRegexp: Python pattern; kName
  std::string flags;                // kString: "" or "i"; kRegexp: any of "imslux"
  uint32_t lo = 0, hi = 0;          // kRange: code points
  size_t pos = 0;                   // byte offset in the grammar text
};

struct Definition {
  enum class How { kDefine, kOverride, kExtend };
  std::string name;   // without the ! / ? modifiers
  bool terminal = false;
  How how = How::kDefine;
  Expr body;          // kAlt of kSeq alternatives
  size_t pos = 0;
};

struct Import {
  std::string module;  // e.g. "common"
  std::string name;    // the imported name
  std::string alias;   // the local name
  size_t pos = 0;
};

struct Module {
  std::vector<Definition> defs;
  std::vector<Expr> ignores;
  std::vector<Import> imports;
};

// "line L, column C" (1-based; columns count bytes) for a byte offset.
std::string position(const std::string& text, size_t pos);

// The built-in `common` module: Lark's common.lark terminals, written for this front end.
const char* common_module_text();

// Parses Lark grammar text. Errors: "lark: <what> at line L, column C"; InvalidArgument for
// syntax errors, Unimplemented for constructs that are refused (templates, %declare, imports
// other than `common`).
StatusOr<Module> parse_syntax(const std::string& text);

}  // namespace deepinfer::structured::lark
