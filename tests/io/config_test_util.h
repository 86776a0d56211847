// Shared helpers of config_test.cpp and config_errors_test.cpp.
#pragma once

#include <fstream>
#include <initializer_list>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/config.h"

namespace deepinfer::io::testing_util {

using nlohmann::json;

inline json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);
}

inline ModelConfig parse_ok(const json& j, const std::string& name = "test/config.json") {
  auto r = parse_model_config(j, name);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return ModelConfig{};
  return *r;
}

// Parses `j`, expects kInvalidArgument whose message contains every one of `parts`.
inline void expect_error(const json& j, std::initializer_list<std::string> parts) {
  auto r = parse_model_config(j, "bad/config.json");
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << *parts.begin() << "'";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  for (const std::string& p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "message: " << r.status().message() << "\nmissing: " << p;
  }
}

inline json v4tiny() { return read_json("tests/data/models/v4tiny_b/config.json"); }

inline json v41_tiny() {
  // deepseek-v4.1.md §10.2 T1 "csa2" (as an HF-style nested config).
  json t = {{"model_type", "deepseek_v41_text"}, {"hidden_size", 64}, {"num_hidden_layers", 10},
            {"num_attention_heads", 4}, {"head_dim", 32}, {"qk_rope_head_dim", 8},
            {"q_lora_rank", 32}, {"o_groups", 2}, {"o_lora_rank", 16}, {"sliding_window", 8},
            {"index_n_heads", 4}, {"index_head_dim", 16}, {"index_topk", 4},
            {"n_routed_experts", 8}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32},
            {"vocab_size", 256}, {"rms_norm_eps", 1e-20}, {"num_nextn_predict_layers", 3},
            {"compress_ratios", {0, 0, 2, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0}},
            {"kv_source_layer_ids", {2, 5}}, {"index_source_layer_ids", {2, 5, 7, 9}},
            {"candidate_source_layer_id", 5}, {"candidate_topk_blocks", 4},
            {"candidate_block_size", 4}, {"engram_layer_ids", {1, 4}},
            {"engram_num_embeddings", {1000, 2000}}, {"engram_max_ngram_size", 3},
            {"engram_vocab_size", 61}, {"engram_n_heads", 2}, {"engram_head_dim", 16},
            {"engram_pad_token_id", 2}, {"engram_compressed_vocab_size", 29},
            {"dspark_block_size", 5}, {"dspark_noise_token_id", 255},
            {"dspark_target_layer_ids", {7, 8, 9}}, {"dspark_markov_rank", 16},
            {"dspark_n_routed_experts", 4}, {"dspark_num_experts_per_tok", 2},
            {"rope_theta", 10000}, {"compress_rope_theta", 160000},
            {"rope_scaling", {{"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 64},
                              {"beta_fast", 32}, {"beta_slow", 1}}}};
  return {{"architectures", {"DeepseekV41ForCausalLM"}}, {"model_type", "deepseek_v41"},
          {"bos_token_id", 0}, {"eos_token_id", 1}, {"pad_token_id", 2},
          {"image_token_id", 250}, {"dtype", "bfloat16"},
          {"quantization_config", {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {32, 32}}, {"scale_fmt", "ue8m0"},
                                   {"expert_dtype", "fp4"}}},
          {"vision_config", {{"num_hidden_layers", 2}}},
          {"text_config", t}};
}

}  // namespace deepinfer::io::testing_util
