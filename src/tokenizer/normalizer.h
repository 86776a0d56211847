// Normalizers of tokenizer.json ("normalizer"): NFC/NFD/NFKC/NFKD (ICU), Lowercase, Prepend,
// Replace (string or regex), Strip, Sequence. Each rewrites the text; offsets are not tracked
// because deepinfer needs only the ids.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tokenizer/regex.h"

namespace deepinfer::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` in place (valid UTF-8 in, valid UTF-8 out).
  virtual void normalize(std::string& text) const = 0;
};

// Builds the normalizer described by a tokenizer.json "normalizer" object. A null JSON gives
// nullptr (no normalization). Unknown types are an Unimplemented error naming the type.
StatusOr<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& j);

// Unicode normalization forms through ICU; exposed for tests.
enum class UnicodeForm { kNFC, kNFD, kNFKC, kNFKD };
void unicode_normalize(UnicodeForm form, std::string& text);

}  // namespace deepinfer::tokenizer
