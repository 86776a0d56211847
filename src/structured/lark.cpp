#include "structured/lark.h"

#include <bitset>
#include <deque>
#include <map>
#include <set>

#include "structured/lark_regex.h"
#include "structured/lark_syntax.h"

namespace deepinfer::structured {
namespace {

using lark::Definition;
using lark::Expr;


enum class Case { kLower, kUpper, kMixed };
Case name_case(const std::string& n) {
  bool lower = false, upper = false;
  for (char c : n) {
    lower = lower || (c >= 'a' && c <= 'z');
    upper = upper || (c >= 'A' && c <= 'Z');
  }
  return lower && upper ? Case::kMixed : upper ? Case::kUpper : Case::kLower;
}

bool nullable(const Regex& re, int n) {
  const RegexNode& node = re.nodes[n];
  switch (node.kind) {
    case RegexNode::Kind::kClass: return false;
    case RegexNode::Kind::kConcat:
      for (int k : node.kids) if (!nullable(re, k)) return false;
      return true;
    case RegexNode::Kind::kAlt:
      for (int k : node.kids) if (nullable(re, k)) return true;
      return false;
    case RegexNode::Kind::kRepeat: return node.min == 0 || nullable(re, node.kids[0]);
    default: return true;
  }
}

// The bytes that can continue a match of `spec` after it reached an accepting state, when they
// are the same for every accepting state (true for WS, comments, NEWLINE...); false otherwise.
StatusOr<bool> uniform_continuation(const TerminalSpec& spec, std::bitset<256>* out) {
  DI_ASSIGN_OR_RETURN(Dfa d, Dfa::build(spec, GrammarLimits{}.max_dfa_states_per_terminal));
  bool first = true;
  for (uint32_t q = 1; q < d.num_states(); ++q) {
    if (!d.accepting(q)) continue;
    std::bitset<256> f;
    for (int b = 0; b < 256; ++b) f[b] = d.next(q, static_cast<uint8_t>(b)) != Dfa::kDead;
    if (!first && f != *out) return false;
    *out = f;
    first = false;
  }
  return true;
}

// The code points whose UTF-8 encoding starts with a byte in `ok`.
CodepointSet first_byte_codepoints(const std::bitset<256>& ok) {
  CodepointSet s;
  for (uint32_t b = 0; b < 0x80; ++b) if (ok[b]) s.add(b, b);
  for (uint32_t b = 0xC2; b <= 0xDF; ++b) if (ok[b]) s.add((b & 0x1F) << 6, ((b & 0x1F) << 6) | 0x3F);
  for (uint32_t b = 0xE0; b <= 0xEF; ++b) {
    if (ok[b]) s.add(std::max<uint32_t>((b & 0x0F) << 12, 0x800), ((b & 0x0F) << 12) | 0xFFF);
  }
  for (uint32_t b = 0xF0; b <= 0xF4; ++b) {
    if (ok[b]) s.add(std::max<uint32_t>((b & 0x07) << 18, 0x10000), std::min<uint32_t>(((b & 0x07) << 18) | 0x3FFFF, kMaxCodepoint));
  }
  return s;
}

struct Mod {
  std::string name;          // "" for the user's grammar, "common"
  const std::string* text = nullptr;
  lark::Module ast;
  std::map<std::string, const Definition*> terms, rules;
  std::map<std::string, std::pair<std::string, size_t>> imports;  // local name -> common name
  std::deque<Definition> merged;                                    // %extend results
};

class Compiler {
 public:
  Compiler(const std::string& text, const LarkOptions& opt) : text_(text), opt_(opt) {}

