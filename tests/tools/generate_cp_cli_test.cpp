// `deepinfer generate --context-parallel-size N` on the bundled tiny DeepSeek-V4 (CPU: the ranks
// are threads of one process over the in-process communicator, the CPU test mode), run as a
// subprocess:
//   * random token-id prompts of 40–220 tokens plus text prompts, chunked prefill (a 64-token
//     step budget), two running sequences (a split chunk shares its step with another request's
//     decode or short chunk): at CP = 2 and 3 every prompt's greedy token ids equal the plain
//     run's, and the summary says how many chunks were split (> 0) and that the ranks agreed;
//   * errors name what is wrong: with --data-parallel-size, --enable-expert-parallel,
//     --device cuda:1, a size < 1, a threshold below block × ranks, a Llama model, and structured
//     outputs (refused per request).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "cli_run.h"
#include "generate_output.h"

namespace {

constexpr const char* kModel = "tests/data/models/deepseek-v4-tiny-stories";

using deepinfer::testing::CliRun;

CliRun run_generate(const std::string& args) { return deepinfer::testing::run_deepinfer("generate", args); }

class GenerateCpCli : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    const auto dir = std::filesystem::temp_directory_path();
    base_ = (dir / ("deepinfer_cp_cli_" + std::to_string(seed_) + "_")).string();
  }
  void TearDown() override {
    for (const char* tag : {"input", "plain", "cp2", "cp3"}) std::filesystem::remove(path(tag));
  }
  std::string path(const std::string& tag) const { return base_ + tag + ".jsonl"; }
  uint32_t seed_ = 0;
  std::string base_;
};

// "…; N chunks split, …" of the ranks line.
long chunks_split(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("; ([0-9]+) chunks split, outputs equal on every rank"))) return -1;
  return std::stol(m[1]);
}

TEST_F(GenerateCpCli, ContextParallelEqualsPlainTokenIds) {
  std::mt19937 rng(seed_);
  {
    std::ofstream in(path("input"));
    for (int i = 0; i < 4; ++i) {
      std::vector<int32_t> ids(40 + rng() % 181);
      for (auto& t : ids) t = static_cast<int32_t>(3 + rng() % 500);
      in << nlohmann::json{{"prompt_token_ids", ids}}.dump() << "\n";
    }
  }
  const std::string common =
      std::string("--model ") + kModel + " --input " + path("input") +
      " --prompt 'Once upon a time' --prompt 'One day, a girl named Mia found a big box'"
      " --max-tokens 12 --temperature 0 --ignore-eos --max-num-seqs 2 --max-num-batched-tokens 64"
      " --kv-cache-memory 67108864 --max-model-len 512 --seed " + std::to_string(seed_) + " --quiet";
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const CliRun plain = run_generate(common + " --output " + path("plain"));
  ASSERT_EQ(plain.rc, 0) << plain.output;
  const CliRun cp2 = run_generate(common + " --context-parallel-size 2 --context-parallel-min-tokens 24"
                                           " --context-parallel-block 3 --device cpu --output " + path("cp2"));
  ASSERT_EQ(cp2.rc, 0) << cp2.output;
  EXPECT_NE(cp2.output.find("ranks       2 context-parallel ranks (every rank runs every prompt, prefill "
                            "chunks of >= 24 tokens split in blocks of 3), threads of one process (CPU test mode)"),
            std::string::npos) << cp2.output;
  EXPECT_NE(cp2.output.find("context parallel rank 1 of 2 (in-process"), std::string::npos) << cp2.output;
  EXPECT_NE(cp2.output.find("6 requests (0 failed)"), std::string::npos) << cp2.output;
  EXPECT_GT(chunks_split(cp2.output), 3) << cp2.output;  // every id prompt has >= 1 chunk of >= 24
  const CliRun cp3 = run_generate(common + " --context-parallel-size 3 --context-parallel-min-tokens 9"
                                           " --context-parallel-block 1 --output " + path("cp3"));
  ASSERT_EQ(cp3.rc, 0) << cp3.output;
  EXPECT_GT(chunks_split(cp3.output), 3) << cp3.output;

  const auto want = deepinfer::testing::read_token_ids(path("plain"), /*check_index=*/true);
  ASSERT_EQ(want.size(), 6u);
  for (const char* tag : {"cp2", "cp3"}) {
    const auto got = deepinfer::testing::read_token_ids(path(tag), /*check_index=*/true);
    ASSERT_EQ(got.size(), want.size()) << tag;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(want[i].size(), 12u) << "prompt " << i;
      EXPECT_EQ(got[i], want[i]) << tag << ", prompt " << i;
    }
  }
}

TEST_F(GenerateCpCli, ErrorsNameWhatIsWrong) {
  const std::string m = std::string("--model ") + kModel + " --prompt 'Once' --max-tokens 2";
  CliRun r = run_generate(m + " --context-parallel-size 2 --data-parallel-size 2");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--context-parallel-size 2 with --data-parallel-size 2: context parallelism "
                          "cannot be combined with data parallelism"), std::string::npos) << r.output;
  r = run_generate(m + " --context-parallel-size 2 --enable-expert-parallel");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--context-parallel-size 2 with --enable-expert-parallel: not supported"),
            std::string::npos) << r.output;
  r = run_generate(m + " --context-parallel-size 2 --device cuda:1");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("rank r runs on cuda:r, so pass --device cuda"), std::string::npos) << r.output;
  r = run_generate(m + " --context-parallel-size 0");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--context-parallel-size must be >= 1, got 0"), std::string::npos) << r.output;
  r = run_generate(m + " --context-parallel-size 4 --context-parallel-block 8 --context-parallel-min-tokens 20");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("context_parallel_min_tokens (20) must be >= context_parallel_block (8, >= 1) "
                          "x context_parallel_size (4)"), std::string::npos) << r.output;
  r = run_generate("--model tests/data/models/stories260K/hf --prompt 'Once' --max-tokens 2 --context-parallel-size 2");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("context parallelism needs a DeepSeek-V4 model"), std::string::npos) << r.output;
  r = run_generate(m + " --context-parallel-size 2 --regex '[a-z]+'");
  EXPECT_EQ(r.rc, 1) << r.output;  // the only request failed
  EXPECT_NE(r.output.find("structured outputs are not supported with context parallelism"),
            std::string::npos) << r.output;
}

}  // namespace
