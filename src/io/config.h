// Typed model configuration parsed from a checkpoint's `config.json`.
//
//   DI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(dir + "/config.json"));
//   if (cfg.is_deepseek_v4()) { const io::DeepseekV4Config& c = cfg.deepseek_v4(); ... }
//
// Supported inputs (see ../shared/design/deepseek-v4.md §1 and deepseek-v4.1.md §1):
//   * DeepSeek-V4 HF config.json (`DeepseekV4ForCausalLM`, model_type `deepseek_v4`), with the
//     legacy keys folded in exactly as HF does (§1.2): `compress_ratios` -> `layer_types`,
//     `compress_rate_csa/hca`, `num_hash_layers` -> `mlp_layer_types`, `qk_rope_head_dim` ->
//     `partial_rotary_factor`, flat `rope_scaling` / flat `rope_parameters` -> the `compress` rope,
//     nested `rope_parameters {main, compress}` taken verbatim (§1.3).
//   * DeepSeek's flat `inference/config.json` (keys `dim`, `n_layers`, `rope_head_dim`, ...).
//   * DeepSeek-V4.1 (`DeepseekV41ForCausalLM`, model fields under `text_config`; compress ratios
//     in {0,1,2}; kv/index source layers, candidates, Engram, DSpark fields).
//   * The Llama family (`LlamaForCausalLM`, model_type `llama`; e.g. stories260K).
// Every validation error is kInvalidArgument and names the file, the field, the value and what
// was expected. Unknown keys are ignored silently only when they are known HF bookkeeping
// (transformers_version, dtype, architectures, ...); any other unknown key is logged as a
// warning once per (file, key).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace deepinfer::io {

// ---------------------------------------------------------------------------------------------
// Enumerations and their config.json spellings.

enum class AttentionType {
  kSliding,            // "sliding_attention": window only, `main` rope
  kCompressedSparse,   // "compressed_sparse_attention" (CSA, m = compress_rate_csa): overlapping
                       // compressor + Lightning indexer, `compress` rope
  kHeavilyCompressed,  // "heavily_compressed_attention" (HCA, m = compress_rate_hca), `compress` rope
  kCompressedSparse2,  // V4.1 "CSA2" (compress ratio 1 or 2, no overlap/position bias); the
                       // spelling "compressed_sparse_attention_2" is deepinfer's own (V4.1 has no
                       // HF layer_types); the per-layer ratio is in DeepseekV4Config::compress_ratio
};
enum class MlpType {
  kMoe,      // "moe": top-k routing with e_score_correction_bias
  kHashMoe,  // "hash_moe": experts from tid2eid[token]
};
enum class ScoringFunc { kSqrtSoftplus, kSoftmax, kSigmoid };
enum class RopeType { kDefault, kYarn, kLinear, kLlama3 };
enum class ModelFamily { kDeepseekV4, kLlama };

const char* attention_type_name(AttentionType t);   // "sliding_attention", ...
const char* attention_type_short(AttentionType t);  // "sliding", "CSA", "HCA", "CSA2"
const char* mlp_type_name(MlpType t);               // "moe", "hash_moe"
const char* scoring_func_name(ScoringFunc f);       // "sqrtsoftplus", "softmax", "sigmoid"
const char* rope_type_name(RopeType t);             // "default", "yarn", "linear", "llama3"
const char* model_family_name(ModelFamily f);       // "deepseek_v4", "llama"

// ---------------------------------------------------------------------------------------------
// One set of rotary parameters (one "rope kind").

struct RopeParams {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;                // base
  double partial_rotary_factor = 1.0;    // fraction of head_dim that is rotated
  int64_t rotary_dim = 0;                // derived: int(head_dim * partial_rotary_factor), even
  // yarn / linear / llama3
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;  // 0 = not given (yarn falls back to
                                                  // max_position_embeddings, as HF does)
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  // Resolved cos/sin multiplier. For yarn: the given `attention_factor`; else 1.0 when the block
  // came from flat keys (HF injects it, §1.3); else HF's default (0.1*ln(factor)+1, or the
  // mscale/mscale_all_dim ratio when both are given). 1.0 for the other types.
  double attention_factor = 1.0;
  bool attention_factor_given = false;   // false when attention_factor was computed / injected
  std::optional<double> mscale;          // yarn (DeepSeek-V3 style), only used for the default
  std::optional<double> mscale_all_dim;  // attention_factor
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
};

