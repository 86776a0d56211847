#include "structured/json_formats.h"

#include <map>

namespace deepinfer::structured {
namespace {

// Full dates with per-month day counts and Feb 29 only in leap years (4-digit years).
const char* kDate =
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    "|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)-02-29)";
// RFC 3339 full-time with seconds 00-59.
const char* kTimeNoLeap =
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";

std::string two_digits(int v) { return std::string(1, static_cast<char>('0' + v / 10)) + static_cast<char>('0' + v % 10); }
std::string hhmm(int minutes) { return two_digits(minutes / 60) + ":" + two_digits(minutes % 60); }

// RFC 3339 leap seconds: second 60 exactly when the time converted to UTC is 23:59:60
// (time-secfrac allowed). Local time t = hh:mm (minutes since midnight) with offset +o means
// UTC = t - o, so UTC 23:59 (1439) needs o = t - 1439 = t + 1 (mod 1440) for '+' and
// o = 1439 - t for '-'; each of the 1,440 local times has exactly one '+' and one '-' offset
// (hours 00-23, minutes 00-59), and 23:59 also Z. The alternatives are grouped by hour and
// minute so that the automaton shares their prefixes; it must remember hh:mm until the offset
// (~1,440 states per position from hh:mm to the fraction: ~11k states in all).
std::string leap_time() {
  std::string out = "(?:";
  for (int h = 0; h < 24; ++h) {
    out += (h ? "|" : "") + two_digits(h) + ":(?:";
    for (int m = 0; m < 60; ++m) {
      int t = h * 60 + m;
      int plus = (t + 1) % 1440, minus = (1439 - t) % 1440;
      std::string off = "\\+" + hhmm(plus) + "|-" + hhmm(minus);
      if (t == 1439) off += "|[Zz]";
      out += (m ? "|" : "") + two_digits(m) + ":60(?:\\.[0-9]+)?(?:" + off + ")";
    }
    out += ")";
  }
  return out + ")";
}

// The leap-second automata need ~11k states alone (more next to maxLength or a pattern).
constexpr uint32_t kLeapStateLimit = 60000;

std::string time_regex() { return std::string("(?:") + kTimeNoLeap + "|" + leap_time() + ")"; }

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
    std::string date = kDate, time = time_regex();
    m["date"] = {date, std::nullopt, ""};
    m["time"] = {time, std::nullopt, "", kLeapStateLimit};
    m["date-time"] = {date + "[Tt]" + time, std::nullopt, "", kLeapStateLimit};
    m["uuid"] = {"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}", std::nullopt, ""};
    m["ipv4"] = {ipv4(), std::nullopt, ""};
    m["ipv6"] = {ipv6(), std::nullopt, ""};
    // At most 4 labels of at most 62 characters (<= 251 in all, within RFC 1123's 253): a
    // subset of valid host names, so the total length needs no separate counter. Labels with
    // "--" in positions 3-4 are reserved for A-labels (RFC 5891 4.2.3.1); punycode cannot be
    // checked by a regex, so they are excluded (stricter).
    std::string short_label = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?";
    std::string host = short_label + "(?:\\." + short_label + "){0,3}";
    m["hostname"] = {host, std::nullopt, "(?:^|\\.)[^.]{2}--", 0,
                     "A-labels (xn--: Punycode decoding and IDNA2008 rules) cannot be checked by an "
                     "automaton; the subset has no reserved '??--' labels and at most 4 labels"};
    // RFC 5321 Mailbox (4.1.2): Local-part (Dot-string or Quoted-string) "@" (Domain: dot-
    // separated sub-domains `Let-dig [Ldh-str]`, or an IPv4 / "IPv6:" address literal). The
    // ABNF has no length limits (4.5.3.1's are size limits for servers), and
    // General-address-literal needs an IANA-registered tag, of which there is none besides IPv6.
    std::string atom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    std::string dot_string = atom + "(?:\\." + atom + ")*";
    // Quoted-string = DQUOTE *(qtextSMTP / quoted-pairSMTP) DQUOTE; qtextSMTP = %d32-33 /
    // %d35-91 / %d93-126; quoted-pairSMTP = "\" %d32-126.
    std::string quoted = "\"(?:[\\x20\\x21\\x23-\\x5B\\x5D-\\x7E]|\\\\[\\x20-\\x7E])*\"";
    std::string address_literal = "\\[(?:" + ipv4() + "|IPv6:" + ipv6() + ")\\]";
    std::string sub_domain = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?";
    std::string domain = sub_domain + "(?:\\." + sub_domain + ")*";
    m["email"] = {"(?:" + dot_string + "|" + quoted + ")@(?:" + domain + "|" + address_literal + ")",
                  std::nullopt, ""};
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
