// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): Split (regex or string; Isolated, Removed,
// MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel (optional prefix space and
// the GPT-2 regex), Digits, Whitespace, WhitespaceSplit, Metaspace and Sequence.
//
// Pieces are byte spans over one buffer; only steps that change the text (Metaspace, ByteLevel
// with add_prefix_space) rebuild the buffer. ByteLevel's byte -> unicode mapping itself is not
// applied here: byte-level BPE consumes raw bytes (see bpe_model.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace deepinfer::tokenizer {

struct Span {
  uint32_t begin, end;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Refines `pieces` (spans of `buf`, in order). `at_input_start`: the buffer begins at offset 0
  // of the user's text (Metaspace prepend_scheme "first").
  virtual void pre_tokenize(std::string& buf, std::vector<Span>& pieces,
                            bool at_input_start) const = 0;
  // True when this pre-tokenizer (or one in its sequence) is ByteLevel.
  virtual bool has_byte_level() const { return false; }
};

// Null JSON gives nullptr (the whole text is one word). Unknown types are Unimplemented.
StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& j);

}  // namespace deepinfer::tokenizer
