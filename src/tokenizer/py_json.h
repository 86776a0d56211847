// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it (", " and ": "
// separators, \uXXXX only for control characters). DeepSeek's reference chat encoder embeds tool
// schemas and arguments this way, so byte-exact prompts need the same serializer.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace deepinfer::tokenizer {

std::string python_json_dumps(const nlohmann::ordered_json& value);

}  // namespace deepinfer::tokenizer
