// TensorParallelLoader (model/deepseek_v4/tensor_parallel_weights.h) on the quantized fixture
// (FP8 e4m3 with 128×128 UE8M0 block scales, FP4 e2m1 experts with 1×32 scales): a slice of rows
// or columns, dequantized from the slice's own bytes and scales, is bitwise the same part of the
// whole matrix as WeightLoader dequantizes it — for shards that end on a block boundary and for a
// last shard that ends with the matrix inside a partial block; a slice that cuts a scale block is
// refused naming the tensor, the slice and the block size.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "backend/backend.h"
#include "io/config.h"
#include "model/deepseek_v4/tensor_parallel_weights.h"
#include "model/weight_loader.h"

namespace deepinfer::model::v4 {
namespace {

const std::string kQuant = "tests/data/v4-fixtures/v4tiny_quant";

class TpWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kQuant + "/config.json")) GTEST_SKIP() << kQuant << " is not in this checkout";
    auto cfg = io::load_model_config(kQuant + "/config.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    cfg_ = *cfg;
    be_ = backend::make_cpu_backend();
    auto full = WeightLoader::open(kQuant, cfg_, be_.get());
    ASSERT_TRUE(full.ok()) << full.status().to_string();
    full_ = std::move(full).value();
    auto tp = TensorParallelLoader::open(kQuant, cfg_, be_.get(), 0, 2);
    ASSERT_TRUE(tp.ok()) << tp.status().to_string();
    tp_ = std::move(tp).value();
  }

  // The slice [r0, r1) × [c0, c1) equals the same part of the whole dequantized matrix, bitwise.
  void expect_slice(const std::string& name, int64_t N, int64_t K, int64_t r0, int64_t r1,
                    int64_t c0, int64_t c1) {
    auto whole = full_->load(name, {N, K});
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    auto part = tp_->load_linear_slice(name, {N, K}, r0, r1, c0, c1);
    ASSERT_TRUE(part.ok()) << part.status().to_string();
    ASSERT_EQ(part->w.dtype(), DType::kF32);
    ASSERT_EQ(part->rows(), r1 - r0);
    ASSERT_EQ(part->cols(), c1 - c0);
    const float* w = whole->data<float>();
    const float* p = part->w.data<float>();
    size_t differ = 0;
    for (int64_t r = r0; r < r1; ++r)
      differ += std::memcmp(p + (r - r0) * (c1 - c0), w + r * K + c0, sizeof(float) * (c1 - c0)) != 0;
    EXPECT_EQ(differ, 0u) << name << " rows [" << r0 << ", " << r1 << ") cols [" << c0 << ", " << c1 << ")";
  }

  io::ModelConfig cfg_;
  std::unique_ptr<backend::Backend> be_;
  std::unique_ptr<WeightLoader> full_;
  std::unique_ptr<TensorParallelLoader> tp_;
};

TEST_F(TpWeights, Fp8RowAndColumnSlicesEqualTheWholeMatrix) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int layer = static_cast<int>(rng() % 5);
  SCOPED_TRACE("layer " + std::to_string(layer) + ", seed " + std::to_string(seed));
  const std::string A = "layers." + std::to_string(layer) + ".attn.";
  expect_slice(A + "wq_b", 256, 128, 0, 128, 0, 128);    // heads of rank 0 of 2
  expect_slice(A + "wq_b", 256, 128, 128, 256, 0, 128);  // rank 1
  expect_slice(A + "wo_b", 128, 160, 0, 128, 0, 128);    // columns: one whole block
  expect_slice(A + "wo_b", 128, 160, 0, 128, 128, 160);  // the partial last block
  expect_slice(A + "wo_a", 160, 128, 128, 160, 0, 128);  // rows: the partial last block
}

TEST_F(TpWeights, Fp4ExpertSlicesEqualTheWholeMatrix) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  const int layer = static_cast<int>(rng() % 5), e = static_cast<int>(rng() % 6);
  SCOPED_TRACE("layer " + std::to_string(layer) + " expert " + std::to_string(e) + ", seed " + std::to_string(seed));
  const std::string X = "layers." + std::to_string(layer) + ".ffn.experts." + std::to_string(e) + ".";
  for (int64_t c0 : {0, 32, 64, 96}) expect_slice(X + "w2", 128, 128, 0, 128, c0, c0 + 32);  // K groups of 32
  expect_slice(X + "w1", 128, 128, 64, 128, 0, 128);  // rows (1-row scale blocks)
  expect_slice(X + "w3", 128, 128, 17, 90, 0, 128);
}

TEST_F(TpWeights, SlicesThatCutScaleBlocksAreRefused) {
  auto fp8 = tp_->load_linear_slice("layers.0.attn.wo_a", {160, 128}, 0, 80, 0, 128);
  ASSERT_FALSE(fp8.ok());
  EXPECT_EQ(fp8.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fp8.status().message().find("rows [0, 80)"), std::string::npos) << fp8.status().to_string();
  EXPECT_NE(fp8.status().message().find("scale blocks of 128x128"), std::string::npos) << fp8.status().to_string();
  auto fp4 = tp_->load_linear_slice("layers.0.ffn.experts.0.w2", {128, 128}, 0, 128, 0, 48);
  ASSERT_FALSE(fp4.ok());
  EXPECT_NE(fp4.status().message().find("scale blocks of 1x32"), std::string::npos) << fp4.status().to_string();
  auto outside = tp_->load_linear_slice("layers.0.attn.wq_b", {256, 128}, 128, 384, 0, 128);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.status().code(), StatusCode::kOutOfRange);
  auto shape = tp_->load_linear_slice("layers.0.attn.wq_b", {128, 128}, 0, 128, 0, 128);
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.status().message().find("expected shape"), std::string::npos) << shape.status().to_string();
}

TEST(TpDims, CheckAndLocalDims) {
  Dims d{};
  d.nH = 64; d.G = 8; d.I = 2048; d.D = 512;
  EXPECT_TRUE(check_tensor_parallel_dims(d, 1).ok());
  EXPECT_TRUE(check_tensor_parallel_dims(d, 8).ok());
  const Dims l = tensor_parallel_local_dims(d, 8);
  EXPECT_EQ(l.nH, 8);
  EXPECT_EQ(l.G, 1);
  EXPECT_EQ(l.I, 256);
  EXPECT_EQ(l.D, 512);
  Status s16 = check_tensor_parallel_dims(d, 16);
  EXPECT_EQ(s16.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s16.message().find("does not divide o_groups 8"), std::string::npos) << s16.to_string();
  EXPECT_EQ(check_tensor_parallel_dims(d, 0).code(), StatusCode::kInvalidArgument);
  const ShardRange r = shard_range(160, 1, 2);
  EXPECT_EQ(r.begin, 80);
  EXPECT_EQ(r.end, 160);
}

}  // namespace
}  // namespace deepinfer::model::v4
