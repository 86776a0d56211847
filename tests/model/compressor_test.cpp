// The KV compressor's decode path (compressor.h: rows joining the tail through a CopyList, full
// tails pooled together by compressor_pool_tails) against its general path (compressor_update
// alone), on the CPU backend: for CSA (overlapping, m = 4) and HCA (m = 8) windows, several
// sequences, a prefill chunk that leaves each tail part-full, then single-token steps — after
// every step both states hold bitwise the same entries and the same tail.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/state.h"

namespace deepinfer::model::v4 {
namespace {

using backend::Tensor;

Tensor random_f32(backend::Shape shape, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(gen);
  return Tensor::from_f32(std::move(shape), v);
}

std::vector<float> entries_of(DeepseekV4State& st, int layer, CompressorKind kind, int64_t d) {
  const int64_t n = st.num_entries(layer, kind);
  Tensor out = Tensor::empty(DType::kF32, {n, d});
  EXPECT_TRUE(st.read_entries(layer, kind, out).ok());
  return std::vector<float>(out.data<float>(), out.data<float>() + n * d);
}

class CompressorDecodePath : public ::testing::TestWithParam<int /*coff*/> {};

TEST_P(CompressorDecodePath, PoolsTheSameEntriesAsTheGeneralPath) {
  const int64_t coff = GetParam(), m = coff == 2 ? 4 : 8, dw = 16, cd = coff * dw;
  const int layer = 1;
  const CompressorKind kind = coff == 2 ? CompressorKind::kIndexer : CompressorKind::kMain;
  std::mt19937 gen(std::random_device{}());
  const uint32_t seed = gen();
  gen.seed(seed);
  auto be = backend::make_cpu_backend();
  Dims d{};
  d.eps = 1e-6f;
  CompressorWeights w;
  w.m = m;
  w.coff = coff;
  w.d = dw;
  w.ape = random_f32({m, cd}, gen);
  w.norm = random_f32({dw}, gen);
  RopeTable rope;
  rope.rotary_dim = 8;
  rope.inv_freq = random_f32({4}, gen);
  StateDims sd{/*num_layers=*/2, /*window=*/8, /*head_dim=*/dw, /*index_head_dim=*/dw};
  constexpr int kSeqs = 3;
  std::vector<std::unique_ptr<ContiguousV4State>> general, decode;
  for (int i = 0; i < kSeqs; ++i) {
    general.push_back(std::make_unique<ContiguousV4State>(sd, be.get()));
    decode.push_back(std::make_unique<ContiguousV4State>(sd, be.get()));
  }
  // Prefill chunks of different lengths (general path on both sides; tails left part-full).
  for (int i = 0; i < kSeqs; ++i) {
    const int64_t len = m + 1 + i;
    Tensor kv = random_f32({len, cd}, gen), gate = random_f32({len, cd}, gen);
    ASSERT_TRUE(compressor_update(*be, d, w, rope, kv, gate, *general[i], layer, kind).ok());
    ASSERT_TRUE(compressor_update(*be, d, w, rope, kv, gate, *decode[i], layer, kind).ok());
  }
  int closed = 0;
  for (int step = 0; step < 3 * static_cast<int>(m); ++step) {
    CopyList later;
    std::vector<DeepseekV4State*> full;
    for (int i = 0; i < kSeqs; ++i) {
      Tensor kv = random_f32({1, cd}, gen), gate = random_f32({1, cd}, gen);
      ASSERT_TRUE(compressor_update(*be, d, w, rope, kv, gate, *general[i], layer, kind).ok());
      bool closes = false;
      ASSERT_TRUE(compressor_update(*be, d, w, rope, kv, gate, *decode[i], layer, kind, &later,
                                    &closes).ok());
      if (closes) full.push_back(decode[i].get());
    }
    ASSERT_TRUE(later.flush(*be).ok());
    closed += static_cast<int>(full.size());
    ASSERT_TRUE(compressor_pool_tails(*be, d, w, rope, full, layer, kind).ok());
    for (int i = 0; i < kSeqs; ++i) {
      ASSERT_EQ(general[i]->num_entries(layer, kind), decode[i]->num_entries(layer, kind));
      const std::vector<float> a = entries_of(*general[i], layer, kind, dw);
      const std::vector<float> b = entries_of(*decode[i], layer, kind, dw);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << "sequence " << i << " step " << step << " (seed " << seed << ")";
      const CompressorTail &ta = general[i]->tail(layer, kind), &tb = decode[i]->tail(layer, kind);
      ASSERT_EQ(ta.rows, tb.rows);
      ASSERT_EQ(0, std::memcmp(ta.kv.data<float>(), tb.kv.data<float>(), ta.rows * cd * sizeof(float)));
    }
  }
  EXPECT_EQ(closed, 3 * kSeqs);  // every sequence closed three windows in 3·m steps
  // A tail that is not full cannot be pooled.
  std::vector<DeepseekV4State*> one{general[0].get()};
  ASSERT_NE(general[0]->tail(layer, kind).rows, m);
  EXPECT_EQ(compressor_pool_tails(*be, d, w, rope, one, layer, kind).code(), StatusCode::kInternal);
}

INSTANTIATE_TEST_SUITE_P(CsaAndHca, CompressorDecodePath, ::testing::Values(2, 1));

}  // namespace
}  // namespace deepinfer::model::v4
