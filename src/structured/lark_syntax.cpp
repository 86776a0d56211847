#include "structured/lark_syntax.h"

#include "structured/codepoint_set.h"
#include "structured/regex.h"

namespace deepinfer::structured::lark {

std::string position(const std::string& text, size_t pos) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') { ++line; col = 1; } else { ++col; }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

// The terminals of Lark's common.lark, written for this front end. ESCAPED_STRING and C_COMMENT
// are the languages Lark's lexer produces from its lazy-regexp definitions (a string ends at the
// first unescaped quote, a comment at the first `*/`), written without lazy quantifiers.
const char* common_module_text() {
  return R"LARK(
DIGIT: "0".."9"
HEXDIGIT: "a".."f" | "A".."F" | DIGIT
INT: DIGIT+
SIGNED_INT: ["+" | "-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e" | "E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+" | "-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+" | "-"] NUMBER
ESCAPED_STRING: "\"" /([^"\\\n]|\\.)*/ "\""
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_" | LETTER) ("_" | LETTER | DIGIT)*
WS_INLINE: (" " | /\t/)+
WS: /[ \t\f\r\n]/+
CR: /\r/
LF: /\n/
NEWLINE: (CR? LF)+
SH_COMMENT: /#[^\n]*/
CPP_COMMENT: /\/\/[^\n]*/
C_COMMENT: /\/\*([^*]|\*+[^*\/])*\*+\//
SQL_COMMENT: /--[^\n]*/
)LARK";
}

namespace {

struct Token {
  enum class Kind { kNewline, kName, kString, kRegexp, kNumber, kPunct, kDirective, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // raw text (names include a leading ! / ? modifier)
  size_t pos = 0;
};

bool name_start(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  StatusOr<Module> run() {
    DI_RETURN_IF_ERROR(tokenize());
    Module m;
    skip_newlines();
    while (peek().kind != Token::Kind::kEnd) {
      const Token& t = peek();
      if (t.kind == Token::Kind::kDirective) {
        DI_RETURN_IF_ERROR(directive(&m));
      } else if (t.kind == Token::Kind::kName) {
        DI_ASSIGN_OR_RETURN(Definition d, definition(Definition::How::kDefine));
        m.defs.push_back(std::move(d));
      } else {
        return error("expected a rule or terminal definition, got '" + t.text + "'", t.pos);
      }
      if (peek().kind != Token::Kind::kNewline && peek().kind != Token::Kind::kEnd) {
        return error("unexpected '" + peek().text + "' (a definition ends at the end of its line; "
                     "continue alternatives on a line starting with '|')", peek().pos);
      }
      skip_newlines();
    }
    return m;
  }

 private:
  Status error(const std::string& what, size_t at) const {
    return InvalidArgument("lark: " + what + " at " + position(s_, at));
  }
  Status refuse(const std::string& what, size_t at) const {
    return Unimplemented("lark: " + what + " at " + position(s_, at));
  }

  // ---- Tokenizer ----
  Status tokenize() {
    size_t i = 0;
    auto push = [&](Token::Kind k, size_t st, size_t end) {
      toks_.push_back({k, s_.substr(st, end - st), st});
    };
    while (i < s_.size()) {
      char c = s_[i];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\f') { ++i; continue; }
      if ((c == '/' && i + 1 < s_.size() && s_[i + 1] == '/') || c == '#') {
        while (i < s_.size() && s_[i] != '\n') ++i;
        continue;
      }
      if (c == '\n') {
        if (toks_.empty() || toks_.back().kind != Token::Kind::kNewline) push(Token::Kind::kNewline, i, i + 1);
        ++i;
        continue;
      }
      size_t st = i;
      if (c == '"') {
        ++i;
        while (i < s_.size() && s_[i] != '"') {
          if (s_[i] == '\n') return error("newline in a string literal (strings are single-line)", st);
          if (s_[i] == '\\' && i + 1 < s_.size() && (s_[i + 1] == '"' || s_[i + 1] == '\\')) ++i;
          ++i;
        }
        if (i >= s_.size()) return error("unterminated string literal", st);
        ++i;
        if (i < s_.size() && s_[i] == 'i') ++i;
        push(Token::Kind::kString, st, i);
        continue;
      }
      if (c == '/') {
        ++i;
        while (i < s_.size() && s_[i] != '/') {
          if (s_[i] == '\\' && i + 1 < s_.size() && (s_[i + 1] == '/' || s_[i + 1] == '\\')) ++i;
          ++i;
        }
        if (i >= s_.size()) return error("unterminated regexp", st);
        ++i;
        while (i < s_.size() && std::string("imslux").find(s_[i]) != std::string::npos) ++i;
        std::string flags = s_.substr(st, i - st);
        flags = flags.substr(flags.rfind('/') + 1);
        if (s_.substr(st, i - st).find('\n') != std::string::npos && flags.find('x') == std::string::npos) {
          return error("newline in a regexp (only allowed with the x flag)", st);
        }
        push(Token::Kind::kRegexp, st, i);
        continue;
      }
      if ((c >= '0' && c <= '9') || (c == '-' && i + 1 < s_.size() && s_[i + 1] >= '0' && s_[i + 1] <= '9')) {
        ++i;
        while (i < s_.size() && s_[i] >= '0' && s_[i] <= '9') ++i;
        push(Token::Kind::kNumber, st, i);
        continue;
      }
      if (c == '%') {
        ++i;
        while (i < s_.size() && name_char(s_[i])) ++i;
        push(Token::Kind::kDirective, st, i);
        continue;
      }
      bool line_start = toks_.empty() || toks_.back().kind == Token::Kind::kNewline;
      if (name_start(c) || (line_start && (c == '!' || c == '?'))) {
        while (i < s_.size() && (s_[i] == '!' || s_[i] == '?') && i - st < 2) ++i;
        if (i >= s_.size() || !name_start(s_[i])) return error("expected a name after the modifier", st);
        while (i < s_.size() && name_char(s_[i])) ++i;
        push(Token::Kind::kName, st, i);
        continue;
      }
      if (s_.compare(i, 2, "..") == 0 || s_.compare(i, 2, "->") == 0) {
        push(Token::Kind::kPunct, i, i + 2);
        i += 2;
        continue;
      }
      if (std::string(":|()[]{},.~*+?").find(c) != std::string::npos) {
        push(Token::Kind::kPunct, i, i + 1);
        ++i;
        continue;
      }
      return error(std::string("unexpected character '") + c + "'", i);
    }
    toks_.push_back({Token::Kind::kEnd, "end of grammar", s_.size()});
    // A newline followed by '|' continues the definition.
    std::vector<Token> out;
    for (size_t k = 0; k < toks_.size(); ++k) {
      if (toks_[k].kind == Token::Kind::kNewline && k + 1 < toks_.size() &&
          toks_[k + 1].kind == Token::Kind::kPunct && toks_[k + 1].text == "|") {
        continue;
      }
      out.push_back(toks_[k]);
    }
    toks_ = std::move(out);
    return OkStatus();
  }

  const Token& peek(size_t ahead = 0) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
  const Token& next() { const Token& t = peek(); if (pos_ < toks_.size() - 1) ++pos_; return t; }
  bool at_punct(const char* p) const { return peek().kind == Token::Kind::kPunct && peek().text == p; }
  void skip_newlines() { while (peek().kind == Token::Kind::kNewline) ++pos_; }
  Status expect(const char* p) {
    if (!at_punct(p)) return error(std::string("expected '") + p + "', got '" + peek().text + "'", peek().pos);
    ++pos_;
    return OkStatus();
  }

  // ---- Literals ----
  // Lark's escape processing: \n \r \t \f \xHH \uHHHH \UHHHHHHHH decoded; \\ -> `backslash`
  // (strings) or `\\` (regexps); \" -> "; any other \c kept as backslash + c.
  StatusOr<std::string> unescape(const std::string& body, bool regexp, size_t at) {
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      char c = body[i];
      if (c != '\\') { out += c; continue; }
      if (i + 1 >= body.size()) return error("literal ends with a backslash", at);
      char e = body[++i];
      auto hex = [&](int n) -> Status {
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
          if (i + 1 >= body.size() || !isxdigit(static_cast<unsigned char>(body[i + 1]))) {
            return error(std::string("truncated \\") + e + " escape", at);
          }
          char h = body[++i];
          v = v * 16 + static_cast<uint32_t>(isdigit(static_cast<unsigned char>(h)) ? h - '0' : (tolower(h) - 'a' + 10));
        }
        if (v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) return error("escape is not a Unicode scalar value", at);
        append_utf8(v, &out);
        return OkStatus();
      };
      switch (e) {
        case '\\': out += regexp ? "\\\\" : "\\"; break;
        case '"': out += '"'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'f': out += '\f'; break;
        case 'x': DI_RETURN_IF_ERROR(hex(2)); break;
        case 'u': DI_RETURN_IF_ERROR(hex(4)); break;
        case 'U': DI_RETURN_IF_ERROR(hex(8)); break;
        default: out += '\\'; out += e; break;
      }
    }
    if (!decode_utf8(out).ok()) return error("literal is not valid UTF-8", at);
    return out;
  }

  StatusOr<Expr> string_expr(const Token& t) {
    return quoted_expr(t, Expr::Kind::kString, '"',
                       "empty string literal (Lark terminals cannot be empty)");
  }

  // A "..."flags or /.../flags token: the unescaped body between the delimiters, then the flags.
  StatusOr<Expr> quoted_expr(const Token& t, Expr::Kind kind, char delim, const char* empty_error) {
    Expr e;
    e.kind = kind;
    e.pos = t.pos;
    const size_t close = t.text.rfind(delim);
    e.flags = t.text.substr(close + 1);
    DI_ASSIGN_OR_RETURN(e.text, unescape(t.text.substr(1, close - 1), kind == Expr::Kind::kRegexp, t.pos));
    if (e.text.empty()) return error(empty_error, t.pos);
    return e;
  }

  // ---- Grammar ----
  Status directive(Module* m) {
    Token d = next();
    if (d.text == "%ignore") {
      DI_ASSIGN_OR_RETURN(Expr e, expansions());
      m->ignores.push_back(std::move(e));
      return OkStatus();
    }
    if (d.text == "%import") return import(m, d.pos);
    if (d.text == "%override" || d.text == "%extend") {
      if (peek().kind != Token::Kind::kName) return error("expected a definition after " + d.text, peek().pos);
      DI_ASSIGN_OR_RETURN(Definition def, definition(d.text == "%override" ? Definition::How::kOverride
                                                                            : Definition::How::kExtend));
      m->defs.push_back(std::move(def));
      return OkStatus();
    }
    if (d.text == "%declare") {
      return refuse("%declare (terminals produced outside the grammar, e.g. by a postlexer) is not "
                    "supported: a masking grammar must define every terminal", d.pos);
    }
    return error("unknown directive '" + d.text + "'", d.pos);
  }

  Status import(Module* m, size_t at) {
    if (at_punct(".")) return refuse("relative %import (only '%import common.NAME' is supported)", at);
    std::vector<std::string> path;
    while (true) {
      if (peek().kind != Token::Kind::kName) return error("expected a module path after %import", peek().pos);
      path.push_back(next().text);
      if (!at_punct(".")) break;
      ++pos_;
    }
    std::vector<Import> list;
    if (at_punct("(")) {
      ++pos_;
      while (true) {
        if (peek().kind != Token::Kind::kName) return error("expected a name in the %import list", peek().pos);
        Token n = next();
        list.push_back({"", n.text, n.text, n.pos});
        if (at_punct(",")) { ++pos_; continue; }
        DI_RETURN_IF_ERROR(expect(")"));
        break;
      }
    } else {
      if (path.size() < 2) return error("%import needs a module and a name (e.g. %import common.WS)", at);
      std::string name = path.back();
      path.pop_back();
      std::string alias = name;
      if (at_punct("->")) {
        ++pos_;
        if (peek().kind != Token::Kind::kName) return error("expected a name after '->'", peek().pos);
        alias = next().text;
      }
      list.push_back({"", name, alias, at});
    }
    std::string module;
    for (const auto& p : path) module += (module.empty() ? "" : ".") + p;
    if (module != "common") {
      return refuse("%import from module '" + module + "' (only the built-in 'common' module is "
                    "available)", at);
    }
    for (auto& imp : list) { imp.module = module; m->imports.push_back(imp); }
    return OkStatus();
  }

  StatusOr<Definition> definition(Definition::How how) {
    Token n = next();
    Definition d;
    d.how = how;
    d.pos = n.pos;
    std::string name = n.text;
    while (!name.empty() && (name[0] == '!' || name[0] == '?')) name.erase(0, 1);
    bool lower = true, upper = true;
    for (char c : name) {
      if (c >= 'a' && c <= 'z') upper = false;
      if (c >= 'A' && c <= 'Z') lower = false;
    }
    if (!lower && !upper) {
      return error("name '" + name + "' mixes cases (rules are lowercase, terminals uppercase)", n.pos);
    }
    d.terminal = upper && !lower;
    if (lower && upper) return error("name '" + name + "' has no letters", n.pos);
    if (d.terminal && name.size() != n.text.size()) {
      return error("modifiers '!' and '?' apply to rules, not to terminal '" + name + "'", n.pos);
    }
    d.name = name;
    if (at_punct("{")) return refuse("template definition '" + name + "{...}' (templates are not supported)", n.pos);
    if (at_punct(".")) {  // priority: accepted, no effect on the language
      ++pos_;
      if (peek().kind != Token::Kind::kNumber) return error("expected a number after '.' (priority)", peek().pos);
      ++pos_;
    }
    DI_RETURN_IF_ERROR(expect(":"));
    DI_ASSIGN_OR_RETURN(d.body, expansions());
    return d;
  }

  StatusOr<Expr> expansions() {
    Expr alt;
    alt.kind = Expr::Kind::kAlt;
    alt.pos = peek().pos;
    while (true) {
      Expr seq;
      seq.kind = Expr::Kind::kSeq;
      seq.pos = peek().pos;
      while (true) {
        const Token& t = peek();
        if (t.kind == Token::Kind::kNewline || t.kind == Token::Kind::kEnd) break;
        if (t.kind == Token::Kind::kPunct && (t.text == "|" || t.text == ")" || t.text == "]" || t.text == "->")) break;
        DI_ASSIGN_OR_RETURN(Expr e, expr());
        seq.kids.push_back(std::move(e));
      }
      if (at_punct("->")) {  // alias: only names the tree node
        ++pos_;
        if (peek().kind != Token::Kind::kName) return error("expected a rule name after '->'", peek().pos);
        ++pos_;
      }
      alt.kids.push_back(std::move(seq));
      if (!at_punct("|")) break;
      ++pos_;
    }
    return alt;
  }

  StatusOr<Expr> expr() {
    DI_ASSIGN_OR_RETURN(Expr a, atom());
    Expr r;
    r.kind = Expr::Kind::kRepeat;
    r.pos = peek().pos;
    if (at_punct("*")) { ++pos_; r.unbounded = true; }
    else if (at_punct("+")) { ++pos_; r.min = 1; r.unbounded = true; }
    else if (at_punct("?")) { ++pos_; r.max = 1; }
    else if (at_punct("~")) {
      ++pos_;
      auto number = [&](uint32_t* v) -> Status {
        if (peek().kind != Token::Kind::kNumber || peek().text[0] == '-') {
          return error("expected a count after '~'", peek().pos);
        }
        if (peek().text.size() > 5 || std::stoul(peek().text) > 10000) {
          return refuse("repetition count above 10000", peek().pos);
        }
        *v = static_cast<uint32_t>(std::stoul(next().text));
        return OkStatus();
      };
      DI_RETURN_IF_ERROR(number(&r.min));
      r.max = r.min;
      if (at_punct("..")) { ++pos_; DI_RETURN_IF_ERROR(number(&r.max)); }
      if (r.max < r.min) return error("repetition '~ n..m' with m < n", r.pos);
    } else {
      return a;
    }
    r.kids.push_back(std::move(a));
    return r;
  }

  StatusOr<Expr> atom() {
    Token t = next();
    if (t.kind == Token::Kind::kPunct && (t.text == "(" || t.text == "[")) {
      DI_ASSIGN_OR_RETURN(Expr inner, expansions());
      DI_RETURN_IF_ERROR(expect(t.text == "(" ? ")" : "]"));
      if (t.text == "(") return inner;
      Expr opt;
      opt.kind = Expr::Kind::kRepeat;
      opt.max = 1;
      opt.pos = t.pos;
      opt.kids.push_back(std::move(inner));
      return opt;
    }
    if (t.kind == Token::Kind::kString) {
      DI_ASSIGN_OR_RETURN(Expr e, string_expr(t));
      if (!at_punct("..")) return e;
      ++pos_;
      if (peek().kind != Token::Kind::kString) return error("expected a string after '..'", peek().pos);
      DI_ASSIGN_OR_RETURN(Expr hi, string_expr(next()));
      if (!e.flags.empty() || !hi.flags.empty()) return refuse("the 'i' flag on a range", t.pos);
      auto a = decode_utf8(e.text), b = decode_utf8(hi.text);
      if (a->size() != 1 || b->size() != 1) return error("range ends must be single characters", t.pos);
      if ((*b)[0] < (*a)[0]) return error("range is reversed", t.pos);
      Expr r;
      r.kind = Expr::Kind::kRange;
      r.lo = (*a)[0];
      r.hi = (*b)[0];
      r.pos = t.pos;
      return r;
    }
    if (t.kind == Token::Kind::kRegexp) return quoted_expr(t, Expr::Kind::kRegexp, '/', "empty regexp");
    if (t.kind == Token::Kind::kName) {
      if (at_punct("{")) return refuse("template usage '" + t.text + "{...}' (templates are not supported)", t.pos);
      Expr e;
      e.kind = Expr::Kind::kName;
      e.text = t.text;
      e.pos = t.pos;
      return e;
    }
    if (t.kind == Token::Kind::kDirective) return error("directive '" + t.text + "' must start a line", t.pos);
    return error("unexpected '" + t.text + "' in an expansion", t.pos);
  }

  const std::string& s_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<Module> parse_syntax(const std::string& text) {
  Parser p(text);
  return p.run();
}

}  // namespace deepinfer::structured::lark
