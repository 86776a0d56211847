#include "structured/json_schema_compiler.h"

#include <algorithm>

namespace deepinfer::structured::json_internal {
namespace {

constexpr uint64_t kMaxNonterminals = 200000;

const std::set<std::string>& refused_keywords() {
  static const std::set<std::string> s = {
      "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies",
      "propertyNames", "patternProperties", "unevaluatedProperties", "unevaluatedItems",
      "contains", "minContains", "maxContains", "multipleOf", "$dynamicRef", "$recursiveRef",
      "divisibleBy", "disallow", "extends"};
  return s;
}

StatusOr<uint8_t> type_mask(const Json& t, const std::string& ptr) {
  auto one = [&](const Json& s) -> StatusOr<uint8_t> {
    if (!s.is_string()) return InvalidArgument("json_schema: 'type' at " + ptr + " must be a string or array of strings");
    std::string n = s.get<std::string>();
    if (n == "null") return static_cast<uint8_t>(kNull);
    if (n == "boolean") return static_cast<uint8_t>(kBool);
    if (n == "object") return static_cast<uint8_t>(kObject);
    if (n == "array") return static_cast<uint8_t>(kArray);
    if (n == "string") return static_cast<uint8_t>(kString);
    if (n == "integer") return static_cast<uint8_t>(kInteger);
    if (n == "number") return static_cast<uint8_t>(kInteger | kFraction);
    return InvalidArgument("json_schema: unknown type '" + n + "' at " + ptr + "/type");
  };
  if (t.is_array()) {
    uint8_t m = 0;
    for (const auto& s : t) { DI_ASSIGN_OR_RETURN(uint8_t x, one(s)); m |= x; }
    return m;
  }
  return one(t);
}

StatusOr<uint64_t> non_negative(const Json& v, const std::string& kw, const std::string& ptr) {
  if (!v.is_number() || v.get<double>() < 0 || std::floor(v.get<double>()) != v.get<double>()) {
    return InvalidArgument("json_schema: '" + kw + "' at " + ptr + " must be a non-negative integer");
  }
  return static_cast<uint64_t>(v.get<double>());
}

}  // namespace

bool SchemaCompiler::old_draft(const Json& root) {
  if (!root.is_object() || !root.contains("$schema") || !root["$schema"].is_string()) return false;
  const std::string s = root["$schema"].get<std::string>();
  return s.find("draft-03") != std::string::npos || s.find("draft-04") != std::string::npos;
}

int SchemaCompiler::new_nt(const std::string& name) {
  if (++nonterminals_ > kMaxNonterminals && budget_.ok()) {
    budget_ = ResourceExhausted("json_schema: the schema expands to more than " +
                                std::to_string(kMaxNonterminals) + " grammar rules");
  }
  return b_->add_nonterminal(name);
}

Status SchemaCompiler::refuse(const std::string& keyword, const std::string& ptr,
                              const std::string& why) {
  std::string msg = "json_schema: keyword '" + keyword + "' at " + ptr +
                    (why.empty() ? " cannot be enforced exactly" : ": " + why);
  if (!opt_.lenient) return Unimplemented(msg + " (refused; lenient mode would ignore it)");
  if (warned_.insert(keyword).second) warnings_.push_back(msg + " (ignored: lenient mode)");
  return OkStatus();
}

std::vector<int> SchemaCompiler::ws() {
  if (opt_.whitespace == JsonSchemaOptions::Whitespace::kCompact) return {};
  if (ws_term_ < 0) {
    auto t = b_->add_regex("[ \\t\\n\\r]{0," + std::to_string(opt_.max_whitespace) + "}");
    ws_term_ = t.value();
  }
  return {GrammarBuilder::terminal_symbol(ws_term_)};
}

std::vector<int> SchemaCompiler::sep(const char* punct) {
  std::vector<int> s = ws();
  s.push_back(lit(punct));
  for (int w : ws()) s.push_back(w);
  return s;
}

int SchemaCompiler::any_value() {
  if (any_value_ >= 0) return any_value_;
  any_value_ = new_nt("json_value");
  int obj = new_nt("json_object"), arr = new_nt("json_array");
  int str = lit("\"");  // placeholder replaced below
  {
    TerminalSpec spec;
    spec.name = "str|any";
    auto re = std::make_shared<Regex>();
    re->root = re->add_repeat(re->add_class(CodepointSet::all()), 0, 0, true);
    spec.components.push_back({re, TerminalComponent::Mode::kFull, true, false});
    str = GrammarBuilder::terminal_symbol(b_->add_terminal(std::move(spec)));
  }
  int num = GrammarBuilder::terminal_symbol(
      b_->add_regex(number_regex(false, std::nullopt, std::nullopt).value()).value());
  for (int s : {obj, arr, str, num, lit("true"), lit("false"), lit("null")}) {
    b_->add_production(any_value_, {s});
  }
  // object: { ws } | { ws member (sep member)* ws }
  std::vector<int> member = {str};
  for (int s : sep(":")) member.push_back(s);
  member.push_back(any_value_);
  int mem = new_nt("json_member");
  b_->add_production(mem, member);
  int mems = new_nt("json_members");
  b_->add_production(mems, {mem});
  std::vector<int> more = {mems};
  for (int s : sep(",")) more.push_back(s);
  more.push_back(mem);
  b_->add_production(mems, more);
  std::vector<int> o1 = {lit("{")}, o2 = {lit("{")};
  for (int w : ws()) o1.push_back(w), o2.push_back(w);
  o2.push_back(mems);
  for (int w : ws()) o2.push_back(w);
  o1.push_back(lit("}"));
  o2.push_back(lit("}"));
  b_->add_production(obj, o1);
  b_->add_production(obj, o2);
  int els = new_nt("json_elements");
  b_->add_production(els, {any_value_});
  std::vector<int> emore = {els};
  for (int s : sep(",")) emore.push_back(s);
  emore.push_back(any_value_);
  b_->add_production(els, emore);
  std::vector<int> a1 = {lit("[")}, a2 = {lit("[")};
  for (int w : ws()) a1.push_back(w), a2.push_back(w);
  a2.push_back(els);
  for (int w : ws()) a2.push_back(w);
  a1.push_back(lit("]"));
  a2.push_back(lit("]"));
  b_->add_production(arr, a1);
  b_->add_production(arr, a2);
  return any_value_;
}

StatusOr<SRef> SchemaCompiler::resolve_ref(const std::string& ref, const std::string& at) {
  if (ref.empty() || ref[0] != '#') {
    return Unimplemented("json_schema: keyword '$ref' at " + at + ": reference '" + ref +
                         "' is not local (only '#...' JSON-pointer references are supported)");
  }
  // Percent-decode the fragment.
  std::string frag;
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size()) {
      frag += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      frag += ref[i];
    }
  }
  if (!frag.empty() && frag[0] != '/') {
    return Unimplemented("json_schema: keyword '$ref' at " + at + ": anchor reference '" + ref +
                         "' is not supported (use a JSON pointer)");
  }
  const Json* node = &root_;
  size_t pos = 1;
  while (pos <= frag.size() && !frag.empty()) {
    size_t next = frag.find('/', pos);
    std::string tok = frag.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    std::string key;
    for (size_t i = 0; i < tok.size(); ++i) {
      if (tok[i] == '~' && i + 1 < tok.size()) { key += tok[i + 1] == '1' ? '/' : '~'; ++i; }
      else key += tok[i];
    }
    if (node->is_object() && node->contains(key)) {
      node = &(*node)[key];
    } else if (node->is_array() && !key.empty() &&
               key.find_first_not_of("0123456789") == std::string::npos &&
               std::stoul(key) < node->size()) {
      node = &(*node)[std::stoul(key)];
    } else {
      return InvalidArgument("json_schema: '$ref' at " + at + ": '" + ref + "' does not resolve");
    }
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return SRef{node, "#" + frag};
}

