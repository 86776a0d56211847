#include "common/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace deepinfer {
namespace {

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"DEEPINFER_MODEL_PATH", "DEEPINFER_LOG_LEVEL", "DEEPINFER_NUM_THREADS",
                          "HF_HOME", "HF_HUB_CACHE", "HF_ENDPOINT", "HF_TOKEN", "HF_TOKEN_PATH",
                          "HF_HUB_OFFLINE", "XDG_CACHE_HOME"}) {
      unsetenv(v);
    }
    setenv("HOME", "/home/tester", 1);
  }
};

TEST_F(EnvTest, DefaultsFollowHuggingfaceHub) {
  Env e = Env::from_process();
  EXPECT_EQ(e.hf_home, "/home/tester/.cache/huggingface");
  EXPECT_EQ(e.hf_hub_cache, "/home/tester/.cache/huggingface/hub");
  EXPECT_EQ(e.hf_endpoint, "https://huggingface.co");
  EXPECT_FALSE(e.hf_hub_offline);
  EXPECT_FALSE(e.model_path.has_value());
  EXPECT_EQ(e.num_threads, 0);

  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(Env::from_process().hf_hub_cache, "/xdg/huggingface/hub");
  setenv("HF_HOME", "/hf", 1);
  EXPECT_EQ(Env::from_process().hf_hub_cache, "/hf/hub");
  setenv("HF_HUB_CACHE", "/cache", 1);
  EXPECT_EQ(Env::from_process().hf_hub_cache, "/cache");
}

TEST_F(EnvTest, ReadsEveryVariable) {
  setenv("DEEPINFER_MODEL_PATH", "/models/v4", 1);
  setenv("DEEPINFER_NUM_THREADS", "3", 1);
  setenv("DEEPINFER_LOG_LEVEL", "debug", 1);
  setenv("HF_ENDPOINT", "http://127.0.0.1:8080//", 1);
  setenv("HF_TOKEN", " hf_abc \n", 1);
  setenv("HF_HUB_OFFLINE", "True", 1);
  Env e = Env::from_process();
  EXPECT_EQ(e.model_path.value_or(""), "/models/v4");
  EXPECT_EQ(e.num_threads, 3);
  EXPECT_EQ(e.log_level, "debug");
  EXPECT_EQ(e.hf_endpoint, "http://127.0.0.1:8080");
  EXPECT_EQ(e.hf_token.value_or(""), "hf_abc");
  EXPECT_TRUE(e.hf_hub_offline);
  setenv("HF_HUB_OFFLINE", "0", 1);
  EXPECT_FALSE(Env::from_process().hf_hub_offline);
}

