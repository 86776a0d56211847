// config.json -> typed config: the committed fixtures, the V4-Flash configs, V4.1, Llama
// (invalid configs: config_errors_test.cpp).
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/config.h"
#include "config_test_util.h"

namespace deepinfer::io {
namespace {

using nlohmann::json;
using namespace testing_util;
using AT = AttentionType;

TEST(ConfigTest, V4TinyB) {
  ModelConfig m = parse_ok(v4tiny());
  ASSERT_TRUE(m.is_deepseek_v4());
  EXPECT_EQ(m.architecture, "DeepseekV4ForCausalLM");
  EXPECT_EQ(m.model_type, "deepseek_v4");
  EXPECT_EQ(m.torch_dtype, "float32");
  EXPECT_EQ(m.family(), ModelFamily::kDeepseekV4);
  const DeepseekV4Config& c = m.deepseek_v4();
  EXPECT_FALSE(c.is_v41);
  EXPECT_EQ(c.vocab_size, 320);
  EXPECT_EQ(m.vocab_size(), 320);
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.q_lora_rank, 64);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.125);
  EXPECT_EQ(c.qk_rope_head_dim, 8);
  EXPECT_EQ(c.o_groups, 2);
  EXPECT_EQ(c.o_lora_rank, 32);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.layer_types, (std::vector<AT>{AT::kSliding, AT::kCompressedSparse,
                                            AT::kHeavilyCompressed, AT::kCompressedSparse}));
  EXPECT_EQ(c.compress_ratio, (std::vector<int64_t>{0, 4, 16, 4}));
  EXPECT_EQ(c.compress_rate_csa, 4);
  EXPECT_EQ(c.compress_rate_hca, 16);
  EXPECT_EQ(c.mlp_layer_types,
            (std::vector<MlpType>{MlpType::kHashMoe, MlpType::kMoe, MlpType::kMoe, MlpType::kMoe}));
  EXPECT_EQ(c.index_n_heads, 8);
  EXPECT_EQ(c.index_head_dim, 32);
  EXPECT_EQ(c.index_topk, 4);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_DOUBLE_EQ(c.hc_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 64);
  EXPECT_EQ(c.scoring_func, ScoringFunc::kSqrtSoftplus);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
  EXPECT_FALSE(c.pad_token_id.has_value());
  EXPECT_EQ(c.max_position_embeddings, 4096);
  // Nested rope_parameters, both default.
  EXPECT_EQ(c.rope_main.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope_main.theta, 10000.0);
  EXPECT_EQ(c.rope_main.rotary_dim, 8);
  EXPECT_EQ(c.rope_compress.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_EQ(c.rope_compress.rotary_dim, 8);
  EXPECT_DOUBLE_EQ(c.rope_compress.attention_factor, 1.0);
  EXPECT_EQ(&c.rope_for_layer(0), &c.rope_main);
  EXPECT_EQ(&c.rope_for_layer(2), &c.rope_compress);
  EXPECT_EQ(layer_types_summary(c), "sliding, CSA, HCA, CSA");
  EXPECT_EQ(mlp_layer_types_summary(c), "hash, moe, moe, moe");
  EXPECT_TRUE(c.mtp_compress_ratios.empty());
}