  StatusOr<LarkGrammar> run() {
    user_.text = &text_;
    common_.name = "common";
    common_text_ = lark::common_module_text();
    common_.text = &common_text_;
    DI_ASSIGN_OR_RETURN(user_.ast, lark::parse_syntax(text_));
    auto common_ast = lark::parse_syntax(common_text_);
    if (!common_ast.ok()) return Internal("lark common grammar: " + common_ast.status().message());
    common_.ast = std::move(*common_ast);
    DI_RETURN_IF_ERROR(index(&common_));
    DI_RETURN_IF_ERROR(index(&user_));

    // %ignore: the ignored terminals (lowered in setup_ignore).
    std::vector<std::vector<int>> ignored;
    for (size_t i = 0; i < user_.ast.ignores.size(); ++i) {
      const Expr& e = user_.ast.ignores[i];
      const Expr* single = &e;
      while ((single->kind == Expr::Kind::kAlt || single->kind == Expr::Kind::kSeq) && single->kids.size() == 1) {
        single = &single->kids[0];
      }
      int sym;
      if (single->kind == Expr::Kind::kName) {
        if (name_case(single->text) != Case::kUpper) {
          return error("%ignore needs terminals, not rule '" + single->text + "'", single->pos);
        }
        DI_ASSIGN_OR_RETURN(sym, named_terminal(user_, single->text, single->pos));
      } else {
        DI_ASSIGN_OR_RETURN(sym, anonymous_terminal(e, "%ignore #" + std::to_string(i)));
      }
      ignored.push_back({sym});
      ignored_.push_back({sym, CodepointSet()});
    }
    DI_RETURN_IF_ERROR(setup_ignore(ignored));

    if (name_case(opt_.start) != Case::kLower || !user_.rules.count(opt_.start)) {
      return InvalidArgument("lark: the grammar has no start rule '" + opt_.start +
                             "' (Lark's default start rule is 'start'; LarkOptions::start picks "
                             "another rule)");
    }
    for (const auto& [name, def] : user_.rules) {
      int nt = rule_nt(name, def->pos);
      for (const Expr& alt : def->body.kids) {
        std::vector<int> rhs;
        DI_RETURN_IF_ERROR(lower_seq(alt, &rhs));
        b_.add_production(nt, std::move(rhs));
      }
    }
    for (const auto& [name, pos] : rule_uses_) {
      if (!user_.rules.count(name)) return error("rule '" + name + "' is used but not defined", pos);
    }
    // Lark rejects bad terminals even when unused: check them all.
    for (const auto& [name, def] : user_.terms) {
      Regex re;
      DI_RETURN_IF_ERROR(terminal_regex(user_, name, def->pos, &re).status());
    }
    int root = rule_nt(opt_.start, 0);
    if (ignore_nt_ >= 0) {
      root = b_.seq({ignore_nt_, root}, "start'");
    } else if (!ignored_.empty()) {  // greedy lowering: trailing ignored text before the end
      std::vector<std::vector<int>> alts = {{root}};
      for (int k : seq_nt_) alts.push_back({root, k});
      root = b_.alt(alts, "start'");
    }
    DI_ASSIGN_OR_RETURN(auto g, CompiledGrammar::compile(std::move(b_), root));
    LarkGrammar out;
    out.grammar = std::move(g);
    out.warnings.assign(warnings_.begin(), warnings_.end());
    return out;
  }

 private:
  Status error(const std::string& what, size_t at, const Mod* m = nullptr) const {
    const Mod& mod = m ? *m : user_;
    std::string where = mod.name.empty() ? "" : " in the built-in '" + mod.name + "' module";
    return InvalidArgument("lark: " + what + " at " + lark::position(*mod.text, at) + where);
  }

  Status index(Mod* m) {
    for (const lark::Import& imp : m->ast.imports) {
      if (name_case(imp.name) != Case::kUpper) {
        return error("%import of '" + imp.name + "': the 'common' module only has terminals", imp.pos, m);
      }
      if (!common_.terms.count(imp.name)) {
        return error("%import of unknown terminal 'common." + imp.name + "'", imp.pos, m);
      }
      if (name_case(imp.alias) != Case::kUpper) {
        return error("%import alias '" + imp.alias + "' must be a terminal name (uppercase)", imp.pos, m);
      }
      if (m->terms.count(imp.alias) || (m->imports.count(imp.alias) && m->imports[imp.alias].first != imp.name)) {
        return error("terminal '" + imp.alias + "' is both imported and defined", imp.pos, m);
      }
      m->imports[imp.alias] = {imp.name, imp.pos};
    }
    for (const Definition& d : m->ast.defs) {
      auto& table = d.terminal ? m->terms : m->rules;
      const char* kind = d.terminal ? "terminal" : "rule";
      auto it = table.find(d.name);
      bool exists = it != table.end() || (d.terminal && m->imports.count(d.name));
      if (d.how == Definition::How::kDefine) {
        if (exists) return error(std::string(kind) + " '" + d.name + "' is defined more than once", d.pos, m);
        table[d.name] = &d;
      } else if (!exists) {
        return error(std::string(kind) + " '" + d.name + "' is not defined, so it cannot be " +
                     (d.how == Definition::How::kOverride ? "overridden" : "extended"), d.pos, m);
      } else if (d.how == Definition::How::kOverride) {
        table[d.name] = &d;
        m->imports.erase(d.name);
      } else {
        if (it == table.end()) {
          return error("%extend of imported terminal '" + d.name + "' (extend a local definition)", d.pos, m);
        }
        Definition merged = *it->second;
        for (const Expr& k : d.body.kids) merged.body.kids.push_back(k);
        m->merged.push_back(std::move(merged));
        table[d.name] = &m->merged.back();
      }
    }
    return OkStatus();
  }

