// DeepSeek-V4 / V4.1 config.json -> DeepseekV4Config (deepseek-v4.md §1, deepseek-v4.1.md §1).
#include <algorithm>
#include <cmath>

#include "common/logging.h"
#include "io/config_internal.h"

namespace deepinfer::io::detail {

using nlohmann::json;

namespace {

constexpr const char* kLayerTypeChoices =
    "one of sliding_attention, compressed_sparse_attention, heavily_compressed_attention";

Status parse_layer_types(ConfigReader& r, const std::string& key, bool v41,
                         std::vector<AttentionType>* out) {
  const json* v = r.raw(key);
  if (!v->is_array()) return r.bad(key, "a list of layer type names");
  out->clear();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    std::string s = e.is_string() ? e.get<std::string>() : "";
    if (s == "sliding_attention") {
      out->push_back(AttentionType::kSliding);
    } else if (s == "compressed_sparse_attention" && !v41) {
      out->push_back(AttentionType::kCompressedSparse);
    } else if (s == "heavily_compressed_attention" && !v41) {
      out->push_back(AttentionType::kHeavilyCompressed);
    } else if (s == "compressed_sparse_attention_2" && v41) {
      out->push_back(AttentionType::kCompressedSparse2);
    } else {
      return InvalidArgument(r.field(key) + "[" + std::to_string(i) + "] = " + json_brief(e) +
                             ": expected " +
                             (v41 ? std::string("one of sliding_attention, "
                                                "compressed_sparse_attention_2")
                                  : std::string(kLayerTypeChoices)));
    }
  }
  return OkStatus();
}

Status parse_mlp_layer_types(ConfigReader& r, const std::string& key, std::vector<MlpType>* out) {
  const json* v = r.raw(key);
  if (!v->is_array()) return r.bad(key, "a list of mlp layer type names");
  out->clear();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    std::string s = e.is_string() ? e.get<std::string>() : "";
    if (s == "moe") {
      out->push_back(MlpType::kMoe);
    } else if (s == "hash_moe") {
      out->push_back(MlpType::kHashMoe);
    } else {
      return InvalidArgument(r.field(key) + "[" + std::to_string(i) + "] = " + json_brief(e) +
                             ": expected one of moe, hash_moe");
    }
  }
  return OkStatus();
}

Status parse_quantization(ConfigReader& parent, DeepseekV4Config* c) {
  const json* q = parent.raw("quantization_config");
  if (q == nullptr || q->is_null()) return OkStatus();
  if (!q->is_object()) return parent.bad("quantization_config", "an object");
  ConfigReader r(*q, parent.source(), parent.prefix() + "quantization_config.");
  QuantizationConfig& out = c->quantization;
  DI_RETURN_IF_ERROR(r.get("quant_method", &out.quant_method));
  DI_RETURN_IF_ERROR(r.get("fmt", &out.fmt));
  DI_RETURN_IF_ERROR(r.get("scale_fmt", &out.scale_fmt));
  DI_RETURN_IF_ERROR(r.get("weight_block_size", &out.weight_block_size));
  DI_RETURN_IF_ERROR(r.get("activation_scheme", &out.activation_scheme));
  DI_RETURN_IF_ERROR(r.get("expert_dtype", &c->expert_dtype));  // V4.1 puts it here
  if (!out.quant_method.empty() && out.quant_method != "fp8") {
    return r.bad("quant_method", "fp8 (the only quantisation deepinfer loads)");
  }
  if (!out.weight_block_size.empty() &&
      (out.weight_block_size.size() != 2 || out.weight_block_size[0] <= 0 ||
       out.weight_block_size[1] <= 0)) {
    return r.bad("weight_block_size", "two positive integers [block_out, block_in]");
  }
  if (!out.scale_fmt.empty() && out.scale_fmt != "ue8m0") {
    return r.bad("scale_fmt", "ue8m0");
  }
  r.warn_unknown_keys({"modules_to_not_convert", "ignored_layers"});
  return OkStatus();
}

