#include "sample/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <unordered_map>

#include "common/check.h"
#include "common/thread_pool.h"
#include "sample/rng.h"

namespace deepinfer::sample {
namespace {

float max_finite_or_neg_inf(std::span<const float> logits) {
  float m = kNegInf;
  for (float v : logits) m = std::max(m, v);
  return m;
}

void fill_top_logprobs(std::span<const float> logprobs, int32_t token, int n, SampledToken* out) {
  const float chosen = logprobs[static_cast<size_t>(token)];
  out->logprob = chosen;
  out->rank = 1;
  for (float v : logprobs) out->rank += (v > chosen) ? 1 : 0;
  if (n <= 0) return;
  std::vector<int32_t> ids(logprobs.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = std::min(static_cast<size_t>(n), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                    [&](int32_t a, int32_t b) {
                      if (logprobs[a] != logprobs[b]) return logprobs[a] > logprobs[b];
                      return a < b;
                    });
  out->top_logprobs.reserve(k);
  for (size_t i = 0; i < k; ++i) out->top_logprobs.push_back({ids[i], logprobs[ids[i]]});
}

// Rows are independent (a row's token depends only on its logits, params and counter-based RNG),
// so they run in parallel: a random row visits every token (one Philox draw, exp and log each),
// ~10 ms for a 129k vocabulary, which would otherwise serialise a batch's step. The pool is the
// sampler's own (the process-wide one may be inside the forward pass on another thread).
void for_each_row(size_t n, const std::function<void(int64_t, int64_t)>& run) {
  if (n < 2) {
    run(0, static_cast<int64_t>(n));
    return;
  }
  static ThreadPool pool(0);
  static std::mutex pool_mutex;  // one batch at a time (several engines in one process)
  std::lock_guard<std::mutex> lock(pool_mutex);
  pool.parallel_for(static_cast<int64_t>(n), run, 1);
}

// Steps 5–10 on a row that went through steps 1b–4, in place (`logits` ends as the processed row,
// which kProcessed logprobs read). Returns the token, or -1 when a random row has every token
// suppressed (the caller picks the fallback).
int32_t draw_processed(std::vector<float>& logits, const PlainSampleRow& row) {
  if (row.temperature < SamplingParams::kGreedyEpsilon) return argmax_lowest_id(logits);
  const float inv_t = 1.0f / row.temperature;
  for (float& v : logits) v *= inv_t;
  apply_min_p(logits, row.min_p);
  apply_top_k(logits, row.top_k);
  apply_top_p(logits, row.top_p);
  // Exponential race over the kept tokens (scale-free, so no normalisation is needed).
  const float m = max_finite_or_neg_inf(logits);
  if (m == kNegInf) return -1;
  double best_score = -1.0;
  int32_t best = -1;
  for (size_t t = 0; t < logits.size(); ++t) {
    if (logits[t] == kNegInf) continue;
    const double p = std::exp(static_cast<double>(logits[t]) - m);
    const double e = -std::log(
        token_uniform(row.seed, row.sequence_index, row.output_position, static_cast<uint32_t>(t)));
    const double score = p / e;
    if (score > best_score) {
      best_score = score;
      best = static_cast<int32_t>(t);
    }
  }
  return best;
}

}  // namespace

bool is_plain_row(const SamplingParams& params, int64_t num_output_tokens) {
  return !params.structured_outputs && params.logit_bias.empty() && !params.logprobs &&
         params.repetition_penalty == 1.0f && params.frequency_penalty == 0.0f &&
         params.presence_penalty == 0.0f && num_output_tokens >= params.min_tokens;
}

Status validate_plain_row(const PlainSampleRow& row, size_t index) {
  auto bad = [&](const char* field, const std::string& range, const std::string& value) {
    return InvalidArgument("sample: row " + std::to_string(index) + " " + field + " must be " + range +
                           ", got " + value);
  };
  if (!std::isfinite(row.temperature) || row.temperature < 0.0f)
    return bad("temperature", "a finite number >= 0 (0 = greedy)", std::to_string(row.temperature));
  if (row.top_k < -1) return bad("top_k", "0 or -1 (off) or at least 1", std::to_string(row.top_k));
  if (!std::isfinite(row.top_p) || row.top_p <= 0.0f || row.top_p > 1.0f)
    return bad("top_p", "in (0, 1]", std::to_string(row.top_p));
  if (!std::isfinite(row.min_p) || row.min_p < 0.0f || row.min_p > 1.0f)
    return bad("min_p", "in [0, 1]", std::to_string(row.min_p));
  return OkStatus();
}

int32_t sample_plain_row(std::span<const float> row_logits, const PlainSampleRow& row) {
  std::vector<float> logits(row_logits.begin(), row_logits.end());
  const int32_t token = draw_processed(logits, row);
  return token >= 0 ? token : argmax_lowest_id(logits);  // everything suppressed: id 0
}

Status sample_plain_rows(std::span<const float> logits, int64_t vocab_size,
                         std::span<const PlainSampleRow> rows, std::span<int32_t> out) {
  if (vocab_size <= 0) return InvalidArgument("sample: vocab_size must be > 0, got " + std::to_string(vocab_size));
  if (logits.size() != rows.size() * static_cast<size_t>(vocab_size))
    return InvalidArgument("sample: logits has " + std::to_string(logits.size()) + " values, expected [" +
                           std::to_string(rows.size()) + " rows, " + std::to_string(vocab_size) + " vocab]");
  if (out.size() != rows.size())
    return InvalidArgument("sample: " + std::to_string(out.size()) + " outputs for " +
                           std::to_string(rows.size()) + " rows");
  for (size_t r = 0; r < rows.size(); ++r) DI_RETURN_IF_ERROR(validate_plain_row(rows[r], r));
  const auto V = static_cast<size_t>(vocab_size);
  for_each_row(rows.size(), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const auto i = static_cast<size_t>(r);
      out[i] = sample_plain_row(logits.subspan(i * V, V), rows[i]);
    }
  });
  return OkStatus();
}