// ---------------------------------------------------------------------------------------------
// DeepSeek-V4 / V4.1. Field names and defaults as in HF's DeepseekV4Config (deepseek-v4.md §1.1).

struct QuantizationConfig {
  std::string quant_method;                 // "fp8" ("" = none)
  std::string fmt;                          // "e4m3"
  std::string scale_fmt;                    // "ue8m0"
  std::vector<int64_t> weight_block_size;   // [128, 128] (V4), [32, 32] (V4.1); empty = none
  std::string activation_scheme;            // "dynamic"
};

// Fields that only DeepSeek-V4.1 configs carry (deepseek-v4.1.md §1.3).
struct DeepseekV41Fields {
  std::vector<int64_t> kv_source_layer_ids;     // layers computing compressed KV + index keys
  std::vector<int64_t> index_source_layer_ids;  // layers running an indexer
  int64_t candidate_source_layer_id = -1;       // -1 = no candidate pool
  int64_t candidate_topk_blocks = 0;
  int64_t candidate_block_size = 0;
  std::vector<int64_t> engram_layer_ids;
  std::vector<int64_t> engram_num_embeddings;   // one per engram layer
  int64_t engram_max_ngram_size = 0;
  int64_t engram_vocab_size = 0;
  int64_t engram_n_heads = 0;
  int64_t engram_head_dim = 0;
  int64_t engram_pad_token_id = -1;
  int64_t engram_compressed_vocab_size = 0;
  int64_t dspark_block_size = 0;
  int64_t dspark_noise_token_id = -1;
  std::vector<int64_t> dspark_target_layer_ids;
  int64_t dspark_markov_rank = 0;
  int64_t dspark_n_routed_experts = 0;
  int64_t dspark_num_experts_per_tok = 0;
  double gate_temp = 1.0;                       // router logit divisor
  std::optional<int64_t> image_token_id;
};

struct DeepseekV4Config {
  bool is_v41 = false;  // DeepSeek-V4.1 (then `v41` holds its extra fields)

  int64_t vocab_size = 129280;
  int64_t hidden_size = 4096;               // H
  int64_t num_hidden_layers = 43;           // L (MTP/DSpark layers not counted)
  int64_t num_attention_heads = 64;         // nH
  int64_t num_key_value_heads = 1;          // must be 1
  int64_t head_dim = 512;                   // D
  int64_t q_lora_rank = 1024;               // Rq
  double partial_rotary_factor = 0.125;     // r / D
  int64_t qk_rope_head_dim = 64;            // r = int(D * partial_rotary_factor) (derived)
  int64_t o_groups = 8;                     // G
  int64_t o_lora_rank = 1024;               // Ro
  int64_t sliding_window = 128;             // W (includes the query token)
  std::vector<AttentionType> layer_types;   // [L] (derived when absent, §1.2)
  std::vector<int64_t> compress_ratio;      // [L] per layer m (0 for sliding) (derived)
  int64_t compress_rate_csa = 4;            // compress_rates["compressed_sparse_attention"]
  int64_t compress_rate_hca = 128;          // compress_rates["heavily_compressed_attention"]
  double compress_rope_theta = 160000.0;
  double rope_theta = 10000.0;
  RopeParams rope_main;                     // sliding layers (and MTP)
  RopeParams rope_compress;                 // every rotary use inside CSA/HCA(/CSA2) layers
  int64_t max_position_embeddings = 1048576;
  int64_t index_n_heads = 64;               // nI
  int64_t index_head_dim = 128;             // cI
  int64_t index_topk = 512;
  int64_t hc_mult = 4;                      // hc
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-6;
  int64_t n_routed_experts = 256;           // E
  int64_t num_experts_per_tok = 6;          // k
  int64_t n_shared_experts = 1;             // informational (HF always builds one)
  int64_t moe_intermediate_size = 2048;     // I (alias intermediate_size)
  std::vector<MlpType> mlp_layer_types;     // [L] (derived when absent, §1.2)
  ScoringFunc scoring_func = ScoringFunc::kSqrtSoftplus;
  double routed_scaling_factor = 1.5;
  bool norm_topk_prob = true;               // not read by the HF forward
  double swiglu_limit = 10.0;
  std::string hidden_act = "silu";
  int64_t num_nextn_predict_layers = 1;     // MTP layers (V4) / DSpark stages (V4.1)
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 0;
  std::vector<int64_t> eos_token_ids = {1};
  std::optional<int64_t> pad_token_id;
  bool attention_bias = false;
  bool mlp_bias = false;
  // Training / API-only fields (no effect on inference), kept for completeness.
  double attention_dropout = 0.0;
  double router_jitter_noise = 0.0;
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;
  double initializer_range = 0.02;
  bool use_cache = true;

