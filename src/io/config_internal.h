// Internal to src/io/config*.cpp: the per-family parsers behind parse_model_config().
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "io/config.h"
#include "io/config_reader.h"

namespace deepinfer::io::detail {

// Parses one rope block (flat HF keys: rope_type|type, rope_theta, partial_rotary_factor, factor,
// original_max_position_embeddings, beta_fast, beta_slow, attention_factor, mscale,
// mscale_all_dim, truncate, low_freq_factor, high_freq_factor) over the values already in *out.
// Marks the consumed keys of `block`; warns about unknown ones. Does not resolve
// attention_factor or rotary_dim (see finish_rope).
Status parse_rope_block(const nlohmann::json& block, const std::string& source,
                        const std::string& prefix, RopeParams* out);
// Computes rotary_dim from head_dim and resolves yarn's attention_factor: `inject_unit_factor`
// = true for blocks built from flat keys (HF injects attention_factor 1.0, deepseek-v4.md §1.3).
void finish_rope(int64_t head_dim, bool inject_unit_factor, RopeParams* out);
// Checks one resolved rope block; `name` is the field path used in messages.
Status validate_rope(const RopeParams& r, int64_t head_dim, const std::string& source,
                     const std::string& name);

// DeepSeek-V4 / V4.1 from an HF-style document (V4.1: `root` is the top level; the model fields
// are read from `text_config` when present).
StatusOr<DeepseekV4Config> parse_deepseek_v4(const nlohmann::json& root, const std::string& source,
                                             bool v41);
// DeepSeek's flat inference/config.json -> the equivalent HF-style document.
StatusOr<nlohmann::json> translate_inference_config(const nlohmann::json& flat,
                                                    const std::string& source, bool* v41);
bool looks_like_inference_config(const nlohmann::json& j);

StatusOr<LlamaConfig> parse_llama(const nlohmann::json& root, const std::string& source);

}  // namespace deepinfer::io::detail
