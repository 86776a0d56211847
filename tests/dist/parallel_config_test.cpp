// The launcher's answers to vLLM's parallelism flags: one rank runs, with or without
// --enable-expert-parallel (the engine's world-size-1 expert-parallel path); data parallel runs
// on enough GPUs (one process each) or as threads on the CPU; every other combination is an
// error naming what is wrong (never silently ignored).
#include "dist/parallel_config.h"

#include <gtest/gtest.h>

namespace deepinfer::dist {
namespace {

Status check(int tp, int dp, bool ep, const std::string& device = "cuda", int gpus = 1) {
  return check_parallel_flags({tp, dp, ep}, device, gpus);
}

void expect_error(const Status& st, StatusCode code, const std::string& text) {
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(text), std::string::npos) << st.to_string();
}

TEST(ParallelFlags, OneRankRuns) {
  EXPECT_TRUE(check(1, 1, false).ok());
  EXPECT_TRUE(check(1, 1, false, "cpu", 0).ok());
}

TEST(ParallelFlags, OneRankWithExpertParallelRuns) {
  // World size 1: the engine hook (EngineConfig.enable_expert_parallel) takes it, on any device.
  EXPECT_TRUE(check(1, 1, true).ok());
  EXPECT_TRUE(check(1, 1, true, "cuda:3", -1).ok());
  EXPECT_TRUE(check(1, 1, true, "cpu", 0).ok());
  EXPECT_TRUE(check(1, 1, true, "cpu-reference", 0).ok());
}

TEST(ParallelFlags, DataParallelRunsOnEnoughGpusOrAsCpuThreads) {
  // One process per GPU on cuda (rank r on cuda:r), with or without expert parallelism.
  EXPECT_TRUE(check(1, 2, true, "cuda", 2).ok());
  EXPECT_TRUE(check(1, 8, true, "cuda", 8).ok());
  EXPECT_TRUE(check(1, 2, false, "cuda", 4).ok());
  EXPECT_TRUE(check(1, 2, true, "cuda", -1).ok());  // unknown count: the ranks find out
  // Threads of one process on the CPU (test mode).
  EXPECT_TRUE(check(1, 2, true, "cpu", 0).ok());
  EXPECT_TRUE(check(1, 3, false, "cpu-reference", 0).ok());
  EXPECT_EQ(rank_device("cuda", 3), "cuda:3");
  EXPECT_EQ(rank_device("cpu", 3), "cpu");
}

TEST(ParallelFlags, TensorParallelRunsOnEnoughGpusOrAsCpuThreads) {
  EXPECT_TRUE(check(2, 1, false, "cuda", 2).ok());
  EXPECT_TRUE(check(4, 1, false, "cuda", -1).ok());  // unknown count: the ranks find out
  EXPECT_TRUE(check(2, 1, false, "cpu", 0).ok());
  EXPECT_TRUE(check(2, 1, false, "cpu-reference", 0).ok());
}

TEST(ParallelFlags, EveryOtherCaseNamesWhatIsWrong) {
  expect_error(check(0, 1, false), StatusCode::kInvalidArgument, "--tensor-parallel-size must be >= 1, got 0");
  expect_error(check(1, -2, true), StatusCode::kInvalidArgument, "--data-parallel-size must be >= 1, got -2");
  expect_error(check(1, 0, true), StatusCode::kInvalidArgument, "--data-parallel-size must be >= 1, got 0");
  // Tensor parallelism: too few GPUs, or combined with the flags it does not support.
  expect_error(check(2, 1, false), StatusCode::kFailedPrecondition,
               "--tensor-parallel-size 2 needs 2 GPUs (one process per GPU), this machine has 1");
  expect_error(check(2, 1, true, "cuda", 4), StatusCode::kInvalidArgument,
               "--tensor-parallel-size 2 with --enable-expert-parallel");
  expect_error(check(2, 2, false, "cuda", 4), StatusCode::kInvalidArgument,
               "--tensor-parallel-size 2 with --data-parallel-size 2");
  expect_error(check(2, 1, false, "cuda:1", 8), StatusCode::kInvalidArgument, "rank r runs on cuda:r");
  ParallelFlags tp_cp{2, 1, false};
  tp_cp.context_parallel_size = 2;
  expect_error(check_parallel_flags(tp_cp, "cpu", 0), StatusCode::kInvalidArgument,
               "--tensor-parallel-size 2 with --context-parallel-size 2");
  expect_error(check(1, 2, true, "cuda", 1), StatusCode::kFailedPrecondition,
               "--data-parallel-size 2 needs 2 GPUs (one process per GPU), this machine has 1");
  expect_error(check(1, 4, false, "cuda", 0), StatusCode::kFailedPrecondition, "this machine has 0");
  expect_error(check(1, 2, true, "cuda:1", 8), StatusCode::kInvalidArgument, "rank r runs on cuda:r, so pass --device cuda");
  expect_error(check(1, 2, true, "tpu", 8), StatusCode::kInvalidArgument, "--device tpu is neither a GPU");
}

}  // namespace
}  // namespace deepinfer::dist
