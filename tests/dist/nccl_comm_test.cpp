// NCCL communicator, world size 1 (the one-GPU machine): the group forms, all-to-all-v to itself
// moves rows to the right offsets, all-reduce of one rank is the identity, bad arguments are
// Status errors. Multi-rank runs need a multi-GPU machine (see docs/dist.md).
#include "dist/nccl_comm.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace deepinfer::dist {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

TEST(NcclComm, UniqueIdHexRoundTrip) {
  NcclUniqueId id;
  for (size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<char>(i * 37 + 5);
  auto back = NcclUniqueId::from_hex(id.to_hex());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->bytes, id.bytes);
  EXPECT_FALSE(NcclUniqueId::from_hex("abc").ok());
  EXPECT_FALSE(NcclUniqueId::from_hex(std::string(256, 'g')).ok());
}

TEST(NcclComm, WorldSizeOne) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  auto id = nccl_unique_id();
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_FALSE(NcclCommunicator::create(*id, 1, 1, 0).ok());  // rank outside the group
  auto comm = NcclCommunicator::create(*id, 1, 0, 0);
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  EXPECT_EQ((*comm)->world_size(), 1);

  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> val(-1.0f, 1.0f);
  const int n = 1000;
  std::vector<float> host(n);
  for (auto& v : host) v = val(rng);
  float *send = nullptr, *recv = nullptr;
  ASSERT_EQ(cudaMalloc(&send, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&recv, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(send, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(recv, 0, n * sizeof(float)), cudaSuccess);

  // Send elements [100, 700) to self, land them at [300, 900).
  Status s = (*comm)->all_to_all_v(send, {600}, {100}, recv, {600}, {300}, NcclType::kFloat32, nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(n);
  ASSERT_EQ(cudaMemcpy(got.data(), recv, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < n; ++i) {
    const float want = (i >= 300 && i < 900) ? host[i - 200] : 0.0f;
    ASSERT_EQ(got[i], want) << "element " << i;
  }

  s = (*comm)->all_reduce_sum(send, recv, n, NcclType::kFloat32, nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), recv, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(got, host);

  const Status bad = (*comm)->all_to_all_v(send, {1, 2}, {0, 1}, recv, {1}, {0}, NcclType::kFloat32, nullptr);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  cudaFree(send);
  cudaFree(recv);
}

}  // namespace
}  // namespace deepinfer::dist
