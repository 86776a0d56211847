#include "structured/vocab_from_tokenizer.h"

namespace deepinfer::structured {

StatusOr<std::shared_ptr<const TokenVocabulary>> vocab_from_tokenizer(
    const tokenizer::Tokenizer& tok, int32_t logits_width) {
  int32_t n = tok.vocab_size();
  std::vector<std::string> bytes(n);
  std::vector<uint8_t> special(n, 0);
  for (int32_t i = 0; i < n; ++i) {
    bytes[i] = tok.token_bytes(i);
    special[i] = tok.is_special(i) ? 1 : 0;
  }
  return TokenVocabulary::create(std::move(bytes), std::move(special), tok.eos_ids(),
                                 logits_width < 0 ? n : logits_width);
}

}  // namespace deepinfer::structured
