// GPU tests (ctest label `gpu`): run on the H200 through scripts/gpu_check.sh, never in CI.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/dequant.h"
#include "backend/cuda/runtime.h"
#include "common/dtypes.h"
#include "memset_sync.h"

namespace deepinfer::cuda {
namespace {

template <typename T>
std::vector<T> to_host(const DeviceBuffer& b, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), b.data(), n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}
template <typename T>
DeviceBuffer to_device(const std::vector<T>& h) {
  auto b = DeviceBuffer::allocate(h.size() * sizeof(T));
  EXPECT_TRUE(b.ok());
  EXPECT_EQ(cudaMemcpy(b->data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return std::move(b).value();
}

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || f32_bits(a) == f32_bits(b);
}

TEST(CudaRuntime, DeviceInfo) {
  auto n = device_count();
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  ASSERT_GE(*n, 1);
  auto d = query_device(0);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  std::printf("device 0: %s sm_%d%d, %d SMs, %.1f/%.1f GiB free, %.0f GB/s theoretical\n",
              d->name.c_str(), d->sm_major, d->sm_minor, d->num_sms, d->free_bytes / 1073741824.0,
              d->total_bytes / 1073741824.0, d->peak_bandwidth_gbs);
  EXPECT_EQ(d->sm_major, 9);  // built for sm_90a
}

TEST(CudaRuntime, PoolAllocatesAndRunsOutCleanly) {
  auto pool = DevicePool::create(1 << 20);
  ASSERT_TRUE(pool.ok());
  void* a = (*pool)->allocate(600 << 10);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ((*pool)->allocate(600 << 10), nullptr);  // full: no crash, no exception
  ASSERT_EQ(testing::memset_sync(a, 0x5A, 600 << 10), cudaSuccess);
  (*pool)->free(a);
  EXPECT_NE((*pool)->allocate(1 << 20), nullptr);
}

TEST(CudaDequant, DecodersMatchCpuOnEveryBitPattern) {
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());
  std::vector<uint8_t> e4(256);
  for (int i = 0; i < 256; ++i) e4[i] = static_cast<uint8_t>(i);
  auto d_e4 = to_device(e4);
  auto d_out = DeviceBuffer::allocate(65536 * 4);
  ASSERT_TRUE(decode_e4m3(static_cast<uint8_t*>(d_e4.data()), 256, static_cast<float*>(d_out->data()), stream->get()).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  auto got = to_host<float>(*d_out, 256);
  for (int i = 0; i < 256; ++i) ASSERT_TRUE(same_float(got[i], e4m3_to_f32(static_cast<uint8_t>(i)))) << i;

  std::vector<uint16_t> bf(65536);
  for (int i = 0; i < 65536; ++i) bf[i] = static_cast<uint16_t>(i);
  auto d_bf = to_device(bf);
  ASSERT_TRUE(decode_bf16(static_cast<uint16_t*>(d_bf.data()), 65536, static_cast<float*>(d_out->data()), stream->get()).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  got = to_host<float>(*d_out, 65536);
  for (int i = 0; i < 65536; ++i) ASSERT_TRUE(same_float(got[i], bf16_to_f32(static_cast<uint16_t>(i)))) << i;
}

TEST(CudaDequant, Bf16RoundingMatchesCpu) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<float> x(1 << 20);
  for (auto& v : x) {
    do v = f32_from_bits(rng()); while (std::isnan(v));
  }
  auto d_x = to_device(x);
  auto d_y = DeviceBuffer::allocate(x.size() * 2);
  auto stream = Stream::create();
  ASSERT_TRUE(encode_bf16(static_cast<float*>(d_x.data()), static_cast<int64_t>(x.size()), static_cast<uint16_t*>(d_y->data()), stream->get()).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  auto y = to_host<uint16_t>(*d_y, x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], f32_to_bf16(x[i])) << "x bits " << f32_bits(x[i]);
}

TEST(CudaDequant, Fp8BlockAndFp4GroupMatchCpu) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto stream = Stream::create();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{256, 384}, {129, 200}, {7, 62}}) {
    // FP8 with ragged last blocks.
    const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
    std::vector<uint8_t> w(rows * cols), s(sr * sc);
    for (auto& v : w) { do v = static_cast<uint8_t>(rng()); while ((v & 0x7F) == 0x7F); }
    for (auto& v : s) v = static_cast<uint8_t>(110 + rng() % 30);
    auto dw = to_device(w), ds = to_device(s);
    auto dout = DeviceBuffer::allocate(rows * cols * 4);
    ASSERT_TRUE(dequant_fp8_block128(static_cast<uint8_t*>(dw.data()), static_cast<uint8_t*>(ds.data()), rows, cols, static_cast<float*>(dout->data()), stream->get()).ok());
    ASSERT_TRUE(stream->synchronize().ok());
    auto got = to_host<float>(*dout, rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(got[r * cols + c], e4m3_to_f32(w[r * cols + c]) * ue8m0_to_f32(s[(r / 128) * sc + c / 128])) << r << "," << c;
    // FP4 packed, scales per 32 (cols even).
    const int64_t gc = (cols + 31) / 32;
    std::vector<uint8_t> p(rows * cols / 2), g(rows * gc);
    for (auto& v : p) v = static_cast<uint8_t>(rng());
    for (auto& v : g) v = static_cast<uint8_t>(115 + rng() % 20);
    auto dp = to_device(p), dg = to_device(g);
    ASSERT_TRUE(dequant_fp4_group32(static_cast<uint8_t*>(dp.data()), static_cast<uint8_t*>(dg.data()), rows, cols, static_cast<float*>(dout->data()), stream->get()).ok());
    ASSERT_TRUE(stream->synchronize().ok());
    got = to_host<float>(*dout, rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t byte = p[r * (cols / 2) + c / 2];
        const uint8_t code = (c & 1) ? byte >> 4 : byte & 0xF;
        ASSERT_EQ(got[r * cols + c], e2m1_to_f32(code) * ue8m0_to_f32(g[r * gc + c / 32])) << r << "," << c;
      }
  }
  EXPECT_FALSE(dequant_fp4_group32(nullptr, nullptr, 4, 7, nullptr, stream->get()).ok());
}

