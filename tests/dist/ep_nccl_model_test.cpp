// Expert parallelism over NCCL on one GPU (world size 1; label gpu, run on the H200):
//   * NcclBackendCommunicator on device tensors of the CUDA backend: exchange_counts,
//     all-to-all-v of rows at offsets, all-reduce identity, argument errors;
//   * the whole DeepSeek-V4 model on CUDA with the EP context (NCCL world size 1, identity
//     placement and an EPLB placement with redundant slots) gives the plain CUDA model's logits
//     bitwise — prefill of a short prompt (the routed experts' slot kernels, S·k ≤ 128), of a long
//     one (S·k > 128: the grouped path) and two decode steps; with and without --batch-invariant.
//     (One case is bounded instead: redundant slots + long prompt without --batch-invariant.)
// Multi-rank NCCL runs need a multi-GPU machine (docs/dist.md).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cuda/cuda_backend.h"
#include "backend/make_backend.h"
#include "dist/expert_parallel_moe.h"
#include "dist/nccl_backend_comm.h"
#include "ep_test_util.h"
#include "io/config.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::dist {
namespace {

using backend::Tensor;
using model::v4::DeepseekV4Model;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

StatusOr<std::unique_ptr<Communicator>> nccl_world_one(backend::Backend* be) {
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(be);
  if (cuda == nullptr) return InvalidArgument("not the CUDA backend");
  DI_ASSIGN_OR_RETURN(NcclUniqueId id, nccl_unique_id());
  DI_ASSIGN_OR_RETURN(auto nccl, NcclCommunicator::create(id, 1, 0, 0));
  return std::unique_ptr<Communicator>(new NcclBackendCommunicator(std::move(nccl), be, cuda->stream()));
}

TEST(EpNccl, CommunicatorOnDeviceTensors) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  auto be = backend::make_backend("cuda");
  ASSERT_TRUE(be.ok()) << be.status().to_string();
  auto comm = nccl_world_one(be->get());
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  Communicator& c = **comm;
  EXPECT_EQ(c.world_size(), 1);
  EXPECT_EQ(c.rank(), 0);
  auto counts = c.exchange_counts({4, 0, 7}, 3);
  ASSERT_TRUE(counts.ok()) << counts.status().to_string();
  EXPECT_EQ(*counts, (std::vector<int64_t>{4, 0, 7}));

  std::vector<float> rows(5 * 3);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 0.25f * static_cast<float>(i) - 1.0f;
  auto send = (*be)->alloc(DType::kF32, {5, 3});
  auto recv = (*be)->alloc(DType::kF32, {5, 3});
  ASSERT_TRUE(send.ok() && recv.ok());
  ASSERT_TRUE((*be)->upload(Tensor::borrow(rows.data(), DType::kF32, {5, 3}), *send).ok());
  ASSERT_TRUE(c.all_to_all_v(*send, {5}, *recv, {5}).ok());
  ASSERT_TRUE(c.all_reduce_sum(*recv).ok());
  std::vector<float> back(rows.size());
  Tensor host = Tensor::borrow(back.data(), DType::kF32, {5, 3});
  ASSERT_TRUE((*be)->download(*recv, host).ok());
  EXPECT_EQ(back, rows);
  EXPECT_EQ(c.all_to_all_v(*send, {4}, *recv, {5}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.exchange_counts({1, 2}, 1).status().code(), StatusCode::kInvalidArgument);
}

// Prefill (all logits) and two decode steps; the decode tokens are the greedy picks, or `forced`
// when given (so a bounded comparison never diverges on a flipped argmax).
StatusOr<std::vector<float>> run(model::Model& m, const std::vector<int32_t>& prompt,
                                 std::vector<int32_t>* picked, const std::vector<int32_t>* forced) {
  return dist::testing::run_greedy(m, prompt, 2, picked, forced);
}

class EpNcclModel : public ::testing::TestWithParam<bool> {};

TEST_P(EpNcclModel, WorldSizeOneEqualsPlainCudaModel) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  const std::string dir = "tests/data/models/v4tiny_b";
  auto cfg = io::load_model_config(dir + "/config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto be = backend::make_backend("cuda", {/*batch_invariant=*/GetParam()});
  ASSERT_TRUE(be.ok()) << be.status().to_string();
  auto plain = DeepseekV4Model::load(dir, *cfg, be->get());
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  auto comm = nccl_world_one(be->get());
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  const int L = static_cast<int>((*plain)->dims().L), E = static_cast<int>((*plain)->dims().E);
  const int V = static_cast<int>((*plain)->dims().V);
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::vector<int64_t> load(static_cast<size_t>(L) * E);
  for (auto& l : load) l = static_cast<int64_t>(rng() % 500);
  EplbParams ep;
  ep.num_replicas = E + 3;
  ep.num_gpus = 1;
  ep.policy = EplbPolicy::kGlobal;
  auto eplb = rebalance_experts(load, L, E, ep);
  auto identity = identity_placement(L, E, 1);
  ASSERT_TRUE(eplb.ok() && identity.ok());
  for (const ExpertPlacement* placement : {&*identity, &*eplb}) {
    ExpertParallelContext ctx{comm->get(), *placement, ReplicaChoice::kTokenModulo};
    auto epm = DeepseekV4Model::load(dir, *cfg, be->get(), &ctx);
    ASSERT_TRUE(epm.ok()) << epm.status().to_string();
    for (int len : {5, 80}) {  // S·k = 10 (slot kernels) and 160 (grouped path without batch invariance)
      std::vector<int32_t> prompt(len);
      for (auto& t : prompt) t = static_cast<int32_t>(rng() % V);
      std::vector<int32_t> greedy;
      auto want = run(**plain, prompt, &greedy, nullptr);
      auto got = run(**epm, prompt, nullptr, &greedy);
      ASSERT_TRUE(want.ok()) << want.status().to_string();
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      ASSERT_EQ(got->size(), want->size());
      size_t diff = 0;
      double worst = 0, err2 = 0, ref2 = 0;
      for (size_t i = 0; i < got->size(); ++i) {
        const double d = static_cast<double>((*got)[i]) - (*want)[i];
        err2 += d * d;
        ref2 += static_cast<double>((*want)[i]) * (*want)[i];
        if (std::memcmp(&(*got)[i], &(*want)[i], sizeof(float)) != 0) {
          ++diff;
          worst = std::max(worst, std::abs(d));
        }
      }
      // Bitwise whenever every expert sees the rows it sees on one rank (identity placement) or
      // the kernels are batch invariant. Redundant slots split an expert's rows, and without
      // --batch-invariant the grouped path (S·k > 128) may then pick another cuBLAS algorithm
      // for the smaller row count: there only a bound (fp32 GEMM rounding).
      const bool exact = GetParam() || placement == &*identity || len * (*plain)->dims().k <= 128;
      if (exact) {
        EXPECT_EQ(diff, 0u) << "prompt length " << len << ", replicas " << placement->num_replicas
                            << ": " << diff << " logits differ, worst |Δ| " << worst << " (seed "
                            << seed << ")";
      } else {
        EXPECT_LE(std::sqrt(err2 / ref2), 1e-5)
            << "prompt length " << len << ", replicas " << placement->num_replicas << ": " << diff
            << " logits differ, worst |Δ| " << worst << " (seed " << seed << ")";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BatchInvariant, EpNcclModel, ::testing::Bool());

}  // namespace
}  // namespace deepinfer::dist
