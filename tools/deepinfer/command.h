// Subcommands of the `deepinfer` CLI register themselves: one file per command (cmd_<name>.cpp),
// each with a static DI_REGISTER_COMMAND(...). main.cpp dispatches on the first argument.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace deepinfer::cli {

struct Command {
  std::string name;
  std::string summary;  // one line for `deepinfer --help`
  // Receives argv with argv[0] = "deepinfer <name>". Returns the process exit code.
  std::function<int(int argc, char** argv)> run;
};

std::vector<Command>& command_registry();

struct CommandRegistrar {
  explicit CommandRegistrar(Command c) { command_registry().push_back(std::move(c)); }
};

}  // namespace deepinfer::cli

#define DI_CLI_CONCAT_INNER_(a, b) a##b
#define DI_CLI_CONCAT_(a, b) DI_CLI_CONCAT_INNER_(a, b)
#define DI_REGISTER_COMMAND(name, summary, fn)                                   \
  static ::deepinfer::cli::CommandRegistrar DI_CLI_CONCAT_(di_cmd_reg_, __LINE__)( \
      ::deepinfer::cli::Command{name, summary, fn})
