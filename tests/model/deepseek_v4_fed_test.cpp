// Fed tokens (SequenceInput::fed_ids; docs/engine.md "Token ids on the device"): a DeepSeek-V4
// decode step whose last tokens are rows of an I32 tensor in the backend's memory (what the
// previous step sampled there) gives bitwise the logits of the same step with the tokens on the
// host — all sequences fed (on CUDA: the graphed decode path, capture and replays), some fed and
// some not, and fed decode rows beside a prefill chunk (the op-by-op path) — on every V4 fixture
// (their hash layers look the fed tokens up on the device). Bad fed inputs are refused with the
// state untouched; a Llama model refuses fed tokens.
// Built twice: for the CPU (label model) and for the GPU (cuda_model_fed_test,
// DI_MODEL_TEST_DEVICE).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/make_backend.h"
#include "model/model.h"
#include "v4_fixtures.h"

#ifndef DI_MODEL_TEST_DEVICE
#define DI_MODEL_TEST_DEVICE "cpu"
#endif

namespace deepinfer::model {
namespace {

using backend::Tensor;

using fixtures::fixture_test_name;
using fixtures::v4_fixture_dirs;

using Side = fixtures::LoadedModel;
Side load_side(const std::string& dir) { return fixtures::load_fixture(DI_MODEL_TEST_DEVICE, dir); }

// The ids as the sampler would leave them: an I32 [m] tensor in the backend's memory.
Tensor on_backend(backend::Backend& be, const std::vector<int32_t>& ids) {
  Tensor host = Tensor::from_i32({static_cast<int64_t>(ids.size())}, ids);
  if (be.host_memory()) return host;
  auto t = be.empty(DType::kI32, {static_cast<int64_t>(ids.size())});
  EXPECT_TRUE(t.ok());
  EXPECT_TRUE(be.upload(host, *t).ok());
  return *t;
}

std::vector<float> host_floats(const Tensor& t) {
  EXPECT_FALSE(t.on_device());
  if (t.on_device()) return {};
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

class V4Fed : public ::testing::TestWithParam<std::string> {};

TEST_P(V4Fed, FedStepsEqualHostTokensBitwise) {
  const std::string dir = GetParam();
  Side host = load_side(dir), fed = load_side(dir);
  ASSERT_TRUE(host.model && fed.model);
  ASSERT_TRUE(fed.model->accepts_fed_tokens());
  const int64_t V = host.model->info().vocab_size;
  const uint32_t seed = std::random_device{}();
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
  std::uniform_int_distribution<int> len(2, 12);

  const int S = 5;
  fixtures::PairedPrefill pp = fixtures::paired_prefill(
      *host.model, *fed.model, S, [&] { return len(gen); }, [&] { return tok(gen); });
  std::vector<std::unique_ptr<SequenceState>>&sh = pp.states[0], &sf = pp.states[1];
  ASSERT_TRUE(host.model->forward(pp.inputs[0]).ok());
  ASSERT_TRUE(fed.model->forward(pp.inputs[1]).ok());

  // Rounds: 0–3 every sequence fed (decode: graphs on CUDA, the first round captures); 4–5 odd
  // sequences fed, even ones on the host; 6–7 a new sequence's 4-token prefill chunk in the batch.
  const int kPlaceholder = -1;
  std::vector<std::unique_ptr<SequenceState>> extra_h, extra_f;
  for (int round = 0; round < 8; ++round) {
    std::vector<int32_t> next(S);
    for (int32_t& t : next) t = tok(gen);
    // The sampler's output holds the fed tokens in shuffled rows, among random other ids.
    const int m = S + 3;
    std::vector<int32_t> sampled(m), row_of(S);
    for (int32_t& t : sampled) t = tok(gen);
    std::vector<int32_t> rows(m);
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), gen);
    for (int b = 0; b < S; ++b) {
      row_of[b] = rows[b];
      sampled[rows[b]] = next[b];
    }
    Tensor fed_ids = on_backend(*fed.be, sampled);
    std::vector<int32_t> placeholder(S, kPlaceholder);
    std::vector<SequenceInput> dh, df;
    for (int b = 0; b < S; ++b) {
      const bool feed = round < 4 || round >= 6 || b % 2 == 1;
      dh.push_back({std::span<const int32_t>(&next[b], 1), sh[b].get(), false});
      SequenceInput in{std::span<const int32_t>(feed ? &placeholder[b] : &next[b], 1), sf[b].get(),
                       false};
      if (feed) {
        in.fed_ids = &fed_ids;
        in.fed_row = row_of[b];
      }
      df.push_back(in);
    }
    std::vector<int32_t> chunk(4);
    if (round >= 6) {
      for (int32_t& t : chunk) t = tok(gen);
      extra_h.push_back(host.model->new_sequence_state());
      extra_f.push_back(fed.model->new_sequence_state());
      dh.push_back({chunk, extra_h.back().get(), false});
      df.push_back({chunk, extra_f.back().get(), false});
    }
    auto lh = host.model->forward(dh);
    auto lf = fed.model->forward(df);
    ASSERT_TRUE(lh.ok()) << lh.status().to_string();
    ASSERT_TRUE(lf.ok()) << lf.status().to_string();
    const std::vector<float> a = host_floats(*lh), b = host_floats(*lf);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
        << dir << ": round " << round << " with fed tokens differs from host tokens (seed " << seed
        << ")";
  }

