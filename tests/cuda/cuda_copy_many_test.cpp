// Backend::copy_many on the GPU (copy_many.cu): many device-to-device copies in one launch —
// 16-byte and 4-byte aligned pairs, pairs beyond one launch's table, empty pairs, I32 and F32 —
// equal to the sources byte for byte, with the untouched bytes around each target unchanged.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda {
namespace {

using backend::Tensor;

TEST(CudaCopyMany, ManyPairsOfMixedAlignmentEqualTheirSources) {
  auto made = CudaBackend::create();
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  CudaBackend& gpu = **made;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> rows_d(0, 300), offset_d(0, 3);
  std::uniform_real_distribution<float> u(-1, 1);
  constexpr int64_t kW = 37;  // odd row width: 4-byte-only alignment for most views
  // 2 × kCopyManyMax + 7 pairs: three launches, the last one partial.
  const int pairs = 2 * kernels::kCopyManyMax + 7;
  std::vector<int64_t> rows(pairs), off(pairs);
  int64_t total = 0;
  for (int i = 0; i < pairs; ++i) {
    rows[i] = i % 11 == 0 ? 0 : rows_d(gen);  // some empty pairs
    off[i] = total + offset_d(gen);
    total = off[i] + rows[i] + 4;
  }
  std::vector<float> src_h(static_cast<size_t>(total * kW)), dst_h(src_h.size());
  for (float& v : src_h) v = u(gen);
  for (float& v : dst_h) v = u(gen);
  auto src = gpu.alloc(DType::kF32, {total, kW});
  auto dst = gpu.alloc(DType::kF32, {total, kW});
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_TRUE(gpu.upload(Tensor::from_f32({total, kW}, src_h), *src).ok());
  ASSERT_TRUE(gpu.upload(Tensor::from_f32({total, kW}, dst_h), *dst).ok());
  // Pair i: src rows [off_i, off_i + rows_i) → dst rows of the pair mirrored from the end.
  std::vector<Tensor> s, d;
  std::vector<float> want = dst_h;
  for (int i = 0; i < pairs; ++i) {
    const int64_t d0 = total - off[i] - rows[i];
    s.push_back(src->rows(off[i], off[i] + rows[i]));
    d.push_back(dst->rows(d0, d0 + rows[i]));
    std::memcpy(want.data() + d0 * kW, src_h.data() + off[i] * kW, rows[i] * kW * sizeof(float));
  }
  ASSERT_TRUE(gpu.copy_many(s, d).ok());
  Tensor back = Tensor::empty(DType::kF32, {total, kW});
  ASSERT_TRUE(gpu.download(*dst, back).ok());
  int bad = 0;
  for (int64_t i = 0; i < total * kW; ++i)
    bad += std::memcmp(&back.data<float>()[i], &want[i], sizeof(float)) != 0;
  EXPECT_EQ(bad, 0) << "of " << total * kW << " floats";
}

TEST(CudaCopyMany, AlignedRowsI32AndErrors) {
  auto made = CudaBackend::create();
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  CudaBackend& gpu = **made;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  // KV-cache-like rows (512 floats = 2 KB): the 16-byte path; plus an I32 pair.
  std::vector<float> a_h(127 * 512);
  for (float& v : a_h) v = std::uniform_real_distribution<float>(-3, 3)(gen);
  std::vector<int32_t> i_h(1000);
  for (int32_t& v : i_h) v = static_cast<int32_t>(gen());
  auto a = gpu.alloc(DType::kF32, {127, 512});
  auto b = gpu.alloc(DType::kF32, {127, 512});
  auto ia = gpu.alloc(DType::kI32, {1000});
  auto ib = gpu.alloc(DType::kI32, {1000});
  ASSERT_TRUE(a.ok() && b.ok() && ia.ok() && ib.ok());
  ASSERT_TRUE(gpu.upload(Tensor::from_f32({127, 512}, a_h), *a).ok());
  ASSERT_TRUE(gpu.upload(Tensor::from_i32({1000}, i_h), *ia).ok());
  std::vector<Tensor> s{*a, *ia}, d{*b, *ib};
  ASSERT_TRUE(gpu.copy_many(s, d).ok());
  Tensor fb = Tensor::empty(DType::kF32, {127, 512});
  Tensor ibh = Tensor::empty(DType::kI32, {1000});
  ASSERT_TRUE(gpu.download(*b, fb).ok());
  ASSERT_TRUE(gpu.download(*ib, ibh).ok());
  EXPECT_EQ(std::memcmp(fb.data<float>(), a_h.data(), a_h.size() * 4), 0);
  EXPECT_EQ(std::memcmp(ibh.data<int32_t>(), i_h.data(), i_h.size() * 4), 0);
  // A pair of different sizes is the copy's own error; mismatched lists name both counts.
  std::vector<Tensor> s2{*a, a->rows(0, 3)}, d2{*b, b->rows(0, 4)};
  EXPECT_FALSE(gpu.copy_many(s2, d2).ok());
  std::vector<Tensor> d1{*b};
  const Status st = gpu.copy_many(s, d1);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("2 sources for 1 destinations"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace deepinfer::cuda