Status SchemaCompiler::expand(std::vector<Member>* members) {
  std::set<std::string> seen;
  // By pointer only: a member whose combinator was already distributed stands for that schema.
  for (const auto& m : *members) seen.insert(m.ref.ptr);
  for (size_t i = 0; i < members->size(); ++i) {
    Member m = (*members)[i];
    const Json& n = *m.ref.node;
    if (n.is_boolean()) continue;
    if (!n.is_object()) {
      return InvalidArgument("json_schema: schema at " + m.ref.ptr + " must be an object or a boolean");
    }
    auto add = [&](SRef r) {
      if (seen.insert(r.ptr).second) members->push_back({std::move(r), 0});
    };
    if (n.contains("$ref")) {
      if (!n["$ref"].is_string()) return InvalidArgument("json_schema: '$ref' at " + m.ref.ptr + " must be a string");
      DI_ASSIGN_OR_RETURN(SRef target, resolve_ref(n["$ref"].get<std::string>(), m.ref.ptr + "/$ref"));
      add(target);
    }
    if (n.contains("allOf")) {
      const Json& all = n["allOf"];
      if (!all.is_array() || all.empty()) return InvalidArgument("json_schema: 'allOf' at " + m.ref.ptr + " must be a non-empty array");
      for (size_t k = 0; k < all.size(); ++k) add({&all[k], m.ref.ptr + "/allOf/" + std::to_string(k)});
    }
  }
  return OkStatus();
}

