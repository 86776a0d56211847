// Python `re` regexps as Lark passes them (/.../flags in a Lark grammar, after Lark's own escape
// processing), parsed to the shared Regex AST (regex.h) over code points.
//
// Same as Python: literals, `.` (all but \n; all with `s`), classes with ranges and `]` first,
// \d \w \s and negations with Python's Unicode sets (or ASCII with `a`), escapes \a \f \n \r \t
// \v \xHH \uHHHH \UHHHHHHHH \0 and octal \ooo, escaped punctuation, groups ( ) (?: ) (?P<n> )
// (?#...), scoped flags (?aisux-isx: ...) and leading global flags (?aisux), `|`, quantifiers
// * + ? {m} {m,} {,n} {m,n} (a `{` that is no quantifier is a literal, as in Python), lazy `?`
// suffix (same full-match language; reported in `warnings`), IGNORECASE with Python's case
// classes (e.g. k ~ K ~ U+212A KELVIN SIGN), VERBOSE.
// Refused with the construct and position: anchors ^ $ \A \Z \b \B, lookaround, backreferences
// \1 (?P=n), conditionals, atomic groups, possessive quantifiers, \N{...}, the L flag.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "structured/codepoint_set.h"
#include "structured/regex.h"

namespace deepinfer::structured {

struct PyRegexFlags {
  bool ignore_case = false;  // i
  bool dotall = false;       // s
  bool verbose = false;      // x
  bool ascii = false;        // a
};

// Parses `pattern` (UTF-8) into nodes of `re` and returns the root node. A lazy quantifier adds
// a note to `warnings` (may be null).
StatusOr<int> parse_python_regex(std::string_view pattern, PyRegexFlags flags, Regex* re,
                                 std::vector<std::string>* warnings);

// Python's \d \w \s for str patterns (Unicode) or with the ASCII flag.
CodepointSet py_digit(bool ascii);
CodepointSet py_word(bool ascii);
CodepointSet py_space(bool ascii);
// Closes `set` under re.IGNORECASE equivalence (ASCII letters only when `ascii`).
CodepointSet py_case_closure(const CodepointSet& set, bool ascii);

namespace lark_tables {
extern const uint32_t kPyDigit[][2];
extern const size_t kPyDigitSize;
extern const uint32_t kPyWord[][2];
extern const size_t kPyWordSize;
extern const uint32_t kPySpace[][2];
extern const size_t kPySpaceSize;
extern const uint32_t kPyCaseClasses[];
extern const size_t kPyCaseClassesSize;
}  // namespace lark_tables

}  // namespace deepinfer::structured
