#include "structured/gbnf.h"

#include <map>

#include "structured/regex.h"

namespace deepinfer::structured {
namespace {

class GbnfParser {
 public:
  GbnfParser(const std::string& text) : s_(text) {}

  StatusOr<int> parse() {
    skip_space(true);
    while (pos_ < s_.size()) {
      size_t at = pos_;
      std::string name = parse_name();
      if (name.empty()) return error("expected a rule name", at);
      skip_space(false);
      if (s_.compare(pos_, 3, "::=") != 0) return error("expected '::=' after rule name '" + name + "'", pos_);
      pos_ += 3;
      skip_space(true);
      int nt = rule(name);
      defined_[name] = true;
      DI_ASSIGN_OR_RETURN(std::vector<std::vector<int>> alts, parse_alternates(false));
      for (auto& a : alts) b_.add_production(nt, a);
      skip_space(true);
    }
    for (const auto& [name, def] : defined_) {
      if (!def) return InvalidArgument("gbnf: rule '" + name + "' is used but not defined");
    }
    if (!rules_.count("root")) return InvalidArgument("gbnf: the grammar has no 'root' rule");
    return rules_["root"];
  }

  GrammarBuilder& builder() { return b_; }

 private:
  Status error(const std::string& what, size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) { if (s_[i] == '\n') { ++line; col = 1; } else { ++col; } }
    return InvalidArgument("gbnf: " + what + " at line " + std::to_string(line) + ", column " + std::to_string(col));
  }

  int rule(const std::string& name) {
    auto it = rules_.find(name);
    if (it != rules_.end()) return it->second;
    int nt = b_.add_nonterminal(name);
    rules_[name] = nt;
    defined_.emplace(name, false);
    return nt;
  }

