// Expected tensors and shapes per config (deepseek-v4.md §8.1 shapes, §9 MTP).
#include "io/weight_specs.h"

namespace deepinfer::io::detail {

namespace {

using K = WeightKind;

void v4_layer(const DeepseekV4Config& c, const std::string& p, AttentionType type, MlpType mlp,
              SpecMap* out) {
  const int64_t H = c.hidden_size, D = c.head_dim, nH = c.num_attention_heads;
  const int64_t Rq = c.q_lora_rank, G = c.o_groups, Ro = c.o_lora_rank, hc = c.hc_mult;
  const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size;
  const int64_t nI = c.index_n_heads, cI = c.index_head_dim;
  auto& m = *out;
  m[p + "attn_norm"] = {{H}, K::kParam};
  m[p + "ffn_norm"] = {{H}, K::kParam};
  for (const char* site : {"hc_attn.", "hc_ffn."}) {
    m[p + site + "fn"] = {{(2 + hc) * hc, hc * H}, K::kParam};
    m[p + site + "base"] = {{(2 + hc) * hc}, K::kParam};
    m[p + site + "scale"] = {{3}, K::kParam};
  }
  m[p + "attn.wq_a"] = {{Rq, H}, K::kMatrix};
  m[p + "attn.q_norm"] = {{Rq}, K::kParam};
  m[p + "attn.wq_b"] = {{nH * D, Rq}, K::kMatrix};
  m[p + "attn.wkv"] = {{D, H}, K::kMatrix};
  m[p + "attn.kv_norm"] = {{D}, K::kParam};
  m[p + "attn.wo_a"] = {{G * Ro, nH * D / G}, K::kMatrix};
  m[p + "attn.wo_b"] = {{H, G * Ro}, K::kMatrix};
  m[p + "attn.sinks"] = {{nH}, K::kParam};
  if (type == AttentionType::kCompressedSparse || type == AttentionType::kHeavilyCompressed) {
    const bool csa = type == AttentionType::kCompressedSparse;
    const int64_t width = csa ? 2 * D : D;  // CSA: overlapping halves a|b
    const int64_t rate = csa ? c.compress_rate_csa : c.compress_rate_hca;
    m[p + "attn.compressor.wkv"] = {{width, H}, K::kMatrix};
    m[p + "attn.compressor.wgate"] = {{width, H}, K::kMatrix};
    m[p + "attn.compressor.norm"] = {{D}, K::kParam};
    m[p + "attn.compressor.ape"] = {{rate, width}, K::kParam};
    if (csa) {
      m[p + "attn.indexer.compressor.wkv"] = {{2 * cI, H}, K::kMatrix};
      m[p + "attn.indexer.compressor.wgate"] = {{2 * cI, H}, K::kMatrix};
      m[p + "attn.indexer.compressor.norm"] = {{cI}, K::kParam};
      m[p + "attn.indexer.compressor.ape"] = {{rate, 2 * cI}, K::kParam};
      m[p + "attn.indexer.wq_b"] = {{nI * cI, Rq}, K::kMatrix};
      m[p + "attn.indexer.weights_proj"] = {{nI, H}, K::kMatrix};
    }
  }
  m[p + "ffn.gate"] = {{E, H}, K::kMatrix};
  if (mlp == MlpType::kMoe) {
    m[p + "ffn.gate_bias"] = {{E}, K::kParam};
  } else {
    m[p + "ffn.tid2eid"] = {{c.vocab_size, c.num_experts_per_tok}, K::kIndex};
  }
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = p + "ffn.experts." + std::to_string(e) + ".";
    m[x + "w1"] = {{I, H}, K::kExpert};
    m[x + "w3"] = {{I, H}, K::kExpert};
    m[x + "w2"] = {{H, I}, K::kExpert};
  }
  m[p + "ffn.shared.w1"] = {{I, H}, K::kMatrix};
  m[p + "ffn.shared.w3"] = {{I, H}, K::kMatrix};
  m[p + "ffn.shared.w2"] = {{H, I}, K::kMatrix};
}

void hc_head(const DeepseekV4Config& c, const std::string& p, SpecMap* m) {
  const int64_t hc = c.hc_mult, H = c.hidden_size;
  (*m)[p + "hc_head.fn"] = {{hc, hc * H}, K::kParam};
  (*m)[p + "hc_head.base"] = {{hc}, K::kParam};
  (*m)[p + "hc_head.scale"] = {{1}, K::kParam};
}

}  // namespace

