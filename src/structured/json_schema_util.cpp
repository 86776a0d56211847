#include <cmath>
#include <cstdio>

#include "structured/codepoint_set.h"
#include "structured/json_schema_internal.h"
#include "structured/regex.h"

namespace deepinfer::structured {

std::string json_quote(const std::string& utf8) {
  std::string out = "\"";
  for (unsigned char c : utf8) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

namespace json_internal {

std::string pointer_escape(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0"; else if (c == '/') out += "~1"; else out += c;
  }
  return out;
}

std::string canonical_number(const Json& v) {
  if (v.is_number_integer()) return v.dump();
  double d = v.get<double>();
  if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 1e15) {
    return std::to_string(static_cast<int64_t>(d));
  }
  return v.dump();
}

uint8_t value_type(const Json& v) {
  if (v.is_null()) return kNull;
  if (v.is_boolean()) return kBool;
  if (v.is_object()) return kObject;
  if (v.is_array()) return kArray;
  if (v.is_string()) return kString;
  if (v.is_number_integer()) return kInteger;
  double d = v.get<double>();
  return (std::isfinite(d) && std::floor(d) == d) ? kInteger : kFraction;
}

bool json_equal(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_number_integer() && b.is_number_integer()) {
      if (a.is_number_unsigned() || b.is_number_unsigned()) return a.dump() == b.dump();
      return a.get<int64_t>() == b.get<int64_t>();
    }
    return a.get<double>() == b.get<double>();
  }
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto jt = b.find(it.key());
      if (jt == b.end() || !json_equal(it.value(), *jt)) return false;
    }
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) if (!json_equal(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

}  // namespace json_internal
}  // namespace deepinfer::structured
