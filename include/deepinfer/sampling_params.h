// SamplingParams: how one request's tokens are drawn and when generation stops. Shaped like vLLM's
// `SamplingParams` (same field names and defaults where a user would expect them).
//
//   SamplingParams p;            // greedy-free defaults: temperature 1, no filtering, 16 tokens
//   p.temperature = 0.7f; p.top_p = 0.9f; p.max_tokens = 128; p.stop = {"\n\n"};
//   DI_RETURN_IF_ERROR(p.validate());
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace deepinfer {

// Constrained decoding for one request, shaped like vLLM's `StructuredOutputsParams`: exactly one
// of `json`, `regex`, `grammar`, `json_object` is set. The output then always matches it (the
// sampler only sees tokens the grammar allows; EOS only where the output is complete). Compiled
// by src/structured (docs/structured.md) off the engine thread (src/engine/structured_outputs.h).
//
//   SamplingParams p;
//   p.structured_outputs = StructuredOutputsParams{};
//   p.structured_outputs->json = R"({"type":"object","properties":{"n":{"type":"integer"}}})";
struct StructuredOutputsParams {
  enum class GrammarSyntax { kAuto, kGbnf, kLark };
  enum class Whitespace { kFlexible, kCompact };

  std::optional<std::string> json;     // JSON Schema (draft 2020-12) text
  std::optional<std::string> regex;    // JSON Schema `pattern` dialect, matched against the whole output
  std::optional<std::string> grammar;  // EBNF grammar text: GBNF (llama.cpp) or Lark
  bool json_object = false;            // any JSON value with an object at the root
  // How `grammar` is read. kAuto: GBNF when the text contains `::=` (GBNF rules are
  // `name ::= ...`), else Lark (`name: ...`, start rule `start`).
  GrammarSyntax grammar_syntax = GrammarSyntax::kAuto;
  // JSON Schema: ignore keywords that cannot be enforced exactly (one warning per keyword)
  // instead of refusing the schema. Strict (false) is the default: never silently looser.
  bool lenient = false;
  // JSON Schema `format`: kAssert (default) enforces the supported formats (date, date-time,
  // email, uuid, ...) and refuses unknown ones; kAnnotation treats `format` as draft 2020-12's
  // default vocabulary does, as an annotation that constrains nothing (any string).
  enum class Format { kAssert, kAnnotation };
  Format format = Format::kAssert;
  // JSON (schema or json_object): kFlexible allows bounded whitespace between JSON tokens (like
  // vLLM's default any-whitespace); kCompact allows none.
  Whitespace whitespace = Whitespace::kFlexible;

  // The set field's name ("json", "regex", "grammar", "json_object"); "" when none is set.
  const char* kind() const;
  // Exactly one of json / regex / grammar / json_object, and a set text is non-empty; the message
  // names the fields, e.g. "SamplingParams.structured_outputs sets 'json' and 'regex' (more than
  // one); set exactly one". The spec itself (schema, regex, grammar) is checked when it compiles.
  Status validate() const;
  // A key equal for specs that compile to the same grammar (kind, options and text).
  std::string cache_key() const;
};

struct SamplingParams {
  // Number of output sequences for the prompt. Each sequence has its own sequence index, which keys
  // its random stream (see src/sample/rng.h), so seeded n > 1 requests still give n different samples.
  int n = 1;

  // --- logits processing (applied in this order; see docs/engine.md) -----------------------------
  float repetition_penalty = 1.0f;  // HF definition, over prompt + output tokens. > 0; 1 = off
  float presence_penalty = 0.0f;    // OpenAI definition, over output tokens. [-2, 2]; 0 = off
  float frequency_penalty = 0.0f;   // OpenAI definition, over output tokens. [-2, 2]; 0 = off
  std::map<int32_t, float> logit_bias;  // token id -> added to its logit (before penalties)
  float temperature = 1.0f;  // >= 0; < 1e-5 means greedy (argmax, ties -> lowest token id)
  int top_k = 0;             // 0 or -1 = off; otherwise >= 1
  float top_p = 1.0f;        // (0, 1]; 1 = off
  float min_p = 0.0f;        // [0, 1]; 0 = off
  // Random seed of this request. Without one, the engine derives a seed from its own --seed and the
  // request's arrival index (deterministic per engine run).
  std::optional<uint64_t> seed;

  // --- stopping -----------------------------------------------------------------------------------
  std::vector<std::string> stop;         // stop strings, matched over the detokenized output text
  std::vector<int32_t> stop_token_ids;   // any of these ends the sequence (the token is kept)
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;               // keep generating past the model's EOS token
  std::optional<int> max_tokens = 16;    // output tokens at most; nullopt = up to max_model_len
  int min_tokens = 0;                    // EOS and stop_token_ids are suppressed until this many

  // --- outputs ------------------------------------------------------------------------------------
  // Number of top log-probabilities to return per output token (the sampled token's logprob is
  // always returned when set). nullopt = none. Values are of the raw model logits (vLLM's default
  // `logprobs_mode=raw_logprobs`), see src/sample/sampler.h.
  std::optional<int> logprobs;
  bool detokenize = true;  // false: no output text (token ids only); stop strings need it
  bool skip_special_tokens = true;

  // --- structured outputs -------------------------------------------------------------------------
  // Constrains the output to a JSON Schema / regex / grammar / any JSON object (see above).
  std::optional<StructuredOutputsParams> structured_outputs;

  static constexpr float kGreedyEpsilon = 1e-5f;  // temperature below this is greedy (vLLM _SAMPLING_EPS)
  static constexpr int kMaxLogprobs = 20;         // like OpenAI's top_logprobs limit

  bool is_greedy() const { return temperature < kGreedyEpsilon; }

  // Checks every field against its allowed range, and structured_outputs->validate(); the message
  // names the field, the value given and the range, e.g. "SamplingParams.top_p must be in (0, 1],
  // got 1.5".
  Status validate() const;
  // validate() plus the checks that need the vocabulary size (token ids in logit_bias and
  // stop_token_ids must be < vocab_size).
  Status validate_for_vocab(int64_t vocab_size) const;
};

}  // namespace deepinfer
