// `deepinfer generate --tensor-parallel-size N` on the bundled tiny DeepSeek-V4 (CPU: the ranks
// are threads of one process over the in-process communicator, the CPU test mode), run as a
// subprocess:
//   * random token-id prompts of 20–120 tokens plus text prompts, chunked prefill (a 64-token
//     step budget), two running sequences: at TP = 2 every prompt's greedy token ids equal the
//     plain run's (the sharded model's logits match the whole model's closely enough on this
//     model; tests/dist/tp_model_test.cpp), and the summary says the ranks agreed;
//   * errors name what is wrong: with --data-parallel-size, --enable-expert-parallel,
//     --context-parallel-size, --device cuda:1, a size < 1, a size that does not divide the
//     heads, a Llama model, and structured outputs (refused per request).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cli_run.h"
#include "generate_output.h"

namespace {

constexpr const char* kModel = "tests/data/models/deepseek-v4-tiny-stories";

using deepinfer::testing::CliRun;

CliRun run_generate(const std::string& args) { return deepinfer::testing::run_deepinfer("generate", args); }

class GenerateTpCli : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    const auto dir = std::filesystem::temp_directory_path();
    base_ = (dir / ("deepinfer_tp_cli_" + std::to_string(seed_) + "_")).string();
  }
  void TearDown() override {
    for (const char* tag : {"input", "plain", "tp2"}) std::filesystem::remove(path(tag));
  }
  std::string path(const std::string& tag) const { return base_ + tag + ".jsonl"; }
  uint32_t seed_ = 0;
  std::string base_;
};

TEST_F(GenerateTpCli, TensorParallelEqualsPlainTokenIds) {
  std::mt19937 rng(seed_);
  {
    std::ofstream in(path("input"));
    for (int i = 0; i < 3; ++i) {
      std::vector<int32_t> ids(20 + rng() % 101);
      for (auto& t : ids) t = static_cast<int32_t>(3 + rng() % 500);
      in << nlohmann::json{{"prompt_token_ids", ids}}.dump() << "\n";
    }
  }
  const std::string common =
      std::string("--model ") + kModel + " --input " + path("input") +
      " --prompt 'Once upon a time' --prompt 'One day, a girl named Mia found a big box'"
      " --max-tokens 10 --temperature 0 --ignore-eos --max-num-seqs 2 --max-num-batched-tokens 64"
      " --kv-cache-memory 67108864 --max-model-len 512 --seed " + std::to_string(seed_) + " --quiet";
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const CliRun plain = run_generate(common + " --output " + path("plain"));
  ASSERT_EQ(plain.rc, 0) << plain.output;
  const CliRun tp2 = run_generate(common + " --tensor-parallel-size 2 --device cpu --output " + path("tp2"));
  ASSERT_EQ(tp2.rc, 0) << tp2.output;
  EXPECT_NE(tp2.output.find("ranks       2 tensor-parallel ranks (every rank runs every prompt with a 1/2 "
                            "shard of the attention heads and expert widths), threads of one process "
                            "(CPU test mode); outputs equal on every rank"),
            std::string::npos) << tp2.output;
  EXPECT_NE(tp2.output.find("tensor parallel rank 1 of 2 (in-process"), std::string::npos) << tp2.output;
  EXPECT_NE(tp2.output.find("5 requests (0 failed)"), std::string::npos) << tp2.output;

  const auto want = deepinfer::testing::read_token_ids(path("plain"), /*check_index=*/true);
  const auto got = deepinfer::testing::read_token_ids(path("tp2"), /*check_index=*/true);
  ASSERT_EQ(want.size(), 5u);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].size(), 10u) << "prompt " << i;
    EXPECT_EQ(got[i], want[i]) << "prompt " << i;
  }
}

TEST_F(GenerateTpCli, ErrorsNameWhatIsWrong) {
  const std::string m = std::string("--model ") + kModel + " --prompt 'Once' --max-tokens 2 --device cpu";
  CliRun r = run_generate(m + " --tensor-parallel-size 2 --data-parallel-size 2");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--tensor-parallel-size 2 with --data-parallel-size 2: tensor parallelism "
                          "cannot be combined with data parallelism"), std::string::npos) << r.output;
  r = run_generate(m + " --tensor-parallel-size 2 --enable-expert-parallel");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--tensor-parallel-size 2 with --enable-expert-parallel: not supported"),
            std::string::npos) << r.output;
  r = run_generate(m + " --tensor-parallel-size 2 --context-parallel-size 2");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--tensor-parallel-size 2 with --context-parallel-size 2: not supported"),
            std::string::npos) << r.output;
  r = run_generate(std::string("--model ") + kModel + " --prompt 'Once' --max-tokens 2 "
                   "--tensor-parallel-size 2 --device cuda:1");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("rank r runs on cuda:r, so pass --device cuda"), std::string::npos) << r.output;
  r = run_generate(m + " --tensor-parallel-size 0");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--tensor-parallel-size must be >= 1, got 0"), std::string::npos) << r.output;
  r = run_generate(m + " --tensor-parallel-size 7");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("tensor parallel size 7 does not divide"), std::string::npos) << r.output;
  r = run_generate("--model tests/data/models/stories260K/hf --prompt 'Once' --max-tokens 2 --device cpu "
                   "--tensor-parallel-size 2");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("tensor parallelism is implemented for DeepSeek-V4 only"), std::string::npos)
      << r.output;
  r = run_generate(m + " --tensor-parallel-size 2 --regex '[a-z]+'");
  EXPECT_EQ(r.rc, 1) << r.output;  // the only request failed
  EXPECT_NE(r.output.find("structured outputs are not supported with tensor parallelism"),
            std::string::npos) << r.output;
}

}  // namespace
