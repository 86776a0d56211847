// Tensor parallelism over NCCL (label gpu; world size = number of visible GPUs, up to 8; one GPU
// runs it at world size 1). One thread per GPU, each rank its own CUDA backend and an NCCL
// communicator (wait_for_completion: threads as ranks; NCCL_NVLS_ENABLE=0 in the environment),
// the model loaded tensor parallel (this rank's heads and expert width only). Rank 0 also loads
// the plain single-GPU model; the prompt's prefill (all rows) and 4 decode steps fed the plain
// run's greedy tokens are compared per row (‖err‖₂/‖ref‖₂): world size 1 bitwise with
// --batch-invariant, otherwise ≤ 1e−4; every rank's logits bitwise equal to rank 0's (NCCL's
// all-reduce hands every rank the same sum). On tiny-stories, the greedy tokens of 16 free decode
// steps from its first reference prompt equal the plain model's. A hang (a rank stuck in a collective) exits the process with every
// rank's last stage (cp_watchdog.h) instead of waiting for the ctest timeout.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "backend/cuda/cuda_backend.h"
#include "backend/make_backend.h"
#include "cp_watchdog.h"
#include "dist/nccl_backend_comm.h"
#include "ep_test_util.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/tensor_parallel.h"

namespace deepinfer::dist {
namespace {

using model::v4::DeepseekV4Model;
using model::v4::TensorParallelContext;

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}


struct RankOut {
  std::vector<float> logits;       // forced run: prefill + 4 decode steps
  std::vector<int32_t> free_picks;  // free greedy run
};

// want/greedy: the plain model's logits and picks (computed by the caller on GPU 0).
StatusOr<RankOut> rank_run(const std::string& dir, const NcclUniqueId& id, int world, int rank,
                           bool batch_invariant, const std::vector<int32_t>& prompt,
                           const std::vector<int32_t>& greedy, int free_steps,
                           testing::RankWatchdog& dog) {
  dog.stage(rank, "loading the tensor-parallel model");
  DI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(dir + "/config.json"));
  DI_ASSIGN_OR_RETURN(auto be, backend::make_backend("cuda:" + std::to_string(rank),
                                                     {.batch_invariant = batch_invariant}));
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(be.get());
  if (cuda == nullptr) return InvalidArgument("not the CUDA backend");
  dog.stage(rank, "ncclCommInitRank");
  DI_ASSIGN_OR_RETURN(auto nccl, NcclCommunicator::create(id, world, rank, rank));
  NcclBackendCommunicator comm(std::move(nccl), be.get(), cuda->stream(),
                               /*wait_for_completion=*/true);  // threads as ranks
  TensorParallelContext tp{&comm};
  DI_ASSIGN_OR_RETURN(auto model, DeepseekV4Model::load(dir, cfg, be.get(), nullptr, &tp));
  RankOut out;
  dog.stage(rank, "forced run (prefill + 4 decode)");
  DI_ASSIGN_OR_RETURN(out.logits, testing::run_greedy(*model, prompt, 4, nullptr, &greedy));
  if (free_steps > 0) {
    dog.stage(rank, "free greedy run");
    DI_RETURN_IF_ERROR(testing::run_greedy(*model, prompt, free_steps, &out.free_picks).status());
  }
  return out;
}

