// A compiled PCRE2 pattern (UTF + UCP, JIT when available) translated from the Oniguruma syntax
// Hugging Face tokenizers uses. The one translation needed: Oniguruma's \s / \S are the Unicode
// White_Space property, while PCRE2's \s (even with UCP) differs (e.g. U+0085, U+180E), so they
// are rewritten into an explicit class. And \p{L|N|P|S|M} get the code points Unicode 16 (HF's
// Oniguruma) assigned after Unicode 14 (Debian 12's PCRE2): see gen_unicode16_delta.py.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace deepinfer::tokenizer {

class Regex {
 public:
  // Compiles `pattern` (Oniguruma syntax as written in tokenizer.json).
  static StatusOr<std::unique_ptr<Regex>> compile(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Finds the first match in subject[start..]; subject must be valid UTF-8. Returns false when
  // there is none; otherwise [*mstart, *mend) are byte offsets into `subject`.
  bool find(std::string_view subject, size_t start, size_t* mstart, size_t* mend) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// The translation applied before compiling (exposed for tests).
StatusOr<std::string> translate_oniguruma_pattern(const std::string& pattern);

}  // namespace deepinfer::tokenizer
