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

// llama.cpp vocab test vectors `<base>.inp` / `<base>.out`: the strings separated by
// "\n__ggml_vocab_test__\n", and one line of space-separated expected ids per string.
inline void read_llama_cpp_vectors(const std::string& base, std::vector<std::string>* texts,
                                   std::vector<std::vector<int32_t>>* expected) {
  const std::string inp = read_text(base + ".inp");
  const std::string out = read_text(base + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < inp.size();) {
    const size_t hit = inp.find(sep, pos);
    ASSERT_NE(hit, std::string::npos) << "unterminated case in " << base << ".inp";
    texts->push_back(inp.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int32_t v;
    while (ls >> v) ids.push_back(v);
    expected->push_back(ids);
  }
  ASSERT_EQ(texts->size(), expected->size()) << base;
  ASSERT_GE(texts->size(), 30u) << base;
}

}  // namespace deepinfer::tokenizer::testing
