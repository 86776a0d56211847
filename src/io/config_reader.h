// Internal to src/io/config*.cpp: typed, key-tracking access to one JSON object of a config file.
//
// Every getter leaves the output untouched when the key is absent or null (the caller pre-fills
// the default), marks the key as consumed, and returns kInvalidArgument naming
// "<source>: <prefix><key> = <value>: expected <what>" when the value has the wrong type.
// After parsing, warn_unknown_keys() reports keys nobody consumed.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace deepinfer::io::detail {

// Short rendering of a JSON value for messages (strings quoted, long values cut).
std::string json_brief(const nlohmann::json& v);

class ConfigReader {
 public:
  // `obj` must outlive the reader. `prefix` is prepended to key names in messages ("text_config.").
  ConfigReader(const nlohmann::json& obj, std::string source, std::string prefix = "");

  const std::string& source() const { return source_; }
  const std::string& prefix() const { return prefix_; }
  // "<source>: <prefix><key>"
  std::string field(const std::string& key) const;
  // kInvalidArgument "<source>: <prefix><key> = <value>: expected <expected>".
  Status bad(const std::string& key, const std::string& expected) const;

  bool has(const std::string& key) const;      // present and not null (does not consume)
  bool present(const std::string& key) const;  // present, possibly null (does not consume)
  // Raw value (nullptr if absent); marks the key consumed.
  const nlohmann::json* raw(const std::string& key);
  void consume(const std::string& key) { used_.insert(key); }

  Status get(const std::string& key, int64_t* out);   // integer (a float with integral value too)
  Status get(const std::string& key, double* out);    // any number
  Status get(const std::string& key, bool* out);
  Status get(const std::string& key, std::string* out);
  Status get(const std::string& key, std::vector<int64_t>* out);
  Status get(const std::string& key, std::optional<int64_t>* out);  // null -> nullopt
  // An int or a list of ints (eos_token_id).
  Status get_int_or_list(const std::string& key, std::vector<int64_t>* out);

  // Logs one warning per (source, key) for every key not consumed and not in `harmless`.
  void warn_unknown_keys(const std::set<std::string>& harmless) const;

 private:
  const nlohmann::json& obj_;
  std::string source_;
  std::string prefix_;
  std::set<std::string> used_;
};

// Keys HF writes into every config.json that carry no model information.
const std::set<std::string>& hf_bookkeeping_keys();

}  // namespace deepinfer::io::detail