TEST(ConfigTest, TinyStoriesYarnOnCompressRope) {
  auto r = load_model_config("tests/data/models/deepseek-v4-tiny-stories");  // a directory
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const DeepseekV4Config& c = r->deepseek_v4();
  EXPECT_EQ(r->torch_dtype, "bfloat16");
  EXPECT_EQ(c.hidden_size, 192);
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.qk_rope_head_dim, 16);
  EXPECT_EQ(layer_types_summary(c), "sliding, CSA, HCA, CSA, HCA, CSA");
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c.rope_main.type, RopeType::kDefault);
  EXPECT_EQ(c.rope_main.rotary_dim, 16);
  const RopeParams& y = c.rope_compress;
  EXPECT_EQ(y.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(y.theta, 160000.0);
  EXPECT_DOUBLE_EQ(y.factor, 4.0);
  EXPECT_EQ(y.original_max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(y.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(y.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(y.attention_factor, 1.0);
  EXPECT_TRUE(y.attention_factor_given);
  EXPECT_DOUBLE_EQ(y.partial_rotary_factor, 0.25);
  EXPECT_EQ(y.rotary_dim, 16);
}

void expect_flash(const DeepseekV4Config& c) {
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_hidden_layers, 43);
  EXPECT_EQ(c.num_attention_heads, 64);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.q_lora_rank, 1024);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.125);
  EXPECT_EQ(c.o_groups, 8);
  EXPECT_EQ(c.o_lora_rank, 1024);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.index_n_heads, 64);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.expert_dtype, "fp4");
  EXPECT_EQ(c.quantization.quant_method, "fp8");
  EXPECT_EQ(c.quantization.scale_fmt, "ue8m0");
  // Appendix B: 0,1 sliding; even 2..42 CSA; odd 3..41 HCA; hash routing on 0..2.
  ASSERT_EQ(c.layer_types.size(), 43u);
  for (int64_t l = 0; l < 43; ++l) {
    AT want = l < 2 ? AT::kSliding : (l % 2 == 0 ? AT::kCompressedSparse : AT::kHeavilyCompressed);
    EXPECT_EQ(c.layer_types[l], want) << "layer " << l;
    EXPECT_EQ(c.compress_ratio[l], l < 2 ? 0 : (l % 2 == 0 ? 4 : 128)) << "layer " << l;
    EXPECT_EQ(c.mlp_layer_types[l], l < 3 ? MlpType::kHashMoe : MlpType::kMoe) << "layer " << l;
    EXPECT_EQ(c.rope_for_layer(l).theta, l < 2 ? 10000.0 : 160000.0);
  }
  EXPECT_EQ(c.num_layers_of(AT::kSliding), 2);
  EXPECT_EQ(c.num_layers_of(AT::kCompressedSparse), 21);
  EXPECT_EQ(c.num_layers_of(AT::kHeavilyCompressed), 20);
  EXPECT_EQ(c.mtp_compress_ratios, std::vector<int64_t>{0});  // entry 43: the MTP layer
  EXPECT_EQ(c.rope_main.type, RopeType::kDefault);
  EXPECT_EQ(c.rope_main.rotary_dim, 64);
  const RopeParams& y = c.rope_compress;
  EXPECT_EQ(y.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(y.theta, 160000.0);
  EXPECT_DOUBLE_EQ(y.factor, 16.0);
  EXPECT_EQ(y.original_max_position_embeddings, 65536);
  EXPECT_DOUBLE_EQ(y.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(y.beta_slow, 1.0);
  EXPECT_EQ(y.rotary_dim, 64);
  // Flat rope_scaling: HF injects attention_factor = 1.0 (§1.3).
  EXPECT_DOUBLE_EQ(y.attention_factor, 1.0);
  EXPECT_FALSE(y.attention_factor_given);
}

TEST(ConfigTest, V4FlashHfConfig) {
  auto r = load_model_config("tests/data/io/model-configs/deepseek-v4-flash/config.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const DeepseekV4Config& c = r->deepseek_v4();
  expect_flash(c);
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_EQ(c.quantization.weight_block_size, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(c.quantization.activation_scheme, "dynamic");
  EXPECT_EQ(c.max_position_embeddings, 1048576);
}

TEST(ConfigTest, V4FlashInferenceConfig) {
  auto r = load_model_config("tests/data/io/model-configs/deepseek-v4-flash/inference_config.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->architecture, "DeepseekV4ForCausalLM");
  EXPECT_EQ(r->torch_dtype, "fp8");
  expect_flash(r->deepseek_v4());
}

TEST(ConfigTest, Stories260KLlama) {
  auto r = load_model_config("tests/data/models/stories260K/hf/config.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->is_llama());
  EXPECT_EQ(r->architecture, "LlamaForCausalLM");
  const LlamaConfig& c = r->llama();
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.rope.rotary_dim, 8);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(r->tie_word_embeddings());
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(r->num_hidden_layers(), 5);
}

TEST(ConfigTest, LlamaDefaultsAndRopeScaling) {
  json j = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64},
            {"num_attention_heads", 4}, {"num_hidden_layers", 2}, {"vocab_size", 100},
            {"intermediate_size", 128}, {"eos_token_id", {5, 6}},
            {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0},
                              {"original_max_position_embeddings", 8192}}}};
  const LlamaConfig c = parse_ok(j).llama();
  EXPECT_EQ(c.num_key_value_heads, 4);  // defaults to num_attention_heads
  EXPECT_EQ(c.head_dim, 16);            // hidden / heads
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(c.rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
}

TEST(ConfigTest, LegacyKeysAndDefaultSchedule) {
  json j = v4tiny();
  j.erase("layer_types");
  j.erase("mlp_layer_types");
  j.erase("compress_rates");
  j.erase("partial_rotary_factor");
  j.erase("rope_parameters");
  j["num_hidden_layers"] = 6;
  j["compress_rate_hca"] = 16;
  j["num_hash_layers"] = 2;
  const DeepseekV4Config c = parse_ok(j).deepseek_v4();
  // HF default (V4-Pro) pattern: 0,1 HCA; (l-2) odd -> CSA, even -> HCA.
  EXPECT_EQ(layer_types_summary(c), "HCA, HCA, HCA, CSA, HCA, CSA");
  EXPECT_EQ(c.compress_ratio, (std::vector<int64_t>{16, 16, 16, 4, 16, 4}));
  EXPECT_EQ(mlp_layer_types_summary(c), "hash, hash, moe, moe, moe, moe");
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 8.0 / 64.0);  // from qk_rope_head_dim
  EXPECT_EQ(c.rope_compress.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope_compress.theta, 160000.0);
}

