// Lark grammars (https://lark-parser.readthedocs.io/en/stable/grammar.html, as accepted by
// llguidance and vLLM) -> the same CompiledGrammar the GBNF front end produces.
//
// Supported: rules `name: ...` (lowercase, modifiers `?` `!` `_` accepted: they only shape the
// parse tree), terminals `NAME: ...` (uppercase, `_` prefix accepted), priorities `name.N` /
// `NAME.N` (accepted, ignored: priorities only pick between parses, they do not change the set
// of accepted documents), alternatives `|` (also at the start of a continuation line), aliases
// `-> name` (ignored), groups, `[...]` and `?` optional, `*`, `+`, `~ n`, `~ n..m`, strings
// "..." with the `i` flag, regexps /.../flags (Python `re` dialect, see lark_regex.h; flags
// i s x u; m accepted as anchors are refused; l refused), ranges "a".."z", `%ignore`,
// `%import common.NAME [-> ALIAS]` and `%import common (A, B)` for the terminals of Lark's
// common.lark (defined here: DIGIT HEXDIGIT INT SIGNED_INT DECIMAL FLOAT SIGNED_FLOAT NUMBER
// SIGNED_NUMBER ESCAPED_STRING LCASE_LETTER UCASE_LETTER LETTER WORD CNAME WS_INLINE WS CR LF
// NEWLINE SH_COMMENT CPP_COMMENT C_COMMENT SQL_COMMENT), `%override`, `%extend`.
// Refused with line:column and the construct: templates, `%declare`, other imports, zero-width
// terminals (as Lark), terminals that refer to rules or to themselves.
//
// Semantics (the language masks enforce):
// - Each terminal is one lexeme: the regular language of its definition (named terminals are
//   inlined into it). Lexemes are not greedy and terminals have no priority, so the accepted
//   documents are those Lark's Earley parser with lexer="dynamic_complete" accepts; a regexp's
//   lazy quantifier is treated as greedy (reported in `warnings`).
// - `%ignore X`: ignored text may appear before the first token, between any two tokens and
//   after the last one, never inside a terminal, and each ignored match is greedy as in Lark (a
//   line comment cannot stop early for the rest of the line to read as tokens). See Compiler::
//   setup_ignore in lark.cpp for the lowering (one byte of lookahead folded into the next
//   lexeme); an ignored terminal whose accepting states continue differently falls back to a
//   non-greedy lowering with a warning.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "structured/grammar.h"

namespace deepinfer::structured {

struct LarkOptions {
  std::string start = "start";  // the start rule (Lark's default)
};

struct LarkGrammar {
  std::shared_ptr<CompiledGrammar> grammar;
  std::vector<std::string> warnings;  // e.g. lazy quantifiers treated as greedy
};

StatusOr<LarkGrammar> compile_lark(const std::string& text, const LarkOptions& options = {});

}  // namespace deepinfer::structured
