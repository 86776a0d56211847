// Shared helpers for the tokenizer tests: load each test tokenizer once per process, read JSONL.
#pragma once

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer::testing {

// Names of the tokenizers under tests/data/tokenizers/ (byte-level BPE) and the
// SentencePiece-style one of the stories260K model.
inline const std::vector<std::string>& byte_level_names() {
  static const std::vector<std::string> n = {"deepseek-v3", "llama3", "qwen3", "gpt2"};
  return n;
}

inline std::string tokenizer_dir(const std::string& name) {
  if (name == "stories260K") return "tests/data/models/stories260K/hf";
  return "tests/data/tokenizers/" + name;
}

inline const Tokenizer& load_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return *it->second;
  auto t = Tokenizer::from_dir(tokenizer_dir(name));
  if (!t.ok()) {
    ADD_FAILURE() << "loading " << name << ": " << t.status().to_string();
    std::abort();
  }
  return *(cache[name] = std::move(t).value());
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <typename Json = nlohmann::json>
std::vector<Json> read_jsonl(const std::string& path) {
  std::vector<Json> rows;
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty()) rows.push_back(Json::parse(line));
  }
  return rows;
}

inline std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

}  // namespace deepinfer::tokenizer::testing