StatusOr<int> SchemaCompiler::compile_list(const std::vector<SRef>& refs) {
  if (refs.empty()) return any_value();
  std::vector<Member> members;
  for (const auto& r : refs) members.push_back({r, 0});
  return compile_conj(std::move(members));
}

StatusOr<int> SchemaCompiler::compile_conj(std::vector<Member> members) {
  DI_RETURN_IF_ERROR(budget_);
  DI_RETURN_IF_ERROR(expand(&members));
  std::vector<std::string> keys;
  for (const auto& m : members) keys.push_back(m.ref.ptr + "|" + std::to_string(m.consumed));
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::string key;
  for (const auto& k : keys) key += k + "\n";
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  int nt = new_nt("schema " + members[0].ref.ptr);
  memo_[key] = nt;
  // false anywhere: no value (nt keeps no production and is pruned as unproductive).
  for (const auto& m : members) {
    if (m.ref.node->is_boolean() && !m.ref.node->get<bool>()) return nt;
  }
  // Distribute the first anyOf/oneOf over the conjunction.
  for (size_t i = 0; i < members.size(); ++i) {
    const Json& n = *members[i].ref.node;
    if (!n.is_object()) continue;
    for (const char* kw : {"anyOf", "oneOf"}) {
      uint32_t bit = kw[0] == 'a' ? kConsumedAnyOf : kConsumedOneOf;
      if (!n.contains(kw) || (members[i].consumed & bit)) continue;
      const Json& alts = n[kw];
      std::string ptr = members[i].ref.ptr + "/" + kw;
      if (!alts.is_array() || alts.empty()) return InvalidArgument("json_schema: '" + std::string(kw) + "' at " + ptr + " must be a non-empty array");
      if (alts.size() > opt_.max_branches) return refuse(kw, ptr, "too many branches");
      std::vector<std::vector<Member>> branches;
      for (size_t k = 0; k < alts.size(); ++k) {
        std::vector<Member> br = members;
        br[i].consumed |= bit;
        br.push_back({{&alts[k], ptr + "/" + std::to_string(k)}, 0});
        branches.push_back(std::move(br));
      }
      if (bit == kConsumedOneOf && alts.size() > 1) {
        std::string why;
        DI_ASSIGN_OR_RETURN(bool disjoint, oneof_disjoint(branches, &why));
        if (!disjoint) DI_RETURN_IF_ERROR(refuse("oneOf", ptr, "branches are not provably disjoint (" + why + ")"));
      }
      for (auto& br : branches) {
        DI_ASSIGN_OR_RETURN(int sub, compile_conj(std::move(br)));
        b_->add_production(nt, {sub});
      }
      return nt;
    }
  }
  Plain p;
  for (const auto& m : members) DI_RETURN_IF_ERROR(merge(m, &p));
  DI_RETURN_IF_ERROR(emit_plain(p, nt, members[0].ref.ptr));
  return nt;
}