  // Refused, with the states untouched (the next step still matches).
  Tensor ids = on_backend(*fed.be, {1, 2});
  const int32_t ph_tok = kPlaceholder;
  SequenceInput bad{std::span<const int32_t>(&ph_tok, 1), sf[0].get(), false};
  bad.fed_ids = &ids;
  bad.fed_row = 2;  // past the tensor
  EXPECT_EQ(fed.model->forward({&bad, 1}).status().code(), StatusCode::kInvalidArgument);
  Tensor f32 =
      fed.be->host_memory() ? Tensor::empty(DType::kF32, {2}) : *fed.be->empty(DType::kF32, {2});
  bad.fed_ids = &f32;
  bad.fed_row = 0;
  EXPECT_EQ(fed.model->forward({&bad, 1}).status().code(), StatusCode::kInvalidArgument);
  Tensor other = on_backend(*fed.be, {3, 4});
  std::vector<SequenceInput> two(
      2, SequenceInput{std::span<const int32_t>(&ph_tok, 1), sf[0].get(), false});
  two[1].state = sf[1].get();
  two[0].fed_ids = &ids;
  two[0].fed_row = 0;
  two[1].fed_ids = &other;
  two[1].fed_row = 0;
  const Status mixed = fed.model->forward(two).status();
  EXPECT_EQ(mixed.code(), StatusCode::kInvalidArgument) << mixed.to_string();
  EXPECT_NE(mixed.message().find("different tensors"), std::string::npos) << mixed.to_string();
  SequenceInput unfed{std::span<const int32_t>(&ph_tok, 1), sf[0].get(), false};  // -1 on the host
  EXPECT_EQ(fed.model->forward({&unfed, 1}).status().code(), StatusCode::kOutOfRange);
  const int32_t t = tok(gen);
  SequenceInput ok_h{std::span<const int32_t>(&t, 1), sh[0].get(), false};
  SequenceInput ok_f{std::span<const int32_t>(&t, 1), sf[0].get(), false};
  auto lh = host.model->forward({&ok_h, 1});
  auto lf = fed.model->forward({&ok_f, 1});
  ASSERT_TRUE(lh.ok() && lf.ok());
  const std::vector<float> a = host_floats(*lh), b = host_floats(*lf);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
      << dir << " after the refusals";
}

std::string name_of(const ::testing::TestParamInfo<std::string>& info) {
  return fixture_test_name(info.param);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V4Fed, ::testing::ValuesIn(v4_fixture_dirs()), name_of);

TEST(LlamaFed, RefusesFedTokens) {
  Side s = load_side("tests/data/models/stories260K/hf");
  ASSERT_TRUE(s.model);
  EXPECT_FALSE(s.model->accepts_fed_tokens());
  auto st = s.model->new_sequence_state();
  Tensor ids = on_backend(*s.be, {5});
  const int32_t ph = -1;
  SequenceInput in{std::span<const int32_t>(&ph, 1), st.get(), false};
  in.fed_ids = &ids;
  in.fed_row = 0;
  const Status e = s.model->forward({&in, 1}).status();
  EXPECT_EQ(e.code(), StatusCode::kInvalidArgument) << e.to_string();
  EXPECT_NE(e.message().find("fed token"), std::string::npos) << e.to_string();
}

}  // namespace
}  // namespace deepinfer::model
