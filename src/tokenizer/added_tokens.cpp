#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <memory>

#include <unicode/uchar.h>

#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

bool is_white_space(uint32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)); }

// HF tests single_word boundaries with the Rust regex crate's Unicode \w: Alphabetic, marks,
// decimal digits, connector punctuation and Join_Control.
bool is_word_char(uint32_t cp) {
  const auto c = static_cast<UChar32>(cp);
  if (cp == 0x200C || cp == 0x200D) return true;
  const int8_t t = u_charType(c);
  if (t == U_UNASSIGNED) {
    // Unassigned in ICU 72 (Unicode 15) but maybe assigned in Unicode 16, which HF uses.
    static const std::unique_ptr<Regex> newer = [] {
      auto re = Regex::compile("^[\\p{L}\\p{M}\\p{N}]");
      return re.ok() ? std::move(re).value() : nullptr;
    }();
    std::string one;
    append_utf8(one, cp);
    size_t ms, me;
    return newer != nullptr && newer->find(one, 0, &ms, &me);
  }
  return u_isUAlphabetic(c) || t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK ||
         t == U_ENCLOSING_MARK || t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

// Code point ending at byte offset `end` (exclusive) of valid UTF-8 text.
uint32_t last_cp(std::string_view s, size_t end, size_t* start) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  size_t len;
  *start = i;
  return decode_utf8(s, i, &len);
}

}  // namespace

void AddedTokenMatcher::build(const std::vector<const AddedToken*>& tokens) {
  nodes_.assign(1, Node{});
  patterns_.clear();
  std::fill(std::begin(first_byte_), std::end(first_byte_), false);
  for (const AddedToken* t : tokens) {
    if (t->content.empty()) continue;
    int32_t n = 0;
    for (unsigned char b : t->content) {
      int32_t c = child(n, b);
      if (c < 0) {
        c = static_cast<int32_t>(nodes_.size());
        nodes_.push_back(Node{});
        auto& nx = nodes_[n].next;
        nx.insert(std::upper_bound(nx.begin(), nx.end(), std::make_pair(b, INT32_MIN),
                                   [](const auto& x, const auto& y) { return x.first < y.first; }),
                  {b, c});
      }
      n = c;
    }
    if (nodes_[n].pattern < 0) {  // first definition wins for duplicate contents
      nodes_[n].pattern = static_cast<int32_t>(patterns_.size());
      patterns_.push_back(t);
    }
    first_byte_[static_cast<uint8_t>(t->content[0])] = true;
  }
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t b) const {
  const auto& nx = nodes_[node].next;
  for (const auto& [k, v] : nx) {
    if (k == b) return v;
    if (k > b) break;
  }
  return -1;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSplit>& out) const {
  size_t start_offset = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    // Longest pattern starting at i.
    int32_t n = 0, best = -1;
    size_t best_end = 0;
    for (size_t k = i; k < text.size(); ++k) {
      n = child(n, static_cast<uint8_t>(text[k]));
      if (n < 0) break;
      if (nodes_[n].pattern >= 0) {
        best = nodes_[n].pattern;
        best_end = k + 1;
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken* tok = patterns_[best];
    size_t start = i, stop = best_end;
    if (tok->single_word) {
      size_t cs;
      const bool start_space = start == 0 || !is_word_char(last_cp(text, start, &cs));
      size_t len = 0;
      const bool stop_space =
          stop == text.size() || !is_word_char(decode_utf8(text, stop, &len));
      if (!start_space || !stop_space) {
        i = best_end;  // HF drops this match; the matcher resumes after it
        continue;
      }
    }
    if (tok->lstrip) {
      size_t s = start;
      while (s > start_offset) {
        size_t cs;
        const uint32_t cp = last_cp(text, s, &cs);
        if (!is_white_space(cp)) break;
        s = cs;
      }
      start = std::max(s, start_offset);
    }
    if (tok->rstrip) {
      while (stop < text.size()) {
        size_t len;
        const uint32_t cp = decode_utf8(text, stop, &len);
        if (!is_white_space(cp)) break;
        stop += len;
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, tok->id});
    start_offset = stop;
    i = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace deepinfer::tokenizer
