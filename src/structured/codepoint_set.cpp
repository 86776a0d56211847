#include "structured/codepoint_set.h"

#include <algorithm>

namespace deepinfer::structured {

void CodepointSet::add(uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  ranges_.emplace_back(lo, hi);
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges_) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges_ = std::move(merged);
}

void CodepointSet::add(const CodepointSet& other) {
  for (const auto& r : other.ranges_) add(r.first, r.second);
}

CodepointSet CodepointSet::complement() const {
  CodepointSet out;
  uint32_t next = 0;
  for (const auto& r : ranges_) {
    if (r.first > next) out.ranges_.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= kMaxCodepoint) out.ranges_.emplace_back(next, kMaxCodepoint);
  return out;
}

CodepointSet CodepointSet::intersect(const CodepointSet& other) const {
  CodepointSet out;
  size_t i = 0, j = 0;
  while (i < ranges_.size() && j < other.ranges_.size()) {
    uint32_t lo = std::max(ranges_[i].first, other.ranges_[j].first);
    uint32_t hi = std::min(ranges_[i].second, other.ranges_[j].second);
    if (lo <= hi) out.ranges_.emplace_back(lo, hi);
    if (ranges_[i].second < other.ranges_[j].second) ++i; else ++j;
  }
  return out;
}

bool CodepointSet::contains(uint32_t c) const {
  for (const auto& r : ranges_) {
    if (c < r.first) return false;
    if (c <= r.second) return true;
  }
  return false;
}

namespace {

// Encodes c in exactly n bytes (n is its natural length).
void encode(uint32_t c, int n, uint8_t* out) {
  if (n == 1) { out[0] = static_cast<uint8_t>(c); return; }
  for (int i = n - 1; i > 0; --i) { out[i] = 0x80 | (c & 0x3F); c >>= 6; }
  static const uint8_t lead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  out[0] = lead[n] | static_cast<uint8_t>(c);
}

void split(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>* out) {
  static const uint32_t bounds[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  // Split by encoded length.
  for (int n = 1; n <= 4; ++n) {
    uint32_t min_n = n == 1 ? 0 : bounds[n - 2] + 1;
    uint32_t max_n = bounds[n - 1];
    if (hi < min_n || lo > max_n) continue;
    uint32_t a = std::max(lo, min_n), b = std::min(hi, max_n);
    if (a != lo || b != hi) {
      split(a, b, out);
      continue;
    }
    // Same length. Split until each continuation position spans the full 0x80-0xBF range
    // or the ranges share a prefix.
    for (int i = 1; i < n; ++i) {
      uint32_t m = (1u << (6 * i)) - 1;
      if ((a & ~m) != (b & ~m)) {
        if ((a & m) != 0) {
          split(a, a | m, out);
          split((a | m) + 1, b, out);
          return;
        }
        if ((b & m) != m) {
          split(a, (b & ~m) - 1, out);
          split(b & ~m, b, out);
          return;
        }
      }
    }
    uint8_t ea[4], eb[4];
    encode(a, n, ea);
    encode(b, n, eb);
    ByteRangeSeq seq;
    for (int i = 0; i < n; ++i) seq.emplace_back(ea[i], eb[i]);
    out->push_back(seq);
    return;
  }
}

}  // namespace

std::vector<ByteRangeSeq> utf8_sequences(uint32_t lo, uint32_t hi) {
  std::vector<ByteRangeSeq> out;
  hi = std::min(hi, kMaxCodepoint);
  if (lo > hi) return out;
  if (lo < 0xD800 && hi >= 0xD800) {
    split(lo, std::min(hi, 0xD7FFu), &out);
    if (hi > 0xDFFF) split(0xE000, hi, &out);
  } else if (lo >= 0xD800 && lo <= 0xDFFF) {
    if (hi > 0xDFFF) split(0xE000, hi, &out);
  } else {
    split(lo, hi, &out);
  }
  return out;
}

void append_utf8(uint32_t c, std::string* out) {
  int n = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  uint8_t b[4];
  encode(c, n, b);
  out->append(reinterpret_cast<char*>(b), n);
}

}  // namespace deepinfer::structured