TEST(TpNcclMultiGpu, EveryRankMatchesThePlainModel) {
  const int world = std::min(gpu_count(), 8);
  if (world < 1) GTEST_SKIP() << "no GPU";
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u, world size %d\n", seed, world);
  std::mt19937 rng(seed);
  struct Case { const char* dir; int free_steps; };
  for (const Case& k : {Case{"tests/data/models/v4tiny_b", 0},
                        Case{"tests/data/v4-fixtures/v4tiny_variant", 0},
                        Case{"tests/data/models/deepseek-v4-tiny-stories", 16}}) {
    auto cfg = io::load_model_config(std::string(k.dir) + "/config.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    const auto& c = cfg->deepseek_v4();
    if (c.num_attention_heads % world || c.o_groups % world || c.moe_intermediate_size % world) {
      std::printf("%s: skipped at world size %d (heads %lld, o_groups %lld, width %lld)\n", k.dir,
                  world, static_cast<long long>(c.num_attention_heads),
                  static_cast<long long>(c.o_groups), static_cast<long long>(c.moe_intermediate_size));
      continue;
    }
    for (bool bi : {true, false}) {
      std::vector<int32_t> prompt(8 + rng() % 120);
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % c.vocab_size);
      if (k.free_steps > 0) {  // the trained model: its first reference prompt (real text)
        auto ref = io::SafetensorsFile::open(std::string(k.dir) + "/reference_outputs.safetensors");
        ASSERT_TRUE(ref.ok()) << ref.status().to_string();
        const io::TensorInfo* ids = (*ref)->find("prompt0.ids");
        ASSERT_NE(ids, nullptr);
        prompt.assign(ids->numel(), 0);
        for (int64_t i = 0; i < ids->numel(); ++i) {
          int64_t x = 0;
          if (ids->dtype == DType::kI64) std::memcpy(&x, ids->data + 8 * i, 8);
          else { int32_t y; std::memcpy(&y, ids->data + 4 * i, 4); x = y; }
          prompt[i] = static_cast<int32_t>(x);
        }
      }
      // The plain single-GPU model on GPU 0 (before the group, so no rank waits on it).
      std::vector<int32_t> greedy, free_want;
      std::vector<float> want;
      {
        auto be = backend::make_backend("cuda:0", {.batch_invariant = bi});
        ASSERT_TRUE(be.ok()) << be.status().to_string();
        auto plain = DeepseekV4Model::load(k.dir, *cfg, be->get());
        ASSERT_TRUE(plain.ok()) << plain.status().to_string();
        auto w = testing::run_greedy(**plain, prompt, 4, &greedy);
        ASSERT_TRUE(w.ok()) << w.status().to_string();
        want = *w;
        if (k.free_steps > 0) {
          ASSERT_TRUE(testing::run_greedy(**plain, prompt, k.free_steps, &free_want).ok());
        }
      }
      auto id = nccl_unique_id();
      ASSERT_TRUE(id.ok()) << id.status().to_string();
      const std::string what = std::string(k.dir) + ", " + std::to_string(prompt.size()) +
                               " tokens" + (bi ? ", batch-invariant" : ", default") + ", seed " +
                               std::to_string(seed);
      testing::RankWatchdog dog(world, std::chrono::seconds(240), what);
      std::vector<StatusOr<RankOut>> result(world, Internal("not run"));
      std::vector<std::thread> threads;
      for (int r = 0; r < world; ++r)
        threads.emplace_back([&, r] {
          result[r] = rank_run(k.dir, *id, world, r, bi, prompt, greedy, k.free_steps, dog);
          dog.finish(r, result[r].status());
        });
      dog.wait();  // exits the process with every rank's stage instead of hanging
      for (auto& t : threads) t.join();
      for (int r = 0; r < world; ++r)
        ASSERT_TRUE(result[r].ok()) << "rank " << r << ": " << result[r].status().to_string();
      const int64_t V = c.vocab_size;
      const double err = dist::testing::worst_row_error(result[0]->logits, want, V);
      std::printf("%s, %zu tokens, %s, world %d: worst row rel err %.3g\n", k.dir, prompt.size(),
                  bi ? "batch-invariant" : "default", world, err);
      if (world == 1 && bi)
        EXPECT_TRUE(testing::bitwise(result[0]->logits, want)) << k.dir << " seed " << seed;
      else
        EXPECT_LE(err, 1e-4) << k.dir << " seed " << seed;
      for (int r = 1; r < world; ++r)
        EXPECT_TRUE(testing::bitwise(result[r]->logits, result[0]->logits))
            << k.dir << " rank " << r << " vs rank 0, seed " << seed;
      if (k.free_steps > 0) {
        for (int r = 0; r < world; ++r)
          EXPECT_EQ(result[r]->free_picks, free_want) << k.dir << " rank " << r << " seed " << seed;
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::dist
