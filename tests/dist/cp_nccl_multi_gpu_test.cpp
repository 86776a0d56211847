// Context-parallel prefill over NCCL (label gpu; world size = number of GPUs, up to 8; one GPU
// runs it at world size 1): one thread per GPU, each rank its own CUDA backend, the model loaded
// on its GPU and an NCCL communicator (NCCL_NVLS_ENABLE=0 in the environment). All ranks prefill
// the same random prompt through prefill_context_parallel (all rows' logits, serpentine blocks),
// then decode 3 tokens from their own state; each rank compares with the plain single-GPU model
// on its GPU:
//   * --batch-invariant: prefill logits (every row) and the 3 decode steps bitwise equal;
//   * without it: each rank's rows see other GEMM shapes (fewer rows), so cuBLAS may round
//     differently — worst row ‖err‖₂/‖ref‖₂ ≤ 1e−4 (decode fed the plain run's greedy tokens).
//
// Threads as ranks over NCCL need NcclBackendCommunicator's wait_for_completion (session 4 this
// test hung on two H200s without it: see nccl_backend_comm.h). Each rank prints its stage to
// stderr as it goes, and a watchdog (cp_watchdog.h) ends the process with every rank's last stage
// when the ranks do not finish in time, or when one rank failed and its peers are stuck.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "backend/cuda/cuda_backend.h"
#include "backend/make_backend.h"
#include "dist/nccl_backend_comm.h"
#include "cp_watchdog.h"
#include "ep_test_util.h"
#include "io/config.h"
#include "model/deepseek_v4/context_parallel.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::dist {
namespace {

using model::v4::ContextParallelInput;
using model::v4::DeepseekV4Model;

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

struct Compare {
  size_t differing = 0;    // logits not bitwise equal
  double worst_row = 0.0;  // max over rows of ‖err‖₂/‖ref‖₂
};

void compare_rows(const float* got, const float* want, int64_t rows, int64_t V, Compare& c) {
  for (int64_t r = 0; r < rows; ++r) {
    double err = 0, ref = 0;
    for (int64_t v = 0; v < V; ++v) {
      const float a = got[r * V + v], b = want[r * V + v];
      c.differing += std::memcmp(&a, &b, sizeof(float)) != 0;
      err += (static_cast<double>(a) - b) * (static_cast<double>(a) - b);
      ref += static_cast<double>(b) * b;
    }
    c.worst_row = std::max(c.worst_row, std::sqrt(err) / std::max(std::sqrt(ref), 1e-30));
  }
}

StatusOr<Compare> rank_run(const std::string& dir, const NcclUniqueId& id, int world, int rank,
                           const std::vector<int32_t>& prompt, int64_t block, bool batch_invariant,
                           testing::RankWatchdog& dog) {
  dog.stage(rank, "loading the model");
  DI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(dir + "/config.json"));
  DI_ASSIGN_OR_RETURN(auto be, backend::make_backend("cuda:" + std::to_string(rank),
                                                     {.batch_invariant = batch_invariant}));
  DI_ASSIGN_OR_RETURN(auto model, DeepseekV4Model::load(dir, cfg, be.get()));
  dog.stage(rank, "plain single-GPU run");
  std::vector<int32_t> greedy;  // the plain run's picks (prefill's, then 2 decode steps')
  DI_ASSIGN_OR_RETURN(std::vector<float> want, testing::run_greedy(*model, prompt, 3, &greedy));
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(be.get());
  if (cuda == nullptr) return InvalidArgument("not the CUDA backend");
  dog.stage(rank, "ncclCommInitRank");
  DI_ASSIGN_OR_RETURN(auto nccl, NcclCommunicator::create(id, world, rank, rank));
  NcclBackendCommunicator comm(std::move(nccl), be.get(), cuda->stream(),
                               /*wait_for_completion=*/true);  // threads as ranks
  auto state = model->new_sequence_state();
  ContextParallelInput in{prompt, state.get(), /*all_logits=*/true, block};
  dog.stage(rank, "prefill_context_parallel");
  DI_ASSIGN_OR_RETURN(auto cp, model->prefill_context_parallel(comm, in));
  dog.stage(rank, "decode from the context-parallel state");
  const int64_t S = static_cast<int64_t>(prompt.size()), V = cp.logits.dim(1);
  if (cp.logits.dim(0) != S || static_cast<int64_t>(want.size()) != (S + 3) * V)
    return Internal("logit shapes differ");
  Compare c;
  compare_rows(cp.logits.data<float>(), want.data(), S, V, c);
  for (int step = 0; step < 3; ++step) {  // decode from the CP state, fed the plain picks
    const int32_t token = greedy[step];
    model::SequenceInput d{std::span<const int32_t>(&token, 1), state.get(), false};
    DI_ASSIGN_OR_RETURN(backend::Tensor l, model->forward({&d, 1}));
    compare_rows(l.data<float>(), want.data() + (S + step) * V, 1, V, c);
  }
  return c;
}

TEST(CpNcclMultiGpu, EveryRankEqualsThePlainModel) {
  const int world = std::min(gpu_count(), 8);
  if (world < 1) GTEST_SKIP() << "no GPU";
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // progress shows even if the process is killed
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u, world size %d\n", seed, world);
  std::mt19937 rng(seed);
  struct Case { const char* dir; int64_t min_len; };
  for (const Case& k : {Case{"tests/data/models/v4tiny_b", 150},
                        Case{"tests/data/models/deepseek-v4-tiny-stories", 600}}) {
    auto cfg = io::load_model_config(std::string(k.dir) + "/config.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    for (bool bi : {true, false}) {
      std::vector<int32_t> prompt(k.min_len + rng() % k.min_len);
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % cfg->deepseek_v4().vocab_size);
      const int64_t block = 1 + rng() % 16;
      auto id = nccl_unique_id();
      ASSERT_TRUE(id.ok()) << id.status().to_string();
      std::vector<StatusOr<Compare>> result(world, Internal("not run"));
      const std::string what = std::string(k.dir) + ", " + std::to_string(prompt.size()) +
                               " tokens, block " + std::to_string(block) +
                               (bi ? ", batch-invariant" : ", default") + ", seed " + std::to_string(seed);
      testing::RankWatchdog dog(world, std::chrono::seconds(240), what);
      std::vector<std::thread> threads;
      for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
          result[r] = rank_run(k.dir, *id, world, r, prompt, block, bi, dog);
          dog.finish(r, result[r].status());
        });
      dog.wait();  // exits the process with every rank's stage instead of hanging
      for (auto& t : threads) t.join();
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(result[r].ok()) << "rank " << r << ": " << result[r].status().to_string();
        std::printf("%s, %zu tokens, block %lld, %s: rank %d: %zu logits differ, worst row %.3g\n",
                    k.dir, prompt.size(), static_cast<long long>(block),
                    bi ? "batch-invariant" : "default", r, result[r]->differing, result[r]->worst_row);
        if (bi)
          EXPECT_EQ(result[r]->differing, 0u) << k.dir << " rank " << r << " seed " << seed;
        else
          EXPECT_LE(result[r]->worst_row, 1e-4) << k.dir << " rank " << r << " seed " << seed;
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::dist
