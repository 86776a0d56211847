// Cross-field validation of DeepSeek-V4 / V4.1 configs (deepseek-v4.md §10.1, deepseek-v4.1.md §1.7).
#include <algorithm>
#include <cmath>

#include "common/logging.h"
#include "io/config_internal.h"

namespace deepinfer::io {

namespace {

std::string num(double v) { return nlohmann::json(v).dump(); }

struct Checker {
  const std::string& source;
  std::string prefix;  // "text_config." for V4.1 nested configs (messages only)

  Status fail(const std::string& field, const std::string& value,
              const std::string& expected) const {
    return InvalidArgument(source + ": " + prefix + field + " = " + value + ": expected " +
                           expected);
  }
  Status positive(const std::string& field, int64_t v) const {
    if (v > 0) return OkStatus();
    return fail(field, std::to_string(v), "a positive integer");
  }
  Status positive(const std::string& field, double v) const {
    if (v > 0) return OkStatus();
    return fail(field, num(v), "> 0");
  }
  Status token(const std::string& field, int64_t id, int64_t vocab) const {
    if (id >= 0 && id < vocab) return OkStatus();
    return fail(field, std::to_string(id), "a token id in [0, vocab_size = " +
                                               std::to_string(vocab) + ")");
  }
  Status layer_id(const std::string& field, size_t i, int64_t id, int64_t L) const {
    if (id >= 0 && id < L) return OkStatus();
    return fail(field + "[" + std::to_string(i) + "]", std::to_string(id),
                "a layer index in [0, num_hidden_layers = " + std::to_string(L) + ")");
  }
};

Status validate_v41(const DeepseekV4Config& c, const Checker& k) {
  const DeepseekV41Fields& f = *c.v41;
  const int64_t L = c.num_hidden_layers;
  for (size_t i = 0; i < f.kv_source_layer_ids.size(); ++i) {
    DI_RETURN_IF_ERROR(k.layer_id("kv_source_layer_ids", i, f.kv_source_layer_ids[i], L));
  }
  for (size_t i = 0; i < f.index_source_layer_ids.size(); ++i) {
    DI_RETURN_IF_ERROR(k.layer_id("index_source_layer_ids", i, f.index_source_layer_ids[i], L));
  }
  auto contains = [](const std::vector<int64_t>& v, int64_t x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  for (size_t i = 0; i < f.kv_source_layer_ids.size(); ++i) {
    const int64_t s = f.kv_source_layer_ids[i];
    if (c.compress_ratio[s] == 0) {
      return k.fail("kv_source_layer_ids[" + std::to_string(i) + "]", std::to_string(s),
                    "a layer with compress ratio > 0 (layer " + std::to_string(s) +
                        " is sliding_attention)");
    }
    if (!contains(f.index_source_layer_ids, s)) {
      return k.fail("kv_source_layer_ids[" + std::to_string(i) + "]", std::to_string(s),
                    "also listed in index_source_layer_ids (index keys exist only on kv sources)");
    }
  }
  // Every compressed layer needs a kv source and an index source <= it with the same ratio.
  for (int64_t l = 0; l < L; ++l) {
    if (c.compress_ratio[l] == 0) continue;
    for (const auto* list : {&f.kv_source_layer_ids, &f.index_source_layer_ids}) {
      int64_t best = -1;
      for (int64_t s : *list) {
        if (s <= l) best = std::max(best, s);
      }
      const char* name = list == &f.kv_source_layer_ids ? "kv_source_layer_ids"
                                                        : "index_source_layer_ids";
      if (best < 0) {
        return k.fail(name, nlohmann::json(*list).dump(),
                      "a source layer <= " + std::to_string(l) + " (layer " + std::to_string(l) +
                          " has compress ratio " + std::to_string(c.compress_ratio[l]) + ")");
      }
      if (c.compress_ratio[best] != c.compress_ratio[l]) {
        return k.fail(name, nlohmann::json(*list).dump(),
                      "the latest source <= layer " + std::to_string(l) + " (layer " +
                          std::to_string(best) + ", ratio " +
                          std::to_string(c.compress_ratio[best]) + ") to have the same ratio " +
                          std::to_string(c.compress_ratio[l]));
      }
    }
  }
  if (f.candidate_source_layer_id != -1) {
    DI_RETURN_IF_ERROR(k.layer_id("candidate_source_layer_id", 0, f.candidate_source_layer_id, L));
    if (!contains(f.index_source_layer_ids, f.candidate_source_layer_id)) {
      return k.fail("candidate_source_layer_id", std::to_string(f.candidate_source_layer_id),
                    "-1 or one of index_source_layer_ids");
    }
    DI_RETURN_IF_ERROR(k.positive("candidate_topk_blocks", f.candidate_topk_blocks));
    DI_RETURN_IF_ERROR(k.positive("candidate_block_size", f.candidate_block_size));
  }
  for (size_t i = 0; i < f.engram_layer_ids.size(); ++i) {
    DI_RETURN_IF_ERROR(k.layer_id("engram_layer_ids", i, f.engram_layer_ids[i], L));
  }
  if (f.engram_num_embeddings.size() != f.engram_layer_ids.size()) {
    return k.fail("engram_num_embeddings", nlohmann::json(f.engram_num_embeddings).dump(),
                  "one entry per engram_layer_ids entry (" +
                      std::to_string(f.engram_layer_ids.size()) + ")");
  }
  if (!f.engram_layer_ids.empty()) {
    DI_RETURN_IF_ERROR(k.positive("engram_n_heads", f.engram_n_heads));
    DI_RETURN_IF_ERROR(k.positive("engram_head_dim", f.engram_head_dim));
    if (f.engram_max_ngram_size < 2) {
      return k.fail("engram_max_ngram_size", std::to_string(f.engram_max_ngram_size), ">= 2");
    }
  }
  for (size_t i = 0; i < f.dspark_target_layer_ids.size(); ++i) {
    DI_RETURN_IF_ERROR(k.layer_id("dspark_target_layer_ids", i, f.dspark_target_layer_ids[i], L));
  }
  if (!(f.gate_temp > 0)) return k.fail("gate_temp", num(f.gate_temp), "> 0");
  return OkStatus();
}

}  // namespace

Status validate_deepseek_v4_config(const DeepseekV4Config& c, const std::string& source) {
  Checker k{source, c.is_v41 ? "text_config." : ""};
  DI_RETURN_IF_ERROR(k.positive("vocab_size", c.vocab_size));
  DI_RETURN_IF_ERROR(k.positive("hidden_size", c.hidden_size));
  DI_RETURN_IF_ERROR(k.positive("num_hidden_layers", c.num_hidden_layers));
  DI_RETURN_IF_ERROR(k.positive("num_attention_heads", c.num_attention_heads));
  DI_RETURN_IF_ERROR(k.positive("head_dim", c.head_dim));
  DI_RETURN_IF_ERROR(k.positive("q_lora_rank", c.q_lora_rank));
  DI_RETURN_IF_ERROR(k.positive("o_groups", c.o_groups));
  DI_RETURN_IF_ERROR(k.positive("o_lora_rank", c.o_lora_rank));
  DI_RETURN_IF_ERROR(k.positive("sliding_window", c.sliding_window));
  DI_RETURN_IF_ERROR(k.positive("max_position_embeddings", c.max_position_embeddings));
  DI_RETURN_IF_ERROR(k.positive("index_n_heads", c.index_n_heads));
  DI_RETURN_IF_ERROR(k.positive("index_head_dim", c.index_head_dim));
  DI_RETURN_IF_ERROR(k.positive("index_topk", c.index_topk));
  DI_RETURN_IF_ERROR(k.positive("hc_mult", c.hc_mult));
  DI_RETURN_IF_ERROR(k.positive("hc_sinkhorn_iters", c.hc_sinkhorn_iters));
  DI_RETURN_IF_ERROR(k.positive("hc_eps", c.hc_eps));
  DI_RETURN_IF_ERROR(k.positive("rms_norm_eps", c.rms_norm_eps));
  DI_RETURN_IF_ERROR(k.positive("n_routed_experts", c.n_routed_experts));
  DI_RETURN_IF_ERROR(k.positive("num_experts_per_tok", c.num_experts_per_tok));
  DI_RETURN_IF_ERROR(k.positive("moe_intermediate_size", c.moe_intermediate_size));
  DI_RETURN_IF_ERROR(k.positive("routed_scaling_factor", c.routed_scaling_factor));
  DI_RETURN_IF_ERROR(k.positive("swiglu_limit", c.swiglu_limit));
  DI_RETURN_IF_ERROR(k.positive("compress_rope_theta", c.compress_rope_theta));
  DI_RETURN_IF_ERROR(k.positive("rope_theta", c.rope_theta));
  DI_RETURN_IF_ERROR(k.positive("compress_rates.compressed_sparse_attention", c.compress_rate_csa));
  DI_RETURN_IF_ERROR(k.positive("compress_rates.heavily_compressed_attention", c.compress_rate_hca));
  if (c.num_key_value_heads != 1) {
    return k.fail("num_key_value_heads", std::to_string(c.num_key_value_heads),
                  "1 (DeepSeek-V4 has one shared K=V head)");
  }
  if (c.num_attention_heads % c.o_groups != 0) {
    return k.fail("o_groups", std::to_string(c.o_groups),
                  "a divisor of num_attention_heads = " + std::to_string(c.num_attention_heads));
  }
  if (c.num_experts_per_tok > c.n_routed_experts) {
    return k.fail("num_experts_per_tok", std::to_string(c.num_experts_per_tok),
                  "<= n_routed_experts = " + std::to_string(c.n_routed_experts));
  }
  if (c.num_nextn_predict_layers < 0) {
    return k.fail("num_nextn_predict_layers", std::to_string(c.num_nextn_predict_layers), ">= 0");
  }
  if (c.hidden_act != "silu") {
    return k.fail("hidden_act", "\"" + c.hidden_act + "\"", "silu");
  }
  // Rope width r = head_dim * partial_rotary_factor (§10.1).
  const double exact_r = static_cast<double>(c.head_dim) * c.partial_rotary_factor;
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1) ||
      std::fabs(exact_r - std::round(exact_r)) > 1e-9 || c.qk_rope_head_dim <= 0 ||
      c.qk_rope_head_dim % 2 != 0) {
    return k.fail("partial_rotary_factor", num(c.partial_rotary_factor),
                  "head_dim * partial_rotary_factor (= qk_rope_head_dim) to be a positive even "
                  "integer <= head_dim = " + std::to_string(c.head_dim) + ", got " + num(exact_r));
  }
  const std::string rp = c.is_v41 ? "text_config.rope_parameters." : "rope_parameters.";
  DI_RETURN_IF_ERROR(detail::validate_rope(c.rope_main, c.head_dim, source, rp + "main"));
  DI_RETURN_IF_ERROR(detail::validate_rope(c.rope_compress, c.head_dim, source, rp + "compress"));
  for (const RopeParams* r : {&c.rope_main, &c.rope_compress}) {
    const std::string which = r == &c.rope_main ? "main" : "compress";
    if (r->rotary_dim > c.index_head_dim) {
      return k.fail("index_head_dim", std::to_string(c.index_head_dim),
                    ">= the rope width " + std::to_string(r->rotary_dim) + " of rope '" + which +
                        "' (the indexer rotates its trailing rope channels)");
    }
  }
  const int64_t L = c.num_hidden_layers;
  if (static_cast<int64_t>(c.layer_types.size()) != L) {
    return k.fail("layer_types", std::to_string(c.layer_types.size()) + " entries",
                  "num_hidden_layers = " + std::to_string(L) + " entries");
  }
  if (static_cast<int64_t>(c.mlp_layer_types.size()) != L) {
    return k.fail("mlp_layer_types", std::to_string(c.mlp_layer_types.size()) + " entries",
                  "num_hidden_layers = " + std::to_string(L) + " entries");
  }
  if (static_cast<int64_t>(c.compress_ratio.size()) != L) {
    return k.fail("compress_ratios", std::to_string(c.compress_ratio.size()) + " entries",
                  "num_hidden_layers = " + std::to_string(L) + " entries");
  }
  for (int64_t i = 0; i < L; ++i) {
    const bool v41_type = c.layer_types[i] == AttentionType::kCompressedSparse2;
    if (v41_type != (c.is_v41 && c.layer_types[i] != AttentionType::kSliding)) {
      return k.fail("layer_types[" + std::to_string(i) + "]",
                    attention_type_name(c.layer_types[i]),
                    c.is_v41 ? "sliding_attention or compressed_sparse_attention_2 (V4.1)"
                             : "one of sliding_attention, compressed_sparse_attention, "
                               "heavily_compressed_attention");
    }
    if (c.is_v41 && c.mlp_layer_types[i] == MlpType::kHashMoe) {
      return k.fail("mlp_layer_types[" + std::to_string(i) + "]", "hash_moe",
                    "moe (DeepSeek-V4.1 has no hash-routed layers)");
    }
  }
  if (c.compress_rate_hca == 4 && c.num_layers_of(AttentionType::kHeavilyCompressed) > 0) {
    log_warning(source + ": compress_rates.heavily_compressed_attention = 4: DeepSeek's own "
                "inference code treats every ratio-4 layer as CSA (deepseek-v4.md §10.1)");
  }
  DI_RETURN_IF_ERROR(k.token("bos_token_id", c.bos_token_id, c.vocab_size));
  for (size_t i = 0; i < c.eos_token_ids.size(); ++i) {
    DI_RETURN_IF_ERROR(k.token(c.eos_token_ids.size() == 1 ? std::string("eos_token_id")
                                                           : "eos_token_id[" + std::to_string(i) + "]",
                               c.eos_token_ids[i], c.vocab_size));
  }
  if (c.pad_token_id) DI_RETURN_IF_ERROR(k.token("pad_token_id", *c.pad_token_id, c.vocab_size));
  if (!c.expert_dtype.empty() && c.expert_dtype != "fp4" && c.expert_dtype != "fp8" &&
      c.expert_dtype != "bf16") {
    return k.fail("expert_dtype", "\"" + c.expert_dtype + "\"", "one of fp4, fp8, bf16");
  }
  if (c.is_v41) {
    if (!c.v41) return Internal(source + ": V4.1 config without its V4.1 fields");
    DI_RETURN_IF_ERROR(validate_v41(c, k));
  }
  return OkStatus();
}

}  // namespace deepinfer::io
