#include "structured/lark_regex.h"

#include <algorithm>

namespace deepinfer::structured {

namespace {

CodepointSet from_table(const uint32_t (*t)[2], size_t n) {
  CodepointSet s;
  for (size_t i = 0; i < n; ++i) s.add(t[i][0], t[i][1]);
  return s;
}

const std::vector<std::vector<uint32_t>>& case_classes() {
  static const std::vector<std::vector<uint32_t>> classes = [] {
    std::vector<std::vector<uint32_t>> out(1);
    for (size_t i = 0; i < lark_tables::kPyCaseClassesSize; ++i) {
      uint32_t c = lark_tables::kPyCaseClasses[i];
      if (c == 0) { out.emplace_back(); } else { out.back().push_back(c); }
    }
    out.pop_back();
    return out;
  }();
  return classes;
}

bool is_octal(uint32_t c) { return c >= '0' && c <= '7'; }
bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
bool is_ascii_letter(uint32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }
int hex_value(uint32_t c) {
  if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return static_cast<int>((c | 0x20) - 'a' + 10);
  return -1;
}

class PyParser {
 public:
  PyParser(std::vector<uint32_t> p, Regex* re, std::vector<std::string>* warnings)
      : p_(std::move(p)), re_(re), warnings_(warnings) {}

  StatusOr<int> parse(PyRegexFlags flags) {
    // Leading global flags: (?aisux) at the very start.
    while (pos_ + 2 < p_.size() && p_[pos_] == '(' && p_[pos_ + 1] == '?') {
      size_t j = pos_ + 2;
      while (j < p_.size() && p_[j] < 0x80 && std::string_view("aiLmsux").find(static_cast<char>(p_[j])) != std::string_view::npos) ++j;
      if (j == pos_ + 2 || j >= p_.size() || p_[j] != ')') break;  // not (?flags): parsed below
      pos_ += 2;
      DI_RETURN_IF_ERROR(parse_flag_letters(&flags));
      ++pos_;
    }
    DI_ASSIGN_OR_RETURN(int root, parse_alt(flags));
    if (!eof()) return error(p_[pos_] == ')' ? "unbalanced parenthesis" : "unexpected character");
    if (depth_ != 0) return error("missing ), unterminated subpattern");
    return root;
  }

 private:
  Status error(const std::string& what) const { return error_at(what, pos_); }
  Status error_at(const std::string& what, size_t at) const {
    return InvalidArgument("python regex: " + what + " at position " + std::to_string(at));
  }
  Status refuse(const std::string& what, size_t at) const {
    return Unimplemented("python regex: " + what + " at position " + std::to_string(at) +
                         " is not supported (it cannot be compiled to a finite automaton)");
  }
  bool eof() const { return pos_ >= p_.size(); }

  void skip_verbose(const PyRegexFlags& f) {
    if (!f.verbose) return;
    while (!eof()) {
      uint32_t c = p_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') { ++pos_; continue; }
      if (c == '#') { while (!eof() && p_[pos_] != '\n') ++pos_; continue; }
      break;
    }
  }

  Status parse_flag_letters(PyRegexFlags* f) {
    size_t at = pos_;
    bool off = false, saw_a = false, saw_u = false;
    while (!eof() && (is_ascii_letter(p_[pos_]) || p_[pos_] == '-')) {
      uint32_t c = p_[pos_];
      if (c == '-') {
        if (off) return error("bad inline flags");
        off = true; ++pos_; continue;
      }
      bool on = !off;
      switch (c) {
        case 'i': f->ignore_case = on; break;
        case 's': f->dotall = on; break;
        case 'x': f->verbose = on; break;
        case 'm': break;  // only changes ^ and $, which are refused anyway
        case 'a': if (off) return error("bad inline flags: 'a' cannot be turned off"); f->ascii = true; saw_a = true; break;
        case 'u': if (off) return error("bad inline flags: 'u' cannot be turned off"); saw_u = true; break;
        case 'L': return refuse("the locale flag L", pos_);
        default: return error(std::string("unknown flag '") + static_cast<char>(c) + "'");
      }
      ++pos_;
    }
    if (saw_a && saw_u) return error_at("bad inline flags: flags 'a' and 'u' are incompatible", at);
    return OkStatus();
  }

  StatusOr<int> parse_alt(PyRegexFlags f) {
    std::vector<int> alts;
    DI_ASSIGN_OR_RETURN(int first, parse_seq(f));
    alts.push_back(first);
    while (!eof() && p_[pos_] == '|') {
      ++pos_;
      DI_ASSIGN_OR_RETURN(int next, parse_seq(f));
      alts.push_back(next);
    }
    return alts.size() == 1 ? alts[0] : re_->add_alt(std::move(alts));
  }

