// Internals of the JSON Schema compiler, shared by its source files.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/json_number_regex.h"
#include "structured/json_schema.h"

namespace deepinfer::structured::json_internal {

using Json = nlohmann::ordered_json;

// A subschema and its location ("#/properties/a").
struct SRef {
  const Json* node = nullptr;
  std::string ptr;
};

// A schema taking part in a conjunction; `consumed` marks combinators already expanded.
struct Member {
  SRef ref;
  uint32_t consumed = 0;  // kConsumedAnyOf | kConsumedOneOf
};
inline constexpr uint32_t kConsumedAnyOf = 1, kConsumedOneOf = 2;

enum TypeBit : uint8_t {
  kNull = 1, kBool = 2, kObject = 4, kArray = 8, kString = 16, kInteger = 32, kFraction = 64,
};
inline constexpr uint8_t kAllTypes = 127;

// The conjunction of schemas without combinators, merged keyword by keyword.
struct Plain {
  uint8_t types = kAllTypes;
  bool has_enum = false;
  std::vector<Json> enum_values;
  std::string enum_ptr;
  std::vector<std::pair<std::string, std::string>> patterns;  // (pattern, pointer)
  std::vector<std::pair<std::string, std::string>> formats;
  std::optional<uint64_t> min_len, max_len;
  std::optional<NumberBound> lower, upper;
  std::string bound_ptr;
  struct ObjMember {
    const Json* props = nullptr;
    std::string ptr;  // of the schema holding properties/additionalProperties
    std::optional<SRef> additional;
  };
  std::vector<ObjMember> obj_members;
  std::vector<std::string> required;
  std::optional<uint64_t> min_props, max_props;
  std::string props_count_ptr;
  struct ArrMember {
    std::vector<SRef> prefix;
    std::optional<SRef> rest;
  };
  std::vector<ArrMember> arr_members;
  uint64_t min_items = 0;
  std::optional<uint64_t> max_items;
  bool unique_items = false;
  std::string unique_ptr;
  std::vector<SRef> contains;  // `contains` subschemas (arrays only)
};

std::string pointer_escape(const std::string& key);
std::string canonical_number(const Json& v);
uint8_t value_type(const Json& v);  // one TypeBit (integral numbers: kInteger)
bool json_equal(const Json& a, const Json& b);  // JSON Schema equality (1 == 1.0)

}  // namespace deepinfer::structured::json_internal
