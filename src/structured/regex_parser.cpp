#include "structured/regex.h"

#include <string>

namespace deepinfer::structured {

StatusOr<std::vector<uint32_t>> decode_utf8(std::string_view s) {
  std::vector<uint32_t> out;
  size_t i = 0;
  while (i < s.size()) {
    uint8_t b = static_cast<uint8_t>(s[i]);
    int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {
      return InvalidArgument("invalid UTF-8 at byte " + std::to_string(i));
    }
    uint32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n; ++k) {
      uint8_t cb = static_cast<uint8_t>(s[i + k]);
      if ((cb & 0xC0) != 0x80) return InvalidArgument("invalid UTF-8 at byte " + std::to_string(i));
      c = (c << 6) | (cb & 0x3F);
    }
    out.push_back(c);
    i += n;
  }
  return out;
}

CodepointSet ecma_digit() { return CodepointSet::range('0', '9'); }
CodepointSet ecma_word() {
  CodepointSet s = CodepointSet::range('a', 'z');
  s.add('A', 'Z'); s.add('0', '9'); s.add('_', '_');
  return s;
}
CodepointSet ecma_space() {
  CodepointSet s = CodepointSet::range('\t', '\r');  // \t \n \v \f \r
  s.add(' ', ' '); s.add(0xA0, 0xA0); s.add(0x1680, 0x1680); s.add(0x2000, 0x200A);
  s.add(0x2028, 0x2029); s.add(0x202F, 0x202F); s.add(0x205F, 0x205F); s.add(0x3000, 0x3000);
  s.add(0xFEFF, 0xFEFF);
  return s;
}
CodepointSet ecma_dot() {
  CodepointSet lt = CodepointSet::single('\n');
  lt.add('\r', '\r'); lt.add(0x2028, 0x2029);
  return lt.complement();
}

int Regex::add_literal(std::string_view utf8) {
  std::vector<int> kids;
  auto cps = decode_utf8(utf8);
  for (uint32_t c : cps.value()) kids.push_back(add_class(CodepointSet::single(c)));
  return add_concat(std::move(kids));
}

namespace {

class Parser {
 public:
  Parser(std::vector<uint32_t> p, Regex* re) : p_(std::move(p)), re_(re) {}

  Status parse() {
    DI_ASSIGN_OR_RETURN(int root, parse_alt());
    if (pos_ < p_.size()) {
      return error(p_[pos_] == ')' ? "unmatched ')'" : "unexpected character");
    }
    re_->root = root;
    return OkStatus();
  }

 private:
  Status error(const std::string& what) const {
    return InvalidArgument("regex: " + what + " at position " + std::to_string(pos_));
  }
  Status refuse(const std::string& what, size_t at) const {
    return Unimplemented("regex: " + what + " at position " + std::to_string(at) +
                         " is not supported (it cannot be compiled to a finite automaton)");
  }
  bool eof() const { return pos_ >= p_.size(); }
  bool peek(uint32_t c) const { return !eof() && p_[pos_] == c; }

  StatusOr<int> parse_alt() {
    std::vector<int> alts;
    DI_ASSIGN_OR_RETURN(int first, parse_concat());
    alts.push_back(first);
    while (peek('|')) {
      ++pos_;
      DI_ASSIGN_OR_RETURN(int next, parse_concat());
      alts.push_back(next);
    }
    return alts.size() == 1 ? alts[0] : re_->add_alt(std::move(alts));
  }

  StatusOr<int> parse_concat() {
    std::vector<int> items;
    while (!eof() && !peek('|') && !peek(')')) {
      DI_ASSIGN_OR_RETURN(int atom, parse_quantified());
      items.push_back(atom);
    }
    return re_->add_concat(std::move(items));
  }

  // Parses a decimal number; false if none.
  bool parse_number(uint32_t* out) {
    size_t start = pos_;
    uint64_t v = 0;
    while (!eof() && p_[pos_] >= '0' && p_[pos_] <= '9') {
      v = v * 10 + (p_[pos_] - '0');
      if (v > 100000000) v = 100000000;
      ++pos_;
    }
    *out = static_cast<uint32_t>(v);
    return pos_ > start;
  }

