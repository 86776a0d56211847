// CUDA graphs for DeepSeek-V4 decode steps (model.cpp forward_graphed; GPU only): the same model
// on two CUDA backends, one replaying captured graphs and one with --enforce-eager, fed the same
// prompts and the same tokens, must give bitwise the same logits at every decode step — the
// capture step and the replays, batch sizes seen before and new ones, more sizes than the set
// cache keeps (evictions), in the default mode and under --batch-invariant — and the graph side
// must really have replayed (and the eager side never).
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/make_backend.h"
#include "model/deepseek_v4/model.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

using backend::Tensor;

std::vector<std::string> fixture_dirs() {
  std::vector<std::string> dirs = {"tests/data/models/v4tiny_b",
                                   "tests/data/models/deepseek-v4-tiny-stories"};
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("tests/data/v4-fixtures", ec))
    if (e.is_directory() && std::filesystem::exists(e.path() / "config.json"))
      dirs.push_back(e.path().string());
  return dirs;
}

struct Side {
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<Model> model;
  v4::DeepseekV4Model* v4 = nullptr;
};

Side load_side(const std::string& dir, bool batch_invariant, bool graphs) {
  Side s;
  auto be = backend::make_backend("cuda", {.batch_invariant = batch_invariant, .graphs = graphs});
  EXPECT_TRUE(be.ok()) << be.status().to_string();
  if (!be.ok()) return s;
  s.be = std::move(be).value();
  auto m = load_model(dir, s.be.get());
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return s;
  s.model = std::move(m).value();
  s.v4 = dynamic_cast<v4::DeepseekV4Model*>(s.model.get());
  EXPECT_NE(s.v4, nullptr) << dir << " did not load as a DeepSeek-V4 model";
  return s;
}

std::vector<float> host_logits(const Tensor& t) {  // forward returns host logits by default
  EXPECT_FALSE(t.on_device());
  if (t.on_device()) return {};
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

class V4Graphs : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(V4Graphs, ReplayedDecodeEqualsEagerBitwise) {
  const auto& [dir, bi] = GetParam();
  Side g = load_side(dir, bi, /*graphs=*/true);
  Side e = load_side(dir, bi, /*graphs=*/false);
  ASSERT_TRUE(g.v4 && e.v4);
  ASSERT_TRUE(g.be->supports_graphs());
  ASSERT_FALSE(e.be->supports_graphs());
  const int64_t V = g.model->info().vocab_size;
  std::mt19937 gen(std::random_device{}());
  const uint32_t seed = gen();
  gen.seed(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
  std::uniform_int_distribution<int> len(2, 20);  // a 1-token prompt would be a decode step

  // Batch sizes in this order: new sizes, a size seen before, then more sizes than the set cache
  // keeps (8) and the first one again (evicted by then: captured again).
  const std::vector<int> sizes = {1, 3, 8, 3, 2, 4, 5, 6, 7, 9, 10, 1};
  uint64_t expected_replays = 0;
  for (size_t round = 0; round < sizes.size(); ++round) {
    const int S = sizes[round];
    const int steps = round < 4 ? 5 : 3;
    std::vector<std::unique_ptr<SequenceState>> sg, se;
    std::vector<std::vector<int32_t>> prompts(S);
    std::vector<SequenceInput> in_g, in_e;
    for (int b = 0; b < S; ++b) {
      prompts[b].resize(len(gen));
      for (int32_t& t : prompts[b]) t = tok(gen);
      sg.push_back(g.model->new_sequence_state());
      se.push_back(e.model->new_sequence_state());
      in_g.push_back({std::span<const int32_t>(prompts[b]), sg.back().get(), false});
      in_e.push_back({std::span<const int32_t>(prompts[b]), se.back().get(), false});
    }
    auto pg = g.model->forward(in_g);
    auto pe = e.model->forward(in_e);
    ASSERT_TRUE(pg.ok() && pe.ok()) << pg.status().to_string() << " / " << pe.status().to_string();
    std::vector<int32_t> next(S);
    for (int step = 0; step < steps; ++step) {
      // The next tokens: random (not the argmax, so the steps see varied inputs), the same on
      // both sides.
      for (int32_t& t : next) t = tok(gen);
      std::vector<SequenceInput> dg, de;
      for (int b = 0; b < S; ++b) {
        dg.push_back({std::span<const int32_t>(&next[b], 1), sg[b].get(), false});
        de.push_back({std::span<const int32_t>(&next[b], 1), se[b].get(), false});
      }
      auto lg = g.model->forward(dg);
      auto le = e.model->forward(de);
      ASSERT_TRUE(lg.ok()) << lg.status().to_string();
      ASSERT_TRUE(le.ok()) << le.status().to_string();
      ASSERT_EQ(lg->numel(), static_cast<int64_t>(S) * V);
      const std::vector<float> a = host_logits(*lg), b = host_logits(*le);
      ASSERT_EQ(a.size(), b.size());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << dir << (bi ? " (batch-invariant)" : "") << ": decode step " << step << " of batch "
          << S << " (round " << round << ") differs from the eager step (seed " << seed << ")";
      if (step > 0) ++expected_replays;  // step 0 of a size not captured yet (or evicted) captures
    }
  }
  // Rounds 0–3: sizes 1, 3, 8 capture at their first step; the second round of 3 replays all 5.
  ++expected_replays;
  EXPECT_EQ(g.v4->graph_replays(), expected_replays) << dir;
  EXPECT_EQ(e.v4->graph_replays(), 0u) << dir;
}

std::string name_of(const ::testing::TestParamInfo<std::tuple<std::string, bool>>& info) {
  std::string n = std::filesystem::path(std::get<0>(info.param)).filename().string();
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n + (std::get<1>(info.param) ? "_bi" : "_default");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V4Graphs,
                         ::testing::Combine(::testing::ValuesIn(fixture_dirs()), ::testing::Bool()),
                         name_of);

}  // namespace
}  // namespace deepinfer::model
