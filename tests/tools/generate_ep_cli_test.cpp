// `deepinfer generate --enable-expert-parallel` (tensor and data parallel size 1) on the bundled
// tiny DeepSeek-V4 (CPU), run as a subprocess: it takes the expert-parallel MoE path (the engine's
// create log names the one-rank in-process communicator) and its greedy token ids equal the plain
// run's for every prompt, in a batch. With a Llama model the flag fails naming the architecture;
// more data-parallel ranks than GPUs are refused before anything loads.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "cli_run.h"
#include "generate_output.h"
#include <vector>

namespace {

constexpr const char* kModel = "tests/data/models/deepseek-v4-tiny-stories";

using deepinfer::testing::CliRun;

CliRun run_generate(const std::string& args) { return deepinfer::testing::run_deepinfer("generate", args); }

std::vector<std::vector<int32_t>> read_token_ids(const std::string& path) {
  return deepinfer::testing::read_token_ids(path, /*check_index=*/false);
}

class GenerateEpCli : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    const auto dir = std::filesystem::temp_directory_path();
    plain_path_ = (dir / ("deepinfer_ep_cli_plain_" + std::to_string(seed_) + ".jsonl")).string();
    ep_path_ = (dir / ("deepinfer_ep_cli_ep_" + std::to_string(seed_) + ".jsonl")).string();
  }
  void TearDown() override {
    std::filesystem::remove(plain_path_);
    std::filesystem::remove(ep_path_);
  }
  uint32_t seed_ = 0;
  std::string plain_path_, ep_path_;
};

TEST_F(GenerateEpCli, ExpertParallelEqualsPlainTokenIds) {
  const std::string common =
      std::string("--model ") + kModel +
      " --prompt 'Once upon a time' --prompt 'Lily and Ben went to the park' --prompt 'The little dog'"
      " --prompt 'One day, a girl named Mia found a big box' --prompt 'Tom had a red ball'"
      " --max-tokens 40 --temperature 0 --ignore-eos --max-num-seqs 3 --kv-cache-memory 67108864"
      " --seed " + std::to_string(seed_) + " --quiet";
  const CliRun plain = run_generate(common + " --output " + plain_path_);
  ASSERT_EQ(plain.rc, 0) << plain.output;
  const CliRun ep = run_generate(common + " --enable-expert-parallel --output " + ep_path_);
  ASSERT_EQ(ep.rc, 0) << ep.output;
  EXPECT_EQ(plain.output.find("expert parallel"), std::string::npos) << plain.output;
  EXPECT_NE(ep.output.find("expert parallel (world size 1, in-process)"), std::string::npos) << ep.output;
  const auto a = read_token_ids(plain_path_);
  const auto b = read_token_ids(ep_path_);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].size(), 40u) << "prompt " << i;
    EXPECT_EQ(b[i], a[i]) << "prompt " << i;
  }
}

TEST_F(GenerateEpCli, ErrorsNameWhatIsWrong) {
  // A Llama model has no routed experts.
  CliRun r = run_generate("--model tests/data/models/stories260K/hf --prompt 'Once' --max-tokens 2 "
                          "--enable-expert-parallel");
  EXPECT_NE(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("enable_expert_parallel"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("LlamaForCausalLM"), std::string::npos) << r.output;
  // More ranks than GPUs is refused before loading (world size > 1: tools_generate_dp_cli_test).
  r = run_generate(std::string("--model ") + kModel +
                   " --prompt 'Once' --max-tokens 2 --data-parallel-size 64 --enable-expert-parallel --device cuda");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("needs 64 GPUs (one process per GPU)"), std::string::npos) << r.output;
}

}  // namespace