  StatusOr<int> parse_quantified() {
    size_t atom_pos = pos_;
    DI_ASSIGN_OR_RETURN(int atom, parse_atom());
    while (!eof()) {
      uint32_t c = p_[pos_];
      uint32_t min = 0, max = 0;
      bool unbounded = false;
      size_t qpos = pos_;
      if (c == '*') { unbounded = true; ++pos_; }
      else if (c == '+') { min = 1; unbounded = true; ++pos_; }
      else if (c == '?') { max = 1; ++pos_; }
      else if (c == '{') {
        ++pos_;
        if (!parse_number(&min)) { pos_ = qpos; return error("'{' without a repetition count (escape it as \\{)"); }
        if (peek(',')) {
          ++pos_;
          if (!parse_number(&max)) unbounded = true;
        } else {
          max = min;
        }
        if (!peek('}')) { pos_ = qpos; return error("unterminated repetition {m,n}"); }
        ++pos_;
        if (!unbounded && max < min) { pos_ = qpos; return error("repetition {m,n} with n < m"); }
      } else {
        break;
      }
      RegexNode::Kind k = re_->nodes[atom].kind;
      if (k == RegexNode::Kind::kBegin || k == RegexNode::Kind::kEnd) {
        pos_ = qpos;
        return error("quantifier after an anchor");
      }
      (void)atom_pos;
      if (peek('?')) ++pos_;  // lazy: same language
      atom = re_->add_repeat(atom, min, max, unbounded);
    }
    return atom;
  }

  StatusOr<int> parse_atom() {
    size_t at = pos_;
    uint32_t c = p_[pos_++];
    switch (c) {
      case '.': return re_->add_class(ecma_dot());
      case '^': { RegexNode n; n.kind = RegexNode::Kind::kBegin; return re_->add(n); }
      case '$': { RegexNode n; n.kind = RegexNode::Kind::kEnd; return re_->add(n); }
      case '(': {
        if (peek('?')) {
          ++pos_;
          if (peek(':')) {
            ++pos_;
          } else if (peek('=') || peek('!')) {
            return refuse(std::string("lookahead (?") + static_cast<char>(p_[pos_]), at);
          } else if (peek('<') && pos_ + 1 < p_.size() && (p_[pos_ + 1] == '=' || p_[pos_ + 1] == '!')) {
            return refuse(std::string("lookbehind (?<") + static_cast<char>(p_[pos_ + 1]), at);
          } else if (peek('<')) {
            ++pos_;
            while (!eof() && !peek('>')) ++pos_;
            if (eof()) return error("unterminated group name");
            ++pos_;
          } else {
            return refuse("group flags (?...)", at);
          }
        }
        DI_ASSIGN_OR_RETURN(int inner, parse_alt());
        if (!peek(')')) { pos_ = at; return error("unterminated group '('"); }
        ++pos_;
        return inner;
      }
      case ')': pos_ = at; return error("unmatched ')'");
      case '*': case '+': case '?': pos_ = at; return error("quantifier without a preceding atom");
      case '{': {
        // ECMA (non-u) treats a '{' that does not start a quantifier as a literal; with `u` it is
        // an error. JSON Schema patterns in the wild use it literally, so accept it when it is
        // not followed by a count.
        size_t save = pos_;
        uint32_t dummy;
        if (parse_number(&dummy)) { pos_ = at; return error("quantifier {m,n} without a preceding atom"); }
        pos_ = save;
        return re_->add_class(CodepointSet::single('{'));
      }
      case '[': return parse_class(at);
      case '\\': {
        CodepointSet s;
        DI_RETURN_IF_ERROR(parse_escape(false, at, &s));
        return re_->add_class(std::move(s));
      }
      default: return re_->add_class(CodepointSet::single(c));
    }
  }

