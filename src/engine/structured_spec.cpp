// Compiling a request's structured_outputs spec into a grammar (see structured_spec.h).
#include "engine/structured_spec.h"

#include "structured/compile.h"
#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/lark.h"

namespace deepinfer::engine {

namespace {
// GrammarSyntax::kAuto: GBNF rules are written `name ::= ...`; Lark rules `name: ...`.
bool looks_like_lark(const std::string& text) {
  return text.find("::=") == std::string::npos && text.find(':') != std::string::npos;
}

}  // namespace

StatusOr<CompiledSpec> compile_spec(const StructuredOutputsParams& p) {
  structured::JsonSchemaOptions jo;
  jo.lenient = p.lenient;
  jo.format = p.format == StructuredOutputsParams::Format::kAnnotation
                  ? structured::JsonSchemaOptions::Format::kAnnotation
                  : structured::JsonSchemaOptions::Format::kAssert;
  jo.whitespace = p.whitespace == StructuredOutputsParams::Whitespace::kCompact
                      ? structured::JsonSchemaOptions::Whitespace::kCompact
                      : structured::JsonSchemaOptions::Whitespace::kFlexible;
  CompiledSpec out;
  if (p.json) {
    auto r = structured::compile_json_schema(*p.json, jo);
    if (!r.ok()) return r.status().with_context("structured_outputs.json");
    out.grammar = std::move(r->grammar);
    out.warnings = std::move(r->warnings);
  } else if (p.regex) {
    auto r = structured::compile_regex(*p.regex);
    if (!r.ok()) return r.status().with_context("structured_outputs.regex");
    out.grammar = std::move(r).value();
  } else if (p.grammar) {
    using Syntax = StructuredOutputsParams::GrammarSyntax;
    const bool lark = p.grammar_syntax == Syntax::kLark ||
                      (p.grammar_syntax == Syntax::kAuto && looks_like_lark(*p.grammar));
    if (lark) {
      auto r = structured::compile_lark(*p.grammar);
      if (!r.ok()) return r.status().with_context("structured_outputs.grammar (Lark)");
      out.grammar = std::move(r->grammar);
      out.warnings = std::move(r->warnings);
      return out;
    }
    auto r = structured::compile_gbnf(*p.grammar);
    if (!r.ok()) return r.status().with_context("structured_outputs.grammar (GBNF)");
    out.grammar = std::move(r).value();
  } else if (p.json_object) {
    auto r = structured::compile_any_json(/*object_root=*/true, jo);
    if (!r.ok()) return r.status().with_context("structured_outputs.json_object");
    out.grammar = std::move(r).value();
  } else {
    return InvalidArgument("structured_outputs: nothing to compile");
  }
  return out;
}


}  // namespace deepinfer::engine