  // Parses {m}, {m,}, {,n}, {m,n} at pos_ (on '{'). Returns false (pos_ unchanged) when the text
  // is no quantifier, which Python then reads as a literal '{'.
  bool parse_braces(uint32_t* mn, uint32_t* mx, bool* unbounded, bool* too_big) {
    size_t save = pos_;
    ++pos_;
    auto digits = [&](uint64_t* v) {
      size_t st = pos_;
      *v = 0;
      while (!eof() && is_digit(p_[pos_])) { *v = std::min<uint64_t>(*v * 10 + (p_[pos_] - '0'), 1u << 31); ++pos_; }
      return pos_ > st;
    };
    uint64_t lo = 0, hi = 0;
    bool has_lo = digits(&lo), has_hi = false;
    if (!eof() && p_[pos_] == ',') {
      ++pos_;
      has_hi = digits(&hi);
      *unbounded = !has_hi;
    } else {
      if (!has_lo) { pos_ = save; return false; }
      hi = lo;
      has_hi = true;
      *unbounded = false;
    }
    if (eof() || p_[pos_] != '}') { pos_ = save; return false; }
    ++pos_;
    *too_big = lo > 10000 || (has_hi && hi > 10000);
    *mn = static_cast<uint32_t>(std::min<uint64_t>(lo, 10001));
    *mx = static_cast<uint32_t>(std::min<uint64_t>(hi, 10001));
    return true;
  }

  StatusOr<int> parse_seq(PyRegexFlags f) {
    std::vector<int> items;
    bool last_is_repeat = false;
    while (true) {
      skip_verbose(f);
      if (eof() || p_[pos_] == '|' || p_[pos_] == ')') break;
      size_t at = pos_;
      uint32_t c = p_[pos_];
      uint32_t mn = 0, mx = 0;
      bool unbounded = false, quant = false, too_big = false;
      if (c == '*') { ++pos_; quant = true; unbounded = true; }
      else if (c == '+') { ++pos_; quant = true; mn = 1; unbounded = true; }
      else if (c == '?') { ++pos_; quant = true; mx = 1; }
      else if (c == '{' && parse_braces(&mn, &mx, &unbounded, &too_big)) { quant = true; }
      if (quant) {
        if (items.empty()) return error_at("nothing to repeat", at);
        if (last_is_repeat) return error_at("multiple repeat", at);
        if (too_big) return refuse("a repetition count above 10000", at);
        if (!unbounded && mx < mn) return error_at("min repeat greater than max repeat", at);
        if (!eof() && p_[pos_] == '?') {
          ++pos_;
          if (warnings_) {
            warnings_->push_back("lazy quantifier at position " + std::to_string(at) +
                                 " treated as greedy: a terminal denotes the regular language of "
                                 "its regexp (Python's shortest-match order is not modelled)");
          }
        } else if (!eof() && p_[pos_] == '+') {
          return refuse("a possessive quantifier", pos_);
        }
        items.back() = re_->add_repeat(items.back(), mn, mx, unbounded);
        last_is_repeat = true;
        continue;
      }
      last_is_repeat = false;
      DI_ASSIGN_OR_RETURN(int atom, parse_atom(f));
      if (atom >= 0) items.push_back(atom);
    }
    if (items.empty()) { RegexNode n; n.kind = RegexNode::Kind::kEmpty; return re_->add(n); }
    return items.size() == 1 ? items[0] : re_->add_concat(std::move(items));
  }

  int literal(uint32_t c, const PyRegexFlags& f) {
    CodepointSet s = CodepointSet::single(c);
    if (f.ignore_case) s = py_case_closure(s, f.ascii);
    return re_->add_class(std::move(s));
  }

  // Returns -1 for things that produce no node ((?#...) comments).
  StatusOr<int> parse_atom(PyRegexFlags f) {
    size_t at = pos_;
    uint32_t c = p_[pos_++];
    switch (c) {
      case '.': {
        CodepointSet s = f.dotall ? CodepointSet::all() : CodepointSet::single('\n').complement();
        return re_->add_class(std::move(s));
      }
      case '^': case '$':
        return refuse(std::string("the anchor '") + static_cast<char>(c) + "'", at);
      case '[': return parse_class(f, at);
      case '(': return parse_group(f, at);
      case '\\': {
        CodepointSet set;
        uint32_t cp = 0;
        bool is_set = false;
        DI_RETURN_IF_ERROR(parse_escape(false, f, at, &cp, &set, &is_set));
        if (is_set) return re_->add_class(std::move(set));
        return literal(cp, f);
      }
      default: return literal(c, f);
    }
  }

