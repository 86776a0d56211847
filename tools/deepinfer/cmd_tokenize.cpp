// `deepinfer tokenize`: JSON Lines in, JSON Lines out.
//   {"text": "..."}                      -> {"ids": [...]}
//   --decode: {"ids": [...]}             -> {"text": "..."}
//   --chat:   {"messages": [...], "options": {"thinking_mode": "thinking", ...}}
//                                         -> {"prompt": "...", "ids": [...]}   (DeepSeek-V4 encoding)
// A line may carry "add_special_tokens" / "skip_special_tokens" to override the flags. Bad lines
// print {"error": "..."} (and a message on stderr); the exit code is then 1.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/env.h"
#include "tokenizer/chat_dsv4.h"
#include "tokenizer/tokenizer.h"
#include "tools/deepinfer/command.h"

#if __has_include("io/hub.h")
#include "io/hub.h"
#define DI_TOKENIZE_HAS_HUB 1
#endif

namespace {

using deepinfer::tokenizer::Tokenizer;

int run_tokenize(int argc, char** argv) {
  CLI::App app{"Tokenize JSON Lines from stdin (or --input) and print JSON Lines"};
  std::string model, tok_dir, input;
  bool decode = false, chat = false, no_special = false, skip_special = false;
  auto* m = app.add_option("--model", model, "model directory or Hugging Face id (its tokenizer files)");
  auto* t = app.add_option("--tokenizer", tok_dir, "directory with tokenizer.json[.xz] (+ tokenizer_config.json)");
  m->excludes(t);
  app.add_option("--input", input, "read this file instead of stdin");
  app.add_flag("--decode", decode, "decode {\"ids\": [...]} lines to {\"text\": ...}");
  app.add_flag("--chat", chat, "encode {\"messages\": [...]} with the DeepSeek-V4 chat encoding");
  app.add_flag("--no-add-special-tokens", no_special, "encode without BOS/EOS (default: add them)");
  app.add_flag("--skip-special-tokens", skip_special, "decode: drop special tokens");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (model.empty() && tok_dir.empty()) {
    std::cerr << "deepinfer tokenize: give --model DIR|ID or --tokenizer DIR\n";
    return 2;
  }
  if (decode && chat) {
    std::cerr << "deepinfer tokenize: --decode and --chat exclude each other\n";
    return 2;
  }
  std::string dir = tok_dir;
  if (!model.empty()) {
#ifdef DI_TOKENIZE_HAS_HUB
    deepinfer::io::ResolveOptions opt;
    opt.download_weights = false;
    auto resolved = deepinfer::io::resolve_model(model, deepinfer::env(), opt);
    if (!resolved.ok()) {
      std::cerr << "deepinfer tokenize: " << resolved.status().to_string() << "\n";
      return 1;
    }
    dir = *resolved;
#else
    dir = model;  // local directories only in this build
#endif
  }
  auto loaded = Tokenizer::from_dir(dir);
  if (!loaded.ok()) {
    std::cerr << "deepinfer tokenize: " << loaded.status().to_string() << "\n";
    return 1;
  }
  const Tokenizer& tok = **loaded;

  std::unique_ptr<std::istream> file;
  if (!input.empty()) {
    file = std::make_unique<std::ifstream>(input);
    if (!*file) {
      std::cerr << "deepinfer tokenize: cannot open " << input << "\n";
      return 1;
    }
  }
  std::istream& in = file ? *file : std::cin;
  int errors = 0;
  std::string line;
  long line_no = 0;
  auto fail = [&](const std::string& msg) {
    ++errors;
    std::cerr << "deepinfer tokenize: line " << line_no << ": " << msg << "\n";
    std::cout << nlohmann::json{{"error", "line " + std::to_string(line_no) + ": " + msg}}.dump() << "\n";
  };
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto row = nlohmann::ordered_json::parse(line, nullptr, false);
    if (row.is_discarded() || !row.is_object()) {
      fail("not a JSON object");
      continue;
    }
    if (decode) {
      if (!row.contains("ids") || !row["ids"].is_array()) {
        fail("expected {\"ids\": [...]}");
        continue;
      }
      std::vector<int32_t> ids;
      bool ok = true;
      for (const auto& v : row["ids"]) {
        if (!v.is_number_integer()) ok = false;
        else ids.push_back(v.get<int32_t>());
      }
      if (!ok) {
        fail("\"ids\" must hold integers");
        continue;
      }
      const bool skip = row.contains("skip_special_tokens") ? row["skip_special_tokens"].get<bool>() : skip_special;
      std::cout << nlohmann::json{{"text", tok.decode(ids, skip)}}.dump(-1, ' ', false,
                                                                       nlohmann::json::error_handler_t::replace)
                << "\n";
      continue;
    }
    std::string text;
    bool add_special = !no_special;
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    if (chat) {
      if (!row.contains("messages")) {
        fail("expected {\"messages\": [...]}");
        continue;
      }
      auto opt = deepinfer::tokenizer::chat_options_from_kwargs(
          row.contains("options") ? row["options"] : nlohmann::ordered_json());
      if (!opt.ok()) {
        fail(opt.status().message());
        continue;
      }
      if (row.contains("tools")) opt->tools = row["tools"];
      auto prompt = deepinfer::tokenizer::apply_chat_template(row["messages"], *opt);
      if (!prompt.ok()) {
        fail(prompt.status().message());
        continue;
      }
      text = *prompt;
      add_special = false;  // the prompt already holds BOS
      out["prompt"] = text;
    } else {
      if (!row.contains("text") || !row["text"].is_string()) {
        fail("expected {\"text\": \"...\"}");
        continue;
      }
      text = row["text"].get<std::string>();
      if (row.contains("add_special_tokens")) add_special = row["add_special_tokens"].get<bool>();
    }
    auto ids = tok.encode(text, add_special);
    if (!ids.ok()) {
      fail(ids.status().message());
      continue;
    }
    out["ids"] = *ids;
    std::cout << out.dump() << "\n";
  }
  return errors == 0 ? 0 : 1;
}

}  // namespace

DI_REGISTER_COMMAND("tokenize", "encode/decode JSON Lines with a model's tokenizer (and V4 chat encoding)",
                    run_tokenize);