  // Resolves a terminal name used in `m` to its module and definition.
  StatusOr<std::pair<Mod*, const Definition*>> resolve_terminal(Mod& m, const std::string& name, size_t pos) {
    auto it = m.terms.find(name);
    if (it != m.terms.end()) return std::make_pair(&m, it->second);
    auto imp = m.imports.find(name);
    if (imp != m.imports.end()) return std::make_pair(&common_, common_.terms.at(imp->second.first));
    std::string hint = common_.terms.count(name) ? " (add '%import common." + name + "')" : "";
    return error("terminal '" + name + "' is used but not defined" + hint, pos, &m);
  }

  // Builds the regex of named terminal `name` (as used in `m`) into `re`.
  StatusOr<int> terminal_regex(Mod& m, const std::string& name, size_t pos, Regex* re) {
    DI_ASSIGN_OR_RETURN(auto found, resolve_terminal(m, name, pos));
    auto [mod, def] = found;
    std::string key = mod->name + "." + name;
    if (in_progress_.count(key)) return error("terminal '" + name + "' is defined in terms of itself", pos, &m);
    in_progress_.insert(key);
    auto node = expr_regex(*mod, def->body, def->name, re);
    in_progress_.erase(key);
    return node;
  }

  StatusOr<int> expr_regex(Mod& m, const Expr& e, const std::string& owner, Regex* re) {
    switch (e.kind) {
      case Expr::Kind::kAlt:
      case Expr::Kind::kSeq: {
        std::vector<int> kids;
        for (const Expr& k : e.kids) {
          DI_ASSIGN_OR_RETURN(int n, expr_regex(m, k, owner, re));
          kids.push_back(n);
        }
        if (kids.size() == 1) return kids[0];
        if (kids.empty()) { RegexNode n; n.kind = RegexNode::Kind::kEmpty; return re->add(n); }
        return e.kind == Expr::Kind::kAlt ? re->add_alt(std::move(kids)) : re->add_concat(std::move(kids));
      }
      case Expr::Kind::kRepeat: {
        DI_ASSIGN_OR_RETURN(int kid, expr_regex(m, e.kids[0], owner, re));
        return re->add_repeat(kid, e.min, e.max, e.unbounded);
      }
      case Expr::Kind::kString: {
        std::vector<int> kids;
        std::vector<uint32_t> cps = decode_utf8(e.text).value();
        for (uint32_t c : cps) {
          CodepointSet s = CodepointSet::single(c);
          if (e.flags == "i") s = py_case_closure(s, false);
          kids.push_back(re->add_class(std::move(s)));
        }
        return kids.size() == 1 ? kids[0] : re->add_concat(std::move(kids));
      }
      case Expr::Kind::kRange: return re->add_class(CodepointSet::range(e.lo, e.hi));
      case Expr::Kind::kRegexp: {
        PyRegexFlags f;
        for (char c : e.flags) {
          if (c == 'i') f.ignore_case = true;
          else if (c == 's') f.dotall = true;
          else if (c == 'x') f.verbose = true;
          else if (c == 'l') {
            return Unimplemented("lark: the regexp flag 'l' (locale) at " + lark::position(*m.text, e.pos));
          }
        }
        std::vector<std::string> notes;
        auto node = parse_python_regex(e.text, f, re, &notes);
        std::string where = "regexp /" + e.text + "/ (terminal '" + owner + "') at " + lark::position(*m.text, e.pos);
        if (!node.ok()) return Status(node.status().code(), "lark: " + where + ": " + node.status().message());
        for (const auto& n : notes) warnings_.insert("lark: " + where + ": " + n);
        return *node;
      }
      case Expr::Kind::kName: {
        if (name_case(e.text) != Case::kUpper) {
          return error("terminal '" + owner + "' refers to rule '" + e.text +
                       "' (terminals may only use terminals, strings and regexps)", e.pos, &m);
        }
        return terminal_regex(m, e.text, e.pos, re);
      }
    }
    return Internal("lark: unknown expression");
  }

  static TerminalSpec spec_of(std::string name, Regex re, int root) {
    re.root = root;
    TerminalSpec spec;
    spec.name = std::move(name);
    TerminalComponent comp;
    comp.regex = std::make_shared<Regex>(std::move(re));
    spec.components.push_back(comp);
    return spec;
  }

