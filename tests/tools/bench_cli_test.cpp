// `deepinfer bench` on the bundled tiny model (CPU), run as a subprocess: the JSON report has every
// field, token counts are exact (num_prompts × output_len; EOS ignored), the engine config
// reflects the flags, and bad flags fail with a message naming the flag. Sizes are small so the
// whole test stays within a few seconds on two cores.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "cli_run.h"

namespace {

constexpr const char* kModel = "tests/data/models/deepseek-v4-tiny-stories";

using deepinfer::testing::CliRun;

CliRun run_cli(const std::string& args) { return deepinfer::testing::run_deepinfer("bench", args); }

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    json_path_ = (std::filesystem::temp_directory_path() /
                  ("deepinfer_bench_test_" + std::to_string(seed_) + ".json")).string();
  }
  void TearDown() override { std::filesystem::remove(json_path_); }
  nlohmann::json read_json() {
    std::ifstream f(json_path_);
    EXPECT_TRUE(f.good()) << "no JSON written to " << json_path_;
    return nlohmann::json::parse(f);
  }
  uint32_t seed_ = 0;
  std::string json_path_;
};

void expect_summary(const nlohmann::json& j, const char* key, size_t count) {
  ASSERT_TRUE(j.contains(key)) << key;
  for (const char* f : {"mean", "p50", "p90", "p99", "count"}) {
    ASSERT_TRUE(j[key].contains(f)) << key << "." << f;
  }
  EXPECT_EQ(j[key]["count"].get<size_t>(), count) << key;
  EXPECT_GT(j[key]["p50"].get<double>(), 0.0) << key;
  EXPECT_LE(j[key]["p50"].get<double>(), j[key]["p99"].get<double>()) << key;
}

TEST_F(BenchCli, ThroughputReportsExactCounts) {
  const int prompts = 6, in = 20, out = 5, conc = 4;
  const CliRun r = run_cli(std::string("--model ") + kModel + " --input-len " + std::to_string(in) +
                        " --output-len " + std::to_string(out) + " --num-prompts " +
                        std::to_string(prompts) + " --max-concurrency " + std::to_string(conc) +
                        " --seed " + std::to_string(seed_) + " --output-json " + json_path_);
  ASSERT_EQ(r.rc, 0) << r.output << "\nseed " << seed_;
  EXPECT_NE(r.output.find("requests/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("TTFT"), std::string::npos) << r.output;
  const nlohmann::json j = read_json();
  EXPECT_EQ(j["mode"], "throughput");
  EXPECT_EQ(j["num_requests"].get<int>(), prompts);
  EXPECT_EQ(j["num_input_tokens"].get<int>(), prompts * in);
  EXPECT_EQ(j["num_output_tokens"].get<int>(), prompts * out);
  EXPECT_EQ(j["engine_stats"]["generated_tokens"].get<int>(), prompts * out);
  EXPECT_EQ(j["engine_config"]["max_num_seqs"].get<int>(), conc);
  EXPECT_EQ(j["engine_config"]["device"], "cpu");
  EXPECT_EQ(j["warmup"]["prompts"].get<int>(), conc);
  for (const char* k : {"elapsed_time", "requests_per_second", "input_tokens_per_second",
                        "output_tokens_per_second", "total_tokens_per_second"}) {
    ASSERT_TRUE(j.contains(k)) << k;
    EXPECT_GT(j[k].get<double>(), 0.0) << k;
  }
  const double el = j["elapsed_time"].get<double>();
  EXPECT_NEAR(j["output_tokens_per_second"].get<double>() * el, prompts * out, 1e-6 * prompts * out);
  EXPECT_NEAR(j["requests_per_second"].get<double>() * el, prompts, 1e-6 * prompts);
  expect_summary(j, "ttft_ms", prompts);
  expect_summary(j, "tpot_ms", prompts);
  expect_summary(j, "e2e_latency_ms", prompts);
}

TEST_F(BenchCli, LatencyRunsEveryIteration) {
  const int batch = 3, in = 16, out = 4, iters = 2;
  const CliRun r = run_cli(std::string("--model ") + kModel + " --mode latency --input-len " +
                        std::to_string(in) + " --output-len " + std::to_string(out) +
                        " --num-prompts " + std::to_string(batch) + " --num-iters " +
                        std::to_string(iters) + " --warmup-prompts 0 --temperature 0 --seed " +
                        std::to_string(seed_) + " --output-json " + json_path_);
  ASSERT_EQ(r.rc, 0) << r.output << "\nseed " << seed_;
  const nlohmann::json j = read_json();
  EXPECT_EQ(j["mode"], "latency");
  EXPECT_EQ(j["num_iters"].get<int>(), iters);
  EXPECT_EQ(j["num_requests"].get<int>(), batch * iters);
  EXPECT_EQ(j["num_input_tokens"].get<int>(), batch * iters * in);
  EXPECT_EQ(j["num_output_tokens"].get<int>(), batch * iters * out);
  EXPECT_EQ(j["warmup"]["prompts"].get<int>(), 0);
  expect_summary(j, "iteration_latency_ms", iters);
  expect_summary(j, "ttft_ms", batch * iters);
}

TEST_F(BenchCli, BadFlagsFailWithAMessage) {
  CliRun r = run_cli(std::string("--model ") + kModel + " --mode sideways");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("--mode"), std::string::npos) << r.output;
  r = run_cli(std::string("--model ") + kModel + " --output-len 0");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("--output-len"), std::string::npos) << r.output;
  r = run_cli("--model tests/data/models/no-such-model --num-prompts 1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("no-such-model"), std::string::npos) << r.output;
  r = run_cli(std::string("--model ") + kModel + " --input-len 40 --output-len 30 --max-model-len 64");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.output.find("--max-model-len"), std::string::npos) << r.output;
}

}  // namespace
