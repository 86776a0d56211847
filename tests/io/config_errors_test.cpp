// Invalid config.json files: one per validation rule, each asserting what the message names.
#include <unistd.h>

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

TEST(ConfigErrorTest, LayerTypeValue) {
  json j = v4tiny();
  j["layer_types"][3] = "foo";
  expect_error(j, {"bad/config.json", "layer_types[3] = \"foo\"",
                   "expected one of sliding_attention, compressed_sparse_attention, "
                   "heavily_compressed_attention"});
}

TEST(ConfigErrorTest, LayerTypesLength) {
  json j = v4tiny();
  j["layer_types"].erase(3);
  expect_error(j, {"layer_types has 3 entries", "num_hidden_layers = 4"});
  json k = v4tiny();
  k["mlp_layer_types"].push_back("moe");
  expect_error(k, {"mlp_layer_types has 5 entries", "num_hidden_layers = 4"});
}

TEST(ConfigErrorTest, MlpLayerTypeValue) {
  json j = v4tiny();
  j["mlp_layer_types"][1] = "dense";
  expect_error(j, {"mlp_layer_types[1] = \"dense\"", "one of moe, hash_moe"});
}

TEST(ConfigErrorTest, CompressRatios) {
  json j = v4tiny();
  j.erase("layer_types");
  j["compress_ratios"] = {0, 4, 5, 4};
  expect_error(j, {"compress_ratios[2] = 5", "0 (sliding), 4 (CSA), 128 (HCA)"});
  j["compress_ratios"] = {0, 4, 128};
  expect_error(j, {"compress_ratios has 3 entries", "at least num_hidden_layers = 4"});
}

TEST(ConfigErrorTest, CompressRatesKeysAndValues) {
  json j = v4tiny();
  j["compress_rates"]["sliding_attention"] = 2;
  expect_error(j, {"compress_rates has key 'sliding_attention'"});
  json k = v4tiny();
  k["compress_rates"]["heavily_compressed_attention"] = 0;
  expect_error(k, {"compress_rates.heavily_compressed_attention = 0", "a positive integer"});
}

TEST(ConfigErrorTest, RopeWidth) {
  json j = v4tiny();
  j.erase("qk_rope_head_dim");
  j["partial_rotary_factor"] = 0.1;  // 64 * 0.1 = 6.4
  expect_error(j, {"partial_rotary_factor = 0.1", "positive even integer", "6.4"});
  json k = v4tiny();
  k["qk_rope_head_dim"] = 16;  // disagrees with 0.125 * 64 = 8
  expect_error(k, {"qk_rope_head_dim = 16", "= 8", "disagree"});
  json m = v4tiny();
  m["index_head_dim"] = 4;  // r = 8 > 4
  expect_error(m, {"index_head_dim = 4", "rope width 8"});
}

TEST(ConfigErrorTest, StructuralConstraints) {
  json j = v4tiny();
  j["num_key_value_heads"] = 2;
  expect_error(j, {"num_key_value_heads = 2", "expected 1"});
  j = v4tiny();
  j["o_groups"] = 3;
  expect_error(j, {"o_groups = 3", "divisor of num_attention_heads = 4"});
  j = v4tiny();
  j["num_experts_per_tok"] = 9;
  expect_error(j, {"num_experts_per_tok = 9", "<= n_routed_experts = 8"});
  j = v4tiny();
  j["hidden_size"] = 0;
  expect_error(j, {"hidden_size = 0", "positive integer"});
  j = v4tiny();
  j["rms_norm_eps"] = -1.0;
  expect_error(j, {"rms_norm_eps = -1.0", "> 0"});
  j = v4tiny();
  j["hidden_act"] = "gelu";
  expect_error(j, {"hidden_act = \"gelu\"", "silu"});
  j = v4tiny();
  j["eos_token_id"] = 320;
  expect_error(j, {"eos_token_id = 320", "[0, vocab_size = 320)"});
}

TEST(ConfigErrorTest, WrongJsonTypes) {
  json j = v4tiny();
  j["hidden_size"] = "abc";
  expect_error(j, {"hidden_size = \"abc\"", "an integer"});
  j = v4tiny();
  j["hidden_size"] = 128.5;
  expect_error(j, {"hidden_size = 128.5", "an integer"});
  j = v4tiny();
  j["tie_word_embeddings"] = "no";
  expect_error(j, {"tie_word_embeddings", "true or false"});
  j = v4tiny();
  j["scoring_func"] = "relu";
  expect_error(j, {"scoring_func = \"relu\"", "one of sqrtsoftplus, softmax, sigmoid"});
  expect_error(json::array(), {"expected a JSON object"});
}

