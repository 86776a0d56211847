// Sampler: one token per logits row, from fp32 logits, following vLLM v1's order of operations.
//
// Per row (params = that row's SamplingParams):
//   1. raw logprobs   = log_softmax(logits)                    (if logprobs requested, mode kRaw)
//   1b. token mask    : if the row has an allowed_token_mask (structured outputs), logits[t] = -inf
//                       for every t whose bit is clear. Applied before anything that can pick a
//                       token, so no later step can revive a disallowed token (bias, penalties and
//                       temperature keep -inf; min-p/top-k/top-p only drop tokens). If every allowed
//                       token ends at -inf (e.g. raw -inf logits, or min_tokens suppressing an EOS
//                       the grammar requires), the row falls back to the lowest allowed id, never
//                       to a disallowed one.
//   2. logit_bias     : logits[t] += bias[t]
//   3. min_tokens     : while fewer than min_tokens outputs, EOS and stop_token_ids -> -inf
//   4. penalties      : repetition (HF: over prompt+output; l>0 ? l/r : l*r), then
//                       frequency/presence (OpenAI: over output; l -= f*count + p*(count>0))
//   5. greedy rows (temperature < 1e-5): argmax, ties -> lowest token id. Done.
//   6. temperature    : logits /= T
//   7. min_p          : drop t with prob(t) < min_p * max prob
//   8. top_k          : keep logits >= the k-th largest (ties at the boundary kept, as vLLM)
//   9. top_p          : rank by (prob desc, id asc); keep t while the mass ranked above t < top_p
//  10. draw           : exponential race: argmax_t p(t) / E_t with E_t = -ln U_t,
//                       U_t = token_uniform(seed, sequence_index, output_position, t) (see rng.h);
//                       P(t wins) = p(t). Ties -> lowest id.
// Logprobs (vLLM's default `logprobs_mode=raw_logprobs`): of the raw model logits, step 1 — also
// for masked rows: the logprob of the sampled token is the model's, before the grammar mask (as
// vLLM returns them). With LogprobsMode::kProcessed they are the log_softmax of the row after
// step 9 (after step 4 for greedy rows), so masked and filtered-out tokens have -inf.
// Rows without a mask take exactly the path they took before masks existed (bit-identical).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "common/status.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer::sample {

enum class LogprobsMode { kRaw, kProcessed };

// What the sampler needs to know about the sequence behind one logits row.
struct SampleRow {
  const SamplingParams* params = nullptr;       // required
  uint64_t seed = 0;                            // the request's resolved seed
  uint32_t sequence_index = 0;                  // which of the n sequences
  std::span<const int32_t> prompt_token_ids;    // for the repetition penalty
  std::span<const int32_t> output_token_ids;    // tokens generated so far; its size is the output position
  int32_t eos_token_id = -1;                    // < 0: the model has none
  // Structured outputs: [ceil(vocab_size / 32)] words, bit (t & 31) of word (t >> 5) set when
  // token t may be sampled (GrammarMatcher::fill_mask's layout). Empty = unconstrained.
  std::span<const uint32_t> allowed_token_mask;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  friend bool operator==(const TokenLogprob&, const TokenLogprob&) = default;
};

struct SampledToken {
  int32_t token = 0;
  // Only when params->logprobs is set:
  std::optional<float> logprob;        // of the sampled token
  int rank = 0;                        // 1 + number of tokens with a strictly higher logprob
  std::vector<TokenLogprob> top_logprobs;  // params->logprobs entries, logprob desc, ties id asc
};

struct SamplerOptions {
  LogprobsMode logprobs_mode = LogprobsMode::kRaw;
};

class Sampler {
 public:
  explicit Sampler(SamplerOptions options = {}) : options_(options) {}

  // logits: [rows.size(), vocab_size] row-major fp32. Returns one SampledToken per row, or
  // InvalidArgument if the shapes disagree, a row has no params, or a row's allowed_token_mask is
  // shorter than ceil(vocab_size / 32) words or allows no token below vocab_size.
  StatusOr<std::vector<SampledToken>> sample(std::span<const float> logits, int64_t vocab_size,
                                             std::span<const SampleRow> rows) const;

  // One row; `row_logits` [vocab_size].
  SampledToken sample_row(std::span<const float> row_logits, const SampleRow& row) const;

 private:
  SamplerOptions options_;
};

// The common case on its own: a row without mask, logit_bias, active min_tokens, penalties or
// logprobs goes through steps 5–10 only. This is what Backend::sample computes (the CPU backend
// calls these functions, so its result is the host sampler's, bit for bit; a device computes the
// same definition, see docs/engine.md "Sampling on the device").
struct PlainSampleRow {
  float temperature = 1.0f;     // < SamplingParams::kGreedyEpsilon: greedy
  int top_k = 0;                // 0 or -1 = off
  float top_p = 1.0f;           // (0, 1]
  float min_p = 0.0f;           // [0, 1]
  uint64_t seed = 0;
  uint32_t sequence_index = 0;
  uint32_t output_position = 0; // number of output tokens before this one
};
// Whether a row with these params and `num_output_tokens` outputs so far takes the plain path
// (Sampler::sample_row gives sample_plain_row's token for it): no structured outputs, logit_bias,
// penalties or logprobs, and min_tokens already reached.
bool is_plain_row(const SamplingParams& params, int64_t num_output_tokens);
// Fields in range (the SamplingParams rules), else InvalidArgument naming row `index` and the field.
Status validate_plain_row(const PlainSampleRow& row, size_t index);
// One row [vocab_size] (non-empty).
int32_t sample_plain_row(std::span<const float> row_logits, const PlainSampleRow& row);
// logits [rows.size(), vocab_size] -> out [rows.size()]; rows run in parallel as in
// Sampler::sample. InvalidArgument for mismatched sizes or a row out of range.
Status sample_plain_rows(std::span<const float> logits, int64_t vocab_size,
                         std::span<const PlainSampleRow> rows, std::span<int32_t> out);

// Building blocks, exposed for tests. All act in place on one row [vocab].
void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     std::span<const int32_t> prompt_token_ids, std::span<const int32_t> output_token_ids);
void apply_min_p(std::span<float> logits, float min_p);
void apply_top_k(std::span<float> logits, int top_k);
void apply_top_p(std::span<float> logits, float top_p);
std::vector<float> log_softmax(std::span<const float> logits);
// logits[t] = -inf where bit t of `mask` is clear. mask: [>= ceil(logits.size() / 32)] words.
void apply_token_mask(std::span<float> logits, std::span<const uint32_t> mask);
// Lowest t < vocab_size whose bit is set in `mask`; -1 if none.
int32_t first_allowed_token(std::span<const uint32_t> mask, int64_t vocab_size);
int32_t argmax_lowest_id(std::span<const float> logits);

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace deepinfer::sample
