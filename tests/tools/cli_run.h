// Runs the deepinfer binary (DEEPINFER_CLI, set by tests/tools/CMakeLists.txt) from a test and
// captures its exit code and its combined stdout + stderr.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace deepinfer::testing {

struct CliRun {
  int rc = -1;
  std::string output;  // stdout + stderr
};

// `deepinfer <command> <args>`.
inline CliRun run_deepinfer(const std::string& command, const std::string& args) {
  const std::string cmd = std::string(DEEPINFER_CLI) + " " + command + " " + args + " 2>&1";
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace deepinfer::testing