  void skip_space(bool newlines) {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '#') { while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_; continue; }
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) { ++pos_; continue; }
      break;
    }
  }

  std::string parse_name() {
    size_t st = pos_;
    while (pos_ < s_.size() && (isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-' || s_[pos_] == '_')) ++pos_;
    return s_.substr(st, pos_ - st);
  }

  // Decodes one (possibly escaped) character; UTF-8 sequences give their code point.
  StatusOr<uint32_t> parse_char() {
    size_t at = pos_;
    if (pos_ >= s_.size()) return error("unexpected end of grammar", at);
    unsigned char c = s_[pos_];
    if (c == '\\') {
      ++pos_;
      if (pos_ >= s_.size()) return error("trailing backslash", at);
      char e = s_[pos_++];
      auto hex = [&](int n) -> StatusOr<uint32_t> {
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          if (pos_ >= s_.size() || !isxdigit(static_cast<unsigned char>(s_[pos_]))) return error("invalid hex escape", at);
          char h = s_[pos_++];
          v = v * 16 + (isdigit(static_cast<unsigned char>(h)) ? h - '0' : (tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case 'n': return 10u;
        case 'r': return 13u;
        case 't': return 9u;
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default: return static_cast<uint32_t>(static_cast<unsigned char>(e));
      }
    }
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    auto cps = decode_utf8(std::string_view(s_).substr(pos_, n));
    if (!cps.ok() || cps->size() != 1) return error("invalid UTF-8", at);
    pos_ += n;
    return (*cps)[0];
  }

  StatusOr<std::vector<std::vector<int>>> parse_alternates(bool nested) {
    std::vector<std::vector<int>> alts;
    DI_ASSIGN_OR_RETURN(std::vector<int> first, parse_sequence(nested));
    alts.push_back(std::move(first));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      skip_space(true);
      DI_ASSIGN_OR_RETURN(std::vector<int> next, parse_sequence(nested));
      alts.push_back(std::move(next));
    }
    return alts;
  }

  int class_terminal(const CodepointSet& set, const std::string& key) {
    TerminalSpec spec;
    spec.name = "gbnf-class:" + key;
    auto re = std::make_shared<Regex>();
    re->root = re->add_class(set);
    spec.components.push_back({re, TerminalComponent::Mode::kFull, false, false});
    return GrammarBuilder::terminal_symbol(b_.add_terminal(std::move(spec)));
  }

  StatusOr<std::vector<int>> parse_sequence(bool nested) {
    std::vector<int> seq;
    while (pos_ < s_.size()) {
      size_t at = pos_;
      char c = s_[pos_];
      int sym;
      if (c == '"') {
        ++pos_;
        std::string lit;
        while (pos_ < s_.size() && s_[pos_] != '"') {
          DI_ASSIGN_OR_RETURN(uint32_t cp, parse_char());
          append_utf8(cp, &lit);
        }
        if (pos_ >= s_.size()) return error("unterminated string literal", at);
        ++pos_;
        if (lit.empty()) { skip_space(nested); continue; }
        sym = GrammarBuilder::terminal_symbol(b_.add_literal(lit));
      } else if (c == '[') {
        ++pos_;
        bool negate = false;
        if (pos_ < s_.size() && s_[pos_] == '^') { negate = true; ++pos_; }
        CodepointSet set;
        while (pos_ < s_.size() && s_[pos_] != ']') {
          DI_ASSIGN_OR_RETURN(uint32_t lo, parse_char());
          uint32_t hi = lo;
          if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
            ++pos_;
            DI_ASSIGN_OR_RETURN(hi, parse_char());
          }
          if (hi < lo) return error("character range out of order", at);
          set.add(lo, hi);
        }
        if (pos_ >= s_.size()) return error("unterminated character class", at);
        ++pos_;
        if (negate) set = set.complement();
        sym = class_terminal(set, s_.substr(at, pos_ - at));
      } else if (c == '.') {
        ++pos_;
        sym = class_terminal(CodepointSet::all(), ".");
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        DI_ASSIGN_OR_RETURN(auto alts, parse_alternates(true));
        if (pos_ >= s_.size() || s_[pos_] != ')') return error("expected ')'", pos_);
        ++pos_;
        sym = b_.alt(alts, "group");
      } else if (c == '<' || c == '!') {
        return Unimplemented(std::string("gbnf: token references (") + c + "...) are not supported")
            .with_context(error("", at).message());
      } else if (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') {
        std::string name = parse_name();
        size_t save = pos_;
        skip_space(true);
        if (s_.compare(pos_, 3, "::=") == 0) { pos_ = at; break; }  // next rule starts
        pos_ = save;
        sym = rule(name);
      } else {
        break;
      }
      // Postfix operators.
      while (pos_ < s_.size()) {
        char op = s_[pos_];
        if (op == '*') { ++pos_; sym = b_.star(sym); }
        else if (op == '+') { ++pos_; sym = b_.plus(sym); }
        else if (op == '?') { ++pos_; sym = b_.optional(sym); }
        else if (op == '{') {
          size_t q = pos_++;
          auto num = [&](uint32_t* v) {
            size_t st = pos_;
            *v = 0;
            while (pos_ < s_.size() && isdigit(static_cast<unsigned char>(s_[pos_]))) *v = *v * 10 + (s_[pos_++] - '0');
            return pos_ > st;
          };
          skip_space(false);
          uint32_t mn = 0, mx = 0;
          bool unbounded = false;
          if (!num(&mn)) return error("expected a repetition count", q);
          skip_space(false);
          if (pos_ < s_.size() && s_[pos_] == ',') {
            ++pos_;
            skip_space(false);
            if (!num(&mx)) unbounded = true;
          } else {
            mx = mn;
          }
          skip_space(false);
          if (pos_ >= s_.size() || s_[pos_] != '}') return error("expected '}'", q);
          ++pos_;
          if (!unbounded && mx < mn) return error("repetition {m,n} with n < m", q);
          if (mx > 10000 || mn > 10000) return error("repetition count above 10000", q);
          sym = b_.repeat(sym, mn, mx, unbounded);
        } else {
          break;
        }
      }
      seq.push_back(sym);
      skip_space(nested);
    }
    return seq;
  }

  const std::string& s_;
  size_t pos_ = 0;
  GrammarBuilder b_;
  std::map<std::string, int> rules_;
  std::map<std::string, bool> defined_;
};

}  // namespace

StatusOr<std::shared_ptr<CompiledGrammar>> compile_gbnf(const std::string& text) {
  GbnfParser p(text);
  DI_ASSIGN_OR_RETURN(int root, p.parse());
  return CompiledGrammar::compile(std::move(p.builder()), root);
}

}  // namespace deepinfer::structured