std::vector<float> log_softmax(std::span<const float> logits) {
  std::vector<float> out(logits.size(), kNegInf);
  const float m = max_finite_or_neg_inf(logits);
  if (m == kNegInf) return out;
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - m);
  const double log_z = m + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) {
    out[i] = static_cast<float>(static_cast<double>(logits[i]) - log_z);
  }
  return out;
}

void apply_token_mask(std::span<float> logits, std::span<const uint32_t> mask) {
  DI_CHECK(mask.size() * 32 >= logits.size()) << "token mask has " << mask.size() << " words for "
                                               << logits.size() << " logits";
  const size_t n = logits.size();
  for (size_t w = 0; w * 32 < n; ++w) {
    const uint32_t bits = mask[w];
    if (bits == 0xffffffffu) continue;
    const size_t end = std::min(n, w * 32 + 32);
    for (size_t t = w * 32; t < end; ++t) {
      if (((bits >> (t & 31)) & 1u) == 0) logits[t] = kNegInf;
    }
  }
}

int32_t first_allowed_token(std::span<const uint32_t> mask, int64_t vocab_size) {
  for (size_t w = 0; w < mask.size() && static_cast<int64_t>(w) * 32 < vocab_size; ++w) {
    if (mask[w] == 0) continue;
    const int64_t t = static_cast<int64_t>(w) * 32 + std::countr_zero(mask[w]);
    return t < vocab_size ? static_cast<int32_t>(t) : -1;
  }
  return -1;
}

int32_t argmax_lowest_id(std::span<const float> logits) {
  DI_CHECK(!logits.empty()) << "empty logits row";
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  return best;
}

void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     std::span<const int32_t> prompt_token_ids, std::span<const int32_t> output_token_ids) {
  const auto vocab = static_cast<int64_t>(logits.size());
  auto in_vocab = [&](int32_t t) { return t >= 0 && t < vocab; };
  if (params.repetition_penalty != 1.0f) {
    std::vector<bool> seen(logits.size(), false);
    for (int32_t t : prompt_token_ids) if (in_vocab(t)) seen[t] = true;
    for (int32_t t : output_token_ids) if (in_vocab(t)) seen[t] = true;
    const float r = params.repetition_penalty;
    for (size_t t = 0; t < logits.size(); ++t) {
      if (!seen[t]) continue;
      logits[t] = logits[t] > 0.0f ? logits[t] / r : logits[t] * r;
    }
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t t : output_token_ids) if (in_vocab(t)) ++counts[t];
    for (const auto& [t, c] : counts) {
      logits[t] -= params.frequency_penalty * static_cast<float>(c) + params.presence_penalty;
    }
  }
}

void apply_min_p(std::span<float> logits, float min_p) {
  if (min_p <= 0.0f) return;
  const float m = max_finite_or_neg_inf(logits);
  if (m == kNegInf) return;
  // prob(t) / max_prob = exp(l_t - m); drop when below min_p.
  for (float& v : logits) {
    if (std::exp(static_cast<double>(v) - m) < static_cast<double>(min_p)) v = kNegInf;
  }
}

void apply_top_k(std::span<float> logits, int top_k) {
  if (top_k <= 0 || static_cast<size_t>(top_k) >= logits.size()) return;
  std::vector<float> sorted(logits.begin(), logits.end());
  std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[static_cast<size_t>(top_k - 1)];
  for (float& v : logits) {
    if (v < kth) v = kNegInf;
  }
}

