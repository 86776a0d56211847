#include "structured/json_formats.h"

#include <map>

namespace deepinfer::structured {
namespace {

// Full dates with per-month day counts and Feb 29 only in leap years (4-digit years).
const char* kDate =
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    "|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)";
// RFC 3339 full-time; leap second 60 not generated (stricter).
const char* kTime =
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
const char* kDec8 = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

std::string ipv4() {
  std::string d = kDec8;
  return d + "\\." + d + "\\." + d + "\\." + d;
}

std::string ipv6() {
  std::string h = "[0-9A-Fa-f]{1,4}";
  std::string ls32 = "(?:" + h + ":" + h + "|" + ipv4() + ")";
  // RFC 3986 IPv6address, all nine forms.
  std::string forms[] = {
      "(?:" + h + ":){6}" + ls32,
      "::(?:" + h + ":){5}" + ls32,
      "(?:" + h + ")?::(?:" + h + ":){4}" + ls32,
      "(?:(?:" + h + ":){0,1}" + h + ")?::(?:" + h + ":){3}" + ls32,
      "(?:(?:" + h + ":){0,2}" + h + ")?::(?:" + h + ":){2}" + ls32,
      "(?:(?:" + h + ":){0,3}" + h + ")?::" + h + ":" + ls32,
      "(?:(?:" + h + ":){0,4}" + h + ")?::" + ls32,
      "(?:(?:" + h + ":){0,5}" + h + ")?::" + h,
      "(?:(?:" + h + ":){0,6}" + h + ")?::",
  };
  std::string out = "(?:";
  for (size_t i = 0; i < 9; ++i) out += (i ? "|" : "") + forms[i];
  return out + ")";
}

const std::map<std::string, FormatRegex>& table() {
  static const std::map<std::string, FormatRegex> t = [] {
    std::map<std::string, FormatRegex> m;
    std::string date = kDate, time = kTime;
    m["date"] = {date, std::nullopt, ""};
    m["time"] = {time, std::nullopt, ""};
    m["date-time"] = {date + "[Tt]" + time, std::nullopt, ""};
    m["uuid"] = {"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}", std::nullopt, ""};
    m["ipv4"] = {ipv4(), std::nullopt, ""};
    m["ipv6"] = {ipv6(), std::nullopt, ""};
    // At most 4 labels of at most 62 characters (<= 251 in all, within RFC 1123's 253): a
    // subset of valid host names, so the total length needs no separate counter. Labels with
    // "--" in positions 3-4 are reserved for A-labels (RFC 5891 4.2.3.1); punycode cannot be
    // checked by a regex, so they are excluded (stricter).
    std::string short_label = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?";
    std::string host = short_label + "(?:\\." + short_label + "){0,3}";
    m["hostname"] = {host, std::nullopt, "(?:^|\\.)[^.]{2}--"};
    // A conservative email: dot-atom local part and a hostname domain (a subset of RFC 5321).
    std::string atom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    m["email"] = {atom + "(?:\\." + atom + ")*@" + host, std::nullopt, ""};
    // Absolute URI (RFC 3986 characters; percent-escapes checked).
    std::string u = "(?:[A-Za-z0-9\\-._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})";
    std::string pchar = "(?:" + u + "|[:@])";
    std::string authority = "(?:(?:" + u + "|:)*@)?(?:\\[" + ipv6() + "\\]|" + u + "*)(?::[0-9]*)?";
    std::string path_abempty = "(?:/" + pchar + "*)*";
    std::string hier = "(?://" + authority + path_abempty + "|/?(?:" + pchar + "+" + path_abempty + ")?)";
    m["uri"] = {"[A-Za-z][A-Za-z0-9+.\\-]*:" + hier + "(?:\\?(?:" + pchar + "|[/?])*)?(?:#(?:" + pchar + "|[/?])*)?",
                std::nullopt, ""};
    return m;
  }();
  return t;
}

}  // namespace

std::optional<FormatRegex> format_regex(const std::string& format) {
  auto it = table().find(format);
  if (it == table().end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> supported_formats() {
  std::vector<std::string> out;
  for (const auto& kv : table()) out.push_back(kv.first);
  return out;
}

}  // namespace deepinfer::structured
