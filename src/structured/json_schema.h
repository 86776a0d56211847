// JSON Schema (draft 2020-12) -> grammar. Strict by default: every assertion keyword is either
// enforced exactly or the schema is refused with an error naming the keyword and its JSON
// pointer. Lenient mode ignores what cannot be enforced, with one warning per keyword.
//
// Output form (docs/structured.md): properties in schema order (declared properties first, in
// the order they appear; then additional properties), canonical string escapes, numbers without
// exponent when bounded, integers without fraction/exponent; whitespace compact or bounded.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "structured/grammar.h"

namespace deepinfer::structured {

struct JsonSchemaOptions {
  enum class Whitespace { kCompact, kFlexible };
  // kFlexible: each gap between JSON tokens allows up to max_whitespace bytes of [ \t\n\r].
  Whitespace whitespace = Whitespace::kFlexible;
  uint32_t max_whitespace = 32;
  bool lenient = false;
  // `format`. kAssert (default; what users of vLLM/SGLang structured outputs expect): the
  // supported formats are enforced exactly and unknown ones refused. kAnnotation: draft
  // 2020-12's default vocabulary (format-annotation): `format` constrains nothing.
  enum class Format { kAssert, kAnnotation };
  Format format = Format::kAssert;
  uint32_t max_array_expansion = 4000;  // minItems/maxItems/prefixItems positions
  uint32_t max_branches = 512;          // anyOf/oneOf expansion
};

struct JsonSchemaGrammar {
  std::shared_ptr<CompiledGrammar> grammar;
  std::vector<std::string> warnings;  // lenient mode: one per relaxed keyword
};

StatusOr<JsonSchemaGrammar> compile_json_schema(const std::string& schema_text,
                                                const JsonSchemaOptions& options = {});

// Any JSON value (json_object mode uses an object at the root).
StatusOr<std::shared_ptr<CompiledGrammar>> compile_any_json(bool object_root,
                                                            const JsonSchemaOptions& options = {});

// Canonical JSON text of a string value as the grammar generates it (escapes as in
// automaton.h), and of numbers (integral values without fraction).
std::string json_quote(const std::string& utf8);

}  // namespace deepinfer::structured
