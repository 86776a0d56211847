// Shared helpers for the structured-output tests.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/json_schema.h"
#include "structured/json_schema_internal.h"
#include "structured/matcher.h"

namespace deepinfer::structured::testing {

using OJson = nlohmann::ordered_json;

// Extracts a .tar.xz under tests/data/structured into a per-process temp folder (once).
inline std::string extract_archive(const std::string& name) {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("di_structured_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  std::string marker = dir + "/." + name + ".done";
  if (!std::filesystem::exists(marker)) {
    std::string cmd = "tar -xJf tests/data/structured/" + name + " -C " + dir;
    if (std::system(cmd.c_str()) != 0) return "";
    std::system(("touch " + marker).c_str());
  }
  return dir;
}

// Drives a matcher over a JSON value serialized compactly with canonical strings and numbers.
// Objects are unordered, so every key order is tried (with rollback) until one is accepted
// completely: the instance is accepted iff some serialization of it is.
class InstanceDriver {
 public:
  // keep_float_form: write integral floats as "1.0" (drafts 3/4, where 1.0 is not an integer);
  // otherwise numbers are written canonically (1.0 -> "1").
  explicit InstanceDriver(GrammarMatcher* m, bool keep_float_form = false)
      : m_(m), keep_float_form_(keep_float_form) {}

  bool accepts(const OJson& v) {
    steps_ = 0;
    return feed(v, [&] { return m_->can_terminate(); });
  }
  bool gave_up() const { return steps_ > kMaxSteps; }

 private:
  static constexpr uint64_t kMaxSteps = 20000;

  bool push(const std::string& s) { ++steps_; return steps_ <= kMaxSteps && m_->accept_bytes(s); }

  bool with(const std::string& s, const std::function<bool()>& cont) {
    if (!push(s)) return false;
    bool r = cont();
    m_->rollback(1);
    return r;
  }

  bool feed(const OJson& v, const std::function<bool()>& cont) {
    if (v.is_object()) {
      std::vector<std::string> keys;
      for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
      std::vector<bool> used(keys.size(), false);
      return with("{", [&] { return members(v, keys, &used, true, cont); });
    }
    if (v.is_array()) {
      return with("[", [&] { return elements(v, 0, cont); });
    }
    std::string text;
    if (v.is_string()) text = json_quote(v.get<std::string>());
    else if (v.is_number_float() && keep_float_form_) text = v.dump();
    else if (v.is_number()) text = json_internal::canonical_number(v);
    else text = v.dump();
    return with(text, cont);
  }

  bool elements(const OJson& v, size_t i, const std::function<bool()>& cont) {
    if (i == v.size()) return with("]", cont);
    auto next = [&] { return feed(v[i], [&] { return elements(v, i + 1, cont); }); };
    if (i == 0) return next();
    return with(",", next);
  }

  bool members(const OJson& v, const std::vector<std::string>& keys, std::vector<bool>* used,
               bool first, const std::function<bool()>& cont) {
    bool any_left = false;
    for (size_t k = 0; k < keys.size(); ++k) {
      if ((*used)[k]) continue;
      any_left = true;
      std::string head = (first ? "" : ",") + json_quote(keys[k]) + ":";
      (*used)[k] = true;
      bool ok = with(head, [&] {
        return feed(v[keys[k]], [&] { return members(v, keys, used, false, cont); });
      });
      (*used)[k] = false;
      if (ok) return true;
      if (steps_ > kMaxSteps) return false;
    }
    if (!any_left) return with("}", cont);
    return false;
  }

  GrammarMatcher* m_;
  bool keep_float_form_;
  uint64_t steps_ = 0;
};

// A small vocabulary of every single byte plus the given multi-byte tokens, one EOS, one
// special token.
inline std::shared_ptr<const TokenVocabulary> byte_vocab(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> toks;
  std::vector<uint8_t> special;
  for (int b = 0; b < 256; ++b) { toks.push_back(std::string(1, static_cast<char>(b))); special.push_back(0); }
  for (const auto& e : extra) { toks.push_back(e); special.push_back(0); }
  toks.push_back("</s>"); special.push_back(1);      // EOS
  toks.push_back("<|tool|>"); special.push_back(1);  // another special token
  int32_t eos = static_cast<int32_t>(toks.size()) - 2;
  return TokenVocabulary::create(toks, special, {eos}, static_cast<int32_t>(toks.size()) + 5).value();
}

// The mask by definition: a token is allowed iff the matcher can take its bytes; EOS iff the
// parse can end; special and empty tokens never.
inline std::vector<bool> brute_force(GrammarMatcher& m, const TokenVocabulary& v) {
  std::vector<bool> allowed(v.vocab_size(), false);
  for (int32_t t = 0; t < v.num_tokens(); ++t) {
    if (v.is_eos(t)) { allowed[t] = m.can_terminate(); continue; }
    if (v.is_special(t) || v.token_bytes(t).empty()) continue;
    allowed[t] = m.can_accept_bytes(v.token_bytes(t));
  }
  return allowed;
}

inline uint32_t test_seed() {
  static const uint32_t seed = std::random_device{}();
  return seed;
}

}  // namespace deepinfer::structured::testing