Status SchemaCompiler::merge(const Member& m, Plain* p) {
  const Json& n = *m.ref.node;
  if (n.is_boolean()) return OkStatus();
  const std::string& ptr = m.ref.ptr;
  bool has_obj = false;
  Plain::ObjMember om;
  om.ptr = ptr;
  bool has_arr = false;
  Plain::ArrMember am;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string& k = it.key();
    const Json& v = it.value();
    std::string kp = ptr + "/" + pointer_escape(k);
    // `if` without `then`/`else`, and `then`/`else` without `if`, have no effect.
    if (k == "if" && !n.contains("then") && !n.contains("else")) continue;
    if ((k == "then" || k == "else") && !n.contains("if")) continue;
    if (k == "not") {
      DI_ASSIGN_OR_RETURN(bool handled, merge_not(v, kp, p));
      if (handled) continue;
    }
    if (k == "contains") {  // emit_array enforces it or refuses; drafts 3/4 have no `contains`
      if (zero_fraction_integers_) p->contains.push_back({&v, kp});
      continue;
    }
    if (refused_keywords().count(k)) {
      DI_RETURN_IF_ERROR(refuse(k, kp));
      continue;
    }
    if (k == "type") {
      DI_ASSIGN_OR_RETURN(uint8_t t, type_mask(v, ptr));
      p->types &= t;
    } else if (k == "enum" || k == "const") {
      std::vector<Json> vals;
      if (k == "const") vals.push_back(v);
      else if (!v.is_array()) return InvalidArgument("json_schema: 'enum' at " + kp + " must be an array");
      else for (const auto& x : v) vals.push_back(x);
      if (!p->has_enum) {
        p->has_enum = true;
        p->enum_values = vals;
        p->enum_ptr = kp;
      } else {
        std::vector<Json> keep;
        for (const auto& a : p->enum_values) {
          for (const auto& b : vals) if (json_equal(a, b)) { keep.push_back(a); break; }
        }
        p->enum_values = keep;
      }
    } else if (k == "minLength") {
      DI_ASSIGN_OR_RETURN(uint64_t x, non_negative(v, k, kp));
      p->min_len = std::max(p->min_len.value_or(0), x);
    } else if (k == "maxLength") {
      DI_ASSIGN_OR_RETURN(uint64_t x, non_negative(v, k, kp));
      p->max_len = p->max_len ? std::min(*p->max_len, x) : x;
    } else if (k == "pattern") {
      if (!v.is_string()) return InvalidArgument("json_schema: 'pattern' at " + kp + " must be a string");
      p->patterns.emplace_back(v.get<std::string>(), kp);
    } else if (k == "format") {
      if (!v.is_string()) return InvalidArgument("json_schema: 'format' at " + kp + " must be a string");
      if (opt_.format == JsonSchemaOptions::Format::kAnnotation) continue;  // constrains nothing
      p->formats.emplace_back(v.get<std::string>(), kp);
    } else if (k == "minimum" || k == "exclusiveMinimum" || k == "maximum" || k == "exclusiveMaximum") {
      if (v.is_boolean()) continue;  // draft-4 form, handled with minimum/maximum below
      if (!v.is_number()) return InvalidArgument("json_schema: '" + k + "' at " + kp + " must be a number");
      bool lower = k.find("inimum") != std::string::npos;
      bool excl = k[0] == 'e';
      std::string sibling = lower ? "exclusiveMinimum" : "exclusiveMaximum";
      if (!excl && n.contains(sibling) && n[sibling].is_boolean() && n[sibling].get<bool>()) excl = true;
      NumberBound bnd{v.get<double>(), excl};
      auto& slot = lower ? p->lower : p->upper;
      if (!slot) {
        slot = bnd;
      } else if (lower ? (bnd.value > slot->value || (bnd.value == slot->value && bnd.exclusive))
                       : (bnd.value < slot->value || (bnd.value == slot->value && bnd.exclusive))) {
        slot = bnd;
      }
      p->bound_ptr = kp;
    } else if (k == "properties") {
      if (!v.is_object()) return InvalidArgument("json_schema: 'properties' at " + kp + " must be an object");
      om.props = &v;
      has_obj = true;
    } else if (k == "additionalProperties") {
      om.additional = SRef{&v, kp};
      has_obj = true;
    } else if (k == "required") {
      if (!v.is_array()) return InvalidArgument("json_schema: 'required' at " + kp + " must be an array");
      for (const auto& r : v) {
        if (!r.is_string()) return InvalidArgument("json_schema: 'required' at " + kp + " must list strings");
        std::string s = r.get<std::string>();
        if (std::find(p->required.begin(), p->required.end(), s) == p->required.end()) p->required.push_back(s);
      }
    } else if (k == "minProperties" || k == "maxProperties") {
      DI_ASSIGN_OR_RETURN(uint64_t x, non_negative(v, k, kp));
      if (k[1] == 'i') p->min_props = std::max(p->min_props.value_or(0), x);
      else p->max_props = p->max_props ? std::min(*p->max_props, x) : x;
      p->props_count_ptr = kp;
    } else if (k == "prefixItems") {
      if (!v.is_array()) return InvalidArgument("json_schema: 'prefixItems' at " + kp + " must be an array");
      if (!(n.contains("items") && n["items"].is_array())) {
        for (size_t i = 0; i < v.size(); ++i) am.prefix.push_back({&v[i], kp + "/" + std::to_string(i)});
      }
      has_arr = true;
    } else if (k == "items") {
      if (v.is_array()) {  // draft 4-2019 tuple form
        for (size_t i = 0; i < v.size(); ++i) am.prefix.push_back({&v[i], kp + "/" + std::to_string(i)});
        if (n.contains("additionalItems")) am.rest = SRef{&n["additionalItems"], ptr + "/additionalItems"};
      } else {
        am.rest = SRef{&v, kp};
      }
      has_arr = true;
    } else if (k == "minItems") {
      DI_ASSIGN_OR_RETURN(uint64_t x, non_negative(v, k, kp));
      p->min_items = std::max(p->min_items, x);
    } else if (k == "maxItems") {
      DI_ASSIGN_OR_RETURN(uint64_t x, non_negative(v, k, kp));
      p->max_items = p->max_items ? std::min(*p->max_items, x) : x;
    } else if (k == "uniqueItems") {
      if (v.is_boolean() && v.get<bool>()) { p->unique_items = true; p->unique_ptr = kp; }
    }
    // Everything else is an annotation, a combinator handled by compile_conj, or an unknown
    // keyword (ignored by the JSON Schema specification).
  }
  if (has_obj) p->obj_members.push_back(om);
  if (has_arr) p->arr_members.push_back(std::move(am));
  return OkStatus();
}