TEST(CudaBlas, Bf16GemmMatchesCpuReference) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 1);
  const int M = 37, N = 129, K = 300;  // odd sizes
  std::vector<uint16_t> a(M * K), b(N * K);
  for (auto& v : a) v = f32_to_bf16(nd(rng));
  for (auto& v : b) v = f32_to_bf16(nd(rng));
  auto stream = Stream::create();
  auto handle = CublasHandle::create(stream->get());
  ASSERT_TRUE(handle.ok()) << handle.status().to_string();
  auto da = to_device(a), db = to_device(b);
  auto dc = DeviceBuffer::allocate(M * N * 4);
  const float alpha = 1, beta = 0;
  // Row-major C[M,N] = A[M,K] · B[N,K]^T  ==  column-major C^T[N,M] = B^T... (op T on B).
  ASSERT_EQ(cublasGemmEx(handle->get(), CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, db.data(),
                         CUDA_R_16BF, K, da.data(), CUDA_R_16BF, K, &beta, dc->data(), CUDA_R_32F,
                         N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_TRUE(stream->synchronize().ok());
  auto c = to_host<float>(*dc, M * N);
  double worst = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += double(bf16_to_f32(a[i * K + k])) * bf16_to_f32(b[j * K + k]);
      worst = std::max(worst, std::fabs(ref - c[i * N + j]) / std::sqrt(double(K)));
    }
  EXPECT_LT(worst, 1e-4) << "worst |err|/sqrt(K)";
}

}  // namespace
}  // namespace deepinfer::cuda
