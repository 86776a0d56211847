// Decoders of tokenizer.json ("decoder"): ByteLevel, Replace, ByteFallback, Fuse, Strip,
// Metaspace and Sequence, applied to the token strings exactly as Hugging Face tokenizers
// chains them (each step maps a list of strings to a list of strings).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace deepinfer::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Null JSON gives nullptr (HF then joins the tokens with spaces).
StatusOr<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& j);

// What a decoder does to one token in the middle of a sequence, as data; used for
// token_bytes() and the streaming detokenizer. `supported` is false for chains outside
// {ByteLevel} or {Replace, ByteFallback, Fuse, Strip(leading), Metaspace} combinations.
struct DecoderSpec {
  bool supported = true;
  bool byte_level = false;     // token chars map back through the GPT-2 byte alphabet
  bool byte_fallback = false;  // "<0xAB>" tokens are raw bytes; invalid groups become U+FFFD each
  std::vector<std::pair<std::string, std::string>> replacements;  // in order
  int strip_leading = 0;       // Strip: leading `strip_char`s removed from the start of the output
  char strip_char = ' ';
  // Metaspace: the first token drops its leading replacement (it would decode as a space).
  std::string metaspace_first_token_strip;
};
DecoderSpec describe_decoder(const nlohmann::json& j);

}  // namespace deepinfer::tokenizer