StatusOr<bool> SchemaCompiler::merge_not(const Json& v, const std::string& kp, Plain* p) {
  if (v.is_boolean()) {  // not true: nothing; not false: everything
    if (v.get<bool>()) p->types = 0;
    return true;
  }
  if (!v.is_object()) return false;
  static const std::set<std::string> annotations = {"$comment", "title", "description", "default",
                                                    "examples", "deprecated", "readOnly", "writeOnly"};
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it.key() != "type" && !annotations.count(it.key())) return false;
  }
  uint8_t t = kAllTypes;
  if (v.contains("type")) { DI_ASSIGN_OR_RETURN(t, type_mask(v["type"], kp)); }
  // The complement of `integer` alone is the non-integral numbers, which have no emitter.
  if ((t & kInteger) && !(t & kFraction)) return false;
  p->types &= static_cast<uint8_t>(~t & kAllTypes);
  return true;
}

StatusOr<bool> SchemaCompiler::oneof_disjoint(const std::vector<std::vector<Member>>& branches,
                                              std::string* why) {
  std::vector<Plain> plains(branches.size());
  for (size_t i = 0; i < branches.size(); ++i) {
    std::vector<Member> ms = branches[i];
    DI_RETURN_IF_ERROR(expand(&ms));
    bool saved = opt_.lenient;
    opt_.lenient = true;  // shallow look only; refusals happen when the branch compiles
    auto saved_warned = warned_;
    auto saved_warnings = warnings_;
    for (const auto& m : ms) {
      Status s = merge(m, &plains[i]);
      if (!s.ok()) { opt_.lenient = saved; return s; }
    }
    opt_.lenient = saved;
    warned_ = saved_warned;
    warnings_ = saved_warnings;
  }
  auto eff_types = [](const Plain& p) {
    if (!p.has_enum) return p.types;
    uint8_t t = 0;
    for (const auto& v : p.enum_values) {
      uint8_t vt = value_type(v);
      if (p.types & vt) t |= vt;
    }
    return t;
  };
  // The const/enum values a required property must take, if the schema says so directly.
  auto prop_values = [&](const Plain& p, const std::string& key, std::vector<Json>* out) {
    if (std::find(p.required.begin(), p.required.end(), key) == p.required.end()) return false;
    for (const auto& om : p.obj_members) {
      if (!om.props || !om.props->contains(key)) continue;
      const Json& s = (*om.props)[key];
      if (s.is_object() && s.contains("const")) { out->push_back(s["const"]); return true; }
      if (s.is_object() && s.contains("enum") && s["enum"].is_array()) {
        for (const auto& v : s["enum"]) out->push_back(v);
        return true;
      }
    }
    return false;
  };
  for (size_t i = 0; i < plains.size(); ++i) {
    for (size_t j = i + 1; j < plains.size(); ++j) {
      const Plain &a = plains[i], &b = plains[j];
      uint8_t overlap = eff_types(a) & eff_types(b);
      if (overlap == 0) continue;
      if (a.has_enum && b.has_enum) {
        bool common = false;
        for (const auto& x : a.enum_values) for (const auto& y : b.enum_values) common |= json_equal(x, y);
        if (!common) continue;
      }
      if (overlap == kObject) {
        bool separated = false;
        for (const auto& key : a.required) {
          std::vector<Json> va, vb;
          if (!prop_values(a, key, &va) || !prop_values(b, key, &vb)) continue;
          bool common = false;
          for (const auto& x : va) for (const auto& y : vb) common |= json_equal(x, y);
          if (!common) { separated = true; break; }
        }
        if (separated) continue;
      }
      *why = "branches " + std::to_string(i) + " and " + std::to_string(j) + " may overlap";
      return false;
    }
  }
  return true;
}

