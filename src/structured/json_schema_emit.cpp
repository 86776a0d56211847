// Grammar emission for a merged (combinator-free) schema: one alternative per allowed type.
#include <algorithm>

#include "structured/json_formats.h"
#include "structured/json_schema_compiler.h"

namespace deepinfer::structured::json_internal {
namespace {

std::string join_key(const std::vector<std::pair<std::string, std::string>>& v) {
  std::string s;
  for (const auto& x : v) s += x.first + "\x1f";
  return s;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

int SchemaCompiler::literal_value(const Json& v) {
  if (v.is_object() || v.is_array()) {
    bool obj = v.is_object();
    std::vector<int> rhs = {lit(obj ? "{" : "[")};
    for (int w : ws()) rhs.push_back(w);
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) for (int s : sep(",")) rhs.push_back(s);
      first = false;
      if (obj) {
        rhs.push_back(lit(json_quote(it.key())));
        for (int s : sep(":")) rhs.push_back(s);
      }
      rhs.push_back(literal_value(it.value()));
    }
    // `{}` / `[]`: one whitespace gap, not two adjacent (ambiguous) ones.
    if (!v.empty()) for (int w : ws()) rhs.push_back(w);
    rhs.push_back(lit(obj ? "}" : "]"));
    return b_->seq(rhs, "literal");
  }
  if (v.is_string()) return lit(json_quote(v.get<std::string>()));
  if (v.is_number()) return literal_number(v, false);
  return lit(v.dump());
}

// An enum/const number: every numeral without exponent whose value equals it exactly
// (equal_value_regex: "1", "1.0", "1.00", "-0" for 0, "0.50" for 0.5). Integers are exact; a
// float schema value is the decimal of its shortest round-trip form (what validators compare:
// the double). integer_form_only: the integer digits alone (drafts 3/4 `type: integer`).
int SchemaCompiler::literal_number(const Json& v, bool integer_form_only) {
  std::string text = v.dump();
  std::string digits = expand_numeral(text);
  if (digits.empty()) return lit(text);  // expansion too long: the value's own form only
  if (integer_form_only) return lit(digits.find('.') == std::string::npos ? digits : text);
  auto t = b_->add_regex(equal_value_regex(digits));
  return t.ok() ? GrammarBuilder::terminal_symbol(*t) : lit(text);
}

Status SchemaCompiler::emit_enum(const Plain& p, int nt) {
  // Values must also satisfy the sibling keywords; check those we can evaluate here.
  if (!p.patterns.empty()) return refuse("pattern", p.patterns[0].second, "next to enum/const");
  if (!p.formats.empty()) return refuse("format", p.formats[0].second, "next to enum/const");
  if (!p.obj_members.empty() || !p.required.empty() || p.min_props || p.max_props) {
    bool any_object = false;
    for (const auto& v : p.enum_values) any_object |= v.is_object();
    if (any_object) return refuse("properties", p.enum_ptr, "object constraints next to enum/const");
  }
  if (!p.arr_members.empty() || p.min_items || p.max_items || p.unique_items) {
    bool any_array = false;
    for (const auto& v : p.enum_values) any_array |= v.is_array();
    if (any_array) return refuse("items", p.enum_ptr, "array constraints next to enum/const");
  }
  for (const auto& v : p.enum_values) {
    uint8_t t = value_type(v);
    bool ok = (p.types & t) != 0 || (t == kInteger && (p.types & kFraction));
    if (t == kInteger && !(p.types & kInteger)) ok = false;
    if (!ok) continue;
    if (v.is_string()) {
      size_t n = utf8_length(v.get<std::string>());
      if ((p.min_len && n < *p.min_len) || (p.max_len && n > *p.max_len)) continue;
    }
    if (v.is_number()) {
      double d = v.get<double>();
      if (p.lower && (d < p.lower->value || (p.lower->exclusive && d == p.lower->value))) continue;
      if (p.upper && (d > p.upper->value || (p.upper->exclusive && d == p.upper->value))) continue;
    }
    if (v.is_array()) {
      if (v.size() < p.min_items || (p.max_items && v.size() > *p.max_items)) continue;
    }
    if (v.is_number() && !zero_fraction_integers_ && !(p.types & kFraction)) {
      // Drafts 3/4 `type: integer`: 1.0 is not an integer, so only the integer digits.
      b_->add_production(nt, {literal_number(v, true)});
      continue;
    }
    b_->add_production(nt, {literal_value(v)});
  }
  return OkStatus();
}

Status SchemaCompiler::emit_string(const Plain& p, int nt) {
  TerminalSpec spec;
  spec.name = "str|" + std::to_string(p.min_len.value_or(0)) + "|" +
              (p.max_len ? std::to_string(*p.max_len) : "inf") + "|" + join_key(p.patterns) + "|" +
              join_key(p.formats);
  auto any_char_repeat = [](uint64_t min, std::optional<uint64_t> max) {
    auto re = std::make_shared<Regex>();
    int c = re->add_class(CodepointSet::all());
    re->root = re->add_repeat(c, static_cast<uint32_t>(min), static_cast<uint32_t>(max.value_or(0)), !max);
    return re;
  };
  if ((p.min_len && *p.min_len > 100000) || (p.max_len && *p.max_len > 100000)) {
    return refuse(p.max_len ? "maxLength" : "minLength", p.enum_ptr.empty() ? "#" : p.enum_ptr, "length bound above 100000");
  }
  spec.components.push_back({any_char_repeat(p.min_len.value_or(0), p.max_len),
                             TerminalComponent::Mode::kFull, true, false});
  for (const auto& [pat, ptr] : p.patterns) {
    auto re = parse_regex(pat);
    if (!re.ok()) {
      DI_RETURN_IF_ERROR(refuse("pattern", ptr, re.status().message()));
      continue;
    }
    spec.components.push_back({std::make_shared<Regex>(std::move(*re)),
                               TerminalComponent::Mode::kSearch, true, false});
  }
  for (const auto& [fmt, ptr] : p.formats) {
    auto f = format_regex(fmt);
    if (!f) {
      DI_RETURN_IF_ERROR(refuse("format", ptr, "unknown format '" + fmt + "'"));
      continue;
    }
    if (!f->inexact.empty()) {
      DI_RETURN_IF_ERROR(refuse("format", ptr, "'" + fmt + "' cannot be enforced exactly: " + f->inexact +
                                " (lenient mode enforces that subset)"));
    }
    auto re = parse_regex(f->pattern);
    spec.components.push_back({std::make_shared<Regex>(std::move(re.value())),
                               TerminalComponent::Mode::kFull, true, false});
    if (f->min_state_limit > 0) {  // the leap-second formats: large, and far from minimal
      spec.min_state_limit = std::max(spec.min_state_limit, f->min_state_limit);
      spec.minimize = true;
    }
    if (!f->forbidden.empty()) {
      spec.components.push_back({std::make_shared<Regex>(parse_regex(f->forbidden).value()),
                                 TerminalComponent::Mode::kSearch, true, true});
    }
    if (f->max_len) {
      spec.components.push_back({any_char_repeat(0, *f->max_len), TerminalComponent::Mode::kFull, true, false});
    }
  }
  b_->add_production(nt, {GrammarBuilder::terminal_symbol(b_->add_terminal(std::move(spec)))});
  return OkStatus();
}

Status SchemaCompiler::emit_number(const Plain& p, int nt) {
  bool integer_only = !(p.types & kFraction);
  auto re = number_regex(integer_only, p.lower, p.upper, zero_fraction_integers_);
  if (!re.ok()) {
    std::string kw = p.bound_ptr.substr(p.bound_ptr.rfind('/') + 1);
    DI_RETURN_IF_ERROR(refuse(kw, p.bound_ptr, re.status().message()));
    re = number_regex(integer_only, std::nullopt, std::nullopt, zero_fraction_integers_);
  }
  DI_ASSIGN_OR_RETURN(int t, b_->add_regex(*re));
  b_->add_production(nt, {GrammarBuilder::terminal_symbol(t)});
  return OkStatus();
}

Status SchemaCompiler::emit_object(const Plain& p, int nt, const std::string& ptr) {
  // Declared keys in schema order, then required keys not declared anywhere.
  std::vector<std::string> keys;
  for (const auto& om : p.obj_members) {
    if (!om.props) continue;
    for (auto it = om.props->begin(); it != om.props->end(); ++it) {
      if (std::find(keys.begin(), keys.end(), it.key()) == keys.end()) keys.push_back(it.key());
    }
  }
  for (const auto& r : p.required) if (std::find(keys.begin(), keys.end(), r) == keys.end()) keys.push_back(r);
  bool extras_forbidden = false;
  for (const auto& om : p.obj_members) {
    if (om.additional && om.additional->node->is_boolean() && !om.additional->node->get<bool>()) extras_forbidden = true;
  }
  if (p.max_props && *p.max_props == 0) {  // only the empty object
    if (!p.required.empty() || (p.min_props && *p.min_props > 0)) return OkStatus();
    std::vector<int> rhs = {lit("{")};
    for (int w : ws()) rhs.push_back(w);
    rhs.push_back(lit("}"));
    b_->add_production(nt, rhs);
    return OkStatus();
  }
  if (p.max_props) {
    if (!extras_forbidden || keys.size() > *p.max_props) {
      DI_RETURN_IF_ERROR(refuse("maxProperties", p.props_count_ptr, "only enforced when every possible property is listed and there are at most that many"));
    }
  }
  // minProperties: satisfied by the required keys, or 1 (a non-empty object) without them.
  const bool need_nonempty = p.min_props && *p.min_props == 1 && p.required.empty();
  if (p.min_props && p.required.size() < *p.min_props && !need_nonempty) {
    DI_RETURN_IF_ERROR(refuse("minProperties", p.props_count_ptr, "only enforced when at least that many properties are required, or when it is 1"));
  }
  // Per-key conjunctions (JSON Schema: a key not in a schema's properties falls under its
  // additionalProperties).
  auto conj_for = [&](const std::string* key) {
    std::vector<SRef> refs;
    for (const auto& om : p.obj_members) {
      if (key && om.props && om.props->contains(*key)) {
        refs.push_back({&(*om.props)[*key], om.ptr + "/properties/" + pointer_escape(*key)});
      } else if (om.additional) {
        refs.push_back(*om.additional);
      }
    }
    return refs;
  };
  int n = static_cast<int>(keys.size());
  std::vector<int> prop_sym(n);
  for (int i = 0; i < n; ++i) {
    DI_ASSIGN_OR_RETURN(int value, compile_list(conj_for(&keys[i])));
    std::vector<int> rhs = {lit(json_quote(keys[i]))};
    for (int s : sep(":")) rhs.push_back(s);
    rhs.push_back(value);
    prop_sym[i] = b_->seq(rhs, "property " + keys[i]);
  }
  // Extra properties: a key that is none of the declared ones.
  int extra = -1;
  if (!extras_forbidden) {
    DI_ASSIGN_OR_RETURN(int value, compile_list(conj_for(nullptr)));
    TerminalSpec spec;
    spec.name = "key-not";
    auto any = std::make_shared<Regex>();
    any->root = any->add_repeat(any->add_class(CodepointSet::all()), 0, 0, true);
    spec.components.push_back({any, TerminalComponent::Mode::kFull, true, false});
    for (const auto& k : keys) {
      auto re = std::make_shared<Regex>();
      re->root = re->add_literal(k);
      spec.components.push_back({re, TerminalComponent::Mode::kFull, true, true});
      spec.name += "\x1f" + k;
    }
    std::vector<int> rhs = {GrammarBuilder::terminal_symbol(b_->add_terminal(std::move(spec)))};
    for (int s : sep(":")) rhs.push_back(s);
    rhs.push_back(value);
    extra = b_->seq(rhs, "extra property");
  }
  // A_i^f (nothing emitted yet) and A_i^c (a comma is needed before the next property).
  std::vector<int> comma = sep(",");
  int next_f = new_nt("props-end-first"), next_c = new_nt("props-end-comma");
  b_->add_production(next_f, {});
  b_->add_production(next_c, {});
  if (extra >= 0) {
    int loop = new_nt("extras");  // (sep extra)*
    b_->add_production(loop, {});
    std::vector<int> more = {loop};
    more.insert(more.end(), comma.begin(), comma.end());
    more.push_back(extra);
    b_->add_production(loop, more);
    b_->add_production(next_f, {extra, loop});
    b_->add_production(next_c, {loop});
  }
  // Non-empty variants of the A_i^f (-1: none), for objects without required keys: there
  // `{ WS A_0^f WS }` with A_0^f nullable would put two whitespace lexemes side by side, an
  // ambiguity that makes the parser's sets grow with every whitespace byte; it is emitted as
  // `{ WS }` | `{ WS A_0^f+ WS }` instead (same language, one gap in the empty object).
  bool any_required = false;
  int nonempty_f = -1;
  if (extra >= 0) {
    nonempty_f = new_nt("props-end-first+");
    b_->add_production(nonempty_f, {extra, next_c});
  }
  for (int i = n - 1; i >= 0; --i) {
    bool required = std::find(p.required.begin(), p.required.end(), keys[i]) != p.required.end();
    any_required |= required;
    int nf = new_nt("props-first+");
    b_->add_production(nf, {prop_sym[i], next_c});
    if (!required && nonempty_f >= 0) b_->add_production(nf, {nonempty_f});
    nonempty_f = nf;
    int f = new_nt("props-first"), c = new_nt("props-comma");
    b_->add_production(f, {prop_sym[i], next_c});
    std::vector<int> rc = comma;
    rc.push_back(prop_sym[i]);
    rc.push_back(next_c);
    b_->add_production(c, rc);
    if (!required) {
      b_->add_production(f, {next_f});
      b_->add_production(c, {next_c});
    }
    next_f = f;
    next_c = c;
  }
  std::vector<int> rhs = {lit("{")};
  for (int w : ws()) rhs.push_back(w);
  if (!any_required && (!ws().empty() || need_nonempty)) {
    if (!need_nonempty) {
      std::vector<int> empty = rhs;
      empty.push_back(lit("}"));
      b_->add_production(nt, empty);
    }
    if (nonempty_f < 0) { (void)ptr; return OkStatus(); }
    next_f = nonempty_f;
  }
  rhs.push_back(next_f);
  for (int w : ws()) rhs.push_back(w);
  rhs.push_back(lit("}"));
  b_->add_production(nt, rhs);
  (void)ptr;
  return OkStatus();
}

Status SchemaCompiler::emit_array(const Plain& p, int nt, const std::string& ptr) {
  if (p.unique_items && !(p.max_items && *p.max_items <= 1)) {
    DI_RETURN_IF_ERROR(refuse("uniqueItems", p.unique_ptr));
  }
  size_t prefix = 0;
  for (const auto& am : p.arr_members) prefix = std::max(prefix, am.prefix.size());
  auto conj_at = [&](size_t i) {
    std::vector<SRef> refs;
    for (const auto& am : p.arr_members) {
      if (i < am.prefix.size()) refs.push_back(am.prefix[i]);
      else if (am.rest) refs.push_back(*am.rest);
    }
    return refs;
  };
  if (!p.contains.empty()) {
    // `[ (E ,)* C (, E)* ]` with E the items schema and C = E ∩ contains: some element matches
    // (the grammar is ambiguous where several do; Earley does not mind). Exact only alone.
    if (p.contains.size() > 1 || prefix > 0 || p.max_items || p.min_items > 1) {
      DI_RETURN_IF_ERROR(refuse("contains", p.contains[0].ptr,
                                "only enforced without prefixItems, maxItems, minItems > 1 or a second contains"));
    } else {
      std::vector<SRef> crefs = conj_at(0);
      crefs.push_back(p.contains[0]);
      DI_ASSIGN_OR_RETURN(int e, compile_list(conj_at(0)));
      DI_ASSIGN_OR_RETURN(int c, compile_list(crefs));
      std::vector<int> comma = sep(",");
      int before = new_nt("contains-before");  // (E ,)*
      b_->add_production(before, {});
      std::vector<int> more = {before, e};
      more.insert(more.end(), comma.begin(), comma.end());
      b_->add_production(before, more);
      int after = new_nt("contains-after");  // (, E)*
      b_->add_production(after, {});
      std::vector<int> more2 = {after};
      more2.insert(more2.end(), comma.begin(), comma.end());
      more2.push_back(e);
      b_->add_production(after, more2);
      std::vector<int> rhs = {lit("[")};
      for (int w : ws()) rhs.push_back(w);
      rhs.push_back(before);
      rhs.push_back(c);
      rhs.push_back(after);
      for (int w : ws()) rhs.push_back(w);
      rhs.push_back(lit("]"));
      b_->add_production(nt, rhs);
      return OkStatus();
    }
  }
  uint64_t min = p.min_items;
  std::optional<uint64_t> max = p.max_items;
  if (max && *max < min) return OkStatus();  // no array satisfies both
  uint64_t fixed = std::max<uint64_t>(prefix, min);
  if (max) fixed = std::min<uint64_t>(fixed, *max);
  uint64_t tail = max ? *max - fixed : 0;
  if (fixed + tail > opt_.max_array_expansion) {
    return refuse(max ? "maxItems" : "minItems", ptr, "bound too large to expand (limit " +
                  std::to_string(opt_.max_array_expansion) + " positions)");
  }
  std::vector<int> comma = sep(",");
  int rest = -1;
  auto rest_elem = [&]() -> StatusOr<int> {
    if (rest < 0) { DI_ASSIGN_OR_RETURN(rest, compile_list(conj_at(prefix))); }
    return rest;
  };
  // Tail after `fixed` elements: need_sep says whether a comma precedes the next element.
  int tail_sym;
  bool need_sep = fixed > 0;
  // The non-empty production of the first position (C_0, or the tail when nothing is fixed);
  // empty: there is none (only `[]`). Used when min == 0, see emit_object's non-empty variants.
  std::vector<int> nonempty_rhs;
  if (max && tail == 0) {
    tail_sym = new_nt("array-end");
    b_->add_production(tail_sym, {});
  } else if (!max) {
    DI_ASSIGN_OR_RETURN(int e, rest_elem());
    int loop = new_nt("array-rest");
    b_->add_production(loop, {});
    std::vector<int> more = {loop};
    more.insert(more.end(), comma.begin(), comma.end());
    more.push_back(e);
    b_->add_production(loop, more);
    tail_sym = new_nt("array-tail");
    b_->add_production(tail_sym, {});
    std::vector<int> first;
    if (need_sep) first = comma;
    first.push_back(e);
    first.push_back(loop);
    b_->add_production(tail_sym, first);
    nonempty_rhs = first;
  } else {
    DI_ASSIGN_OR_RETURN(int e, rest_elem());
    int d = new_nt("array-opt");  // D_0 (comma-prefixed)
    b_->add_production(d, {});
    for (uint64_t j = 1; j < tail; ++j) {
      int dj = new_nt("array-opt");
      b_->add_production(dj, {});
      std::vector<int> r = comma;
      r.push_back(e);
      r.push_back(d);
      b_->add_production(dj, r);
      d = dj;
    }
    tail_sym = new_nt("array-tail");
    b_->add_production(tail_sym, {});
    std::vector<int> first;
    if (need_sep) first = comma;
    first.push_back(e);
    first.push_back(d);
    b_->add_production(tail_sym, first);
    nonempty_rhs = first;
  }
  // C_i for i = fixed-1 .. 0.
  int next = tail_sym;
  for (int64_t i = static_cast<int64_t>(fixed) - 1; i >= 0; --i) {
    std::vector<SRef> refs = conj_at(static_cast<size_t>(i));
    DI_ASSIGN_OR_RETURN(int e, compile_list(refs));
    int c = new_nt("array-item");
    if (static_cast<uint64_t>(i) >= min) b_->add_production(c, {});
    std::vector<int> r;
    if (i > 0) r = comma;
    r.push_back(e);
    r.push_back(next);
    b_->add_production(c, r);
    if (i == 0) nonempty_rhs = r;
    next = c;
  }
  std::vector<int> rhs = {lit("[")};
  for (int w : ws()) rhs.push_back(w);
  if (min == 0 && !ws().empty()) {
    // `[ WS X WS ]` with X nullable: `[ WS ]` | `[ WS X+ WS ]` (no adjacent whitespace lexemes).
    std::vector<int> empty = rhs;
    empty.push_back(lit("]"));
    b_->add_production(nt, empty);
    if (nonempty_rhs.empty()) return OkStatus();
    rhs.insert(rhs.end(), nonempty_rhs.begin(), nonempty_rhs.end());
    for (int w : ws()) rhs.push_back(w);
    rhs.push_back(lit("]"));
    b_->add_production(nt, rhs);
    return OkStatus();
  }
  rhs.push_back(next);
  for (int w : ws()) rhs.push_back(w);
  rhs.push_back(lit("]"));
  b_->add_production(nt, rhs);
  return OkStatus();
}

Status SchemaCompiler::emit_plain(const Plain& p, int nt, const std::string& ptr) {
  if (p.has_enum) return emit_enum(p, nt);
  if (p.types & kNull) b_->add_production(nt, {lit("null")});
  if (p.types & kBool) {
    b_->add_production(nt, {lit("true")});
    b_->add_production(nt, {lit("false")});
  }
  if (p.types & kString) DI_RETURN_IF_ERROR(emit_string(p, nt));
  if (p.types & kInteger) DI_RETURN_IF_ERROR(emit_number(p, nt));
  if (p.types & kObject) DI_RETURN_IF_ERROR(emit_object(p, nt, ptr));
  if (p.types & kArray) DI_RETURN_IF_ERROR(emit_array(p, nt, ptr));
  return OkStatus();
}

}  // namespace deepinfer::structured::json_internal

