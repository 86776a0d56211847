#include "tokenizer/py_json.h"

#include <cmath>
#include <cstdio>

namespace deepinfer::tokenizer {
namespace {

void dump_string(const std::string& s, std::string& out) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

// Python float repr: shortest round-trip digits; exponent form when exp < -4 or exp >= 16.
void dump_float(double d, std::string& out) {
  if (std::isnan(d)) {
    out += "NaN";
    return;
  }
  if (std::isinf(d)) {
    out += d > 0 ? "Infinity" : "-Infinity";
    return;
  }
  char buf[64];
  int prec = 1;
  for (; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*e", prec - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf = "[-]D.DDDDe[+-]XX"; split mantissa digits and exponent.
  std::string s(buf);
  const size_t epos = s.find('e');
  const int exp = std::atoi(s.c_str() + epos + 1);
  std::string mant = s.substr(0, epos);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits.push_back(c);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string r = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    r += digits.substr(0, 1);
    if (digits.size() > 1) {
      r += '.';
      r.append(digits, 1, std::string::npos);
    }
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    r += eb;
  } else if (exp < 0) {
    r += "0.";
    r.append(static_cast<size_t>(-exp - 1), '0');
    r += digits;
  } else {
    const size_t ip = static_cast<size_t>(exp) + 1;
    if (digits.size() <= ip) {
      r += digits;
      r.append(ip - digits.size(), '0');
      r += ".0";
    } else {
      r.append(digits, 0, ip);
      r += '.';
      r.append(digits, ip, std::string::npos);
    }
  }
  out += r;
}

void dump(const nlohmann::ordered_json& v, std::string& out) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::object: {
      out.push_back('{');
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        dump_string(it.key(), out);
        out += ": ";
        dump(it.value(), out);
      }
      out.push_back('}');
      return;
    }
    case nlohmann::ordered_json::value_t::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        dump(e, out);
      }
      out.push_back(']');
      return;
    }
    case nlohmann::ordered_json::value_t::string:
      dump_string(v.get_ref<const std::string&>(), out);
      return;
    case nlohmann::ordered_json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      return;
    case nlohmann::ordered_json::value_t::number_integer:
      out += std::to_string(v.get<int64_t>());
      return;
    case nlohmann::ordered_json::value_t::number_unsigned:
      out += std::to_string(v.get<uint64_t>());
      return;
    case nlohmann::ordered_json::value_t::number_float:
      dump_float(v.get<double>(), out);
      return;
    default:
      out += "null";
      return;
  }
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  dump(value, out);
  return out;
}

}  // namespace deepinfer::tokenizer
