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
// integer_only: no fraction. Errors (naming the keyword) when a bound cannot be expressed
// exactly: a non-integral bound on a number, or a bound of magnitude >= 1e15.
StatusOr<std::string> number_regex(bool integer_only, std::optional<NumberBound> lower,
                                   std::optional<NumberBound> upper);

}  // namespace deepinfer::structured
