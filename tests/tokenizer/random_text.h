// Random test strings for the tokenizer differential and streaming tests: mixed scripts, emoji
// (incl. ZWJ sequences), combining marks, control characters, unusual whitespace, long
// whitespace and digit runs, contractions, and strings that look like (or are) special tokens.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer::testing {

class RandomText {
 public:
  explicit RandomText(uint64_t seed, std::vector<std::string> specials = {})
      : rng_(seed), specials_(std::move(specials)) {}

  std::string next() {
    std::string s;
    const int parts = pick(1, 8);
    for (int p = 0; p < parts; ++p) add_part(s);
    return s;
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  void cp(std::string& s, uint32_t c) {
    if (c >= 0xD800 && c <= 0xDFFF) c = 0xFFFD;
    append_utf8(s, c);
  }
  void range(std::string& s, uint32_t lo, uint32_t hi, int n) {
    for (int i = 0; i < n; ++i) cp(s, static_cast<uint32_t>(pick(static_cast<int>(lo), static_cast<int>(hi))));
  }

  void add_part(std::string& s) {
    static const char* kWords[] = {"the", "Hello", "world", "I'm", "you'll", "WE'VE", "it's", "don't",
                                   "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "ſ",
                                   "function", "return", "x", "Ångström", "naïve", "coöperate",
                                   "http://example.com/a?b=c", "a_b", "C++", "i.e.", "--", "...",
                                   "\xE2\x96\x81", "\xE2\x96\x81\xE2\x96\x81x", "Ġ", "Ċ"};
    static const char* kSpecialish[] = {"<|", "|>", "<｜", "｜>", "<|endoftext|", "|endoftext|>",
                                        "<|im_start", "<s", "</s", "<think", "</think", "<0x41>",
                                        "<unk>", "<|begin_of_text|>", "<｜User｜>", "<｜Assistant｜>",
                                        "｜DSML｜", "<｜begin▁of▁sentence｜", "[INST]", "<<SYS>>"};
    static const char* kEmoji[] = {"👋", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇩🇪", "1️⃣", "🤖", "😀😃😄"};
    static const char* kSpaces[] = {" ", "  ", "\t", "\n", "\r\n", "\u00A0", "\u2003", "\u3000",
                                    "\u200B", "\u2028", "\u0085", "\u180E", "\uFEFF", "\u202F", "\x0B", "\x0C"};
    switch (pick(0, 17)) {
      case 0: case 1: s += kWords[pick(0, std::size(kWords) - 1)]; break;
      case 2: s += " "; s += kWords[pick(0, std::size(kWords) - 1)]; break;
      case 3: range(s, 'a', 'z', pick(1, 12)); break;
      case 4: range(s, 0x20, 0x7E, pick(1, 20)); break;
      case 5: range(s, 0x4E00, 0x9FFF, pick(1, 10)); break;           // CJK
      case 6: range(s, 0x3040, 0x30FF, pick(1, 8)); break;            // kana
      case 7: range(s, 0xAC00, 0xD7A3, pick(1, 6)); break;            // Hangul syllables
      case 8: s += kEmoji[pick(0, std::size(kEmoji) - 1)]; break;
      case 9:  // letters with combining marks (NFC-sensitive), incl. decomposed sequences
        for (int i = pick(1, 5); i > 0; --i) {
          cp(s, static_cast<uint32_t>(pick('A', 'z')));
          range(s, 0x300, 0x36F, pick(1, 3));
        }
        break;
      case 10: range(s, 0x00, 0x1F, pick(1, 4)); if (pick(0, 1)) range(s, 0x7F, 0x9F, 1); break;
      case 11: for (int i = pick(1, 40); i > 0; --i) s += kSpaces[pick(0, std::size(kSpaces) - 1)]; break;
      case 12: s += std::string(static_cast<size_t>(pick(1, 64)), pick(0, 1) ? ' ' : '\n'); break;
      case 13: range(s, '0', '9', pick(1, 40)); if (pick(0, 1)) range(s, 0x660, 0x669, pick(1, 5)); if (pick(0, 2) == 0) range(s, 0xFF10, 0xFF19, 3); break;
      case 14:
        if (!specials_.empty() && pick(0, 1)) {
          s += specials_[pick(0, static_cast<int>(specials_.size()) - 1)];
        } else {
          s += kSpecialish[pick(0, std::size(kSpecialish) - 1)];
        }
        break;
      case 15:  // assorted scripts: Latin ext, Greek, Cyrillic, Hebrew, Arabic, Devanagari, Thai
        {
          static const uint32_t kRanges[][2] = {{0xC0, 0x24F}, {0x370, 0x3FF}, {0x400, 0x4FF}, {0x590, 0x5FF},
                                                {0x600, 0x6FF}, {0x900, 0x97F}, {0xE00, 0xE7F}, {0x1E00, 0x1EFF},
                                                {0x2000, 0x2BFF}, {0xFF00, 0xFFEF}};
          const auto& r = kRanges[pick(0, std::size(kRanges) - 1)];
          range(s, r[0], r[1], pick(1, 8));
        }
        break;
      case 16: range(s, 0x10000, 0x1FFFF, pick(1, 3)); break;  // supplementary planes (emoji, math, historic)
      default: range(s, 0x1, 0xFFFF, pick(1, 4)); break;       // anything in the BMP
    }
  }

  std::mt19937_64 rng_;
  std::vector<std::string> specials_;
};

}  // namespace deepinfer::tokenizer::testing