  StatusOr<int> parse_group(PyRegexFlags f, size_t at) {
    if (!eof() && p_[pos_] == '?') {
      ++pos_;
      if (eof()) return error_at("unexpected end of pattern", at);
      uint32_t k = p_[pos_];
      if (k == ':') { ++pos_; }
      else if (k == 'P') {
        ++pos_;
        if (!eof() && p_[pos_] == '<') {
          ++pos_;
          size_t st = pos_;
          while (!eof() && p_[pos_] != '>') ++pos_;
          if (eof() || pos_ == st) return error_at("missing group name", at);
          ++pos_;
        } else if (!eof() && p_[pos_] == '=') {
          return refuse("a backreference (?P=name)", at);
        } else {
          return error_at("unknown extension ?P", at);
        }
      } else if (k == '#') {
        while (!eof() && p_[pos_] != ')') ++pos_;
        if (eof()) return error_at("missing ), unterminated comment", at);
        ++pos_;
        return -1;
      } else if (k == '=' || k == '!') {
        return refuse("lookahead (?" + std::string(1, static_cast<char>(k)) + "...)", at);
      } else if (k == '<') {
        if (pos_ + 1 < p_.size() && (p_[pos_ + 1] == '=' || p_[pos_ + 1] == '!')) {
          return refuse("lookbehind (?<" + std::string(1, static_cast<char>(p_[pos_ + 1])) + "...)", at);
        }
        return error_at("unknown extension ?<", at);
      } else if (k == '(') {
        return refuse("a conditional group (?(...)...)", at);
      } else if (k == '>') {
        return refuse("an atomic group (?>...)", at);
      } else if (is_ascii_letter(k) || k == '-') {
        DI_RETURN_IF_ERROR(parse_flag_letters(&f));
        if (!eof() && p_[pos_] == ')') {
          return error_at("global flags not at the start of the expression", at);
        }
        if (eof() || p_[pos_] != ':') return error_at("missing : after inline flags", at);
        ++pos_;
      } else {
        return error_at("unknown extension ?" + std::string(1, static_cast<char>(k)), at);
      }
    }
    ++depth_;
    DI_ASSIGN_OR_RETURN(int inner, parse_alt(f));
    if (eof() || p_[pos_] != ')') return error_at("missing ), unterminated subpattern", at);
    ++pos_;
    --depth_;
    return inner;
  }

  // After a backslash at `at` (pos_ is past it). Sets either *cp or *set (is_set).
  Status parse_escape(bool in_class, const PyRegexFlags& f, size_t at, uint32_t* cp,
                      CodepointSet* set, bool* is_set) {
    if (eof()) return error_at("bad escape (end of pattern)", at);
    uint32_t e = p_[pos_++];
    *is_set = false;
    auto hex = [&](int n) -> Status {
      uint32_t v = 0;
      for (int i = 0; i < n; ++i) {
        if (eof() || hex_value(p_[pos_]) < 0) return error_at("incomplete escape", at);
        v = v * 16 + static_cast<uint32_t>(hex_value(p_[pos_++]));
      }
      if (v > kMaxCodepoint) return error_at("bad escape (code point above U+10FFFF)", at);
      *cp = v;
      return OkStatus();
    };
    switch (e) {
      case 'd': case 'D': case 'w': case 'W': case 's': case 'S': {
        CodepointSet s = (e | 0x20) == 'd' ? py_digit(f.ascii) : (e | 0x20) == 'w' ? py_word(f.ascii) : py_space(f.ascii);
        if (e < 'a') s = s.complement();
        *set = std::move(s);
        *is_set = true;
        return OkStatus();
      }
      case 'a': *cp = 7; return OkStatus();
      case 'b':
        if (in_class) { *cp = 8; return OkStatus(); }
        return refuse("the word boundary \\b", at);
      case 'f': *cp = 12; return OkStatus();
      case 'n': *cp = 10; return OkStatus();
      case 'r': *cp = 13; return OkStatus();
      case 't': *cp = 9; return OkStatus();
      case 'v': *cp = 11; return OkStatus();
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': return hex(8);
      case 'N': return refuse("a named character \\N{...}", at);
      case 'A': case 'Z': case 'B':
        if (in_class) return error_at(std::string("bad escape \\") + static_cast<char>(e), at);
        return refuse(std::string("the anchor \\") + static_cast<char>(e), at);
      default: break;
    }
    if (e == '0' || (in_class && is_octal(e))) {
      uint32_t v = e - '0';
      for (int i = 0; i < 2 && !eof() && is_octal(p_[pos_]); ++i) v = v * 8 + (p_[pos_++] - '0');
      if (v > 0377) return error_at("octal escape value outside of range 0-0o377", at);
      *cp = v;
      return OkStatus();
    }
    if (is_digit(e)) {
      if (!in_class && is_octal(e) && pos_ + 1 < p_.size() && is_octal(p_[pos_]) &&
          is_octal(p_[pos_ + 1])) {
        uint32_t v = (e - '0') * 64 + (p_[pos_] - '0') * 8 + (p_[pos_ + 1] - '0');
        pos_ += 2;
        if (v > 0377) return error_at("octal escape value outside of range 0-0o377", at);
        *cp = v;
        return OkStatus();
      }
      if (in_class) return error_at(std::string("bad escape \\") + static_cast<char>(e), at);
      return refuse("a backreference \\" + std::string(1, static_cast<char>(e)), at);
    }
    if (e < 0x80 && is_ascii_letter(e)) {
      return error_at(std::string("bad escape \\") + static_cast<char>(e), at);
    }
    *cp = e;
    return OkStatus();
  }

