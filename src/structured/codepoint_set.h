// A set of Unicode code points as sorted, disjoint, non-adjacent closed ranges.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer::structured {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

class CodepointSet {
 public:
  CodepointSet() = default;
  static CodepointSet single(uint32_t c) { CodepointSet s; s.add(c, c); return s; }
  static CodepointSet range(uint32_t lo, uint32_t hi) { CodepointSet s; s.add(lo, hi); return s; }
  static CodepointSet all() { return range(0, kMaxCodepoint); }

  void add(uint32_t lo, uint32_t hi);  // inclusive; normalizes
  void add(const CodepointSet& other);
  CodepointSet complement() const;      // within [0, kMaxCodepoint]
  CodepointSet intersect(const CodepointSet& other) const;
  CodepointSet minus(const CodepointSet& other) const { return intersect(other.complement()); }
  bool contains(uint32_t c) const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// Splits a code point range into UTF-8 byte-range sequences (surrogates D800-DFFF excluded,
// they have no UTF-8 encoding). Each sequence is 1-4 (lo, hi) byte ranges.
using ByteRangeSeq = std::vector<std::pair<uint8_t, uint8_t>>;
std::vector<ByteRangeSeq> utf8_sequences(uint32_t lo, uint32_t hi);

void append_utf8(uint32_t c, std::string* out);

}  // namespace deepinfer::structured