  Status parse_hex(int n, uint32_t* out) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (eof()) return error("truncated hex escape");
      uint32_t c = p_[pos_];
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) return error("invalid hex digit in escape");
      v = v * 16 + d;
      ++pos_;
    }
    *out = v;
    return OkStatus();
  }

  // After a backslash. `in_class`: \b means backspace there.
  Status parse_escape(bool in_class, size_t at, CodepointSet* out) {
    if (eof()) return error("trailing backslash");
    uint32_t c = p_[pos_++];
    switch (c) {
      case 'd': *out = ecma_digit(); return OkStatus();
      case 'D': *out = ecma_digit().complement(); return OkStatus();
      case 'w': *out = ecma_word(); return OkStatus();
      case 'W': *out = ecma_word().complement(); return OkStatus();
      case 's': *out = ecma_space(); return OkStatus();
      case 'S': *out = ecma_space().complement(); return OkStatus();
      case 't': *out = CodepointSet::single('\t'); return OkStatus();
      case 'n': *out = CodepointSet::single('\n'); return OkStatus();
      case 'r': *out = CodepointSet::single('\r'); return OkStatus();
      case 'v': *out = CodepointSet::single('\v'); return OkStatus();
      case 'f': *out = CodepointSet::single('\f'); return OkStatus();
      case '0':
        if (!eof() && p_[pos_] >= '0' && p_[pos_] <= '9') return refuse("octal escape or backreference \\0N", at);
        *out = CodepointSet::single(0); return OkStatus();
      case 'b':
        if (in_class) { *out = CodepointSet::single(8); return OkStatus(); }
        return refuse("word boundary \\b", at);
      case 'B': return refuse("non-word-boundary \\B", at);
      case 'k': return refuse("named backreference \\k", at);
      case 'p': case 'P': return refuse(std::string("Unicode property class \\") + static_cast<char>(c), at);
      case 'c': {
        if (eof() || !((p_[pos_] >= 'a' && p_[pos_] <= 'z') || (p_[pos_] >= 'A' && p_[pos_] <= 'Z'))) {
          return error("invalid control escape \\c");
        }
        *out = CodepointSet::single(p_[pos_++] % 32);
        return OkStatus();
      }
      case 'x': {
        uint32_t v = 0;
        DI_RETURN_IF_ERROR(parse_hex(2, &v));
        *out = CodepointSet::single(v);
        return OkStatus();
      }
      case 'u': {
        uint32_t v = 0;
        if (peek('{')) {
          ++pos_;
          v = 0;
          size_t digits = 0;
          while (!eof() && !peek('}')) {
            uint32_t d = 0;
            DI_RETURN_IF_ERROR(parse_hex(1, &d));
            v = v * 16 + d;
            if (v > kMaxCodepoint) return error("code point escape \\u{...} out of range");
            ++digits;
          }
          if (eof() || digits == 0) return error("unterminated \\u{...} escape");
          ++pos_;
        } else {
          DI_RETURN_IF_ERROR(parse_hex(4, &v));
          // A surrogate pair written as two escapes is one code point.
          if (v >= 0xD800 && v <= 0xDBFF && pos_ + 5 < p_.size() + 0 && p_[pos_] == '\\' &&
              p_[pos_ + 1] == 'u') {
            size_t save = pos_;
            pos_ += 2;
            uint32_t lo;
            if (parse_hex(4, &lo).ok() && lo >= 0xDC00 && lo <= 0xDFFF) {
              v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              pos_ = save;
            }
          }
          if (v >= 0xD800 && v <= 0xDFFF) return refuse("lone surrogate escape", at);
        }
        *out = CodepointSet::single(v);
        return OkStatus();
      }
      default:
        if (c >= '1' && c <= '9') return refuse("backreference \\" + std::string(1, static_cast<char>(c)), at);
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          pos_ = at;
          return error(std::string("unknown escape \\") + static_cast<char>(c));
        }
        *out = CodepointSet::single(c);  // identity escape of punctuation
        return OkStatus();
    }
  }

  StatusOr<int> parse_class(size_t at) {
    bool negate = false;
    if (peek('^')) { negate = true; ++pos_; }
    CodepointSet set;
    bool first = true;
    while (true) {
      if (eof()) { pos_ = at; return error("unterminated character class '['"); }
      if (peek(']') ) { ++pos_; break; }
      (void)first;
      first = false;
      size_t item_at = pos_;
      CodepointSet lo_set;
      bool lo_single = true;
      uint32_t lo = 0;
      DI_RETURN_IF_ERROR(class_atom(&lo_set, &lo, &lo_single));
      if (peek('-') && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        CodepointSet hi_set;
        bool hi_single = true;
        uint32_t hi = 0;
        DI_RETURN_IF_ERROR(class_atom(&hi_set, &hi, &hi_single));
        if (!lo_single || !hi_single) {
          pos_ = item_at;
          return error("class escape used as a range bound");
        }
        if (hi < lo) { pos_ = item_at; return error("character class range out of order"); }
        set.add(lo, hi);
      } else {
        set.add(lo_set);
      }
    }
    return re_->add_class(negate ? set.complement() : set);
  }

  Status class_atom(CodepointSet* set, uint32_t* single, bool* is_single) {
    size_t at = pos_;
    uint32_t c = p_[pos_++];
    if (c == '\\') {
      DI_RETURN_IF_ERROR(parse_escape(true, at, set));
      if (set->ranges().size() == 1 && set->ranges()[0].first == set->ranges()[0].second) {
        *single = set->ranges()[0].first;
        *is_single = true;
      } else {
        *is_single = false;
      }
      return OkStatus();
    }
    *set = CodepointSet::single(c);
    *single = c;
    *is_single = true;
    return OkStatus();
  }

  std::vector<uint32_t> p_;
  size_t pos_ = 0;
  Regex* re_;
};

}  // namespace

StatusOr<Regex> parse_regex(std::string_view pattern) {
  auto cps = decode_utf8(pattern);
  if (!cps.ok()) return InvalidArgument("regex: " + cps.status().message());
  Regex re;
  Parser p(std::move(*cps), &re);
  DI_RETURN_IF_ERROR(p.parse());
  return re;
}

}  // namespace deepinfer::structured
