// Regexes for JSON numbers with bounds, exact over the text forms they allow:
// integers are written without exponent or fraction; bounded numbers without exponent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace deepinfer::structured {

struct NumberBound {
  double value = 0;
  bool exclusive = false;
};

// Regex for 0 <= a <= I <= b (b = nullopt: unbounded) written without leading zeros.
std::string uint_range_regex(uint64_t a, std::optional<uint64_t> b);

// The JSON text of numbers v with lower <= v <= upper (each optional, possibly exclusive).
// integer_only: integral values, written without exponent; with zero_fraction also with a
// fraction of zeros ("1.0", "-0.00": draft 6 and later count 1.0 as an integer; drafts 3/4 do
// not), and "-0" wherever 0 is in range. Bounded numbers are written without exponent.
// Errors (naming the keyword) when a bound cannot be expressed exactly: a non-integral bound on
// a number, or a bound of magnitude >= 1e15.
StatusOr<std::string> number_regex(bool integer_only, std::optional<NumberBound> lower,
                                   std::optional<NumberBound> upper, bool zero_fraction = false);

// The JSON numerals without exponent whose value is exactly `digits` (an optional '-', decimal
// digits, optionally '.' and more digits; no exponent): the same digits with leading integer
// zeros and trailing fraction zeros removed, then any number of trailing fraction zeros (an
// integral value: none or ".0+"); for zero also "-0" and "-0.0+".
std::string equal_value_regex(const std::string& digits);

// The exact decimal expansion (no exponent) of a JSON numeral, e.g. "1.5e-3" -> "0.0015",
// "-9.007199254740992e+15" -> "-9007199254740992"; empty when it is not a numeral or its
// expansion would exceed max_len characters.
std::string expand_numeral(const std::string& numeral, size_t max_len = 400);

}  // namespace deepinfer::structured
