// The contiguous DeepSeek-V4 sequence state (bounds and errors) and load-time errors of the model
// library (missing directory, missing tensor, unsupported family).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/state.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

using backend::Tensor;

TEST(ContiguousV4State, WindowEntriesAndErrors) {
  v4::StateDims dims{/*num_layers=*/2, /*window=*/5, /*head_dim=*/3, /*index_head_dim=*/2};
  auto be = backend::make_cpu_backend();
  v4::ContiguousV4State st(dims, be.get());
  std::mt19937 gen(std::random_device{}());
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> rows(4 * 3);
  for (float& v : rows) v = u(gen);
  ASSERT_TRUE(st.write_window(1, Tensor::from_f32({4, 3}, rows)).ok());
  EXPECT_EQ(st.window_rows(1), 4);
  EXPECT_EQ(st.window_rows(0), 0);
  Tensor back = Tensor::empty(DType::kF32, {4, 3});
  ASSERT_TRUE(st.read_window(1, back).ok());
  EXPECT_EQ(std::vector<float>(back.data<float>(), back.data<float>() + 12), rows);
  // W−1 = 4 rows at most; a wrong width or layer is an error.
  EXPECT_EQ(st.write_window(1, Tensor::empty(DType::kF32, {5, 3})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.write_window(0, Tensor::empty(DType::kF32, {1, 4})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.write_window(2, Tensor::empty(DType::kF32, {1, 3})).code(), StatusCode::kOutOfRange);
  // Entries append per kind with their own width.
  ASSERT_TRUE(st.append_entries(0, v4::CompressorKind::kMain, Tensor::from_f32({1, 3}, {1, 2, 3})).ok());
  ASSERT_TRUE(st.append_entries(0, v4::CompressorKind::kMain, Tensor::from_f32({1, 3}, {4, 5, 6})).ok());
  ASSERT_TRUE(st.append_entries(0, v4::CompressorKind::kIndexer, Tensor::from_f32({1, 2}, {7, 8})).ok());
  EXPECT_EQ(st.num_entries(0, v4::CompressorKind::kMain), 2);
  EXPECT_EQ(st.num_entries(0, v4::CompressorKind::kIndexer), 1);
  Tensor e = Tensor::empty(DType::kF32, {2, 3});
  ASSERT_TRUE(st.read_entries(0, v4::CompressorKind::kMain, e).ok());
  EXPECT_EQ(std::vector<float>(e.data<float>(), e.data<float>() + 6), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(st.append_entries(0, v4::CompressorKind::kIndexer, Tensor::from_f32({1, 3}, {1, 2, 3})).code(),
            StatusCode::kInvalidArgument);
  Tensor wrong = Tensor::empty(DType::kF32, {3, 3});
  EXPECT_EQ(st.read_entries(0, v4::CompressorKind::kMain, wrong).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.num_tokens(), 0);
  st.advance(7);
  EXPECT_EQ(st.num_tokens(), 7);
}

// The deferred reads/writes (one copy_many per flush) give the same rows as the immediate ones,
// change nothing before the flush, and keep the bookkeeping (window_rows) and errors.
TEST(ContiguousV4State, DeferredCopiesMatchImmediate) {
  v4::StateDims dims{/*num_layers=*/2, /*window=*/6, /*head_dim=*/4, /*index_head_dim=*/3};
  auto be = backend::make_cpu_backend();
  v4::ContiguousV4State a(dims, be.get()), b(dims, be.get());
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  auto random = [&](int64_t r, int64_t c) {
    std::vector<float> v(static_cast<size_t>(r * c));
    for (float& x : v) x = u(gen);
    return Tensor::from_f32({r, c}, v);
  };
  const Tensor win = random(5, 4), ent = random(3, 3);
  ASSERT_TRUE(a.write_window(1, win).ok());
  ASSERT_TRUE(a.append_entries(1, v4::CompressorKind::kIndexer, ent).ok());
  v4::CopyList later;
  ASSERT_TRUE(b.defer_write_window(1, win, later).ok());
  EXPECT_EQ(b.window_rows(1), 5);  // bookkeeping at once
  ASSERT_TRUE(b.append_entries(1, v4::CompressorKind::kIndexer, ent).ok());
  ASSERT_TRUE(later.flush(*be).ok());
  EXPECT_TRUE(later.src.empty() && later.dst.empty());
  Tensor wa = Tensor::empty(DType::kF32, {5, 4}), wb = Tensor::empty(DType::kF32, {5, 4});
  Tensor ea = Tensor::empty(DType::kF32, {3, 3}), eb = Tensor::empty(DType::kF32, {3, 3});
  ASSERT_TRUE(a.read_window(1, wa).ok());
  ASSERT_TRUE(a.read_entries(1, v4::CompressorKind::kIndexer, ea).ok());
  std::fill(wb.data<float>(), wb.data<float>() + 20, 7.f);
  ASSERT_TRUE(b.defer_read_window(1, wb, later).ok());
  ASSERT_TRUE(b.defer_read_entries(1, v4::CompressorKind::kIndexer, eb, later).ok());
  EXPECT_EQ(wb.data<float>()[0], 7.f);  // nothing copied before the flush
  EXPECT_EQ(later.src.size(), 2u);
  ASSERT_TRUE(later.flush(*be).ok());
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(wb.data<float>()[i], win.data<float>()[i]);
    EXPECT_EQ(wa.data<float>()[i], win.data<float>()[i]);
  }
  for (int i = 0; i < 9; ++i) EXPECT_EQ(eb.data<float>()[i], ea.data<float>()[i]);
  // Errors as the immediate calls: a wrong shape, too many rows, a bad layer.
  Tensor bad = Tensor::empty(DType::kF32, {4, 4});
  EXPECT_FALSE(b.defer_read_window(1, bad, later).ok());
  EXPECT_FALSE(b.defer_write_window(1, random(6, 4), later).ok());
  EXPECT_FALSE(b.defer_read_entries(2, v4::CompressorKind::kMain, bad, later).ok());
  EXPECT_TRUE(later.src.empty());
  // copy_many itself: mismatched lists are an error naming both counts.
  std::vector<Tensor> one{win};
  std::vector<Tensor> none;
  const Status st = be->copy_many(one, none);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("1 sources for 0 destinations"), std::string::npos) << st.message();
}

TEST(ModelLoading, ErrorsNameWhatIsWrong) {
  auto be = backend::make_cpu_backend();
  auto missing = load_model("tests/data/models/no-such-model", be.get());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no-such-model"), std::string::npos) << missing.status().to_string();

  // v4tiny_b's config with a checkpoint that lacks lm_head ("head.weight").
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("di_model_test_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file("tests/data/models/v4tiny_b/config.json", dir / "config.json");
  auto src = io::SafetensorsFile::open("tests/data/models/v4tiny_b/model.safetensors");
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  std::vector<io::TensorToWrite> kept;
  for (const io::TensorInfo& t : (*src)->tensors()) {
    if (t.name == "head.weight") continue;
    kept.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  }
  ASSERT_TRUE(io::write_safetensors((dir / "model.safetensors").string(), kept).ok());
  auto broken = load_model(dir.string(), be.get());
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("head"), std::string::npos) << broken.status().to_string();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer::model
