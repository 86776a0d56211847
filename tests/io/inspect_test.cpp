// `deepinfer inspect` logic (io/model_summary): exact parameter counts and bytes of the committed
// checkpoints (numbers computed independently from the safetensors headers with Python:
// sum of numel over floating-point tensors; I64 tid2eid tables separately).
#include "io/model_summary.h"

#include <unistd.h>

#include <filesystem>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace deepinfer::io {
namespace {

namespace fs = std::filesystem;

ModelSummary summarize(const std::string& dir) {
  auto s = summarize_model(dir);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : ModelSummary{};
}

TEST(InspectTest, V4TinyB) {
  ModelSummary s = summarize("tests/data/models/v4tiny_b");
  EXPECT_TRUE(s.weights_ok) << s.weights_error;
  EXPECT_EQ(s.parameters, 1421957);
  EXPECT_EQ(s.mtp_parameters, 0);
  ASSERT_EQ(s.params_by_dtype.size(), 1u);
  EXPECT_EQ(s.params_by_dtype.at("F32").elements, 1421957);
  EXPECT_EQ(s.params_by_dtype.at("F32").bytes, 1421957u * 4u);
  EXPECT_EQ(s.index_tables.tensors, 1);    // layer 0 tid2eid [320, 2] I64
  EXPECT_EQ(s.index_tables.elements, 640);
  EXPECT_EQ(s.index_tables.bytes, 5120u);
  EXPECT_EQ(s.scales.tensors, 0);
  EXPECT_EQ(s.num_tensors, 210);
  EXPECT_EQ(s.num_files, 1);
  EXPECT_EQ(s.total_bytes, 5692948u);
  const std::string text = format_summary_text(s);
  EXPECT_NE(text.find("DeepseekV4ForCausalLM"), std::string::npos) << text;
  EXPECT_NE(text.find("4: sliding, CSA, HCA, CSA"), std::string::npos) << text;
  EXPECT_NE(text.find("1,421,957 (1.42 M)"), std::string::npos) << text;
  EXPECT_NE(text.find("CSA 4, HCA 16"), std::string::npos) << text;
  EXPECT_NE(text.find("ok: every tensor mapped (210"), std::string::npos) << text;
  nlohmann::json j = summary_to_json(s);
  EXPECT_EQ(j["parameters"], 1421957);
  EXPECT_EQ(j["total_bytes"], 5692948);
  EXPECT_EQ(j["config"]["layer_types"][2], "heavily_compressed_attention");
  EXPECT_EQ(j["config"]["rope"]["compress"]["theta"], 160000.0);
}

TEST(InspectTest, TinyStories) {
  ModelSummary s = summarize("tests/data/models/deepseek-v4-tiny-stories");
  EXPECT_TRUE(s.weights_ok) << s.weights_error;
  EXPECT_EQ(s.parameters, 7297705);  // "7.3 M parameters" of its SOURCES.md
  EXPECT_EQ(s.params_by_dtype.at("BF16").elements, 7297705);
  EXPECT_EQ(s.params_by_dtype.at("BF16").bytes, 7297705u * 2u);
  EXPECT_EQ(s.index_tables.elements, 1024);  // tid2eid [512, 2]
  EXPECT_EQ(s.total_bytes, 14603602u);
  const std::string text = format_summary_text(s);
  EXPECT_NE(text.find("7,297,705 (7.30 M)"), std::string::npos) << text;
  EXPECT_NE(text.find("yarn theta 160000, rotary 16, factor 4, original 512, beta 32/1, "
                      "attention_factor 1"), std::string::npos) << text;
}

TEST(InspectTest, Stories260K) {
  ModelSummary s = summarize("tests/data/models/stories260K/hf");
  EXPECT_TRUE(s.weights_ok) << s.weights_error;
  EXPECT_EQ(s.parameters, 260032);  // the tied lm_head is not counted twice
  EXPECT_EQ(s.total_bytes, 1040128u);
  EXPECT_EQ(s.index_tables.tensors, 0);
  const std::string text = format_summary_text(s);
  EXPECT_NE(text.find("LlamaForCausalLM"), std::string::npos) << text;
  EXPECT_NE(text.find("8 x 8 (4 KV heads)"), std::string::npos) << text;
  EXPECT_NE(text.find("tied"), std::string::npos) << text;
}

// Quantised checkpoint: FP4 bytes count 2 parameters each, scales are not parameters, and a
// checkpoint the registry rejects is still summarised (with the problem reported).
TEST(InspectTest, QuantisedCountingRule) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto ckpt = Checkpoint::open("tests/data/models/v4tiny_b");
  ASSERT_TRUE(ckpt.ok());
  std::vector<TensorToWrite> t;
  for (const TensorInfo* x : (*ckpt)->tensors()) {
    if (x->name == "model.layers.1.ffn.experts.0.w1.weight") {  // [64, 128] -> FP4 [64, 64] bytes
      std::vector<uint8_t> b(64 * 64);
      for (auto& v : b) v = static_cast<uint8_t>(rng());
      t.push_back({x->name, DType::kI8, {64, 64}, b});
      t.push_back({"model.layers.1.ffn.experts.0.w1.scale", DType::kF8E8M0, {64, 4},
                   std::vector<uint8_t>(256, 127)});
    } else if (x->name == "model.layers.1.attn.wq_a.weight") {  // [64, 128] -> FP8
      std::vector<uint8_t> b(64 * 128);
      for (auto& v : b) v = static_cast<uint8_t>(rng() & 0x7e);
      t.push_back({x->name, DType::kF8E4M3, {64, 128}, b});
      t.push_back({"model.layers.1.attn.wq_a.scale", DType::kF8E8M0, {1, 1}, {127}});
    } else {
      t.push_back({x->name, x->dtype, x->shape,
                   std::vector<uint8_t>(x->data, x->data + x->nbytes)});
    }
  }
  const fs::path dir = fs::temp_directory_path() / ("di_inspect_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file("tests/data/models/v4tiny_b/config.json", dir / "config.json");
  ASSERT_TRUE(write_safetensors((dir / "model.safetensors").string(), t).ok());
  ModelSummary s = summarize(dir.string());
  EXPECT_TRUE(s.weights_ok) << s.weights_error;
  EXPECT_EQ(s.parameters, 1421957);  // same logical parameters as the fp32 original
  EXPECT_EQ(s.params_by_dtype.at("F4").elements, 64 * 128);
  EXPECT_EQ(s.params_by_dtype.at("F4").bytes, 64u * 64u);
  EXPECT_EQ(s.params_by_dtype.at("F8_E4M3").elements, 64 * 128);
  EXPECT_EQ(s.params_by_dtype.at("F32").elements, 1421957 - 2 * 64 * 128);
  EXPECT_EQ(s.scales.tensors, 2);
  EXPECT_EQ(s.scales.elements, 257);

  // Drop one tensor: the registry rejects it, the summary still counts the rest.
  t.erase(std::remove_if(t.begin(), t.end(),
                         [](const TensorToWrite& x) { return x.name == "model.norm.weight"; }),
          t.end());
  ASSERT_TRUE(write_safetensors((dir / "model.safetensors").string(), t).ok());
  ModelSummary bad = summarize(dir.string());
  EXPECT_FALSE(bad.weights_ok);
  EXPECT_NE(bad.weights_error.find("1 missing tensor"), std::string::npos) << bad.weights_error;
  EXPECT_EQ(bad.parameters, 1421957 - 128);
  EXPECT_EQ(bad.params_by_dtype.at("F4").elements, 64 * 128);  // found without the registry
  EXPECT_EQ(bad.scales.tensors, 2);
  EXPECT_NE(format_summary_text(bad).find("PROBLEM: "), std::string::npos);
  fs::remove_all(dir);
}

TEST(InspectTest, Errors) {
  auto s = summarize_model("tests/data/io/model-configs/does-not-exist");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("does-not-exist"), std::string::npos);
  // A directory with a config but no weights.
  auto t = summarize_model("tests/data/io/model-configs/deepseek-v4-flash");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("deepseek-v4-flash"), std::string::npos)
      << t.status().message();
}

}  // namespace
}  // namespace deepinfer::io