Status parse_v41_fields(ConfigReader& r, ConfigReader& root, DeepseekV41Fields* f) {
  DI_RETURN_IF_ERROR(r.get("kv_source_layer_ids", &f->kv_source_layer_ids));
  DI_RETURN_IF_ERROR(r.get("index_source_layer_ids", &f->index_source_layer_ids));
  DI_RETURN_IF_ERROR(r.get("candidate_source_layer_id", &f->candidate_source_layer_id));
  DI_RETURN_IF_ERROR(r.get("candidate_topk_blocks", &f->candidate_topk_blocks));
  DI_RETURN_IF_ERROR(r.get("candidate_block_size", &f->candidate_block_size));
  DI_RETURN_IF_ERROR(r.get("engram_layer_ids", &f->engram_layer_ids));
  DI_RETURN_IF_ERROR(r.get("engram_num_embeddings", &f->engram_num_embeddings));
  DI_RETURN_IF_ERROR(r.get("engram_max_ngram_size", &f->engram_max_ngram_size));
  DI_RETURN_IF_ERROR(r.get("engram_vocab_size", &f->engram_vocab_size));
  DI_RETURN_IF_ERROR(r.get("engram_n_heads", &f->engram_n_heads));
  DI_RETURN_IF_ERROR(r.get("engram_head_dim", &f->engram_head_dim));
  DI_RETURN_IF_ERROR(r.get("engram_pad_token_id", &f->engram_pad_token_id));
  DI_RETURN_IF_ERROR(r.get("engram_compressed_vocab_size", &f->engram_compressed_vocab_size));
  DI_RETURN_IF_ERROR(r.get("dspark_block_size", &f->dspark_block_size));
  DI_RETURN_IF_ERROR(r.get("dspark_noise_token_id", &f->dspark_noise_token_id));
  DI_RETURN_IF_ERROR(r.get("dspark_target_layer_ids", &f->dspark_target_layer_ids));
  DI_RETURN_IF_ERROR(r.get("dspark_markov_rank", &f->dspark_markov_rank));
  DI_RETURN_IF_ERROR(r.get("dspark_n_routed_experts", &f->dspark_n_routed_experts));
  DI_RETURN_IF_ERROR(r.get("dspark_num_experts_per_tok", &f->dspark_num_experts_per_tok));
  DI_RETURN_IF_ERROR(r.get("gate_temp", &f->gate_temp));
  std::optional<int64_t> image;
  DI_RETURN_IF_ERROR(root.get("image_token_id", &image));
  DI_RETURN_IF_ERROR(r.get("image_token_id", &image));
  f->image_token_id = image;
  return OkStatus();
}

}  // namespace