void deepseek_v4_specs(const DeepseekV4Config& c, SpecMap* required, SpecMap* optional) {
  const int64_t V = c.vocab_size, H = c.hidden_size;
  (*required)["embed"] = {{V, H}, K::kMatrix};
  (*(c.tie_word_embeddings ? optional : required))["head"] = {{V, H}, K::kMatrix};
  (*required)["norm"] = {{H}, K::kParam};
  hc_head(c, "", required);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    v4_layer(c, "layers." + std::to_string(i) + ".", c.layer_types[i], c.mlp_layer_types[i],
             required);
  }
  for (int64_t j = 0; j < c.num_nextn_predict_layers; ++j) {
    const std::string p = "mtp." + std::to_string(j) + ".";
    int64_t ratio = j < static_cast<int64_t>(c.mtp_compress_ratios.size())
                        ? c.mtp_compress_ratios[j] : 0;
    AttentionType t = ratio == 0 ? AttentionType::kSliding
                      : ratio == 4 ? AttentionType::kCompressedSparse
                                   : AttentionType::kHeavilyCompressed;
    v4_layer(c, p, t, MlpType::kMoe, optional);
    (*optional)[p + "e_proj"] = {{H, H}, K::kMatrix};
    (*optional)[p + "h_proj"] = {{H, H}, K::kMatrix};
    (*optional)[p + "enorm"] = {{H}, K::kParam};
    (*optional)[p + "hnorm"] = {{H}, K::kParam};
    (*optional)[p + "norm"] = {{H}, K::kParam};
    hc_head(c, p, optional);
  }
}

void llama_specs(const LlamaConfig& c, SpecMap* required, SpecMap* optional) {
  const int64_t V = c.vocab_size, H = c.hidden_size, I = c.intermediate_size;
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  (*required)["embed"] = {{V, H}, K::kMatrix};
  (*(c.tie_word_embeddings ? optional : required))["head"] = {{V, H}, K::kMatrix};
  (*required)["norm"] = {{H}, K::kParam};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    auto& m = *required;
    m[p + "attn_norm"] = {{H}, K::kParam};
    m[p + "ffn_norm"] = {{H}, K::kParam};
    m[p + "attn.wq"] = {{q, H}, K::kMatrix};
    m[p + "attn.wk"] = {{kv, H}, K::kMatrix};
    m[p + "attn.wv"] = {{kv, H}, K::kMatrix};
    m[p + "attn.wo"] = {{H, q}, K::kMatrix};
    m[p + "ffn.w1"] = {{I, H}, K::kMatrix};
    m[p + "ffn.w3"] = {{I, H}, K::kMatrix};
    m[p + "ffn.w2"] = {{H, I}, K::kMatrix};
    if (c.attention_bias) {
      m[p + "attn.bq"] = {{q}, K::kParam};
      m[p + "attn.bk"] = {{kv}, K::kParam};
      m[p + "attn.bv"] = {{kv}, K::kParam};
      m[p + "attn.bo"] = {{H}, K::kParam};
    }
    if (c.mlp_bias) {
      m[p + "ffn.b1"] = {{I}, K::kParam};
      m[p + "ffn.b3"] = {{I}, K::kParam};
      m[p + "ffn.b2"] = {{H}, K::kParam};
    }
  }
}

}  // namespace deepinfer::io::detail
