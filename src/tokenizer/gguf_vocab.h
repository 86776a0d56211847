// GGUF vocabulary files (llama.cpp's ggml-vocab-*.gguf): a validating reader for the header and
// key/value metadata, and a converter that builds a Tokenizer from the tokenizer.ggml.* keys.
//
//   DI_ASSIGN_OR_RETURN(auto tok, tokenizer_from_gguf("ggml-vocab-deepseek-llm.gguf.xz"));
//
// Supported: tokenizer.ggml.model "gpt2" (byte-level BPE with merges; tokenizer.ggml.pre
// "deepseek-llm" / "deepseek-coder" regex pre-tokenizers as llama.cpp defines them) and "llama"
// (SentencePiece BPE: the adjacent pair whose merged token has the highest score merges first;
// byte fallback). The conversion builds an equivalent tokenizer.json in memory and loads it
// through Tokenizer::from_json. Tensor infos and data after the metadata are not read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

// One metadata value. Integers of every width are widened (signedness kept), floats to double.
struct GgufValue {
  enum class Kind { kUInt, kInt, kFloat, kBool, kString, kArray };
  Kind kind = Kind::kUInt;
  uint32_t gguf_type = 0;  // the type code in the file (element type for arrays)
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  // Arrays: elements of one type (nested arrays are refused).
  Kind elem_kind = Kind::kUInt;
  std::vector<std::string> strings;
  std::vector<double> floats;
  std::vector<int64_t> ints;  // signed or unsigned integers and bools
};

struct GgufFile {
  uint32_t version = 0;
  uint64_t tensor_count = 0;
  std::map<std::string, GgufValue> kv;
};

// Parses the header and metadata of a GGUF file held in `bytes`; `name` is used in errors.
StatusOr<GgufFile> parse_gguf(std::string_view bytes, const std::string& name);
// Reads (plain or .xz) and parses.
StatusOr<GgufFile> read_gguf(const std::string& path);

// The tokenizer.json and tokenizer_config.json equivalent of a GGUF vocabulary.
struct GgufTokenizerJson {
  nlohmann::json tokenizer;
  nlohmann::json config;
};
StatusOr<GgufTokenizerJson> gguf_to_tokenizer_json(const GgufFile& gguf, const std::string& name);

StatusOr<std::unique_ptr<Tokenizer>> tokenizer_from_gguf(const std::string& path);

}  // namespace deepinfer::tokenizer
