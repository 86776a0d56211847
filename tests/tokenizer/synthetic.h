// Synthetic tokenizer.json variants (built from stories260K's) for the differential and
// streaming tests.
#pragma once

#include "tests/tokenizer/test_util.h"

namespace deepinfer::tokenizer::testing {

// Synthetic variants of the stories260K tokenizer that exercise what the real files do not:
// added tokens with lstrip / rstrip / single_word / normalized flags, NFC + Strip + Replace
// normalizers, Digits and Metaspace pre-tokenizers, the Metaspace decoder.
inline nlohmann::json synthetic_json(const std::string& name) {
  nlohmann::json j = nlohmann::json::parse(read_text("tests/data/models/stories260K/hf/tokenizer.json"));
  auto add = [&](int id, const char* content, bool lstrip, bool rstrip, bool single_word, bool normalized,
                 bool special) {
    j["added_tokens"].push_back({{"id", id}, {"content", content}, {"single_word", single_word}, {"lstrip", lstrip},
                                 {"rstrip", rstrip}, {"normalized", normalized}, {"special", special}});
  };
  if (name == "synth-flags") {
    add(512, "<mask>", true, false, false, false, true);
    add(513, "[SEP]", false, true, false, false, true);
    add(514, "word", false, false, true, true, false);
    add(515, "Once upon", false, false, false, true, false);  // normalized: matched as "▁Once▁upon"
    add(516, "<x>", true, true, true, false, false);
    j["normalizer"] = nlohmann::json::parse(R"({"type": "Sequence", "normalizers": [
        {"type": "NFC"}, {"type": "Strip", "strip_left": false, "strip_right": true},
        {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]})");
    j["pre_tokenizer"] = nlohmann::json::parse(R"({"type": "Digits", "individual_digits": true})");
  } else {
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = nlohmann::json::parse(
        R"({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true})");
    j["decoder"] = nlohmann::json::parse(
        R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true}]})");
    add(512, "<sep>", false, false, false, false, true);
  }
  return j;
}

inline bool is_synthetic(const std::string& name) { return name.rfind("synth-", 0) == 0; }

inline const Tokenizer& get_tokenizer(const std::string& name) {
  if (!is_synthetic(name)) return load_tokenizer(name);
  static std::map<std::string, std::unique_ptr<Tokenizer>> synth;
  auto& slot = synth[name];
  if (!slot) {
    auto t = Tokenizer::from_json(synthetic_json(name));
    if (!t.ok()) {
      ADD_FAILURE() << name << ": " << t.status().to_string();
      std::abort();
    }
    slot = std::move(t).value();
  }
  return *slot;
}

}  // namespace deepinfer::tokenizer::testing
