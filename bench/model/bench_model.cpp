// CPU prefill and decode throughput of the model library on small checkpoints.
//
//   build/bench/model/bench_model [--prefill N] [--decode N] [--threads T] [--reference] [dir ...]
//
// For each model directory: one-shot prefill of N pseudo-random token ids (tokens/s), then N
// greedy decode steps through the sequence state (tokens/s), best of 3 runs each. Defaults: the
// fixtures under tests/data (run from the repository root).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

using namespace deepinfer;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int argmax(const float* row, int64_t V) {
  return static_cast<int>(std::max_element(row, row + V) - row);
}

}  // namespace

int main(int argc, char** argv) {
  int prefill = 128, decode = 64, threads = 0;
  bool reference = false;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--prefill" && i + 1 < argc) prefill = std::atoi(argv[++i]);
    else if (a == "--decode" && i + 1 < argc) decode = std::atoi(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--reference") reference = true;
    else if (a == "-h" || a == "--help") {
      std::printf("usage: bench_model [--prefill N] [--decode N] [--threads T] [--reference] [dir ...]\n");
      return 0;
    } else dirs.push_back(a);
  }
  if (dirs.empty()) {
    dirs = {"tests/data/models/v4tiny_b", "tests/data/models/deepseek-v4-tiny-stories",
            "tests/data/models/stories260K/hf"};
    std::error_code ec;
    std::vector<std::string> extra;
    for (const auto& e : std::filesystem::directory_iterator("tests/data/v4-fixtures", ec))
      if (e.is_directory()) extra.push_back(e.path().string());
    std::sort(extra.begin(), extra.end());
    dirs.insert(dirs.end(), extra.begin(), extra.end());
  }
  backend::CpuBackendOptions opt;
  opt.reference = reference;
  opt.num_threads = threads;
  auto be = backend::make_cpu_backend(opt);
  std::printf("backend %s, threads %s, prefill %d tokens, decode %d tokens (best of 3)\n",
              be->name(), threads ? std::to_string(threads).c_str() : "default", prefill, decode);
  std::printf("%-48s %14s %14s\n", "model", "prefill tok/s", "decode tok/s");
  for (const std::string& dir : dirs) {
    auto m = model::load_model(dir, be.get());
    if (!m.ok()) {
      std::printf("%-48s load failed: %s\n", dir.c_str(), m.status().to_string().c_str());
      continue;
    }
    model::Model& mdl = **m;
    const int64_t V = mdl.info().vocab_size;
    std::vector<int32_t> ids(prefill);
    uint32_t x = 12345;
    for (auto& t : ids) t = static_cast<int32_t>((x = x * 1664525u + 1013904223u) >> 8) % V;
    double best_prefill = 1e30, best_decode = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      auto st = mdl.new_sequence_state();
      model::SequenceInput in{std::span<const int32_t>(ids), st.get(), false};
      auto t0 = std::chrono::steady_clock::now();
      auto l = mdl.forward({&in, 1});
      best_prefill = std::min(best_prefill, seconds_since(t0));
      if (!l.ok()) { std::printf("forward failed: %s\n", l.status().to_string().c_str()); return 1; }
      int32_t tok = argmax(l->data<float>(), V);
      t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < decode; ++i) {
        model::SequenceInput step{std::span<const int32_t>(&tok, 1), st.get(), false};
        auto d = mdl.forward({&step, 1});
        if (!d.ok()) { std::printf("decode failed: %s\n", d.status().to_string().c_str()); return 1; }
        tok = argmax(d->data<float>(), V);
      }
      best_decode = std::min(best_decode, seconds_since(t0));
    }
    std::printf("%-48s %14.1f %14.1f\n", dir.c_str(), prefill / best_prefill, decode / best_decode);
  }
  return 0;
}