  StatusOr<int> named_terminal(Mod& m, const std::string& name, size_t pos) {
    DI_ASSIGN_OR_RETURN(auto found, resolve_terminal(m, name, pos));
    std::string key = "lark:" + found.first->name + "." + found.second->name;
    auto it = term_syms_.find(key);
    if (it != term_syms_.end()) return it->second;
    Regex re;
    DI_ASSIGN_OR_RETURN(int root, terminal_regex(m, name, pos, &re));
    if (nullable(re, root)) {  // only tokens are checked: a part of a terminal may be empty
      return error("terminal '" + name + "' matches the empty string (Lark does not allow "
                   "zero-width terminals)", found.second->pos, found.first);
    }
    int sym = add_spec(spec_of(key, std::move(re), root));
    term_syms_[key] = sym;
    return sym;
  }

  // A string, regexp or range in a rule (or an %ignore expression): its own terminal.
  StatusOr<int> anonymous_terminal(const Expr& e, const std::string& owner) {
    std::string key = e.kind == Expr::Kind::kString && e.flags.empty() ? "lit:" + e.text
                    : e.kind == Expr::Kind::kRegexp ? "lark:/" + e.text + "/" + e.flags
                    : e.kind == Expr::Kind::kString ? "lark:\"" + e.text + "\"" + e.flags
                    : e.kind == Expr::Kind::kRange ? "lark:" + std::to_string(e.lo) + ".." + std::to_string(e.hi)
                    : "lark:" + owner;
    auto it = term_syms_.find(key);
    if (it != term_syms_.end()) return it->second;
    Regex re;
    DI_ASSIGN_OR_RETURN(int root, expr_regex(user_, e, owner, &re));
    if (nullable(re, root)) {
      return error(owner + " matches the empty string (Lark does not allow zero-width terminals)", e.pos);
    }
    int sym = add_spec(spec_of(key, std::move(re), root));
    term_syms_[key] = sym;
    return sym;
  }

  int rule_nt(const std::string& name, size_t pos) {
    rule_uses_.emplace(name, pos);
    auto it = rule_nts_.find(name);
    if (it != rule_nts_.end()) return it->second;
    int nt = b_.add_nonterminal(name);
    rule_nts_[name] = nt;
    return nt;
  }

  // %ignore lowering. Lark matches an ignored terminal greedily, so a piece of ignored text ends
  // only where the next byte cannot continue it. When every accepting state of an ignored
  // terminal I_k has the same continuation bytes F_k, this is exact with one-byte lookahead
  // folded into the next lexeme: SEQ_k (ignored text ending with a piece of I_k) ->
  // I_k | SEQ_j I_k[first byte not in F_j]; a token T -> T | SEQ_k T[first byte not in F_k];
  // start' -> start | start SEQ_k. Otherwise (warning) IGNORE = (I_1 | ...)*, T -> T IGNORE,
  // start' -> IGNORE start, which lets an ignored match stop early.
  Status setup_ignore(const std::vector<std::vector<int>>& ignored) {
    if (ignored.empty()) return OkStatus();
    std::vector<std::string> mixed;
    for (auto& ig : ignored_) {
      std::bitset<256> f;
      DI_ASSIGN_OR_RETURN(bool uniform, uniform_continuation(specs_.at(ig.first), &f));
      if (!uniform) mixed.push_back(specs_.at(ig.first).name);
      ig.second = first_byte_codepoints(~f);
    }
    if (!mixed.empty()) {
      for (const auto& n : mixed) {
        warnings_.insert("lark: %ignore " + n + ": its matches continue differently from different "
                         "accepting states, so ignored text is not cut greedily as in Lark (a "
                         "match may stop early; write one %ignore per kind of ignored text)");
      }
      ignore_nt_ = b_.star(b_.alt(ignored, "ignored"));
      return OkStatus();
    }
    for (size_t k = 0; k < ignored_.size(); ++k) seq_nt_.push_back(b_.add_nonterminal("ignored"));
    for (size_t k = 0; k < ignored_.size(); ++k) {
      b_.add_production(seq_nt_[k], {ignored_[k].first});
      for (size_t j = 0; j < ignored_.size(); ++j) {
        b_.add_production(seq_nt_[k], {seq_nt_[j], restricted(ignored_[k].first, j)});
      }
    }
    return OkStatus();
  }

  // Terminal `sym` whose first byte cannot continue ignored terminal k.
  int restricted(int sym, size_t k) {
    auto key = std::make_pair(sym, k);
    auto it = restricted_.find(key);
    if (it != restricted_.end()) return it->second;
    TerminalSpec spec = specs_.at(sym);
    spec.name += " (not continuing ignored " + specs_.at(ignored_[k].first).name + ")";
    auto re = std::make_shared<Regex>();
    int first = re->add_class(ignored_[k].second);
    int rest = re->add_repeat(re->add_class(CodepointSet::all()), 0, 0, true);
    re->root = re->add_concat({first, rest});
    TerminalComponent comp;
    comp.regex = re;
    spec.components.push_back(comp);
    int r = add_spec(std::move(spec));
    restricted_[key] = r;
    return r;
  }

