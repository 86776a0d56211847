// `deepinfer inspect <model>`: resolved path, architecture, config summary, parameter count and
// bytes per dtype (io/model_summary.h does the work; this file only parses flags and prints).
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/env.h"
#include "io/model_summary.h"
#include "tools/deepinfer/command.h"

#if __has_include("io/hub.h")
#include "io/hub.h"
#define DI_INSPECT_HAS_HUB 1
#endif

namespace {

int run_inspect(int argc, char** argv) {
  CLI::App app{std::string("Print a model's configuration, parameter count and bytes per dtype.\n") +
               deepinfer::io::parameter_counting_rule()};
  std::string model;
  bool as_json = false;
  bool no_weights = false;
  app.add_option("model", model,
                 "local model directory, or Hugging Face id org/name[@revision] (resolved through "
                 "the HF cache; DEEPINFER_MODEL_PATH overrides)")
      ->required();
  app.add_flag("--json", as_json, "print one JSON object instead of text");
  app.add_flag("--config-only", no_weights,
               "Hub ids: download config/tokenizer files only (no weights); the parameter count "
               "then needs the weights already in the cache");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  std::string dir = model;
#ifdef DI_INSPECT_HAS_HUB
  deepinfer::io::ResolveOptions opt;
  opt.download_weights = !no_weights;
  opt.quiet = as_json;
  auto resolved = deepinfer::io::resolve_model(model, deepinfer::env(), opt);
  if (!resolved.ok()) {
    std::cerr << "deepinfer inspect: " << resolved.status().to_string() << "\n";
    return 1;
  }
  dir = *resolved;
#endif
  auto summary = deepinfer::io::summarize_model(dir);
  if (!summary.ok()) {
    std::cerr << "deepinfer inspect: " << summary.status().to_string() << "\n";
    return 1;
  }
  if (as_json) {
    nlohmann::json j = deepinfer::io::summary_to_json(*summary);
    j["model"] = model;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "model:          " << model << "\n" << deepinfer::io::format_summary_text(*summary);
  }
  return summary->weights_ok ? 0 : 1;
}

}  // namespace

DI_REGISTER_COMMAND("inspect", "show a model's config, parameter count and bytes per dtype",
                    run_inspect);
