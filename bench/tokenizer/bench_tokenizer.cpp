// Encode throughput of deepinfer's tokenizer against Hugging Face `tokenizers` on the same text,
// single thread, in one run (the Python side runs as a subprocess on the same machine, same text).
//
//   bench_tokenizer [--corpus tests/data/tokenizers/corpus/ulysses.md.xz] [--repeats 5]
//                   [tokenizer dirs... (default: the four under tests/data/tokenizers)]
// Run from the repository root. Prints MB/s for both and the ratio (deepinfer / HF); also checks
// that both produced identical ids.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

using deepinfer::tokenizer::Tokenizer;

int main(int argc, char** argv) {
  std::string corpus = "tests/data/tokenizers/corpus/ulysses.md.xz";
  int repeats = 5;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--corpus" && i + 1 < argc) corpus = argv[++i];
    else if (a == "--repeats" && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
    else dirs.push_back(a);
  }
  if (dirs.empty()) {
    for (const char* n : {"deepseek-v3", "llama3", "qwen3", "gpt2"}) dirs.push_back(std::string("tests/data/tokenizers/") + n);
  }
  auto text_or = deepinfer::tokenizer::read_file_maybe_xz(corpus);
  if (!text_or.ok()) {
    std::cerr << text_or.status().to_string() << "\n";
    return 1;
  }
  const std::string text = *text_or;
  // Both sides encode the corpus line by line (HF: encode_batch on one thread): a realistic
  // request size; encoding the whole 1.5 MB as one string is pathological for HF's offsets.
  std::vector<std::string> lines;
  for (size_t pos = 0;;) {
    const size_t nl = text.find('\n', pos);
    lines.push_back(text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  namespace fs = std::filesystem;
  const fs::path tmp = fs::temp_directory_path() / "di_bench_tokenizer";
  fs::create_directories(tmp);
  const fs::path text_file = tmp / "corpus.txt", ids_file = tmp / "hf_ids.json";
  std::ofstream(text_file, std::ios::binary) << text;

  std::printf("corpus %s: %.2f MB in %zu lines, %d repeats (median), single thread\n", corpus.c_str(), text.size() / 1e6, lines.size(), repeats);
  std::printf("%-14s %10s %12s %12s %8s %s\n", "tokenizer", "tokens", "deepinfer", "HF", "ratio", "ids");
  int rc = 0;
  for (const auto& dir : dirs) {
    auto tok = Tokenizer::from_dir(dir);
    if (!tok.ok()) {
      std::cerr << tok.status().to_string() << "\n";
      return 1;
    }
    (void)(*tok)->encode(text.substr(0, 10000), false);  // warm-up
    std::vector<double> times;
    std::vector<int32_t> ids;
    for (int r = 0; r < repeats; ++r) {
      ids.clear();
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& line : lines) {
        auto part = *(*tok)->encode(line, false);
        ids.insert(ids.end(), part.begin(), part.end());
      }
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    const double ours = times[times.size() / 2];
    std::string json_path = dir + "/tokenizer.json";
    if (!fs::exists(json_path)) json_path += ".xz";
    const std::string cmd = "python3 bench/tokenizer/hf_encode_bench.py '" + json_path + "' '" + text_file.string() +
                            "' " + std::to_string(repeats) + " '" + ids_file.string() + "'";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    while (p && fgets(buf, sizeof(buf), p)) out += buf;
    if (!p || pclose(p) != 0) {
      std::cerr << "HF side failed: " << cmd << "\n";
      return 1;
    }
    const auto hf = nlohmann::json::parse(out);
    const double theirs = hf.at("median_s").get<double>();
    std::ifstream f(ids_file);
    const auto hf_ids = nlohmann::json::parse(f).get<std::vector<int32_t>>();
    const bool same = hf_ids == ids;
    if (!same) rc = 1;
    const std::string name = fs::path(dir).filename().string();
    std::printf("%-14s %10zu %9.2f MB/s %9.2f MB/s %7.2fx %s\n", name.c_str(), ids.size(), text.size() / ours / 1e6,
                text.size() / theirs / 1e6, theirs / ours, same ? "identical" : "DIFFERENT");
  }
  fs::remove_all(tmp);
  return rc;
}
