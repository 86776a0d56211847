// `deepinfer structured check (--json-schema FILE | --regex R | --grammar FILE) [--tokenizer DIR]`
// A grammar is GBNF, or Lark when the file ends in .lark or with --grammar-syntax lark.
// Reads JSON Lines {"text": ...} (stdin or --input) and prints {"accepted": true|false} per line,
// driving the real matcher: token by token through fill_mask + accept_token with a tokenizer
// (the text is encoded without special tokens, then EOS must be allowed), byte by byte
// without one. A schema/grammar that is refused prints the reason and exits 2.
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "structured/compile.h"
#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/lark.h"
#include "structured/matcher.h"
#include "tools/deepinfer/command.h"

#if __has_include("tokenizer/tokenizer.h")
#include "structured/vocab_from_tokenizer.h"
#include "tokenizer/tokenizer.h"
#define DI_STRUCTURED_HAS_TOKENIZER 1
#endif

namespace {

using namespace deepinfer;
using namespace deepinfer::structured;

bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

std::shared_ptr<const TokenVocabulary> byte_vocabulary() {
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, static_cast<char>(b)));
  toks.push_back("<eos>");
  std::vector<uint8_t> special(256, 0);
  special.push_back(1);
  return TokenVocabulary::create(toks, special, {256}).value();
}

