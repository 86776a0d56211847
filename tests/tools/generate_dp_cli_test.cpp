// `deepinfer generate --data-parallel-size N` on the bundled tiny DeepSeek-V4 (CPU: the ranks are
// threads of one process over the in-process communicator, the CPU test mode of the launcher),
// run as a subprocess: with --enable-expert-parallel (experts sharded, lockstep) and without it
// (independent replicas) every prompt's greedy token ids equal the plain single-rank run's, the
// outputs come back in prompt order, and the summary names the ranks. Errors: tensor parallelism with
// expert parallelism, more ranks than GPUs on cuda, --device cuda:N with several ranks, and the hidden rank flags
// used by hand. The child half of the process launcher (a rank writing its share for the parent)
// runs on the CPU too.
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

// Prompt order is checked too: the launcher merges the ranks' results.
std::vector<std::vector<int32_t>> read_token_ids(const std::string& path) {
  return deepinfer::testing::read_token_ids(path, /*check_index=*/true);
}

class GenerateDpCli : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    const auto dir = std::filesystem::temp_directory_path();
    base_ = (dir / ("deepinfer_dp_cli_" + std::to_string(seed_) + "_")).string();
  }
  void TearDown() override {
    for (const char* tag : {"plain", "dp2ep", "dp3ep", "dp2"}) std::filesystem::remove(path(tag));
  }
  std::string path(const std::string& tag) const { return base_ + tag + ".jsonl"; }
  uint32_t seed_ = 0;
  std::string base_;
};

TEST_F(GenerateDpCli, DataParallelEqualsPlainTokenIds) {
  // 5 prompts of different lengths: ranks get 3/2 (DP 2) and 2/2/1 (DP 3), one running sequence
  // each (--max-num-seqs 1), so the ranks with fewer prompts run out first and idle.
  const std::string common =
      std::string("--model ") + kModel +
      " --prompt 'Once upon a time' --prompt 'Lily and Ben went to the park' --prompt 'The little dog'"
      " --prompt 'One day, a girl named Mia found a big box' --prompt 'Tom had a red ball'"
      " --max-tokens 24 --temperature 0 --ignore-eos --max-num-seqs 1 --kv-cache-memory 33554432"
      " --max-model-len 96 --seed " + std::to_string(seed_) + " --quiet";
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const CliRun plain = run_generate(common + " --output " + path("plain"));
  ASSERT_EQ(plain.rc, 0) << plain.output;
  const CliRun dp2ep = run_generate(common + " --data-parallel-size 2 --enable-expert-parallel --device cpu --output " + path("dp2ep"));
  ASSERT_EQ(dp2ep.rc, 0) << dp2ep.output;
  EXPECT_NE(dp2ep.output.find("ranks       2 data-parallel ranks sharing the experts (expert parallel, lockstep), "
                              "threads of one process (CPU test mode); prompts per rank 3/2"),
            std::string::npos) << dp2ep.output;
  EXPECT_NE(dp2ep.output.find("expert parallel (world size 2, in-process), data parallel rank 1 of 2"),
            std::string::npos) << dp2ep.output;
  EXPECT_NE(dp2ep.output.find("async scheduling is off"), std::string::npos) << dp2ep.output;
  EXPECT_NE(dp2ep.output.find("5 requests (0 failed)"), std::string::npos) << dp2ep.output;
  const CliRun dp3ep = run_generate(common + " --data-parallel-size 3 --enable-expert-parallel --output " + path("dp3ep"));
  ASSERT_EQ(dp3ep.rc, 0) << dp3ep.output;
  EXPECT_NE(dp3ep.output.find("prompts per rank 2/2/1"), std::string::npos) << dp3ep.output;
  const CliRun dp2 = run_generate(common + " --data-parallel-size 2 --output " + path("dp2"));
  ASSERT_EQ(dp2.rc, 0) << dp2.output;
  EXPECT_NE(dp2.output.find("2 data-parallel ranks (independent replicas)"), std::string::npos) << dp2.output;

  const auto want = read_token_ids(path("plain"));
  ASSERT_EQ(want.size(), 5u);
  for (const char* tag : {"dp2ep", "dp3ep", "dp2"}) {
    const auto got = read_token_ids(path(tag));
    ASSERT_EQ(got.size(), want.size()) << tag;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(want[i].size(), 24u) << "prompt " << i;
      EXPECT_EQ(got[i], want[i]) << tag << ", prompt " << i;
    }
  }
}

TEST_F(GenerateDpCli, RankProcessWritesItsShareForTheParent) {
  // What a launched child does (the launcher adds --dp-rank/--dp-results and, with EP on cuda,
  // --dp-nccl-id): rank 1 of 2 runs prompts 1 and 3, prints nothing on stdout and writes one
  // line per prompt (global index, token ids) and a summary line. Replicas (no EP) run on the CPU.
  const std::string results = path("plain");
  const std::string args = std::string("--model ") + kModel +
                           " --prompt 'Once upon a time' --prompt 'The little dog' --prompt 'Tom had a red ball'"
                           " --prompt 'Lily and Ben' --max-tokens 5 --temperature 0 --ignore-eos"
                           " --data-parallel-size 2 --dp-rank 1 --dp-results " + results;
  const std::string cmd = std::string(DEEPINFER_CLI) + " generate " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0);
  EXPECT_EQ(out, "") << "a rank prints nothing on stdout";
  std::ifstream f(results);
  std::string line;
  std::vector<size_t> indices;
  bool summary = false;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("summary")) {
      summary = true;
      EXPECT_EQ(j["summary"]["rank"].get<int>(), 1);
      EXPECT_EQ(j["summary"]["num_generated_tokens"].get<int64_t>(), 10);
      continue;
    }
    indices.push_back(j["index"].get<size_t>());
    EXPECT_EQ(j["outputs"][0]["token_ids"].size(), 5u) << line;
  }
  EXPECT_TRUE(summary);
  EXPECT_EQ(indices, (std::vector<size_t>{1, 3}));
  // With EP a rank needs the group: on the CPU there is no cross-process transport.
  const CliRun r = run_generate(args + " --enable-expert-parallel");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("data parallel rank 1 of 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("communicator"), std::string::npos) << r.output;
}

TEST_F(GenerateDpCli, ErrorsNameWhatIsWrong) {
  const std::string m = std::string("--model ") + kModel + " --prompt 'Once' --max-tokens 2";
  CliRun r = run_generate(m + " --tensor-parallel-size 2 --enable-expert-parallel");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--tensor-parallel-size 2 with --enable-expert-parallel: not supported"),
            std::string::npos) << r.output;
  r = run_generate(m + " --data-parallel-size 64 --enable-expert-parallel --device cuda");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--data-parallel-size 64 needs 64 GPUs (one process per GPU), this machine has"),
            std::string::npos) << r.output;
  r = run_generate(m + " --data-parallel-size 2 --enable-expert-parallel --device cuda:1");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("rank r runs on cuda:r, so pass --device cuda"), std::string::npos) << r.output;
  r = run_generate(m + " --data-parallel-size 2 --dp-rank 5 --dp-results /dev/null");
  EXPECT_EQ(r.rc, 2) << r.output;
  EXPECT_NE(r.output.find("--dp-rank 5"), std::string::npos) << r.output;
  // The hidden rank flags are not in --help.
  r = run_generate("--help");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("--data-parallel-size"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("--dp-rank"), std::string::npos) << r.output;
}

}  // namespace
