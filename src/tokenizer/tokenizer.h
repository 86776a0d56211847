// Tokenizer: Hugging Face tokenizer.json (BPE: byte-level as in DeepSeek-V3/V4, Llama-3, Qwen3,
// GPT-2; SentencePiece-style with byte fallback as in Llama-2 / stories260K), plus the BOS/EOS
// conventions of tokenizer_config.json and generation_config.json.
//
//   DI_ASSIGN_OR_RETURN(auto tok, Tokenizer::from_dir("path/to/model"));
//   DI_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->encode("Hello", /*add_special_tokens=*/true));
//   std::string text = tok->decode(ids, /*skip_special_tokens=*/false);
//
// Thread-safe for concurrent encode/decode (word caches are per thread).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/decoder.h"

namespace deepinfer::tokenizer {

class BpeModel;
class Normalizer;
class PreTokenizer;

class Tokenizer {
 public:
  // Loads tokenizer.json (or tokenizer.json.xz) and, when present, tokenizer_config.json and
  // generation_config.json from `dir`.
  static StatusOr<std::unique_ptr<Tokenizer>> from_dir(const std::string& dir);
  // Loads one tokenizer.json (plain or .xz) with optional configs (null JSON when absent).
  static StatusOr<std::unique_ptr<Tokenizer>> from_file(const std::string& tokenizer_json_path,
                                                        const nlohmann::json& tokenizer_config = {},
                                                        const nlohmann::json& generation_config = {});
  static StatusOr<std::unique_ptr<Tokenizer>> from_json(const nlohmann::json& tokenizer_json,
                                                        const nlohmann::json& tokenizer_config = {},
                                                        const nlohmann::json& generation_config = {});
  ~Tokenizer();

  // Largest id (model vocab or added token) + 1.
  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }
  // The exact bytes token `id` decodes to in the middle of a sequence (byte-level: through the
  // byte alphabet; "<0xAB>" byte-fallback tokens: that byte; added tokens: their content).
  // Empty for ids that do not exist. May be an incomplete UTF-8 sequence.
  const std::string& token_bytes(int32_t id) const;
  // True for added tokens flagged "special" (what skip_special_tokens drops).
  bool is_special(int32_t id) const;
  // The token string as stored in tokenizer.json ("" for unknown ids).
  const std::string& id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The added tokens as listed in tokenizer.json.
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  std::optional<int32_t> bos_id() const { return bos_id_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  // Whether encode(text, true) prepends BOS / appends EOS (or applies the TemplateProcessing).
  bool adds_bos() const { return add_bos_; }

  // Encodes UTF-8 text. add_special_tokens applies the post-processor (BOS etc.); added and
  // special tokens written in the text are always recognised (as HF does). Invalid UTF-8 is an
  // InvalidArgument error naming the byte offset.
  StatusOr<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const;
  // Decodes ids (unknown ids are skipped, like HF). Invalid byte sequences become U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // How decoding treats one token (for the streaming detokenizer).
  const DecoderSpec& decoder_spec() const { return decoder_spec_; }

 private:
  Tokenizer();
  void encode_plain(std::string_view segment, bool at_input_start, std::vector<int32_t>& out) const;
  void encode_normalized(std::string& buf, bool at_input_start, std::vector<int32_t>& out) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  DecoderSpec decoder_spec_;

  std::vector<AddedToken> added_;
  std::unique_ptr<std::vector<AddedToken>> normalized_copies_;  // normalized contents of normalized tokens
  AddedTokenMatcher raw_matcher_;         // normalized=false tokens, on the raw text
  AddedTokenMatcher normalized_matcher_;  // normalized=true tokens, on normalized text

  std::vector<std::string> id_to_token_;
  std::vector<std::string> token_bytes_;
  std::vector<uint8_t> special_;  // per id
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // added by add_special_tokens
  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
  bool add_bos_ = false;
};

// Reads a file; a path ending in ".xz" is decompressed (liblzma).
StatusOr<std::string> read_file_maybe_xz(const std::string& path);

}  // namespace deepinfer::tokenizer
