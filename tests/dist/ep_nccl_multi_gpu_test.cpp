// Expert parallelism over NCCL across GPUs (label gpu; skipped with fewer than 2 GPUs): one thread
// per GPU, each rank its own CUDA backend (--batch-invariant), its own random prompt and only its
// expert slots; the MoE layers exchange rows with NCCL all-to-all. Each rank's prefill logits
// (every row) and two greedy decode steps must be bitwise equal to the plain single-GPU model on
// that rank's prompt (loaded on the same GPU). Identity placement, and an EPLB placement with
// redundant slots.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "backend/cuda/cuda_backend.h"
#include "backend/make_backend.h"
#include "dist/eplb.h"
#include "dist/expert_parallel_moe.h"
#include "dist/nccl_backend_comm.h"
#include "ep_test_util.h"
#include "io/config.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::dist {
namespace {

using model::v4::DeepseekV4Model;

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Rank `rank` of `world` (GPU = rank): plain model and EP model on this GPU; returns the number of
// logits that differ (bitwise) between them on `prompt`.
StatusOr<size_t> rank_run(const std::string& dir, const NcclUniqueId& id, int world, int rank,
                          const std::vector<int32_t>& prompt, const ExpertPlacement& placement) {
  DI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(dir + "/config.json"));
  DI_ASSIGN_OR_RETURN(auto be, backend::make_backend("cuda:" + std::to_string(rank),
                                                     {.batch_invariant = true}));
  DI_ASSIGN_OR_RETURN(auto plain, DeepseekV4Model::load(dir, cfg, be.get()));
  std::vector<int32_t> greedy;
  DI_ASSIGN_OR_RETURN(std::vector<float> want, testing::run_greedy(*plain, prompt, 2, &greedy));
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(be.get());
  if (cuda == nullptr) return InvalidArgument("not the CUDA backend");
  DI_ASSIGN_OR_RETURN(auto nccl, NcclCommunicator::create(id, world, rank, rank));
  NcclBackendCommunicator comm(std::move(nccl), be.get(), cuda->stream());
  ExpertParallelContext ctx{&comm, placement, ReplicaChoice::kTokenModulo};
  DI_ASSIGN_OR_RETURN(auto epm, DeepseekV4Model::load(dir, cfg, be.get(), &ctx));
  DI_ASSIGN_OR_RETURN(std::vector<float> got, testing::run_greedy(*epm, prompt, 2, nullptr, &greedy));
  if (got.size() != want.size()) return Internal("logit counts differ");
  size_t diff = 0;
  for (size_t i = 0; i < got.size(); ++i) diff += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
  return diff;
}

TEST(EpNcclMultiGpu, EveryRankEqualsThePlainModel) {
  const int world = std::min(gpu_count(), 8);
  if (world < 2) GTEST_SKIP() << "needs 2 GPUs, found " << world;
  const std::string dir = "tests/data/models/v4tiny_b";
  auto cfg = io::load_model_config(dir + "/config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  const auto& v4 = cfg->deepseek_v4();
  const int L = static_cast<int>(v4.num_hidden_layers), E = static_cast<int>(v4.n_routed_experts);
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u, world size %d\n", seed, world);
  std::mt19937 rng(seed);
  std::vector<int64_t> load(static_cast<size_t>(L) * E);
  for (auto& l : load) l = static_cast<int64_t>(rng() % 500);
  EplbParams ep;
  ep.num_replicas = E + world;  // one redundant slot per GPU
  ep.num_gpus = world;
  ep.policy = EplbPolicy::kGlobal;
  auto eplb = rebalance_experts(load, L, E, ep);
  auto identity = identity_placement(L, E, world);
  ASSERT_TRUE(eplb.ok()) << eplb.status().to_string();
  ASSERT_TRUE(identity.ok()) << identity.status().to_string();
  for (const ExpertPlacement* placement : {&*identity, &*eplb}) {
    auto id = nccl_unique_id();
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    std::vector<std::vector<int32_t>> prompts(world);
    for (auto& p : prompts) {
      p.resize(3 + rng() % 60);
      for (auto& t : p) t = static_cast<int32_t>(rng() % v4.vocab_size);
    }
    std::vector<StatusOr<size_t>> result(world, Internal("not run"));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] { result[r] = rank_run(dir, *id, world, r, prompts[r], *placement); });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(result[r].ok()) << "rank " << r << ": " << result[r].status().to_string();
      EXPECT_EQ(*result[r], 0u) << "rank " << r << " (prompt of " << prompts[r].size()
                                << " tokens, " << placement->num_replicas << " slots): logits "
                                << "differ from the plain model, seed " << seed;
    }
  }
}

}  // namespace
}  // namespace deepinfer::dist
