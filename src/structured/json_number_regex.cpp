#include "structured/json_number_regex.h"

#include <cctype>
#include <cmath>
#include <vector>

namespace deepinfer::structured {
namespace {

// Same-length decimal strings x <= y.
std::string same_len(const std::string& x, const std::string& y) {
  if (x.empty()) return "";
  if (x.size() == 1) {
    return x == y ? x : "[" + x + "-" + y + "]";
  }
  if (x[0] == y[0]) return std::string(1, x[0]) + same_len(x.substr(1), y.substr(1));
  std::string rx = x.substr(1), ry = y.substr(1);
  bool x_zeros = rx.find_first_not_of('0') == std::string::npos;
  bool y_nines = ry.find_first_not_of('9') == std::string::npos;
  std::string n = std::to_string(rx.size());
  if (x_zeros && y_nines) {
    return std::string("[") + x[0] + "-" + y[0] + "][0-9]{" + n + "}";
  }
  std::vector<std::string> parts;
  char lo = x[0], hi = y[0];
  if (!x_zeros) {
    parts.push_back(std::string(1, x[0]) + "(?:" + same_len(rx, std::string(rx.size(), '9')) + ")");
    ++lo;
  }
  if (!y_nines) {
    --hi;
  }
  if (lo <= hi) parts.push_back(std::string("[") + lo + "-" + hi + "][0-9]{" + n + "}");
  if (!y_nines) {
    parts.push_back(std::string(1, y[0]) + "(?:" + same_len(std::string(ry.size(), '0'), ry) + ")");
  }
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "|" : "") + parts[i];
  return out;
}

uint64_t pow10(size_t n) { uint64_t p = 1; while (n--) p *= 10; return p; }

// Piece: integer part in [lo, hi] (hi nullopt = unbounded) with a fraction constraint.
enum class Frac { kNone, kAny, kZero, kNonZero };
struct Piece { uint64_t lo; std::optional<uint64_t> hi; Frac frac; };

}  // namespace

std::string uint_range_regex(uint64_t a, std::optional<uint64_t> b) {
  std::vector<std::string> parts;
  std::string sa = std::to_string(a);
  uint64_t top = b ? *b : pow10(sa.size()) - 1;
  if (b && *b < a) return "[]";
  std::string st = std::to_string(top);
  for (size_t len = sa.size(); len <= st.size(); ++len) {
    uint64_t lo = std::max<uint64_t>(a, len == 1 ? 0 : pow10(len - 1));
    uint64_t hi = std::min<uint64_t>(top, pow10(len) - 1);
    if (lo > hi) continue;
    parts.push_back(same_len(std::to_string(lo), std::to_string(hi)));
  }
  if (!b) parts.push_back("[1-9][0-9]{" + std::to_string(sa.size()) + ",}");
  std::string out = "(?:";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "|" : "") + parts[i];
  return out + ")";
}

