// One request's StructuredOutputsParams compiled into a grammar: JSON Schema (strict, or
// lenient with warnings), regex, GBNF or Lark (GrammarSyntax, or detected: GBNF rules use `::=`),
// or any JSON object. Errors name the field and, from the compilers, the keyword or construct.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "deepinfer/sampling_params.h"
#include "structured/grammar.h"

namespace deepinfer::engine {

struct CompiledSpec {
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  std::vector<std::string> warnings;
};

StatusOr<CompiledSpec> compile_spec(const StructuredOutputsParams& p);

}  // namespace deepinfer::engine
