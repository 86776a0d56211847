// GBNF (llama.cpp grammar format) -> grammar. Supported: rules `name ::= ...`, alternation,
// grouping, string literals and character classes with escapes (\n \r \t \\ \" \] \- \xHH
// \uHHHH \UHHHHHHHH), `.`, postfix * + ? {m} {m,} {m,n}, comments. The start rule is `root`.
// Refused with position: token references `<[id]>` / `!<...>`, undefined rules.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "structured/grammar.h"

namespace deepinfer::structured {

StatusOr<std::shared_ptr<CompiledGrammar>> compile_gbnf(const std::string& text);

}  // namespace deepinfer::structured
