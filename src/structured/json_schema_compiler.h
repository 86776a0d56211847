// The JSON Schema compiler object (internal). See json_schema.h for the contract.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/json_schema_internal.h"

namespace deepinfer::structured::json_internal {

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options, GrammarBuilder* b)
      : root_(root), opt_(options), b_(b), zero_fraction_integers_(!old_draft(root)) {}

  StatusOr<int> compile_root();
  int any_value();
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  // Combinators and $ref expansion, then merging and emission.
  StatusOr<int> compile_conj(std::vector<Member> members);
  Status expand(std::vector<Member>* members);
  StatusOr<int> compile_list(const std::vector<SRef>& refs);  // conjunction of subschemas
  Status merge(const Member& m, Plain* p);
  // `not` whose complement is exact here (a boolean, or only `type` and annotations, not
  // splitting integers from numbers): applied to p's types, true; otherwise false (refuse).
  StatusOr<bool> merge_not(const Json& v, const std::string& kp, Plain* p);
  Status emit_plain(const Plain& p, int nt, const std::string& ptr);
  Status emit_enum(const Plain& p, int nt);
  Status emit_string(const Plain& p, int nt);
  Status emit_number(const Plain& p, int nt);
  Status emit_object(const Plain& p, int nt, const std::string& ptr);
  Status emit_array(const Plain& p, int nt, const std::string& ptr);
  StatusOr<bool> oneof_disjoint(const std::vector<std::vector<Member>>& branches,
                                std::string* why);
  StatusOr<SRef> resolve_ref(const std::string& ref, const std::string& at);
  int literal_value(const Json& v);
  int literal_number(const Json& v, bool integer_form_only);
  // Drafts 3 and 4 ($schema): 1.0 is not an integer (later drafts: a number with a zero
  // fractional part is one).
  static bool old_draft(const Json& root);

  // Strict: error naming the keyword; lenient: one warning per keyword, then OK.
  Status refuse(const std::string& keyword, const std::string& ptr, const std::string& why = "");

  std::vector<int> ws();
  std::vector<int> sep(const char* punct);  // ws punct ws
  int lit(const std::string& s) { return GrammarBuilder::terminal_symbol(b_->add_literal(s)); }
  int new_nt(const std::string& name);

  const Json& root_;
  JsonSchemaOptions opt_;
  GrammarBuilder* b_;
  std::map<std::string, int> memo_;
  std::set<std::string> warned_;
  std::vector<std::string> warnings_;
  int any_value_ = -1;
  int ws_term_ = -1;
  uint64_t nonterminals_ = 0;
  Status budget_ = OkStatus();
  bool zero_fraction_integers_;  // integers may be written with a zero fraction ("1.0")
};

}  // namespace deepinfer::structured::json_internal
