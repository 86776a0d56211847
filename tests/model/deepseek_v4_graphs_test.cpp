// CUDA graphs for DeepSeek-V4 decode steps (model.cpp forward_graphed; GPU only): the same model
// on two CUDA backends, one replaying captured graphs and one with --enforce-eager, fed the same
// prompts and the same tokens, must give bitwise the same logits at every decode step — the
// capture step and the replays, batch sizes seen before and new ones, more sizes than the set
// cache keeps (evictions), in the default mode and under --batch-invariant — and the graph side
// must really have replayed (and the eager side never). Also the MoE's shared expert on the
// side queue vs one queue (session 14).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/make_backend.h"
#include "model/deepseek_v4/model.h"
#include "model/model.h"
#include "v4_fixtures.h"

namespace deepinfer::model {
namespace {

using backend::Tensor;

using fixtures::fixture_test_name;
using fixtures::v4_fixture_dirs;

struct Side : fixtures::LoadedModel {
  v4::DeepseekV4Model* v4 = nullptr;
};

Side load_side(const std::string& dir, bool batch_invariant, bool graphs, bool side_stream = true) {
  Side s;
  static_cast<fixtures::LoadedModel&>(s) = fixtures::load_fixture(
      "cuda", dir,
      {.batch_invariant = batch_invariant, .graphs = graphs, .side_stream = side_stream});
  if (s.model == nullptr) return s;
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
    fixtures::PairedPrefill pp = fixtures::paired_prefill(
        *g.model, *e.model, S, [&] { return len(gen); }, [&] { return tok(gen); });
    std::vector<std::unique_ptr<SequenceState>>&sg = pp.states[0], &se = pp.states[1];
    auto pg = g.model->forward(pp.inputs[0]);
    auto pe = e.model->forward(pp.inputs[1]);
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

// Session 14: the MoE's shared expert on the backend's side queue (a second stream; two graph
// branches when captured) gives bitwise the logits of one queue — prefill, then decode steps at
// batch sizes 1, 3 and 16, graphed and eager — and the side queue refuses misuse.
TEST_P(V4Graphs, SideQueueEqualsOneQueueBitwise) {
  const auto& [dir, bi] = GetParam();
  for (bool graphs : {true, false}) {
    Side two = load_side(dir, bi, graphs, /*side_stream=*/true);
    Side one = load_side(dir, bi, graphs, /*side_stream=*/false);
    ASSERT_TRUE(two.v4 && one.v4);
    const int64_t V = two.model->info().vocab_size;
    const uint32_t seed = std::random_device{}();
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
    for (int S : {1, 3, 16}) {
      fixtures::PairedPrefill pp = fixtures::paired_prefill(
          *two.model, *one.model, S, [&] { return 2 + gen() % 12; }, [&] { return tok(gen); });
      std::vector<std::vector<int32_t>>& prompts = pp.prompts;
      std::vector<SequenceInput>&in2 = pp.inputs[0], &in1 = pp.inputs[1];
      for (int step = 0; step < 4; ++step) {
        auto l2 = two.model->forward(in2);
        auto l1 = one.model->forward(in1);
        ASSERT_TRUE(l2.ok()) << l2.status().to_string();
        ASSERT_TRUE(l1.ok()) << l1.status().to_string();
        const std::vector<float> a = host_logits(*l2), b = host_logits(*l1);
        ASSERT_EQ(a.size(), b.size());
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << dir << (bi ? " (batch-invariant)" : "") << (graphs ? " graphs" : " eager")
            << ": batch " << S << " step " << step << " differs with the side queue (seed " << seed
            << ")";
        std::vector<int32_t> next(S);
        for (int32_t& t : next) t = tok(gen);
        prompts.assign(S, {});
        for (int b = 0; b < S; ++b) {
          prompts[b] = {next[b]};
          in2[b].tokens = prompts[b];
          in1[b].tokens = prompts[b];
        }
      }
    }
    EXPECT_EQ(one.be->begin_side().code(), StatusCode::kUnimplemented);
    ASSERT_TRUE(two.be->begin_side().ok());
    EXPECT_EQ(two.be->begin_side().code(), StatusCode::kFailedPrecondition);  // already open
    EXPECT_EQ(two.be->join_side().code(), StatusCode::kFailedPrecondition);   // still issuing to it
    EXPECT_EQ(two.be->synchronize().code(), StatusCode::kFailedPrecondition);
    ASSERT_TRUE(two.be->end_side().ok());
    ASSERT_TRUE(two.be->join_side().ok());
    EXPECT_TRUE(two.be->synchronize().ok());
  }
}

std::string name_of(const ::testing::TestParamInfo<std::tuple<std::string, bool>>& info) {
  return fixture_test_name(std::get<0>(info.param)) +
         (std::get<1>(info.param) ? "_bi" : "_default");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V4Graphs,
                         ::testing::Combine(::testing::ValuesIn(v4_fixture_dirs()),
                                            ::testing::Bool()),
                         name_of);

}  // namespace
}  // namespace deepinfer::model
