// Adapter: the grammar's TokenVocabulary from deepinfer's Tokenizer (library di_structured_tok,
// so that di_structured itself does not depend on the tokenizer).
#pragma once

#include <memory>

#include "common/status.h"
#include "structured/token_vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::structured {

// logits_width: the model's logits row length (>= tokenizer vocab_size; the padding ids are
// never allowed). -1: the tokenizer's vocab_size.
StatusOr<std::shared_ptr<const TokenVocabulary>> vocab_from_tokenizer(
    const tokenizer::Tokenizer& tok, int32_t logits_width = -1);

}  // namespace deepinfer::structured
