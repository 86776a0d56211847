// DeepSeek's flat inference/config.json (ModelArgs names) -> an HF-style document
// (deepseek-v4.1.md §1.5; the V4-Flash file is tests/data/io/model-configs/deepseek-v4-flash/).
#include "io/config_internal.h"

namespace deepinfer::io::detail {

using nlohmann::json;

bool looks_like_inference_config(const json& j) {
  return j.is_object() && !j.contains("architectures") && !j.contains("model_type") &&
         !j.contains("hidden_size") && j.contains("dim") && j.contains("n_layers");
}

StatusOr<json> translate_inference_config(const json& flat, const std::string& source, bool* v41) {
  // DeepSeek name -> HF name. Keys not listed keep their name (they are spelled the same).
  static const std::pair<const char*, const char*> kRename[] = {
      {"dim", "hidden_size"},
      {"n_layers", "num_hidden_layers"},
      {"n_heads", "num_attention_heads"},
      {"moe_inter_dim", "moe_intermediate_size"},
      {"n_activated_experts", "num_experts_per_tok"},
      {"score_func", "scoring_func"},
      {"route_scale", "routed_scaling_factor"},
      {"rope_head_dim", "qk_rope_head_dim"},
      {"norm_eps", "rms_norm_eps"},
      {"window_size", "sliding_window"},
      {"n_hash_layers", "num_hash_layers"},
      {"n_mtp_layers", "num_nextn_predict_layers"},
      {"kv_source_layers", "kv_source_layer_ids"},
      {"index_source_layers", "index_source_layer_ids"},
      {"candidate_source_layer", "candidate_source_layer_id"},
      {"engram_pad_id", "engram_pad_token_id"},
      {"dspark_n_activated_experts", "dspark_num_experts_per_tok"},
      {"max_seq_len", "max_position_embeddings"},
  };
  json hf = json::object();
  json rope_scaling = json::object();
  json quant = json::object();
  for (auto it = flat.begin(); it != flat.end(); ++it) {
    const std::string& k = it.key();
    std::string name = k;
    for (const auto& [from, to] : kRename) {
      if (k == from) name = to;
    }
    if (k == "original_seq_len") {
      rope_scaling["original_max_position_embeddings"] = *it;
    } else if (k == "rope_factor") {
      rope_scaling["factor"] = *it;
    } else if (k == "beta_fast" || k == "beta_slow" || k == "mscale") {
      rope_scaling[k] = *it;
    } else if (k == "dtype") {
      if (it->is_string() && it->get<std::string>() == "fp8") {
        quant["quant_method"] = "fp8";
        quant["fmt"] = "e4m3";
      }
    } else if (k == "scale_fmt") {
      quant["scale_fmt"] = *it;
    } else if (k.rfind("vision_", 0) == 0 || k == "max_batch_size") {
      // vision tower / batch sizing of DeepSeek's script: nothing for the text model
    } else {
      hf[name] = *it;
    }
  }
  if (rope_scaling.contains("factor")) {
    rope_scaling["rope_type"] = "yarn";
    hf["rope_scaling"] = rope_scaling;
  }
  if (!quant.empty()) hf["quantization_config"] = quant;

  *v41 = flat.contains("kv_source_layers") || flat.contains("index_source_layers");
  if (!*v41 && flat.contains("compress_ratios") && flat["compress_ratios"].is_array()) {
    for (const json& m : flat["compress_ratios"]) {
      if (m.is_number_integer() && (m.get<int64_t>() == 1 || m.get<int64_t>() == 2)) *v41 = true;
    }
  }
  // DeepSeek's code decides CSA by `ratio == 4` and uses any other positive ratio as HCA; HF's
  // compress_ratios accepts only 0/4/128, so spell the schedule out as layer_types.
  if (!*v41 && hf.contains("compress_ratios") && hf["compress_ratios"].is_array() &&
      hf.contains("num_hidden_layers") && hf["num_hidden_layers"].is_number_integer()) {
    const json& ratios = hf["compress_ratios"];
    const int64_t L = hf["num_hidden_layers"].get<int64_t>();
    json types = json::array();
    int64_t hca = -1;
    for (int64_t i = 0; i < L && i < static_cast<int64_t>(ratios.size()); ++i) {
      if (!ratios[i].is_number_integer() || ratios[i].get<int64_t>() < 0) {
        return InvalidArgument(source + ": compress_ratios[" + std::to_string(i) + "] = " +
                               json_brief(ratios[i]) + ": expected an integer >= 0");
      }
      const int64_t m = ratios[i].get<int64_t>();
      if (m == 0) {
        types.push_back("sliding_attention");
      } else if (m == 4) {
        types.push_back("compressed_sparse_attention");
      } else {
        if (hca != -1 && hca != m) {
          return InvalidArgument(source + ": compress_ratios[" + std::to_string(i) + "] = " +
                                 std::to_string(m) + ": expected every HCA layer to use the same "
                                 "ratio (" + std::to_string(hca) + ")");
        }
        hca = m;
        types.push_back("heavily_compressed_attention");
      }
    }
    if (static_cast<int64_t>(types.size()) == L) {
      hf["layer_types"] = types;
      hf["compress_rates"] = {{"compressed_sparse_attention", 4},
                              {"heavily_compressed_attention", hca == -1 ? 128 : hca}};
      // Keep the list only for the MTP entries past L (values checked against 0/4/128).
      json rest = json::array();
      for (size_t i = 0; i < ratios.size(); ++i) {
        const int64_t m = ratios[i].is_number_integer() ? ratios[i].get<int64_t>() : -1;
        rest.push_back(static_cast<int64_t>(i) < L ? 0 : (m == hca && m != 4 ? 128 : m));
      }
      hf["compress_ratios"] = rest;
    }
  }
  return hf;
}

}  // namespace deepinfer::io::detail
