// JSON Schema `format` values enforced as regexes over the decoded string (full match).
// Each is exact for the grammar it names, or stricter (never looser); see docs/structured.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace deepinfer::structured {

struct FormatRegex {
  std::string pattern;            // full-match regex
  std::optional<uint32_t> max_len;  // extra length bound in code points (hostname: 253)
  std::string forbidden;            // if set: strings containing a match (search) are excluded
  uint32_t min_state_limit = 0;     // TerminalSpec::min_state_limit for strings of this format
  // Non-empty: the regex is a strict subset of the format and why (the format is refused in
  // strict mode; lenient mode enforces the subset).
  std::string inexact;
};

std::optional<FormatRegex> format_regex(const std::string& format);
std::vector<std::string> supported_formats();

}  // namespace deepinfer::structured