int run_check(int argc, char** argv) {
  CLI::App app{"Check documents against a JSON schema, regex or grammar with the real matcher"};
  std::string schema_file, regex, grammar_file, tok_dir, input, syntax = "auto", start = "start";
  std::string format_mode = "assert";
  bool lenient = false, compact = false;
  auto* s = app.add_option("--json-schema", schema_file, "JSON Schema file (draft 2020-12)");
  auto* r = app.add_option("--regex", regex, "regular expression (JSON Schema pattern dialect, full match)");
  auto* g = app.add_option("--grammar", grammar_file,
                           "grammar file: GBNF (start rule: root) or Lark (.lark; start rule: start)");
  app.add_option("--grammar-syntax", syntax, "grammar syntax: auto (by extension), gbnf, lark")
      ->check(CLI::IsMember({"auto", "gbnf", "lark"}));
  app.add_option("--start", start, "Lark: the start rule (default: start)");
  s->excludes(r)->excludes(g);
  r->excludes(g);
  app.add_option("--tokenizer", tok_dir, "tokenizer directory: drive token by token");
  app.add_option("--input", input, "JSON Lines file (default: stdin)");
  app.add_flag("--lenient", lenient, "JSON Schema: ignore keywords that cannot be enforced (warns)");
  app.add_flag("--compact", compact, "JSON Schema: no whitespace between JSON tokens");
  app.add_option("--format-mode", format_mode,
                 "JSON Schema `format`: assert (default: enforce supported formats, refuse unknown "
                 "ones) or annotation (draft 2020-12's default vocabulary: any string)")
      ->check(CLI::IsMember({"assert", "annotation"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (schema_file.empty() && regex.empty() && grammar_file.empty()) {
    std::cerr << "structured check: give one of --json-schema, --regex, --grammar\n";
    return 2;
  }
  StatusOr<std::shared_ptr<CompiledGrammar>> grammar = Internal("unset");
  if (!schema_file.empty()) {
    std::string text;
    if (!read_file(schema_file, &text)) { std::cerr << "cannot read " << schema_file << "\n"; return 2; }
    JsonSchemaOptions opt;
    opt.lenient = lenient;
    if (compact) opt.whitespace = JsonSchemaOptions::Whitespace::kCompact;
    if (format_mode == "annotation") opt.format = JsonSchemaOptions::Format::kAnnotation;
    auto js = compile_json_schema(text, opt);
    if (js.ok()) {
      for (const auto& w : js->warnings) std::cerr << "warning: " << w << "\n";
      grammar = js->grammar;
    } else {
      grammar = js.status();
    }
  } else if (!regex.empty()) {
    grammar = compile_regex(regex);
  } else {
    std::string text;
    if (!read_file(grammar_file, &text)) { std::cerr << "cannot read " << grammar_file << "\n"; return 2; }
    bool is_lark = syntax == "lark" || (syntax == "auto" && grammar_file.size() > 5 &&
                                        grammar_file.substr(grammar_file.size() - 5) == ".lark");
    if (is_lark) {
      LarkOptions opt;
      opt.start = start;
      auto lg = compile_lark(text, opt);
      if (lg.ok()) {
        for (const auto& w : lg->warnings) std::cerr << "warning: " << w << "\n";
        grammar = lg->grammar;
      } else {
        grammar = lg.status();
      }
    } else {
      grammar = compile_gbnf(text);
    }
  }
  if (!grammar.ok()) {
    std::cout << nlohmann::json{{"error", grammar.status().to_string()}}.dump() << "\n";
    std::cerr << "refused: " << grammar.status().to_string() << "\n";
    return 2;
  }
  std::shared_ptr<const TokenVocabulary> vocab;
#ifdef DI_STRUCTURED_HAS_TOKENIZER
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (!tok_dir.empty()) {
    auto t = tokenizer::Tokenizer::from_dir(tok_dir);
    if (!t.ok()) { std::cerr << t.status().to_string() << "\n"; return 2; }
    tok = std::move(*t);
    auto v = vocab_from_tokenizer(*tok);
    if (!v.ok()) { std::cerr << v.status().to_string() << "\n"; return 2; }
    vocab = *v;
  }
#else
  if (!tok_dir.empty()) { std::cerr << "this build has no tokenizer\n"; return 2; }
#endif
  if (!vocab) vocab = byte_vocabulary();
  std::ifstream file;
  if (!input.empty()) {
    file.open(input);
    if (!file) { std::cerr << "cannot read " << input << "\n"; return 2; }
  }
  std::istream& in = input.empty() ? std::cin : file;
  std::string line;
  int rc = 0;
  std::vector<uint32_t> mask(vocab->bitmask_words());
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j;
    try { j = nlohmann::json::parse(line); } catch (const std::exception& e) {
      std::cout << nlohmann::json{{"error", std::string("bad JSON line: ") + e.what()}}.dump() << "\n";
      rc = 1;
      continue;
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      std::cout << nlohmann::json{{"error", "each line must be {\"text\": string}"}}.dump() << "\n";
      rc = 1;
      continue;
    }
    std::string text = j["text"].get<std::string>();
    std::vector<int32_t> ids;
#ifdef DI_STRUCTURED_HAS_TOKENIZER
    if (tok) {
      auto enc = tok->encode(text, false);
      if (!enc.ok()) {
        std::cout << nlohmann::json{{"error", enc.status().to_string()}}.dump() << "\n";
        rc = 1;
        continue;
      }
      ids = *enc;
    }
#endif
    if (ids.empty() && !text.empty() && vocab->num_tokens() == 257) {
      for (unsigned char c : text) ids.push_back(c);
    }
    ids.push_back(vocab->eos_ids().empty() ? -1 : vocab->eos_ids()[0]);
    GrammarMatcher m(*grammar, vocab);
    bool accepted = true;
    std::string error;
    for (int32_t id : ids) {
      Status st = m.fill_mask(mask.data(), mask.size());
      if (!st.ok()) { error = st.to_string(); accepted = false; break; }
      bool allowed = id >= 0 && ((mask[id >> 5] >> (id & 31)) & 1);
      bool ok = m.accept_token(id);
      if (allowed != ok) {
        error = "internal: mask and accept disagree on token " + std::to_string(id);
        rc = 1;
      }
      if (!ok) { accepted = false; break; }
    }
    nlohmann::json out{{"accepted", accepted && m.is_terminated()}};
    if (!error.empty()) out["error"] = error;
    std::cout << out.dump() << "\n";
  }
  return rc;
}

int run_structured(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) != "check") {
    std::cerr << "usage: deepinfer structured check (--json-schema FILE | --regex R | --grammar FILE "
                 "[--grammar-syntax auto|gbnf|lark] [--start RULE]) [--tokenizer DIR] [--input FILE] "
                 "[--lenient] [--compact] [--format-mode assert|annotation]\n";
    return 2;
  }
  std::string name = std::string(argv[0]) + " check";
  std::vector<char*> args{name.data()};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  return run_check(static_cast<int>(args.size()), args.data());
}

}  // namespace

DI_REGISTER_COMMAND("structured", "check documents against JSON schemas, regexes and grammars",
                    run_structured);
