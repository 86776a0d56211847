// Checkpoint tensor names -> canonical names (deepseek-v4.md §8.1-§8.3; see weight_registry.h).
#include <cctype>
#include <unordered_map>

#include "io/weight_registry.h"

namespace deepinfer::io {

std::string layer_weight(int64_t layer, std::string_view suffix) {
  return "layers." + std::to_string(layer) + "." + std::string(suffix);
}
std::string mtp_weight(int64_t mtp_layer, std::string_view suffix) {
  return "mtp." + std::to_string(mtp_layer) + "." + std::string(suffix);
}
std::string expert_weight(int64_t layer, int64_t expert, std::string_view w) {
  return "layers." + std::to_string(layer) + ".ffn.experts." + std::to_string(expert) + "." +
         std::string(w);
}

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// Parses "<prefix><int>." at the start of s; on success returns the length consumed.
size_t parse_indexed(std::string_view s, std::string_view prefix, int64_t* index) {
  if (!starts_with(s, prefix)) return 0;
  size_t i = prefix.size();
  size_t begin = i;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == begin || i - begin > 9 || i >= s.size() || s[i] != '.') return 0;
  if (s[begin] == '0' && i - begin > 1) return 0;  // no leading zeros
  *index = std::stoll(std::string(s.substr(begin, i - begin)));
  return i + 1;
}

using Table = std::unordered_map<std::string, std::string>;

const Table& v4_global_table() {
  static const Table t = {
      {"embed.weight", "embed"},
      {"embed_tokens.weight", "embed"},
      {"head.weight", "head"},
      {"lm_head.weight", "head"},
      {"norm.weight", "norm"},
      {"hc_head_fn", "hc_head.fn"},
      {"hc_head_base", "hc_head.base"},
      {"hc_head_scale", "hc_head.scale"},
      {"hc_head.hc_fn", "hc_head.fn"},
      {"hc_head.hc_base", "hc_head.base"},
      {"hc_head.hc_scale", "hc_head.scale"},
  };
  return t;
}

// Names inside one decoder layer ("layers.{i}." or "mtp.{j}." stripped).
const Table& v4_layer_table() {
  static const Table t = [] {
    Table m = {
        {"attn_norm.weight", "attn_norm"},
        {"input_layernorm.weight", "attn_norm"},
        {"ffn_norm.weight", "ffn_norm"},
        {"post_attention_layernorm.weight", "ffn_norm"},
        {"attn.wq_a.weight", "attn.wq_a"},
        {"self_attn.q_a_proj.weight", "attn.wq_a"},
        {"attn.q_norm.weight", "attn.q_norm"},
        {"self_attn.q_a_norm.weight", "attn.q_norm"},
        {"attn.wq_b.weight", "attn.wq_b"},
        {"self_attn.q_b_proj.weight", "attn.wq_b"},
        {"attn.wkv.weight", "attn.wkv"},
        {"self_attn.kv_proj.weight", "attn.wkv"},
        {"attn.kv_norm.weight", "attn.kv_norm"},
        {"attn.norm.weight", "attn.kv_norm"},  // save_pretrained quirk (§8.3)
        {"self_attn.kv_norm.weight", "attn.kv_norm"},
        {"attn.wo_a.weight", "attn.wo_a"},
        {"self_attn.o_a_proj.weight", "attn.wo_a"},
        {"attn.wo_b.weight", "attn.wo_b"},
        {"self_attn.o_b_proj.weight", "attn.wo_b"},
        {"attn.attn_sink", "attn.sinks"},
        {"self_attn.sinks", "attn.sinks"},
        {"attn.indexer.wq_b.weight", "attn.indexer.wq_b"},
        {"self_attn.compressor.indexer.q_b_proj.weight", "attn.indexer.wq_b"},
        {"attn.indexer.weights_proj.weight", "attn.indexer.weights_proj"},
        {"self_attn.compressor.indexer.scorer.weights_proj.weight", "attn.indexer.weights_proj"},
        {"ffn.gate.weight", "ffn.gate"},
        {"mlp.gate.weight", "ffn.gate"},
        {"ffn.gate.bias", "ffn.gate_bias"},
        {"mlp.gate.e_score_correction_bias", "ffn.gate_bias"},
        {"ffn.gate.tid2eid", "ffn.tid2eid"},
        {"mlp.gate.tid2eid", "ffn.tid2eid"},
        {"ffn.shared_experts.w1.weight", "ffn.shared.w1"},
        {"ffn.shared_experts.w2.weight", "ffn.shared.w2"},
        {"ffn.shared_experts.w3.weight", "ffn.shared.w3"},
        {"mlp.shared_experts.gate_proj.weight", "ffn.shared.w1"},
        {"mlp.shared_experts.down_proj.weight", "ffn.shared.w2"},
        {"mlp.shared_experts.up_proj.weight", "ffn.shared.w3"},
        {"mlp.experts.gate_up_proj", "ffn.experts.*.gate_up"},
        {"mlp.experts.down_proj", "ffn.experts.*.down"},
    };
    for (const char* site : {"attn", "ffn"}) {
      for (const char* p : {"fn", "base", "scale"}) {
        const std::string canon = std::string("hc_") + site + "." + p;
        m[std::string("hc_") + site + "_" + p] = canon;      // upstream: hc_attn_fn
        m[std::string(site) + "_hc." + p] = canon;           // HF: attn_hc.fn
      }
    }
    // Compressors: upstream attn.compressor.* / attn.indexer.compressor.*, HF
    // self_attn.compressor.* / self_attn.compressor.indexer.*.
    const std::pair<const char*, const char*> comp[] = {
        {"wkv.weight", "wkv"}, {"wgate.weight", "wgate"}, {"norm.weight", "norm"}, {"ape", "ape"}};
    const std::pair<const char*, const char*> comp_hf[] = {{"kv_proj.weight", "wkv"},
                                                           {"gate_proj.weight", "wgate"},
                                                           {"kv_norm.weight", "norm"},
                                                           {"position_bias", "ape"}};
    for (const auto& [up, canon] : comp) {
      m[std::string("attn.compressor.") + up] = std::string("attn.compressor.") + canon;
      m[std::string("attn.indexer.compressor.") + up] =
          std::string("attn.indexer.compressor.") + canon;
    }
    for (const auto& [hf, canon] : comp_hf) {
      m[std::string("self_attn.compressor.") + hf] = std::string("attn.compressor.") + canon;
      m[std::string("self_attn.compressor.indexer.") + hf] =
          std::string("attn.indexer.compressor.") + canon;
    }
    return m;
  }();
  return t;
}