StatusOr<std::string> number_regex(bool integer_only, std::optional<NumberBound> lower,
                                   std::optional<NumberBound> upper, bool zero_fraction) {
  const std::string zf = integer_only && zero_fraction ? "(?:\\.0+)?" : "";
  if (!lower && !upper) {
    return integer_only ? "-?(?:0|[1-9][0-9]*)" + zf
                        : std::string("-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?");
  }
  // Integers: normalise to inclusive integral bounds.
  auto check = [](double v, const char* kw) -> Status {
    if (!(std::fabs(v) < 1e15)) {
      return Unimplemented(std::string("numeric bound ") + kw + " of magnitude >= 1e15 cannot be "
                           "enforced exactly");
    }
    return OkStatus();
  };
  if (lower) DI_RETURN_IF_ERROR(check(lower->value, lower->exclusive ? "exclusiveMinimum" : "minimum"));
  if (upper) DI_RETURN_IF_ERROR(check(upper->value, upper->exclusive ? "exclusiveMaximum" : "maximum"));
  if (integer_only) {
    std::optional<int64_t> lo, hi;
    if (lower) {
      double v = lower->exclusive ? std::floor(lower->value) + 1 : std::ceil(lower->value);
      lo = static_cast<int64_t>(v);
    }
    if (upper) {
      double v = upper->exclusive ? std::ceil(upper->value) - 1 : std::floor(upper->value);
      hi = static_cast<int64_t>(v);
    }
    if (lo && hi && *lo > *hi) return std::string("[]");
    std::vector<std::string> parts;
    // Non-negative part: [max(lo,0), hi].
    if (!hi || *hi >= 0) {
      uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
      std::optional<uint64_t> b;
      if (hi) b = static_cast<uint64_t>(*hi);
      parts.push_back(uint_range_regex(a, b));
    }
    // Negative part: -[max(-hi,1), -lo].
    if (!lo || *lo < 0) {
      uint64_t a = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
      std::optional<uint64_t> b;
      if (lo) b = static_cast<uint64_t>(-*lo);
      parts.push_back("-" + uint_range_regex(a, b));
    }
    // "-0" has the value 0.
    if (zero_fraction && (!lo || *lo <= 0) && (!hi || *hi >= 0)) parts.push_back("-0");
    std::string out = "(?:";
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? "|" : "") + parts[i];
    return out + ")" + zf;
  }
  // Numbers: integral bounds only; no exponent.
  auto integral = [](double v) { return std::floor(v) == v; };
  if ((lower && !integral(lower->value)) || (upper && !integral(upper->value))) {
    return Unimplemented(std::string("a non-integral ") +
                         ((lower && !integral(lower->value)) ? (lower->exclusive ? "exclusiveMinimum" : "minimum")
                                                             : (upper->exclusive ? "exclusiveMaximum" : "maximum")) +
                         " on a number cannot be enforced exactly");
  }
  // For each sign, magnitude u = I + f; collect piece lists and intersect.
  auto ge = [](int64_t a, bool strict) {  // u >= a (or u > a), a may be negative
    std::vector<Piece> out;
    if (a < 0 || (a == 0 && !strict)) { out.push_back({0, std::nullopt, Frac::kAny}); return out; }
    uint64_t ua = static_cast<uint64_t>(a);
    if (!strict) { out.push_back({ua, std::nullopt, Frac::kAny}); return out; }
    out.push_back({ua + 1, std::nullopt, Frac::kAny});
    out.push_back({ua, ua, Frac::kNonZero});
    return out;
  };
  auto le = [](int64_t c, bool strict) {  // u <= c (or u < c)
    std::vector<Piece> out;
    if (c < 0 || (c == 0 && strict)) return out;
    uint64_t uc = static_cast<uint64_t>(c);
    if (uc > 0) out.push_back({0, uc - 1, Frac::kAny});
    if (!strict) out.push_back({uc, uc, Frac::kZero});
    return out;
  };
  auto all = std::vector<Piece>{{0, std::nullopt, Frac::kAny}};
  auto intersect = [](const std::vector<Piece>& a, const std::vector<Piece>& b) {
    std::vector<Piece> out;
    for (const auto& x : a) {
      for (const auto& y : b) {
        uint64_t lo = std::max(x.lo, y.lo);
        std::optional<uint64_t> hi = x.hi;
        if (!hi || (y.hi && *y.hi < *hi)) hi = y.hi;
        if (hi && *hi < lo) continue;
        Frac f;
        if (x.frac == Frac::kAny) f = y.frac;
        else if (y.frac == Frac::kAny || y.frac == x.frac) f = x.frac;
        else continue;  // zero vs nonzero
        out.push_back({lo, hi, f});
      }
    }
    return out;
  };
  int64_t lo_v = lower ? static_cast<int64_t>(lower->value) : 0;
  int64_t hi_v = upper ? static_cast<int64_t>(upper->value) : 0;
  // Non-negative numbers: u >= lo, u <= hi.
  std::vector<Piece> pos = all;
  if (lower) pos = intersect(pos, ge(lo_v, lower->exclusive));
  if (upper) pos = intersect(pos, le(hi_v, upper->exclusive));
  // Negative numbers v = -u: v >= lo <=> u <= -lo; v <= hi <=> u >= -hi.
  std::vector<Piece> neg = all;
  if (lower) neg = intersect(neg, le(-lo_v, lower->exclusive));
  if (upper) neg = intersect(neg, ge(-hi_v, upper->exclusive));
  auto render = [](const std::vector<Piece>& ps) {
    std::vector<std::string> parts;
    for (const auto& p : ps) {
      std::string frac = p.frac == Frac::kAny ? "(?:\\.[0-9]+)?"
                       : p.frac == Frac::kZero ? "(?:\\.0+)?"
                       : "\\.[0-9]*[1-9][0-9]*";
      parts.push_back(uint_range_regex(p.lo, p.hi) + frac);
    }
    return parts;
  };
  std::vector<std::string> parts = render(pos);
  for (const auto& s : render(neg)) parts.push_back("-" + s);
  if (parts.empty()) return std::string("[]");
  std::string out = "(?:";
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "|" : "") + parts[i];
  return out + ")";
}

