// The multi-process launcher (dist/launcher.h) with /bin/sh as the rank program: every rank runs
// with its own argv and the launcher's environment overrides (NCCL_NVLS_ENABLE=0); a failing rank
// is named with how it failed, and its peers, still running (sleeping), are stopped instead of
// being waited for — the test returning at all is the no-hang check (no timing assertion).
#include "dist/launcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace deepinfer::dist {
namespace {

std::vector<std::string> sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

TEST(RankLauncher, EveryRankRunsWithItsArgvAndTheEnvironmentOverride) {
  RankLaunch l;
  l.env = {{"NCCL_NVLS_ENABLE", "0"}, {"DEEPINFER_TEST_RANKS", "three"}};
  for (int r = 0; r < 3; ++r) {
    l.argv.push_back(sh("test \"$NCCL_NVLS_ENABLE\" = 0 && test \"$DEEPINFER_TEST_RANKS\" = three && "
                        "test \"$0\" = rank" + std::to_string(r)));
    l.argv.back().push_back("rank" + std::to_string(r));  // $0 of the script
  }
  const Status st = run_rank_processes(l);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(RankLauncher, AFailingRankIsNamedAndThePeersAreStopped) {
  RankLaunch l;
  l.kill_grace_s = 1.0;
  l.argv = {sh("exec sleep 300"), sh("exit 3"), sh("exec sleep 300")};
  Status st = run_rank_processes(l);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 1 of 3"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("exited with code 3"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("the other ranks were stopped"), std::string::npos) << st.to_string();

  // A rank that ignores SIGTERM is killed after the grace period.
  l.argv = {sh("trap '' TERM; exec sleep 300"), sh("sleep 0.2; kill -9 $$")};
  st = run_rank_processes(l);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 1 of 2"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("killed by signal 9"), std::string::npos) << st.to_string();
}

TEST(RankLauncher, ProgramsThatCannotStartAndBadArguments) {
  RankLaunch l;
  l.argv = {{"/nonexistent/deepinfer-rank"}};
  Status st = run_rank_processes(l);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 0 of 1"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("could not start"), std::string::npos) << st.to_string();
  EXPECT_EQ(run_rank_processes(RankLaunch{}).code(), StatusCode::kInvalidArgument);
  l.argv = {sh("exit 0"), {}};
  st = run_rank_processes(l);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rank 1"), std::string::npos) << st.to_string();
}

TEST(RankLauncher, SelfExecutablePathIsThisTest) {
  auto p = self_executable_path();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_NE(p->find("dist_dp_launcher_test"), std::string::npos) << *p;
}

}  // namespace
}  // namespace deepinfer::dist
