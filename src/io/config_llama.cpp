// Llama-family config.json -> LlamaConfig (HF LlamaConfig names and defaults).
#include "io/config_internal.h"

namespace deepinfer::io {

Status validate_llama_config(const LlamaConfig& c, const std::string& source) {
  auto fail = [&](const std::string& field, const std::string& value, const std::string& exp) {
    return InvalidArgument(source + ": " + field + " = " + value + ": expected " + exp);
  };
  const std::pair<const char*, int64_t> positives[] = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"max_position_embeddings", c.max_position_embeddings}};
  for (const auto& [name, v] : positives) {
    if (v <= 0) return fail(name, std::to_string(v), "a positive integer");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return fail("num_key_value_heads", std::to_string(c.num_key_value_heads),
                "a divisor of num_attention_heads = " + std::to_string(c.num_attention_heads));
  }
  if (!(c.rms_norm_eps > 0)) return fail("rms_norm_eps", nlohmann::json(c.rms_norm_eps).dump(), "> 0");
  if (c.hidden_act != "silu") return fail("hidden_act", "\"" + c.hidden_act + "\"", "silu");
  DI_RETURN_IF_ERROR(detail::validate_rope(c.rope, c.head_dim, source, "rope_scaling"));
  auto token = [&](const std::string& f, int64_t id) -> Status {
    if (id >= 0 && id < c.vocab_size) return OkStatus();
    return fail(f, std::to_string(id),
                "a token id in [0, vocab_size = " + std::to_string(c.vocab_size) + ")");
  };
  if (c.bos_token_id) DI_RETURN_IF_ERROR(token("bos_token_id", *c.bos_token_id));
  for (int64_t e : c.eos_token_ids) DI_RETURN_IF_ERROR(token("eos_token_id", e));
  if (c.pad_token_id) DI_RETURN_IF_ERROR(token("pad_token_id", *c.pad_token_id));
  return OkStatus();
}

namespace detail {

StatusOr<LlamaConfig> parse_llama(const nlohmann::json& root, const std::string& source) {
  ConfigReader r(root, source);
  LlamaConfig c;
  DI_RETURN_IF_ERROR(r.get("vocab_size", &c.vocab_size));
  DI_RETURN_IF_ERROR(r.get("hidden_size", &c.hidden_size));
  DI_RETURN_IF_ERROR(r.get("intermediate_size", &c.intermediate_size));
  DI_RETURN_IF_ERROR(r.get("num_hidden_layers", &c.num_hidden_layers));
  DI_RETURN_IF_ERROR(r.get("num_attention_heads", &c.num_attention_heads));
  c.num_key_value_heads = c.num_attention_heads;
  DI_RETURN_IF_ERROR(r.get("num_key_value_heads", &c.num_key_value_heads));
  if (r.has("head_dim")) {
    DI_RETURN_IF_ERROR(r.get("head_dim", &c.head_dim));
  } else {
    if (c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0) {
      return InvalidArgument(source + ": hidden_size = " + std::to_string(c.hidden_size) +
                             ": expected a multiple of num_attention_heads = " +
                             std::to_string(c.num_attention_heads) + " when head_dim is absent");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  DI_RETURN_IF_ERROR(r.get("rms_norm_eps", &c.rms_norm_eps));
  DI_RETURN_IF_ERROR(r.get("max_position_embeddings", &c.max_position_embeddings));
  DI_RETURN_IF_ERROR(r.get("tie_word_embeddings", &c.tie_word_embeddings));
  DI_RETURN_IF_ERROR(r.get("hidden_act", &c.hidden_act));
  DI_RETURN_IF_ERROR(r.get("attention_bias", &c.attention_bias));
  DI_RETURN_IF_ERROR(r.get("mlp_bias", &c.mlp_bias));
  DI_RETURN_IF_ERROR(r.get("bos_token_id", &c.bos_token_id));
  DI_RETURN_IF_ERROR(r.get_int_or_list("eos_token_id", &c.eos_token_ids));
  DI_RETURN_IF_ERROR(r.get("pad_token_id", &c.pad_token_id));

  c.rope.theta = 10000.0;
  DI_RETURN_IF_ERROR(r.get("rope_theta", &c.rope.theta));
  DI_RETURN_IF_ERROR(r.get("partial_rotary_factor", &c.rope.partial_rotary_factor));
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const nlohmann::json* b = r.raw(key);
    if (b == nullptr || b->is_null()) continue;
    DI_RETURN_IF_ERROR(parse_rope_block(*b, source, std::string(key) + ".", &c.rope));
  }
  finish_rope(c.head_dim, /*inject_unit_factor=*/false, &c.rope);
  if (c.rope.type == RopeType::kYarn && c.rope.original_max_position_embeddings == 0) {
    c.rope.original_max_position_embeddings = c.max_position_embeddings;
  }
  DI_RETURN_IF_ERROR(validate_llama_config(c, source));
  r.warn_unknown_keys(hf_bookkeeping_keys());
  return c;
}

}  // namespace detail
}  // namespace deepinfer::io