// Extra names of an MTP block (§9).
const Table& v4_mtp_table() {
  static const Table t = {
      {"e_proj.weight", "e_proj"},       {"h_proj.weight", "h_proj"},
      {"enorm.weight", "enorm"},         {"hnorm.weight", "hnorm"},
      {"norm.weight", "norm"},           {"hc_head_fn", "hc_head.fn"},
      {"hc_head_base", "hc_head.base"},  {"hc_head_scale", "hc_head.scale"},
      {"hc_head.hc_fn", "hc_head.fn"},   {"hc_head.hc_base", "hc_head.base"},
      {"hc_head.hc_scale", "hc_head.scale"},
  };
  return t;
}

// Maps a name with the "model." prefix already stripped; no scale handling.
std::optional<std::string> map_v4_plain(std::string_view s) {
  int64_t idx = 0;
  size_t n = 0;
  std::string scope;
  const Table* extra = nullptr;
  if ((n = parse_indexed(s, "layers.", &idx)) != 0) {
    scope = "layers." + std::to_string(idx) + ".";
  } else if ((n = parse_indexed(s, "mtp.", &idx)) != 0) {
    scope = "mtp." + std::to_string(idx) + ".";
    extra = &v4_mtp_table();
  } else {
    auto it = v4_global_table().find(std::string(s));
    if (it == v4_global_table().end()) return std::nullopt;
    return it->second;
  }
  std::string_view rest = s.substr(n);
  if (extra != nullptr) {
    auto it = extra->find(std::string(rest));
    if (it != extra->end()) return scope + it->second;
  }
  auto it = v4_layer_table().find(std::string(rest));
  if (it != v4_layer_table().end()) return scope + it->second;
  // ffn.experts.{e}.w{1,2,3}.weight
  int64_t e = 0;
  size_t m = parse_indexed(rest, "ffn.experts.", &e);
  if (m != 0) {
    std::string_view w = rest.substr(m);
    if (w == "w1.weight" || w == "w2.weight" || w == "w3.weight") {
      return scope + "ffn.experts." + std::to_string(e) + "." + std::string(w.substr(0, 2));
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> canonical_deepseek_v4_name(std::string_view name, bool* is_scale) {
  *is_scale = false;
  std::string_view s = name;
  if (starts_with(s, "model.")) s.remove_prefix(6);
  if (auto m = map_v4_plain(s)) return m;
  for (std::string_view suffix : {std::string_view(".weight_scale_inv"), std::string_view(".scale")}) {
    if (!ends_with(s, suffix)) continue;
    std::string base = std::string(s.substr(0, s.size() - suffix.size())) + ".weight";
    if (auto m = map_v4_plain(base)) {
      *is_scale = true;
      return m;
    }
  }
  return std::nullopt;
}

std::optional<std::string> canonical_llama_name(std::string_view name) {
  std::string_view s = name;
  if (starts_with(s, "model.")) s.remove_prefix(6);
  static const Table global = {
      {"embed_tokens.weight", "embed"}, {"lm_head.weight", "head"}, {"norm.weight", "norm"}};
  static const Table layer = [] {
    Table m = {{"input_layernorm.weight", "attn_norm"},
               {"post_attention_layernorm.weight", "ffn_norm"}};
    const std::pair<const char*, const char*> proj[] = {
        {"self_attn.q_proj", "attn.wq"}, {"self_attn.k_proj", "attn.wk"},
        {"self_attn.v_proj", "attn.wv"}, {"self_attn.o_proj", "attn.wo"},
        {"mlp.gate_proj", "ffn.w1"},     {"mlp.up_proj", "ffn.w3"},
        {"mlp.down_proj", "ffn.w2"}};
    for (const auto& [hf, canon] : proj) {
      m[std::string(hf) + ".weight"] = canon;
      std::string bias = canon;
      bias[bias.size() - 2] = 'b';  // attn.wq -> attn.bq, ffn.w1 -> ffn.b1
      m[std::string(hf) + ".bias"] = bias;
    }
    return m;
  }();
  int64_t idx = 0;
  size_t n = parse_indexed(s, "layers.", &idx);
  if (n == 0) {
    // lm_head is written without the model. prefix; accept it with one too.
    auto it = global.find(std::string(s));
    if (it == global.end()) return std::nullopt;
    return it->second;
  }
  auto it = layer.find(std::string(s.substr(n)));
  if (it == layer.end()) return std::nullopt;
  return "layers." + std::to_string(idx) + "." + it->second;
}

}  // namespace deepinfer::io