  // Checkpoint-format keys unknown to HF's config class (§1.1).
  std::string expert_dtype;                 // "fp4" or "" (from top level or quantization_config)
  std::string topk_method;                  // "noaux_tc" or ""
  QuantizationConfig quantization;
  // Compress ratio of each MTP/DSpark layer (entries of `compress_ratios` past L); empty when the
  // config has no such list (then MTP layers are sliding, ratio 0).
  std::vector<int64_t> mtp_compress_ratios;

  std::optional<DeepseekV41Fields> v41;

  // Helpers.
  int64_t num_layers_of(AttentionType t) const;
  const RopeParams& rope_for_layer(int64_t layer) const;  // main for sliding, else compress
};

// ---------------------------------------------------------------------------------------------
// Llama family (dense GQA).

struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;         // defaults to num_attention_heads
  int64_t head_dim = 128;                   // defaults to hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  RopeParams rope;                          // rope_theta + rope_scaling / rope_parameters
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";
  bool attention_bias = false;
  bool mlp_bias = false;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;
};

// ---------------------------------------------------------------------------------------------

struct ModelConfig {
  std::string source;         // file the config came from (for messages)
  std::string architecture;   // "DeepseekV4ForCausalLM", "DeepseekV41ForCausalLM", "LlamaForCausalLM"
  std::string model_type;     // "deepseek_v4", "deepseek_v41", "llama"
  std::string torch_dtype;    // "dtype"/"torch_dtype" of config.json ("" if absent)
  std::variant<DeepseekV4Config, LlamaConfig> arch;

  ModelFamily family() const;
  bool is_deepseek_v4() const { return std::holds_alternative<DeepseekV4Config>(arch); }
  bool is_llama() const { return std::holds_alternative<LlamaConfig>(arch); }
  const DeepseekV4Config& deepseek_v4() const { return std::get<DeepseekV4Config>(arch); }
  const LlamaConfig& llama() const { return std::get<LlamaConfig>(arch); }
  int64_t vocab_size() const;
  int64_t hidden_size() const;
  int64_t num_hidden_layers() const;
  bool tie_word_embeddings() const;
};

// Parses an already-loaded JSON document; `source_name` prefixes every message.
StatusOr<ModelConfig> parse_model_config(const nlohmann::json& j, const std::string& source_name);
// Reads and parses a config.json file (or a model directory containing config.json).
StatusOr<ModelConfig> load_model_config(const std::string& config_json_path);

// Validation of an already-built config (parse_* call these; exposed for code that builds
// configs by hand, e.g. tests).
Status validate_deepseek_v4_config(const DeepseekV4Config& c, const std::string& source_name);
Status validate_llama_config(const LlamaConfig& c, const std::string& source_name);

// Human-readable per-layer lists, every layer in order: "sliding, CSA, HCA, CSA" and
// "hash, moe, moe, moe".
std::string layer_types_summary(const DeepseekV4Config& c);
std::string mlp_layer_types_summary(const DeepseekV4Config& c);

}  // namespace deepinfer::io
