// Random request workloads for the engine tests: token-id prompts and per-request sampling
// params, drawn from a seeded generator (the test prints the seed).
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "deepinfer/sampling_params.h"

namespace deepinfer::runtime_test {

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
};

// `n` requests: prompts of 1..max_prompt ids in [3, vocab) (after `bos` when it is >= 0),
// max_tokens in [min_out, max_out]; sampling params from `make_params(i, rng)`.
template <typename MakeParams>
Workload random_workload(int64_t vocab, int32_t bos, int n, int max_prompt, int min_out,
                         int max_out, std::mt19937& rng, MakeParams make_params) {
  Workload w;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    if (bos >= 0) p.push_back(bos);
    const int len = 1 + static_cast<int>(rng() % max_prompt);
    for (int j = 0; j < len; ++j) p.push_back(3 + static_cast<int32_t>(rng() % (vocab - 3)));
    w.prompts.push_back(std::move(p));
    SamplingParams sp = make_params(i, rng);
    sp.max_tokens = min_out + static_cast<int>(rng() % (max_out - min_out + 1));
    w.params.push_back(sp);
  }
  return w;
}

}  // namespace deepinfer::runtime_test
