#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Number of bytes of the longest prefix of s[i..] that is a valid start of a UTF-8 sequence
// (possibly the whole sequence), and the full length the lead byte asks for (0 if invalid lead).
// Follows the Unicode "maximal subpart" definition (Table 3-7 well-formed byte sequences).
void scan_seq(std::string_view s, size_t i, size_t* valid_prefix, size_t* need) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *valid_prefix = 1;
    *need = 1;
    return;
  }
  uint8_t lo = 0x80, hi = 0xBF;
  size_t n;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *valid_prefix = 0;
    *need = 0;
    return;
  }
  *need = n;
  size_t k = 1;
  for (; k < n && i + k < s.size(); ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = (k == 1) ? lo : 0x80;
    const uint8_t h = (k == 1) ? hi : 0xBF;
    if (b < l || b > h) break;
  }
  *valid_prefix = k;
}

}  // namespace

size_t valid_utf8_seq_len(std::string_view s, size_t i) {
  size_t vp, need;
  scan_seq(s, i, &vp, &need);
  return (need != 0 && vp == need) ? need : 0;
}

uint32_t decode_utf8(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *len = 2;
    return ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(s[i + 1]) & 0x3Fu);
  }
  if (b0 < 0xF0) {
    *len = 3;
    return ((b0 & 0x0Fu) << 12) | ((static_cast<uint8_t>(s[i + 1]) & 0x3Fu) << 6) |
           (static_cast<uint8_t>(s[i + 2]) & 0x3Fu);
  }
  *len = 4;
  return ((b0 & 0x07u) << 18) | ((static_cast<uint8_t>(s[i + 1]) & 0x3Fu) << 12) |
         ((static_cast<uint8_t>(s[i + 2]) & 0x3Fu) << 6) | (static_cast<uint8_t>(s[i + 3]) & 0x3Fu);
}

size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = valid_utf8_seq_len(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t vp, need;
    scan_seq(s, i, &vp, &need);
    if (need != 0 && vp == need) {
      out.append(s.substr(i, need));
      i += need;
    } else {
      out.append("\xEF\xBF\xBD");
      i += (vp == 0 ? 1 : vp);
    }
  }
  return out;
}

size_t utf8_stable_prefix(std::string_view s) {
  // Only the last (up to 3) bytes can be an incomplete sequence.
  const size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = start; i < s.size(); ++i) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80 || (b & 0xC0) == 0x80) continue;  // not a lead byte
    size_t vp, need;
    scan_seq(s, i, &vp, &need);
    if (need > 1 && vp == s.size() - i && vp < need) return i;  // valid but truncated tail
  }
  return s.size();
}

const std::array<uint32_t, 256>& byte_to_unicode() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? b : 256 + n++;
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(uint32_t cp) {
  static const std::array<int, 512> inv = [] {
    std::array<int, 512> t;
    t.fill(-1);
    const auto& fwd = byte_to_unicode();
    for (int b = 0; b < 256; ++b) t[fwd[b]] = b;
    return t;
  }();
  return cp < 512 ? inv[cp] : -1;
}

}  // namespace deepinfer::tokenizer
