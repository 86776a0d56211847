// The `deepinfer` command-line tool: `deepinfer <command> [options]`.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/env.h"
#include "common/logging.h"
#include "tools/deepinfer/command.h"

namespace deepinfer::cli {
std::vector<Command>& command_registry() {
  static std::vector<Command> registry;
  return registry;
}
}  // namespace deepinfer::cli

namespace {
void print_usage() {
  auto cmds = deepinfer::cli::command_registry();
  std::sort(cmds.begin(), cmds.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::printf("deepinfer — inference engine for DeepSeek-V4\n\nusage: deepinfer <command> [options]\n\n"
              "commands:\n");
  for (const auto& c : cmds) std::printf("  %-12s %s\n", c.name.c_str(), c.summary.c_str());
  std::printf("\n`deepinfer <command> --help` shows a command's options.\n");
}
}  // namespace

int main(int argc, char** argv) {
  using namespace deepinfer;
  LogLevel level;
  if (parse_log_level(env().log_level, &level)) {
    set_log_level(level);
  } else {
    log_warning("DEEPINFER_LOG_LEVEL='" + env().log_level +
                "' is not one of debug|info|warning|error|off; using info");
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("deepinfer 0.1.0\n");
    return 0;
  }
  for (const auto& c : cli::command_registry()) {
    if (c.name == argv[1]) {
      std::string prog = std::string("deepinfer ") + argv[1];
      std::vector<char*> sub_argv;
      sub_argv.push_back(prog.data());
      for (int i = 2; i < argc; ++i) sub_argv.push_back(argv[i]);
      return c.run(static_cast<int>(sub_argv.size()), sub_argv.data());
    }
  }
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n\n", argv[1]);
  print_usage();
  return 2;
}