std::string expand_numeral(const std::string& numeral, size_t max_len) {
  size_t i = 0;
  bool neg = false;
  if (i < numeral.size() && numeral[i] == '-') { neg = true; ++i; }
  std::string int_digits, frac_digits;
  while (i < numeral.size() && std::isdigit(static_cast<unsigned char>(numeral[i]))) int_digits += numeral[i++];
  if (int_digits.empty()) return "";
  if (i < numeral.size() && numeral[i] == '.') {
    ++i;
    while (i < numeral.size() && std::isdigit(static_cast<unsigned char>(numeral[i]))) frac_digits += numeral[i++];
    if (frac_digits.empty()) return "";
  }
  long long exp = 0;
  if (i < numeral.size() && (numeral[i] == 'e' || numeral[i] == 'E')) {
    ++i;
    bool eneg = false;
    if (i < numeral.size() && (numeral[i] == '+' || numeral[i] == '-')) eneg = numeral[i++] == '-';
    if (i == numeral.size()) return "";
    for (; i < numeral.size() && std::isdigit(static_cast<unsigned char>(numeral[i])); ++i) {
      exp = exp * 10 + (numeral[i] - '0');
      if (exp > static_cast<long long>(max_len) + 1000) return "";
    }
    if (eneg) exp = -exp;
  }
  if (i != numeral.size()) return "";
  // value = 0.[int_digits frac_digits] * 10^(point), point = digits before the decimal point.
  std::string digits = int_digits + frac_digits;
  long long point = static_cast<long long>(int_digits.size()) + exp;
  if (point > static_cast<long long>(max_len) || -point > static_cast<long long>(max_len)) return "";
  std::string ip, fp;
  if (point <= 0) {
    fp = std::string(static_cast<size_t>(-point), '0') + digits;
  } else if (static_cast<size_t>(point) >= digits.size()) {
    ip = digits + std::string(static_cast<size_t>(point) - digits.size(), '0');
  } else {
    ip = digits.substr(0, static_cast<size_t>(point));
    fp = digits.substr(static_cast<size_t>(point));
  }
  size_t nz = ip.find_first_not_of('0');
  ip = nz == std::string::npos ? "0" : ip.substr(nz);
  while (!fp.empty() && fp.back() == '0') fp.pop_back();
  std::string out = (neg ? "-" : "") + ip + (fp.empty() ? "" : "." + fp);
  if (out.size() > max_len) return "";
  return out;
}

std::string equal_value_regex(const std::string& digits) {
  std::string e = expand_numeral(digits);
  if (e.empty()) return "[]";
  bool neg = e[0] == '-';
  if (neg) e = e.substr(1);
  size_t dot = e.find('.');
  std::string ip = dot == std::string::npos ? e : e.substr(0, dot);
  std::string fp = dot == std::string::npos ? "" : e.substr(dot + 1);
  if (ip == "0" && fp.empty()) return "-?0(?:\\.0+)?";
  std::string out = neg ? "-" : "";
  out += ip;
  if (fp.empty()) return out + "(?:\\.0+)?";
  return out + "\\." + fp + "0*";
}

}  // namespace deepinfer::structured
