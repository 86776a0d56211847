#include "dist/launcher.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

extern char** environ;

namespace deepinfer::dist {

namespace {

// "NAME=value" strings: the parent's environment with `env` set or replaced.
std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [k, v] : env) replaced = replaced || k == name;
    if (!replaced) out.push_back(entry);
  }
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::string describe(int status) {
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    return "exited with code " + std::to_string(code) + (code == 127 ? " (could not start the program)" : "");
  }
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended with wait status " + std::to_string(status);
}

// Terminates and reaps every child still running (pid > 0 in `pids`).
void kill_all(std::vector<pid_t>& pids, double grace_s) {
  for (pid_t p : pids) if (p > 0) kill(p, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  for (;;) {
    bool left = false;
    for (pid_t& p : pids) {
      if (p <= 0) continue;
      int st = 0;
      const pid_t r = waitpid(p, &st, WNOHANG);
      if (r == p || (r < 0 && errno == ECHILD)) p = 0;
      else left = true;
    }
    if (!left) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (pid_t& p : pids) {
    if (p <= 0) continue;
    kill(p, SIGKILL);
    int st = 0;
    waitpid(p, &st, 0);
    p = 0;
  }
}

}  // namespace

Status run_rank_processes(const RankLaunch& launch) {
  const size_t world = launch.argv.size();
  if (world == 0) return InvalidArgument("run_rank_processes: no ranks to launch");
  for (size_t r = 0; r < world; ++r) {
    if (launch.argv[r].empty()) return InvalidArgument("run_rank_processes: rank " + std::to_string(r) + " has an empty argv");
  }
  // Everything the children need is built before fork (only async-signal-safe calls after it).
  std::vector<std::string> env_strings = child_environment(launch.env);
  std::vector<char*> envp = c_strings(env_strings);
  std::vector<std::vector<std::string>> argv_strings = launch.argv;
  std::vector<std::vector<char*>> argvs;
  for (auto& a : argv_strings) argvs.push_back(c_strings(a));

  std::vector<pid_t> pids(world, 0);
  for (size_t r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      const std::string why = std::strerror(errno);
      kill_all(pids, launch.kill_grace_s);
      return Internal("launching rank " + std::to_string(r) + ": fork failed: " + why);
    }
    if (pid == 0) {
      execve(argvs[r][0], argvs[r].data(), envp.data());
      _exit(127);
    }
    pids[r] = pid;
  }
  // Poll our own children only (never waitpid(-1): the caller may have others).
  size_t running = world;
  while (running > 0) {
    bool reaped = false;
    for (size_t r = 0; r < world; ++r) {
      if (pids[r] <= 0) continue;
      int st = 0;
      const pid_t p = waitpid(pids[r], &st, WNOHANG);
      if (p == 0) continue;
      if (p < 0) {
        if (errno == EINTR) continue;
        const std::string why = std::strerror(errno);
        pids[r] = 0;
        kill_all(pids, launch.kill_grace_s);
        return Internal("waiting for rank " + std::to_string(r) + ": " + why);
      }
      pids[r] = 0;
      --running;
      reaped = true;
      if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
      kill_all(pids, launch.kill_grace_s);
      return Internal("rank " + std::to_string(r) + " of " + std::to_string(world) + " (" +
                      launch.argv[r][0] + ") " + describe(st) + "; the other ranks were stopped");
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return OkStatus();
}

StatusOr<std::string> self_executable_path() {
  std::string buf(4096, '\0');
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return Internal(std::string("readlink(/proc/self/exe): ") + std::strerror(errno));
  buf.resize(static_cast<size_t>(n));
  return buf;
}

}  // namespace deepinfer::dist