namespace deepinfer::structured {

StatusOr<JsonSchemaGrammar> compile_json_schema(const std::string& schema_text,
                                                const JsonSchemaOptions& options) {
  json_internal::Json root;
  try {
    root = json_internal::Json::parse(schema_text);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("json_schema: the schema is not valid JSON: ") + e.what());
  }
  GrammarBuilder b;
  json_internal::SchemaCompiler c(root, options, &b);
  DI_ASSIGN_OR_RETURN(int start, c.compile_root());
  JsonSchemaGrammar out;
  auto g = CompiledGrammar::compile(std::move(b), start);
  if (!g.ok()) {
    const std::string& msg = g.status().message();
    if (g.status().code() == StatusCode::kResourceExhausted && msg.rfind("terminal str|", 0) == 0) {
      // A string terminal (length bounds x pattern x format) whose automaton is too large. Its
      // name is "str|min|max|patterns|formats" (formats hold no '|'): blame maxLength when it
      // is bounded, else pattern when there is one, else format.
      std::string name = msg.substr(0, msg.find(':'));
      size_t p1 = name.find('|', 4), p2 = name.find('|', p1 + 1);
      std::string max = name.substr(p1 + 1, p2 - p1 - 1);
      bool has_pattern = name.rfind('|') > p2 + 1;
      std::string kw = max != "inf" ? "maxLength" : has_pattern ? "pattern" : "format";
      return Status(g.status().code(), "json_schema: keyword '" + kw + "': the string automaton "
                    "(length bounds combined with pattern/format) is too large: " + msg);
    }
    return Status(g.status().code(), "json_schema: " + msg);
  }
  out.grammar = std::move(*g);
  out.warnings = c.warnings();
  return out;
}

StatusOr<std::shared_ptr<CompiledGrammar>> compile_any_json(bool object_root,
                                                            const JsonSchemaOptions& options) {
  json_internal::Json root = object_root ? json_internal::Json{{"type", "object"}}
                                         : json_internal::Json::object();
  GrammarBuilder b;
  json_internal::SchemaCompiler c(root, options, &b);
  DI_ASSIGN_OR_RETURN(int start, c.compile_root());
  return CompiledGrammar::compile(std::move(b), start);
}

}  // namespace deepinfer::structured