TEST(ConfigTest, MissingEverythingGivesHfDefaults) {
  json j = {{"architectures", {"DeepseekV4ForCausalLM"}}};
  const DeepseekV4Config c = parse_ok(j).deepseek_v4();
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_hidden_layers, 43);
  EXPECT_EQ(c.qk_rope_head_dim, 64);  // 64/512 default factor
  EXPECT_EQ(c.compress_rate_hca, 128);
  EXPECT_EQ(c.layer_types[0], AT::kHeavilyCompressed);
  EXPECT_EQ(c.layer_types[3], AT::kCompressedSparse);
  EXPECT_EQ(c.mlp_layer_types[2], MlpType::kHashMoe);
  EXPECT_EQ(c.mlp_layer_types[3], MlpType::kMoe);
}

TEST(ConfigTest, NestedYarnWithoutAttentionFactorUsesHfDefault) {
  json j = v4tiny();
  j["rope_parameters"]["compress"] = {{"rope_type", "yarn"}, {"rope_theta", 160000.0},
                                      {"partial_rotary_factor", 0.125}, {"factor", 16.0},
                                      {"original_max_position_embeddings", 256}};
  const DeepseekV4Config c = parse_ok(j).deepseek_v4();
  EXPECT_NEAR(c.rope_compress.attention_factor, 0.1 * std::log(16.0) + 1.0, 1e-12);
  EXPECT_FALSE(c.rope_compress.attention_factor_given);
  // mscale / mscale_all_dim ratio (DeepSeek-V3 style).
  j["rope_parameters"]["compress"]["mscale"] = 1.0;
  j["rope_parameters"]["compress"]["mscale_all_dim"] = 1.0;
  EXPECT_DOUBLE_EQ(parse_ok(j).deepseek_v4().rope_compress.attention_factor, 1.0);
  // Flat rope_scaling instead: attention_factor 1.0 is injected.
  json k = v4tiny();
  k.erase("rope_parameters");
  k["rope_scaling"] = {{"type", "yarn"}, {"factor", 16.0}};
  const DeepseekV4Config d = parse_ok(k).deepseek_v4();
  EXPECT_EQ(d.rope_compress.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(d.rope_compress.attention_factor, 1.0);
  EXPECT_EQ(d.rope_compress.original_max_position_embeddings, 4096);  // max_position_embeddings
  EXPECT_EQ(d.rope_main.type, RopeType::kDefault);
}

TEST(ConfigTest, V41NestedTextConfig) {
  ModelConfig m = parse_ok(v41_tiny());
  EXPECT_EQ(m.architecture, "DeepseekV41ForCausalLM");
  const DeepseekV4Config& c = m.deepseek_v4();
  ASSERT_TRUE(c.is_v41);
  ASSERT_TRUE(c.v41.has_value());
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 10);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-20);
  EXPECT_EQ(layer_types_summary(c),
            "sliding, sliding, CSA2/2, CSA2/2, CSA2/2, CSA2/1, CSA2/1, CSA2/1, CSA2/1, CSA2/1");
  EXPECT_EQ(c.compress_ratio, (std::vector<int64_t>{0, 0, 2, 2, 2, 1, 1, 1, 1, 1}));
  EXPECT_EQ(c.mtp_compress_ratios, (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(mlp_layer_types_summary(c), "moe, moe, moe, moe, moe, moe, moe, moe, moe, moe");
  EXPECT_EQ(c.pad_token_id, 2);
  EXPECT_EQ(c.expert_dtype, "fp4");
  EXPECT_EQ(c.quantization.weight_block_size, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(c.rope_compress.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope_compress.attention_factor, 1.0);
  const DeepseekV41Fields& f = *c.v41;
  EXPECT_EQ(f.kv_source_layer_ids, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(f.index_source_layer_ids, (std::vector<int64_t>{2, 5, 7, 9}));
  EXPECT_EQ(f.candidate_source_layer_id, 5);
  EXPECT_EQ(f.engram_layer_ids, (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(f.dspark_target_layer_ids, (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(f.image_token_id, 250);
  EXPECT_DOUBLE_EQ(f.gate_temp, 1.0);
}

TEST(ConfigTest, FlatInferenceConfigWithOtherHcaRate) {
  // DeepSeek's own names; ratio 16 is HCA there (anything but 4), spelled out as layer_types.
  json j = {{"vocab_size", 320}, {"dim", 128}, {"n_layers", 4}, {"n_heads", 4},
            {"head_dim", 64}, {"rope_head_dim", 8}, {"q_lora_rank", 64}, {"o_groups", 2},
            {"o_lora_rank", 32}, {"window_size", 16}, {"index_n_heads", 8},
            {"index_head_dim", 32}, {"index_topk", 4}, {"n_routed_experts", 8},
            {"n_activated_experts", 2}, {"moe_inter_dim", 64}, {"n_hash_layers", 1},
            {"score_func", "sqrtsoftplus"}, {"route_scale", 2.5}, {"norm_eps", 1e-5},
            {"compress_ratios", {0, 4, 16, 4, 0}}, {"max_batch_size", 8}};
  ModelConfig m = parse_ok(j);
  const DeepseekV4Config& c = m.deepseek_v4();
  EXPECT_EQ(m.architecture, "DeepseekV4ForCausalLM");
  EXPECT_EQ(layer_types_summary(c), "sliding, CSA, HCA, CSA");
  EXPECT_EQ(c.compress_ratio, (std::vector<int64_t>{0, 4, 16, 4}));
  EXPECT_EQ(c.mtp_compress_ratios, std::vector<int64_t>{0});
  EXPECT_EQ(mlp_layer_types_summary(c), "hash, moe, moe, moe");
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_compress.type, RopeType::kDefault);  // no rope_factor: no YaRN
  j["compress_ratios"] = {0, 4, 16, 32, 0};
  expect_error(j, {"compress_ratios[3] = 32", "same ratio (16)"});
}

TEST(ConfigTest, FlatInferenceConfigV41) {
  json j = {{"vocab_size", 256}, {"dim", 64}, {"n_layers", 4}, {"n_heads", 4}, {"head_dim", 32},
            {"rope_head_dim", 8}, {"q_lora_rank", 32}, {"o_groups", 2}, {"o_lora_rank", 16},
            {"window_size", 8}, {"index_n_heads", 4}, {"index_head_dim", 16}, {"index_topk", 4},
            {"n_routed_experts", 8}, {"n_activated_experts", 2}, {"moe_inter_dim", 32},
            {"n_mtp_layers", 1}, {"compress_ratios", {0, 2, 1, 1, 0}},
            {"kv_source_layers", {1, 2}}, {"index_source_layers", {1, 2, 3}},
            {"candidate_source_layer", -1}, {"original_seq_len", 64}, {"rope_factor", 4},
            {"beta_fast", 32}, {"beta_slow", 1}, {"dtype", "fp8"}, {"scale_fmt", "ue8m0"},
            {"expert_dtype", "fp4"}, {"vision_hidden_size", 16}};
  ModelConfig m = parse_ok(j);
  EXPECT_EQ(m.architecture, "DeepseekV41ForCausalLM");
  const DeepseekV4Config& c = m.deepseek_v4();
  ASSERT_TRUE(c.is_v41);
  EXPECT_EQ(layer_types_summary(c), "sliding, CSA2/2, CSA2/1, CSA2/1");
  EXPECT_EQ(c.v41->index_source_layer_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(c.v41->candidate_source_layer_id, -1);
  EXPECT_EQ(c.rope_compress.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(c.rope_compress.factor, 4.0);
  EXPECT_EQ(c.rope_compress.original_max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c.rope_compress.attention_factor, 1.0);
  EXPECT_EQ(c.quantization.quant_method, "fp8");
  EXPECT_EQ(c.expert_dtype, "fp4");
}

TEST(ConfigTest, UnknownKeysWarnOnceHarmlessKeysNever) {
  json j = v4tiny();
  j["my_new_switch"] = 3;
  testing::internal::CaptureStderr();
  parse_ok(j, "warn/config.json");
  parse_ok(j, "warn/config.json");  // same file again: no second warning
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warn/config.json: my_new_switch: unknown config key ignored (value 3)"),
            std::string::npos) << err;
  EXPECT_EQ(err.find("my_new_switch"), err.rfind("my_new_switch")) << err;
  // The fixture itself has only known keys and HF bookkeeping (transformers_version, dtype, ...).
  testing::internal::CaptureStderr();
  parse_ok(v4tiny(), "quiet/config.json");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}
}  // namespace
}  // namespace deepinfer::io