StatusOr<int> SchemaCompiler::compile_root() {
  // A metaschema other than a published draft's declares vocabularies we cannot read (a
  // validator would fetch it): e.g. without the validation vocabulary `minimum` asserts nothing.
  if (root_.is_object() && root_.contains("$schema") && root_["$schema"].is_string()) {
    std::string uri = root_["$schema"].get<std::string>();
    std::string u = uri;
    if (!u.empty() && u.back() == '#') u.pop_back();
    for (const char* scheme : {"http://", "https://"}) {
      if (u.rfind(scheme, 0) == 0) u = u.substr(std::string(scheme).size());
    }
    static const std::set<std::string> known = {
        "json-schema.org/draft-03/schema", "json-schema.org/draft-04/schema",
        "json-schema.org/draft-06/schema", "json-schema.org/draft-07/schema",
        "json-schema.org/draft/2019-09/schema", "json-schema.org/draft/2020-12/schema",
        "json-schema.org/schema"};
    if (!known.count(u)) {
      DI_RETURN_IF_ERROR(refuse("$schema", "#/$schema", "custom metaschema '" + uri +
                                "': its vocabularies are unknown (read as draft 2020-12 in lenient mode)"));
    }
  }
  DI_ASSIGN_OR_RETURN(int nt, compile_list({SRef{&root_, "#"}}));
  DI_RETURN_IF_ERROR(budget_);
  return nt;
}

}  // namespace deepinfer::structured::json_internal
