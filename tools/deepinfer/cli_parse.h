// Argument parsing shared by the subcommands that use CLI11.
#pragma once

#include <CLI/CLI.hpp>

namespace deepinfer::cli {

// Parses argv into `app`. A repeated single-value flag takes its last value, so a script such as
// `scripts/run.sh --temperature 0` can override the script's own settings (repeatable flags like
// --prompt keep every value). Returns -1 when parsing succeeded, else the exit code to return
// (help printed, or the error explained).
inline int parse_taking_last(CLI::App& app, int argc, char** argv) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_max() == 1) opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return -1;
}

}  // namespace deepinfer::cli