  int add_spec(TerminalSpec spec) {
    int sym = GrammarBuilder::terminal_symbol(b_.add_terminal(spec));
    specs_.emplace(sym, std::move(spec));
    return sym;
  }

  // A token with the ignored text around it.
  int token(int term_sym) {
    if (ignored_.empty()) return term_sym;
    auto it = wrapped_.find(term_sym);
    if (it != wrapped_.end()) return it->second;
    int nt;
    if (ignore_nt_ >= 0) {
      nt = b_.seq({term_sym, ignore_nt_}, "token");
    } else {
      std::vector<std::vector<int>> alts = {{term_sym}};
      for (size_t k = 0; k < ignored_.size(); ++k) alts.push_back({seq_nt_[k], restricted(term_sym, k)});
      nt = b_.alt(alts, "token");
    }
    wrapped_[term_sym] = nt;
    return nt;
  }

  Status lower_seq(const Expr& e, std::vector<int>* out) {
    switch (e.kind) {
      case Expr::Kind::kSeq:
        for (const Expr& k : e.kids) DI_RETURN_IF_ERROR(lower_seq(k, out));
        return OkStatus();
      case Expr::Kind::kAlt: {
        if (e.kids.size() == 1) return lower_seq(e.kids[0], out);
        std::vector<std::vector<int>> alts;
        for (const Expr& k : e.kids) {
          alts.emplace_back();
          DI_RETURN_IF_ERROR(lower_seq(k, &alts.back()));
        }
        out->push_back(b_.alt(alts, "group"));
        return OkStatus();
      }
      case Expr::Kind::kRepeat: {
        std::vector<int> inner;
        DI_RETURN_IF_ERROR(lower_seq(e.kids[0], &inner));
        int sym = inner.size() == 1 ? inner[0] : b_.seq(inner, "group");
        if (!e.unbounded && e.min == 0 && e.max == 1) out->push_back(b_.optional(sym));
        else if (e.unbounded && e.min == 0) out->push_back(b_.star(sym));
        else if (e.unbounded && e.min == 1) out->push_back(b_.plus(sym));
        else out->push_back(b_.repeat(sym, e.min, e.max, e.unbounded));
        return OkStatus();
      }
      case Expr::Kind::kString:
      case Expr::Kind::kRegexp:
      case Expr::Kind::kRange: {
        DI_ASSIGN_OR_RETURN(int t, anonymous_terminal(e, "the " + std::string(e.kind == Expr::Kind::kString ? "string" : e.kind == Expr::Kind::kRegexp ? "regexp" : "range") + " at " + lark::position(text_, e.pos)));
        out->push_back(token(t));
        return OkStatus();
      }
      case Expr::Kind::kName: {
        Case c = name_case(e.text);
        if (c == Case::kMixed) return error("name '" + e.text + "' mixes cases (rules are lowercase, terminals uppercase)", e.pos);
        if (c == Case::kUpper) {
          DI_ASSIGN_OR_RETURN(int t, named_terminal(user_, e.text, e.pos));
          out->push_back(token(t));
        } else {
          out->push_back(rule_nt(e.text, e.pos));
        }
        return OkStatus();
      }
    }
    return Internal("lark: unknown expression");
  }

  const std::string& text_;
  LarkOptions opt_;
  std::string common_text_;
  Mod user_, common_;
  GrammarBuilder b_;
  std::set<std::string> in_progress_;
  std::set<std::string> warnings_;
  std::map<std::string, int> term_syms_;
  std::map<std::string, int> rule_nts_;
  std::map<std::string, size_t> rule_uses_;
  std::map<int, int> wrapped_;
  std::map<int, TerminalSpec> specs_;                 // every terminal made here, by symbol
  std::vector<std::pair<int, CodepointSet>> ignored_;  // symbol, code points that may follow it
  std::vector<int> seq_nt_;                            // greedy lowering: SEQ_k
  std::map<std::pair<int, size_t>, int> restricted_;
  int ignore_nt_ = -1;                                 // fallback lowering: IGNORE*
};

}  // namespace

StatusOr<LarkGrammar> compile_lark(const std::string& text, const LarkOptions& options) {
  Compiler c(text, options);
  return c.run();
}

}  // namespace deepinfer::structured