  StatusOr<int> parse_class(const PyRegexFlags& f, size_t at) {
    bool negate = false;
    if (!eof() && p_[pos_] == '^') { negate = true; ++pos_; }
    CodepointSet set;
    bool first = true;
    while (true) {
      if (eof()) return error_at("unterminated character set", at);
      if (p_[pos_] == ']' && !first) { ++pos_; break; }
      first = false;
      size_t item_at = pos_;
      uint32_t lo = 0;
      bool lo_set = false;
      CodepointSet cls;
      if (p_[pos_] == '\\') {
        ++pos_;
        DI_RETURN_IF_ERROR(parse_escape(true, f, item_at, &lo, &cls, &lo_set));
      } else {
        lo = p_[pos_++];
      }
      if (pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        size_t dash = pos_;
        ++pos_;
        uint32_t hi = 0;
        bool hi_set = false;
        CodepointSet hcls;
        if (p_[pos_] == '\\') {
          size_t e_at = pos_++;
          DI_RETURN_IF_ERROR(parse_escape(true, f, e_at, &hi, &hcls, &hi_set));
        } else {
          hi = p_[pos_++];
        }
        if (lo_set || hi_set) return error_at("bad character range", dash);
        if (hi < lo) return error_at("bad character range (reversed)", dash);
        set.add(lo, hi);
      } else if (lo_set) {
        set.add(cls);
      } else {
        set.add(lo, lo);
      }
    }
    if (f.ignore_case) set = py_case_closure(set, f.ascii);
    if (negate) set = set.complement();
    return re_->add_class(std::move(set));
  }

  std::vector<uint32_t> p_;
  size_t pos_ = 0;
  int depth_ = 0;
  Regex* re_;
  std::vector<std::string>* warnings_;
};

}  // namespace

CodepointSet py_digit(bool ascii) {
  if (ascii) return CodepointSet::range('0', '9');
  static const CodepointSet s = from_table(lark_tables::kPyDigit, lark_tables::kPyDigitSize);
  return s;
}

CodepointSet py_word(bool ascii) {
  if (ascii) {
    CodepointSet s = CodepointSet::range('a', 'z');
    s.add('A', 'Z'); s.add('0', '9'); s.add('_', '_');
    return s;
  }
  static const CodepointSet s = from_table(lark_tables::kPyWord, lark_tables::kPyWordSize);
  return s;
}

CodepointSet py_space(bool ascii) {
  if (ascii) { CodepointSet s = CodepointSet::range('\t', '\r'); s.add(' ', ' '); return s; }
  static const CodepointSet s = from_table(lark_tables::kPySpace, lark_tables::kPySpaceSize);
  return s;
}

CodepointSet py_case_closure(const CodepointSet& set, bool ascii) {
  CodepointSet out = set;
  if (ascii) {
    CodepointSet lower = set.intersect(CodepointSet::range('a', 'z'));
    CodepointSet upper = set.intersect(CodepointSet::range('A', 'Z'));
    for (auto [lo, hi] : lower.ranges()) out.add(lo - 32, hi - 32);
    for (auto [lo, hi] : upper.ranges()) out.add(lo + 32, hi + 32);
    return out;
  }
  for (const auto& cls : case_classes()) {
    bool any = false;
    for (uint32_t c : cls) any = any || set.contains(c);
    if (any) for (uint32_t c : cls) out.add(c, c);
  }
  return out;
}

StatusOr<int> parse_python_regex(std::string_view pattern, PyRegexFlags flags, Regex* re,
                                 std::vector<std::string>* warnings) {
  auto cps = decode_utf8(pattern);
  if (!cps.ok()) return InvalidArgument("python regex: " + cps.status().message());
  PyParser p(std::move(*cps), re, warnings);
  return p.parse(flags);
}

}  // namespace deepinfer::structured
