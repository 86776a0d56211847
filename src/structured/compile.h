// Front door: compile a structured-output spec into a grammar the matcher runs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "structured/grammar.h"

namespace deepinfer::structured {

// A regex in the JSON Schema pattern dialect, matched against the whole output.
StatusOr<std::shared_ptr<CompiledGrammar>> compile_regex(const std::string& pattern);

}  // namespace deepinfer::structured
