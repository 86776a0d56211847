// "Plain JSON string text": the bytes a JSON string may hold without escapes — U+0020..U+10FFFF
// except '"' and '\', as well-formed UTF-8 (a final character may be incomplete). A token whose
// bytes are plain text is a "plain token"; the mask fast path (matcher.cpp) allows all short
// enough plain tokens at once when a lexeme provably stays alive and cannot end on such text.
// This is a classifier for tokens only: exactness never depends on it (any lexeme DFA is
// checked against it, see plain_depth.h).
//
// Two classes: kJson (the text above) and kEcmaDot, the same without U+2028 and U+2029 (E2 80 A8,
// E2 80 A9) — the text ECMA `.` matches inside a JSON string. A `pattern` built on `.` dies on
// U+2028, so under kJson its plain depth would be capped at 2 bytes (the walk then visits almost
// the whole trie); under kEcmaDot it is as deep as an ordinary string's.
#pragma once

#include <cstdint>

namespace deepinfer::structured::plain_text {

constexpr int kJson = 0;
constexpr int kEcmaDot = 1;
constexpr int kNumClasses = 2;

// A plain *measure*: a class and a unit of length. Bytes (measures 0, 1) or code points
// (measures 2, 3: kCodePoints + class), where a text's length is the number of characters it
// starts — a final cut character counts as one, so every prefix of a text is at most as long.
// Counted strings (`maxLength`) need code points: with k characters left, k + 1 bytes may still
// be fewer than k + 1 characters, so under a byte measure their misses walk every plain
// subtree longer than k bytes; under code points all plain text of k + 1 characters kills them.
constexpr int kCodePoints = 2;
constexpr int kNumMeasures = 4;
inline int measure_class(int measure) { return measure & 1; }
inline bool measure_counts_code_points(int measure) { return measure >= kCodePoints; }

// States: 0 dead, 1 between characters, 2..8 inside a multi-byte character, 9 after E2 and
// 10 after E2 80 (kEcmaDot only).
constexpr uint8_t kDead = 0;
constexpr uint8_t kStart = 1;
constexpr int kNumStates = 11;

inline uint8_t step(uint8_t state, uint8_t b, int cls = kJson) {
  switch (state) {
    case 1:
      if (b < 0x80) return (b >= 0x20 && b != '"' && b != '\\') ? 1 : 0;
      if (b >= 0xC2 && b <= 0xDF) return 2;
      if (b == 0xE0) return 4;
      if (b == 0xED) return 5;
      if (b == 0xE2 && cls == kEcmaDot) return 9;
      if (b >= 0xE1 && b <= 0xEF) return 3;
      if (b == 0xF0) return 6;
      if (b >= 0xF1 && b <= 0xF3) return 7;
      if (b == 0xF4) return 8;
      return 0;
    case 2: return (b >= 0x80 && b <= 0xBF) ? 1 : 0;        // one continuation byte left
    case 3: return (b >= 0x80 && b <= 0xBF) ? 2 : 0;        // two left
    case 4: return (b >= 0xA0 && b <= 0xBF) ? 2 : 0;        // after E0 (no overlongs)
    case 5: return (b >= 0x80 && b <= 0x9F) ? 2 : 0;        // after ED (no surrogates)
    case 6: return (b >= 0x90 && b <= 0xBF) ? 3 : 0;        // after F0
    case 7: return (b >= 0x80 && b <= 0xBF) ? 3 : 0;        // after F1..F3
    case 8: return (b >= 0x80 && b <= 0x8F) ? 3 : 0;        // after F4 (<= U+10FFFF)
    case 9: return b == 0x80 ? 10 : (b >= 0x81 && b <= 0xBF) ? 2 : 0;  // after E2 (kEcmaDot)
    case 10: return (b >= 0x80 && b <= 0xBF && b != 0xA8 && b != 0xA9) ? 1 : 0;  // after E2 80
    default: return 0;
  }
}

}  // namespace deepinfer::structured::plain_text