TEST_F(EnvTest, TokenFromFileAndBadThreadCount) {
  auto dir = std::filesystem::temp_directory_path() / ("di_env_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << "hf_from_file\n";
  setenv("HF_HOME", dir.c_str(), 1);
  EXPECT_EQ(Env::from_process().hf_token.value_or(""), "hf_from_file");
  setenv("DEEPINFER_NUM_THREADS", "many", 1);
  EXPECT_EQ(Env::from_process().num_threads, 0);  // warned, default kept
  std::filesystem::remove_all(dir);
}

TEST_F(EnvTest, KernelSelectorsAndSessionThirteenSwitches) {
  // x5..x9 name routed-expert modes only; elsewhere they are refused (warned, auto kept). The
  // session-13 switches parse their documented values and keep the default otherwise.
  setenv("DEEPINFER_EXPERTS_KERNEL", "x7", 1);
  setenv("DEEPINFER_GEMV_KERNEL", "x7", 1);
  setenv("DEEPINFER_SMALL_LINEAR", "x4", 1);
  setenv("DEEPINFER_SPIN_WAIT", "2", 1);
  setenv("DEEPINFER_WA_FUSED_REDUCE", "0", 1);
  Env e = Env::from_process();
  EXPECT_EQ(e.experts_kernel, "x7");
  EXPECT_EQ(e.gemv_kernel, "auto");
  EXPECT_EQ(e.small_linear, "x4");
  EXPECT_EQ(e.spin_wait, 2);
  EXPECT_FALSE(e.wa_fused_reduce);
  setenv("DEEPINFER_SPIN_WAIT", "yes", 1);
  setenv("DEEPINFER_WA_FUSED_REDUCE", "2", 1);
  e = Env::from_process();
  EXPECT_EQ(e.spin_wait, 1);
  EXPECT_TRUE(e.wa_fused_reduce);
  // Session 15: x0 (the session 12-14 routed-expert auto) for the experts only.
  setenv("DEEPINFER_EXPERTS_KERNEL", "x0", 1);
  setenv("DEEPINFER_GEMV_KERNEL", "x0", 1);
  e = Env::from_process();
  EXPECT_EQ(e.experts_kernel, "x0");
  EXPECT_EQ(e.gemv_kernel, "auto");
  for (const char* v :
       {"DEEPINFER_EXPERTS_KERNEL", "DEEPINFER_GEMV_KERNEL", "DEEPINFER_SMALL_LINEAR",
        "DEEPINFER_SPIN_WAIT", "DEEPINFER_WA_FUSED_REDUCE"})
    unsetenv(v);
}

// Session 16: DEEPINFER_DENSE_WG (skinny_wg's first row count) and the head's cuBLAS row limit
// parse their documented ranges and keep the default (warned) otherwise.
TEST_F(EnvTest, SessionSixteenSwitches) {
  const char* names[] = {"DEEPINFER_DENSE_WG", "DEEPINFER_HEAD_BLAS_MAX_ROWS"};
  for (const char* v : names) unsetenv(v);
  Env e = Env::from_process();
  EXPECT_EQ(e.dense_wg, 17);
  EXPECT_EQ(e.head_blas_max_rows, 384);  // session 17 (64 in session 16)
  setenv("DEEPINFER_DENSE_WG", "0", 1);
  setenv("DEEPINFER_HEAD_BLAS_MAX_ROWS", "16", 1);
  e = Env::from_process();
  EXPECT_EQ(e.dense_wg, 0);
  EXPECT_EQ(e.head_blas_max_rows, 16);
  setenv("DEEPINFER_DENSE_WG", "65", 1);
  setenv("DEEPINFER_HEAD_BLAS_MAX_ROWS", "15", 1);
  e = Env::from_process();
  EXPECT_EQ(e.dense_wg, 17);
  EXPECT_EQ(e.head_blas_max_rows, 384);
  setenv("DEEPINFER_HEAD_BLAS_MAX_ROWS", "2048", 1);
  EXPECT_EQ(Env::from_process().head_blas_max_rows, 2048);
  setenv("DEEPINFER_HEAD_BLAS_MAX_ROWS", "2049", 1);
  EXPECT_EQ(Env::from_process().head_blas_max_rows, 384);
  for (const char* v : names) unsetenv(v);
}

TEST_F(EnvTest, SessionSeventeenSwitches) {  // DEEPINFER_LINEAR_WR, DEEPINFER_DENSE_WG_MAX_ROWS
  unsetenv("DEEPINFER_DENSE_WG_MAX_ROWS");
  EXPECT_EQ(Env::from_process().dense_wg_max_rows, 384);
  setenv("DEEPINFER_DENSE_WG_MAX_ROWS", "64", 1);
  EXPECT_EQ(Env::from_process().dense_wg_max_rows, 64);
  setenv("DEEPINFER_DENSE_WG_MAX_ROWS", "2048", 1);
  EXPECT_EQ(Env::from_process().dense_wg_max_rows, 2048);
  setenv("DEEPINFER_DENSE_WG_MAX_ROWS", "63", 1);  // warned, default kept
  EXPECT_EQ(Env::from_process().dense_wg_max_rows, 384);
  unsetenv("DEEPINFER_DENSE_WG_MAX_ROWS");
  unsetenv("DEEPINFER_LINEAR_WR");
  EXPECT_EQ(Env::from_process().linear_wr, 1);
  setenv("DEEPINFER_LINEAR_WR", "0", 1);
  EXPECT_EQ(Env::from_process().linear_wr, 0);
  setenv("DEEPINFER_LINEAR_WR", "2", 1);  // warned, default kept
  EXPECT_EQ(Env::from_process().linear_wr, 1);
  setenv("DEEPINFER_LINEAR_WR", "on", 1);
  EXPECT_EQ(Env::from_process().linear_wr, 1);
  unsetenv("DEEPINFER_LINEAR_WR");
}

TEST_F(EnvTest, SessionEighteenSwitches) {  // DEEPINFER_LINEAR_WG, DEEPINFER_LINEAR_WG_MAX_ROWS
  unsetenv("DEEPINFER_LINEAR_WG");
  unsetenv("DEEPINFER_LINEAR_WG_MAX_ROWS");
  EXPECT_EQ(Env::from_process().linear_wg, 17);
  EXPECT_EQ(Env::from_process().linear_wg_max_rows, 65536);
  setenv("DEEPINFER_LINEAR_WG", "0", 1);
  setenv("DEEPINFER_LINEAR_WG_MAX_ROWS", "384", 1);
  EXPECT_EQ(Env::from_process().linear_wg, 0);
  EXPECT_EQ(Env::from_process().linear_wg_max_rows, 384);
  setenv("DEEPINFER_LINEAR_WG", "1", 1);
  EXPECT_EQ(Env::from_process().linear_wg, 1);
  setenv("DEEPINFER_LINEAR_WG", "65", 1);           // warned, default kept
  setenv("DEEPINFER_LINEAR_WG_MAX_ROWS", "63", 1);  // warned, default kept
  EXPECT_EQ(Env::from_process().linear_wg, 17);
  EXPECT_EQ(Env::from_process().linear_wg_max_rows, 65536);
  setenv("DEEPINFER_LINEAR_WG", "x", 1);
  setenv("DEEPINFER_LINEAR_WG_MAX_ROWS", "65537", 1);
  EXPECT_EQ(Env::from_process().linear_wg, 17);
  EXPECT_EQ(Env::from_process().linear_wg_max_rows, 65536);
  unsetenv("DEEPINFER_LINEAR_WG");
  unsetenv("DEEPINFER_LINEAR_WG_MAX_ROWS");
}

TEST_F(EnvTest, SessionTwentySwitches) {  // DEEPINFER_EXPERTS_WG, DEEPINFER_EXPERTS_WG_VARIANT
  unsetenv("DEEPINFER_EXPERTS_WG");
  EXPECT_EQ(Env::from_process().experts_wg, 2048);
  setenv("DEEPINFER_EXPERTS_WG", "0", 1);
  EXPECT_EQ(Env::from_process().experts_wg, 0);
  setenv("DEEPINFER_EXPERTS_WG", "1", 1);
  EXPECT_EQ(Env::from_process().experts_wg, 1);
  setenv("DEEPINFER_EXPERTS_WG", "1048576", 1);
  EXPECT_EQ(Env::from_process().experts_wg, 1048576);
  setenv("DEEPINFER_EXPERTS_WG", "1048577", 1);  // warned, default kept
  EXPECT_EQ(Env::from_process().experts_wg, 2048);
  setenv("DEEPINFER_EXPERTS_WG", "-1", 1);
  EXPECT_EQ(Env::from_process().experts_wg, 2048);
  setenv("DEEPINFER_EXPERTS_WG", "many", 1);
  EXPECT_EQ(Env::from_process().experts_wg, 2048);
  unsetenv("DEEPINFER_EXPERTS_WG");
  unsetenv("DEEPINFER_EXPERTS_WG_VARIANT");
  EXPECT_EQ(Env::from_process().experts_wg_variant, 0);
  setenv("DEEPINFER_EXPERTS_WG_VARIANT", "3", 1);
  EXPECT_EQ(Env::from_process().experts_wg_variant, 3);
  setenv("DEEPINFER_EXPERTS_WG_VARIANT", "5", 1);  // warned, default kept
  EXPECT_EQ(Env::from_process().experts_wg_variant, 0);
  unsetenv("DEEPINFER_EXPERTS_WG_VARIANT");
}

TEST_F(EnvTest, SideStreamSwitch) {  // session 14: DEEPINFER_SIDE_STREAM 1 (default) | 0
  unsetenv("DEEPINFER_SIDE_STREAM");
  EXPECT_TRUE(Env::from_process().side_stream);
  setenv("DEEPINFER_SIDE_STREAM", "0", 1);
  EXPECT_FALSE(Env::from_process().side_stream);
  setenv("DEEPINFER_SIDE_STREAM", "off", 1);  // warned, default kept
  EXPECT_TRUE(Env::from_process().side_stream);
  unsetenv("DEEPINFER_SIDE_STREAM");
}

}  // namespace
}  // namespace deepinfer