StatusOr<DeepseekV4Config> parse_deepseek_v4(const json& root, const std::string& source,
                                             bool v41) {
  ConfigReader top(root, source);
  const json* text = top.raw("text_config");
  if (text != nullptr && !text->is_null() && !text->is_object()) {
    return top.bad("text_config", "an object");
  }
  const bool nested = text != nullptr && text->is_object();
  ConfigReader inner(nested ? *text : root, source, nested ? "text_config." : "");
  ConfigReader& r = nested ? inner : top;  // model fields
  // `top` = the top level (same object as `r` when not nested).

  DeepseekV4Config c;
  c.is_v41 = v41;
  DI_RETURN_IF_ERROR(r.get("vocab_size", &c.vocab_size));
  DI_RETURN_IF_ERROR(r.get("hidden_size", &c.hidden_size));
  DI_RETURN_IF_ERROR(r.get("num_hidden_layers", &c.num_hidden_layers));
  DI_RETURN_IF_ERROR(r.get("num_attention_heads", &c.num_attention_heads));
  DI_RETURN_IF_ERROR(r.get("num_key_value_heads", &c.num_key_value_heads));
  DI_RETURN_IF_ERROR(r.get("head_dim", &c.head_dim));
  DI_RETURN_IF_ERROR(r.get("q_lora_rank", &c.q_lora_rank));
  DI_RETURN_IF_ERROR(r.get("o_groups", &c.o_groups));
  DI_RETURN_IF_ERROR(r.get("o_lora_rank", &c.o_lora_rank));
  DI_RETURN_IF_ERROR(r.get("sliding_window", &c.sliding_window));
  DI_RETURN_IF_ERROR(r.get("compress_rope_theta", &c.compress_rope_theta));
  DI_RETURN_IF_ERROR(r.get("rope_theta", &c.rope_theta));
  DI_RETURN_IF_ERROR(r.get("max_position_embeddings", &c.max_position_embeddings));
  DI_RETURN_IF_ERROR(r.get("index_n_heads", &c.index_n_heads));
  DI_RETURN_IF_ERROR(r.get("index_head_dim", &c.index_head_dim));
  DI_RETURN_IF_ERROR(r.get("index_topk", &c.index_topk));
  DI_RETURN_IF_ERROR(r.get("hc_mult", &c.hc_mult));
  DI_RETURN_IF_ERROR(r.get("hc_sinkhorn_iters", &c.hc_sinkhorn_iters));
  DI_RETURN_IF_ERROR(r.get("hc_eps", &c.hc_eps));
  DI_RETURN_IF_ERROR(r.get("rms_norm_eps", &c.rms_norm_eps));
  DI_RETURN_IF_ERROR(r.get("n_routed_experts", &c.n_routed_experts));
  DI_RETURN_IF_ERROR(r.get("num_experts_per_tok", &c.num_experts_per_tok));
  DI_RETURN_IF_ERROR(r.get("n_shared_experts", &c.n_shared_experts));
  // `intermediate_size` is HF's alias of moe_intermediate_size; the explicit name wins.
  DI_RETURN_IF_ERROR(r.get("intermediate_size", &c.moe_intermediate_size));
  DI_RETURN_IF_ERROR(r.get("moe_intermediate_size", &c.moe_intermediate_size));
  DI_RETURN_IF_ERROR(r.get("routed_scaling_factor", &c.routed_scaling_factor));
  DI_RETURN_IF_ERROR(r.get("norm_topk_prob", &c.norm_topk_prob));
  DI_RETURN_IF_ERROR(r.get("swiglu_limit", &c.swiglu_limit));
  DI_RETURN_IF_ERROR(r.get("hidden_act", &c.hidden_act));
  DI_RETURN_IF_ERROR(r.get("num_nextn_predict_layers", &c.num_nextn_predict_layers));
  DI_RETURN_IF_ERROR(r.get("tie_word_embeddings", &c.tie_word_embeddings));
  DI_RETURN_IF_ERROR(r.get("attention_bias", &c.attention_bias));
  DI_RETURN_IF_ERROR(r.get("mlp_bias", &c.mlp_bias));
  DI_RETURN_IF_ERROR(r.get("attention_dropout", &c.attention_dropout));
  DI_RETURN_IF_ERROR(r.get("router_jitter_noise", &c.router_jitter_noise));
  DI_RETURN_IF_ERROR(r.get("router_aux_loss_coef", &c.router_aux_loss_coef));
  DI_RETURN_IF_ERROR(r.get("output_router_logits", &c.output_router_logits));
  DI_RETURN_IF_ERROR(r.get("initializer_range", &c.initializer_range));
  DI_RETURN_IF_ERROR(r.get("use_cache", &c.use_cache));
  DI_RETURN_IF_ERROR(r.get("expert_dtype", &c.expert_dtype));
  DI_RETURN_IF_ERROR(r.get("topk_method", &c.topk_method));

  // Token ids: V4.1 keeps them at the top level; text_config (when given) wins.
  {
    std::optional<int64_t> bos = c.bos_token_id;
    DI_RETURN_IF_ERROR(top.get("bos_token_id", &bos));
    DI_RETURN_IF_ERROR(top.get_int_or_list("eos_token_id", &c.eos_token_ids));
    DI_RETURN_IF_ERROR(top.get("pad_token_id", &c.pad_token_id));
    if (nested) {
      DI_RETURN_IF_ERROR(r.get("bos_token_id", &bos));
      DI_RETURN_IF_ERROR(r.get_int_or_list("eos_token_id", &c.eos_token_ids));
      DI_RETURN_IF_ERROR(r.get("pad_token_id", &c.pad_token_id));
    }
    if (!bos) return r.bad("bos_token_id", "an integer token id");
    c.bos_token_id = *bos;
  }

  // Router scoring.
  {
    std::string s = "sqrtsoftplus";
    DI_RETURN_IF_ERROR(r.get("scoring_func", &s));
    if (s == "sqrtsoftplus") c.scoring_func = ScoringFunc::kSqrtSoftplus;
    else if (s == "softmax") c.scoring_func = ScoringFunc::kSoftmax;
    else if (s == "sigmoid") c.scoring_func = ScoringFunc::kSigmoid;
    else return r.bad("scoring_func", "one of sqrtsoftplus, softmax, sigmoid");
  }

  // Rope width (§1.2): partial_rotary_factor, else qk_rope_head_dim / head_dim, else 64/512.
  {
    const bool has_prf = r.has("partial_rotary_factor");
    const bool has_qk = r.has("qk_rope_head_dim");
    int64_t qk = 0;
    DI_RETURN_IF_ERROR(r.get("qk_rope_head_dim", &qk));
    if (has_prf) {
      DI_RETURN_IF_ERROR(r.get("partial_rotary_factor", &c.partial_rotary_factor));
    } else if (has_qk) {
      if (c.head_dim <= 0) return r.bad("head_dim", "a positive integer");
      c.partial_rotary_factor = static_cast<double>(qk) / static_cast<double>(c.head_dim);
    } else {
      c.partial_rotary_factor = 64.0 / 512.0;
    }
    c.qk_rope_head_dim =
        static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
    if (has_prf && has_qk && qk != c.qk_rope_head_dim) {
      return InvalidArgument(r.field("qk_rope_head_dim") + " = " + std::to_string(qk) +
                             ": expected head_dim * partial_rotary_factor = " +
                             std::to_string(c.head_dim) + " * " +
                             json(c.partial_rotary_factor).dump() + " = " +
                             std::to_string(c.qk_rope_head_dim) + " (the two keys disagree)");
    }
  }

  // Compress rates (§1.2): dict, then legacy overrides.
  if (const json* rates = r.raw("compress_rates"); rates != nullptr && !rates->is_null()) {
    if (!rates->is_object()) return r.bad("compress_rates", "an object {layer type: rate}");
    ConfigReader rr(*rates, source, r.prefix() + "compress_rates.");
    DI_RETURN_IF_ERROR(rr.get("compressed_sparse_attention", &c.compress_rate_csa));
    DI_RETURN_IF_ERROR(rr.get("heavily_compressed_attention", &c.compress_rate_hca));
    for (auto it = rates->begin(); it != rates->end(); ++it) {
      if (it.key() != "compressed_sparse_attention" && it.key() != "heavily_compressed_attention") {
        return InvalidArgument(r.field("compress_rates") + " has key '" + it.key() +
                               "': expected only compressed_sparse_attention, "
                               "heavily_compressed_attention");
      }
    }
  }
  DI_RETURN_IF_ERROR(r.get("compress_rate_csa", &c.compress_rate_csa));
  DI_RETURN_IF_ERROR(r.get("compress_rate_hca", &c.compress_rate_hca));

  const int64_t L = c.num_hidden_layers;
  if (L <= 0 || L > 100000) return r.bad("num_hidden_layers", "an integer in [1, 100000]");

  // Layer schedule (§1.2; V4.1 §1.6).
  std::vector<int64_t> ratios;
  const bool has_ratios = r.has("compress_ratios");
  DI_RETURN_IF_ERROR(r.get("compress_ratios", &ratios));
  if (has_ratios) {
    for (size_t i = 0; i < ratios.size(); ++i) {
      const int64_t m = ratios[i];
      const bool ok = v41 ? (m == 0 || m == 1 || m == 2) : (m == 0 || m == 4 || m == 128);
      if (!ok) {
        return InvalidArgument(r.field("compress_ratios") + "[" + std::to_string(i) + "] = " +
                               std::to_string(m) + ": expected one of " +
                               (v41 ? "0, 1, 2" : "0 (sliding), 4 (CSA), 128 (HCA)"));
      }
    }
    if (static_cast<int64_t>(ratios.size()) < L) {
      return InvalidArgument(r.field("compress_ratios") + " has " + std::to_string(ratios.size()) +
                             " entries: expected at least num_hidden_layers = " +
                             std::to_string(L));
    }
    if (v41 && static_cast<int64_t>(ratios.size()) != L + c.num_nextn_predict_layers) {
      return InvalidArgument(r.field("compress_ratios") + " has " + std::to_string(ratios.size()) +
                             " entries: expected num_hidden_layers + num_nextn_predict_layers = " +
                             std::to_string(L + c.num_nextn_predict_layers));
    }
    c.mtp_compress_ratios.assign(ratios.begin() + L, ratios.end());
  }
  if (r.has("layer_types")) {
    DI_RETURN_IF_ERROR(parse_layer_types(r, "layer_types", v41, &c.layer_types));
    if (static_cast<int64_t>(c.layer_types.size()) != L) {
      return InvalidArgument(r.field("layer_types") + " has " +
                             std::to_string(c.layer_types.size()) +
                             " entries: expected num_hidden_layers = " + std::to_string(L));
    }
  } else if (has_ratios) {
    for (int64_t i = 0; i < L; ++i) {
      const int64_t m = ratios[i];
      if (m == 0) c.layer_types.push_back(AttentionType::kSliding);
      else if (v41) c.layer_types.push_back(AttentionType::kCompressedSparse2);
      else if (m == 4) c.layer_types.push_back(AttentionType::kCompressedSparse);
      else c.layer_types.push_back(AttentionType::kHeavilyCompressed);
    }
  } else if (v41) {
    return InvalidArgument(r.field("compress_ratios") +
                           " is missing: a DeepSeek-V4.1 config needs the per-layer ratios");
  } else {
    // HF default (the V4-Pro pattern): 0,1 HCA; then alternating, (l-2) odd -> CSA.
    for (int64_t i = 0; i < L; ++i) {
      const bool csa = i >= 2 && ((i - 2) % 2 == 1);
      c.layer_types.push_back(csa ? AttentionType::kCompressedSparse
                                  : AttentionType::kHeavilyCompressed);
    }
  }
  for (int64_t i = 0; i < L; ++i) {
    switch (c.layer_types[i]) {
      case AttentionType::kSliding: c.compress_ratio.push_back(0); break;
      case AttentionType::kCompressedSparse: c.compress_ratio.push_back(c.compress_rate_csa); break;
      case AttentionType::kHeavilyCompressed: c.compress_ratio.push_back(c.compress_rate_hca); break;
      case AttentionType::kCompressedSparse2:
        if (!has_ratios || ratios[i] == 0) {
          return InvalidArgument(r.field("layer_types") + "[" + std::to_string(i) +
                                 "] = compressed_sparse_attention_2: expected a ratio 1 or 2 in "
                                 "compress_ratios[" + std::to_string(i) + "]");
        }
        c.compress_ratio.push_back(ratios[i]);
        break;
    }
  }

  // MoE schedule (§1.2): mlp_layer_types, else num_hash_layers (default 3; V4.1: none).
  int64_t num_hash = v41 ? 0 : 3;
  DI_RETURN_IF_ERROR(r.get("num_hash_layers", &num_hash));
  if (r.has("mlp_layer_types")) {
    DI_RETURN_IF_ERROR(parse_mlp_layer_types(r, "mlp_layer_types", &c.mlp_layer_types));
    if (static_cast<int64_t>(c.mlp_layer_types.size()) != L) {
      return InvalidArgument(r.field("mlp_layer_types") + " has " +
                             std::to_string(c.mlp_layer_types.size()) +
                             " entries: expected num_hidden_layers = " + std::to_string(L));
    }
  } else {
    if (num_hash < 0) return r.bad("num_hash_layers", "an integer >= 0");
    for (int64_t i = 0; i < L; ++i) {
      c.mlp_layer_types.push_back(i < num_hash ? MlpType::kHashMoe : MlpType::kMoe);
    }
  }

  // Rope parameter sets (§1.3).
  c.rope_main.theta = c.rope_theta;
  c.rope_main.partial_rotary_factor = c.partial_rotary_factor;
  const json* rp = r.raw("rope_parameters");
  const json* rs = r.raw("rope_scaling");
  const bool rp_nested = rp != nullptr && rp->is_object() &&
                         (rp->contains("main") || rp->contains("compress"));
  if (rp_nested) {
    ConfigReader nr(*rp, source, r.prefix() + "rope_parameters.");
    for (const char* kind : {"main", "compress"}) {
      const json* b = nr.raw(kind);
      if (b == nullptr || b->is_null()) {
        return InvalidArgument(nr.field(kind) +
                               " is missing: nested rope_parameters need both main and compress");
      }
      RopeParams& out = std::string(kind) == "main" ? c.rope_main : c.rope_compress;
      out = RopeParams{};
      out.theta = std::string(kind) == "main" ? c.rope_theta : c.compress_rope_theta;
      out.partial_rotary_factor = 1.0;  // HF: a verbatim block without it rotates all of head_dim
      DI_RETURN_IF_ERROR(
          parse_rope_block(*b, source, nr.prefix() + kind + ".", &out));
      if (!b->contains("partial_rotary_factor")) {
        log_warning(nr.field(kind) + " has no partial_rotary_factor: like HF, the whole head_dim "
                    "is rotated (deepseek-v4.md §1.3)");
      }
      if (out.type == RopeType::kYarn && !out.attention_factor_given) {
        log_warning(nr.field(kind) + " is YaRN without attention_factor: like HF, cos/sin are "
                    "scaled by the default 0.1*ln(factor)+1 (deepseek-v4.md §1.3)");
      }
      finish_rope(c.head_dim, /*inject_unit_factor=*/false, &out);
    }
    nr.warn_unknown_keys({});
  } else {
    const json* flat = nullptr;
    std::string flat_name;
    if (rp != nullptr && !rp->is_null()) { flat = rp; flat_name = "rope_parameters"; }
    if (rs != nullptr && !rs->is_null()) { flat = rs; flat_name = "rope_scaling"; }
    c.rope_compress = RopeParams{};
    if (flat != nullptr) {
      DI_RETURN_IF_ERROR(
          parse_rope_block(*flat, source, r.prefix() + flat_name + ".", &c.rope_compress));
    }
    c.rope_compress.theta = c.compress_rope_theta;
    c.rope_compress.partial_rotary_factor = c.partial_rotary_factor;
    finish_rope(c.head_dim, /*inject_unit_factor=*/true, &c.rope_compress);
    c.rope_main.type = RopeType::kDefault;
    finish_rope(c.head_dim, /*inject_unit_factor=*/true, &c.rope_main);
  }
  // YaRN without original_max_position_embeddings uses max_position_embeddings (HF).
  for (RopeParams* rp2 : {&c.rope_main, &c.rope_compress}) {
    if (rp2->type == RopeType::kYarn && rp2->original_max_position_embeddings == 0) {
      rp2->original_max_position_embeddings = c.max_position_embeddings;
    }
  }

  DI_RETURN_IF_ERROR(parse_quantization(r, &c));
  if (nested && c.quantization.quant_method.empty()) {
    DI_RETURN_IF_ERROR(parse_quantization(top, &c));
  }

  if (v41) {
    c.v41.emplace();
    DI_RETURN_IF_ERROR(parse_v41_fields(r, top, &*c.v41));
  }

  DI_RETURN_IF_ERROR(validate_deepseek_v4_config(c, source));

  std::set<std::string> harmless = hf_bookkeeping_keys();
  harmless.insert("vision_config");  // V4.1: vision tower, not used by a text-only engine
  harmless.insert("max_batch_size");
  r.warn_unknown_keys(harmless);
  if (nested) top.warn_unknown_keys(harmless);
  return c;
}

}  // namespace deepinfer::io::detail