TEST(ConfigErrorTest, RopeBlocks) {
  json j = v4tiny();
  j["rope_parameters"]["compress"]["rope_type"] = "dynamic";
  expect_error(j, {"rope_parameters.compress.rope_type = \"dynamic\"",
                   "one of default, yarn, linear, llama3"});
  j = v4tiny();
  j["rope_parameters"].erase("compress");
  expect_error(j, {"rope_parameters.compress is missing"});
  j = v4tiny();
  j["rope_parameters"]["compress"] = {{"rope_type", "yarn"}, {"factor", 0.5},
                                      {"attention_factor", 1.0}, {"partial_rotary_factor", 0.125}};
  expect_error(j, {"rope_parameters.compress.factor = 0.5", ">= 1"});
  j["rope_parameters"]["compress"]["factor"] = 4.0;
  j["rope_parameters"]["compress"]["beta_fast"] = 0.5;
  expect_error(j, {"rope_parameters.compress.beta_fast = 0.5", "> beta_slow"});
}

TEST(ConfigErrorTest, UnknownArchitecture) {
  json j = v4tiny();
  j["architectures"] = {"MixtralForCausalLM"};
  j["model_type"] = "mixtral";
  expect_error(j, {"unknown architecture 'MixtralForCausalLM'", "DeepseekV4ForCausalLM",
                   "LlamaForCausalLM"});
  json k = {{"hidden_size", 4}};
  expect_error(k, {"no architectures and no model_type"});
  json m = v4tiny();
  m["architectures"] = "DeepseekV4ForCausalLM";  // not a list
  expect_error(m, {"architectures = \"DeepseekV4ForCausalLM\"", "non-empty list"});
}

TEST(ConfigErrorTest, V41Rules) {
  json j = v41_tiny();
  j["text_config"]["compress_ratios"][2] = 4;
  expect_error(j, {"text_config.compress_ratios[2] = 4", "one of 0, 1, 2"});
  j = v41_tiny();
  j["text_config"]["compress_ratios"].erase(12);
  expect_error(j, {"compress_ratios has 12 entries",
                   "num_hidden_layers + num_nextn_predict_layers = 13"});
  j = v41_tiny();
  j["text_config"]["index_source_layer_ids"] = {2, 7, 9};
  expect_error(j, {"kv_source_layer_ids[1] = 5", "also listed in index_source_layer_ids"});
  j = v41_tiny();
  j["text_config"]["kv_source_layer_ids"] = {2};
  expect_error(j, {"kv_source_layer_ids", "same ratio 1"});
  j = v41_tiny();
  j["text_config"]["engram_num_embeddings"] = {1000};
  expect_error(j, {"engram_num_embeddings", "one entry per engram_layer_ids entry (2)"});
  j = v41_tiny();
  j["text_config"]["dspark_target_layer_ids"] = {7, 8, 10};
  expect_error(j, {"dspark_target_layer_ids[2] = 10", "[0, num_hidden_layers = 10)"});
}

TEST(ConfigErrorTest, LlamaRules) {
  json j = read_json("tests/data/models/stories260K/hf/config.json");
  j["num_key_value_heads"] = 3;
  expect_error(j, {"num_key_value_heads = 3", "divisor of num_attention_heads = 8"});
  j = read_json("tests/data/models/stories260K/hf/config.json");
  j.erase("head_dim");
  j["num_attention_heads"] = 7;
  j["num_key_value_heads"] = 7;
  expect_error(j, {"hidden_size = 64", "multiple of num_attention_heads = 7"});
}

TEST(ConfigErrorTest, Files) {
  auto r = load_model_config("tests/data/io/model-configs/does-not-exist/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("does-not-exist/config.json"), std::string::npos);

  const auto dir = std::filesystem::temp_directory_path() /
                   ("di_config_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "config.json").string();
  std::ofstream(path) << "{\"hidden_size\": 4,";
  auto bad = load_model_config(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("not valid JSON"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find(path), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer::io