void apply_top_p(std::span<float> logits, float top_p) {
  if (top_p >= 1.0f) return;
  const float m = max_finite_or_neg_inf(logits);
  if (m == kNegInf) return;
  std::vector<int32_t> ids;
  std::vector<double> p(logits.size(), 0.0);
  double z = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == kNegInf) continue;
    p[i] = std::exp(static_cast<double>(logits[i]) - m);
    z += p[i];
    ids.push_back(static_cast<int32_t>(i));
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    if (p[a] != p[b]) return p[a] > p[b];
    return a < b;
  });
  double mass_above = 0.0;
  size_t keep = 0;
  for (; keep < ids.size(); ++keep) {
    if (mass_above >= static_cast<double>(top_p)) break;
    mass_above += p[ids[keep]] / z;
  }
  for (size_t i = keep; i < ids.size(); ++i) logits[ids[i]] = kNegInf;
}

SampledToken Sampler::sample_row(std::span<const float> row_logits, const SampleRow& row) const {
  DI_CHECK(row.params != nullptr) << "SampleRow without params";
  const SamplingParams& params = *row.params;
  const bool want_logprobs = params.logprobs.has_value();
  const auto output_position = static_cast<uint32_t>(row.output_token_ids.size());
  SampledToken result;

  std::vector<float> raw_logprobs;
  if (want_logprobs && options_.logprobs_mode == LogprobsMode::kRaw) raw_logprobs = log_softmax(row_logits);

  std::vector<float> logits(row_logits.begin(), row_logits.end());
  const auto vocab = static_cast<int64_t>(logits.size());
  const bool masked = !row.allowed_token_mask.empty();
  if (masked) apply_token_mask(logits, row.allowed_token_mask);
  for (const auto& [t, bias] : params.logit_bias) {
    if (t >= 0 && t < vocab) logits[t] += bias;
  }
  if (static_cast<int>(row.output_token_ids.size()) < params.min_tokens) {
    if (row.eos_token_id >= 0 && row.eos_token_id < vocab) logits[row.eos_token_id] = kNegInf;
    for (int32_t t : params.stop_token_ids) {
      if (t >= 0 && t < vocab) logits[t] = kNegInf;
    }
  }
  apply_penalties(logits, params, row.prompt_token_ids, row.output_token_ids);

  const PlainSampleRow plain{params.temperature, params.top_k, params.top_p, params.min_p,
                            row.seed, row.sequence_index, output_position};
  result.token = draw_processed(logits, plain);
  if (params.is_greedy()) {
    if (masked && logits[static_cast<size_t>(result.token)] == kNegInf) {
      result.token = first_allowed_token(row.allowed_token_mask, vocab);  // every allowed one is -inf
    }
  } else if (result.token < 0) {
    // Everything suppressed: deterministic fallback (id 0, or the lowest allowed id).
    result.token =
        masked ? first_allowed_token(row.allowed_token_mask, vocab) : argmax_lowest_id(logits);
  }

  DI_CHECK(result.token >= 0) << "allowed_token_mask allows no token (Sampler::sample checks this)";
  if (want_logprobs) {
    if (options_.logprobs_mode == LogprobsMode::kRaw) {
      fill_top_logprobs(raw_logprobs, result.token, *params.logprobs, &result);
    } else {
      fill_top_logprobs(log_softmax(logits), result.token, *params.logprobs, &result);
    }
  }
  return result;
}

StatusOr<std::vector<SampledToken>> Sampler::sample(std::span<const float> logits, int64_t vocab_size,
                                                    std::span<const SampleRow> rows) const {
  if (vocab_size <= 0) return InvalidArgument("Sampler: vocab_size must be > 0, got " + std::to_string(vocab_size));
  if (logits.size() != rows.size() * static_cast<size_t>(vocab_size)) {
    return InvalidArgument("Sampler: logits has " + std::to_string(logits.size()) + " values, expected [" +
                           std::to_string(rows.size()) + " rows, " + std::to_string(vocab_size) + " vocab]");
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].params == nullptr) return InvalidArgument("Sampler: row " + std::to_string(r) + " has no SamplingParams");
    const auto& mask = rows[r].allowed_token_mask;
    if (!mask.empty()) {
      const size_t words = (static_cast<size_t>(vocab_size) + 31) / 32;
      if (mask.size() < words) {
        return InvalidArgument("Sampler: row " + std::to_string(r) + " allowed_token_mask has " +
                               std::to_string(mask.size()) + " words, expected ceil(" +
                               std::to_string(vocab_size) + " / 32) = " + std::to_string(words));
      }
      if (first_allowed_token(mask, vocab_size) < 0) {
        return InvalidArgument("Sampler: row " + std::to_string(r) +
                               " allowed_token_mask allows no token below vocab_size " +
                               std::to_string(vocab_size));
      }
    }
  }
  std::vector<SampledToken> out(rows.size());
  for_each_row(rows.size(), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      out[static_cast<size_t>(r)] = sample_row(
          logits.subspan(static_cast<size_t>(r) * static_cast<size_t>(vocab_size),
                         static_cast<size_t>(vocab_size)),
          rows[static_cast<size_t>(r)]);
  });
  return out;
}

}  // namespace deepinfer::sample
