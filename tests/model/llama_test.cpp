// Dense Llama (stories260K, karpathy's trained 260K-parameter TinyStories model, HF layout):
//   * greedy decoding (prompt prefill, then one token at a time through the KV state, stop when
//     the argmax is BOS = 1 as llama2.c's run.c does) reproduces expected/greedy.jsonl exactly;
//   * logits for "Once upon a time" (12 positions) match expected/logits_once_upon_a_time.json:
//     worst row of ‖got − ref‖₂ / ‖ref‖₂ ≤ 1e-4, and every logit within 1e-4·max|ref row|;
//   * token-by-token and chunked prefill give the one-shot logits (same metric, ≤ 1e-5).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/make_backend.h"
#include "model/model.h"
#include "reference.h"

// The backend the model runs on: "cpu" in CI; the GPU test program builds this file with "cuda".
#ifndef DI_MODEL_TEST_DEVICE
#define DI_MODEL_TEST_DEVICE "cpu"
#endif

namespace deepinfer::model {
namespace {

constexpr const char* kDir = "tests/data/models/stories260K/hf";
constexpr const char* kExpected = "tests/data/models/stories260K/expected";

class Stories260K : public ::testing::Test {
 protected:
  void SetUp() override {
    auto be = backend::make_backend(DI_MODEL_TEST_DEVICE);
    ASSERT_TRUE(be.ok()) << be.status().to_string();
    be_ = std::move(be).value();
    auto m = load_model(kDir, be_.get());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    V_ = model_->info().vocab_size;
  }
  std::vector<float> logits_chunked(const std::vector<int32_t>& ids, size_t chunk) {
    auto st = model_->new_sequence_state();
    std::vector<float> out;
    for (size_t b = 0; b < ids.size(); b += chunk) {
      const size_t e = std::min(ids.size(), b + chunk);
      SequenceInput in{std::span<const int32_t>(ids.data() + b, e - b), st.get(), true};
      auto l = model_->forward({&in, 1});
      EXPECT_TRUE(l.ok()) << l.status().to_string();
      if (!l.ok()) return {};
      out.insert(out.end(), l->data<float>(), l->data<float>() + l->numel());
    }
    return out;
  }
  std::unique_ptr<backend::Backend> be_;
  std::unique_ptr<Model> model_;
  int64_t V_ = 0;
};

TEST_F(Stories260K, GreedyMatchesExpected) {
  std::ifstream f(std::string(kExpected) + "/greedy.jsonl");
  ASSERT_TRUE(f.good());
  std::string line;
  int cases = 0;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    const std::vector<int32_t> prompt = j["prompt_ids_with_bos"].get<std::vector<int32_t>>();
    const std::vector<int32_t> want = j["ids"].get<std::vector<int32_t>>();
    const size_t steps = j["steps"].get<size_t>();
    auto st = model_->new_sequence_state();
    std::vector<int32_t> seq = prompt;
    SequenceInput in{std::span<const int32_t>(prompt), st.get(), false};
    auto l = model_->forward({&in, 1});
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    while (seq.size() < steps) {
      const int32_t next = testing::argmax(l->data<float>(), V_);
      if (next == 1) break;  // run.c stops on BOS
      seq.push_back(next);
      if (seq.size() == steps) break;
      SequenceInput step{std::span<const int32_t>(&seq.back(), 1), st.get(), false};
      l = model_->forward({&step, 1});
      ASSERT_TRUE(l.ok()) << l.status().to_string();
    }
    EXPECT_EQ(seq, want) << "prompt '" << j["prompt"].get<std::string>() << "'";
    ++cases;
  }
  EXPECT_GE(cases, 1);
}

TEST_F(Stories260K, LogitsMatchExpected) {
  std::ifstream f(std::string(kExpected) + "/logits_once_upon_a_time.json");
  ASSERT_TRUE(f.good());
  auto j = nlohmann::json::parse(f);
  const std::vector<int32_t> ids = j["ids"].get<std::vector<int32_t>>();
  std::vector<float> want;
  for (const auto& row : j["logits"]) {
    ASSERT_EQ(static_cast<int64_t>(row.size()), V_);
    for (const auto& v : row) want.push_back(v.get<float>());
  }
  ASSERT_EQ(want.size(), ids.size() * V_);
  std::vector<float> got = logits_chunked(ids, ids.size());
  ASSERT_EQ(got.size(), want.size());
  auto err = testing::row_relative_error(got.data(), want.data(), ids.size(), V_);
  EXPECT_LE(err.worst, 1e-4) << "worst row " << err.row << " relative L2 error " << err.worst;
  for (size_t r = 0; r < ids.size(); ++r) {
    float mx = 0;
    for (int64_t v = 0; v < V_; ++v) mx = std::max(mx, std::abs(want[r * V_ + v]));
    for (int64_t v = 0; v < V_; ++v)
      ASSERT_NEAR(got[r * V_ + v], want[r * V_ + v], 1e-4 * mx) << "row " << r << " logit " << v;
  }
  for (size_t chunk : {1, 3, 7, 64}) {
    std::vector<float> c = logits_chunked(ids, chunk);
    auto e = testing::row_relative_error(c.data(), got.data(), ids.size(), V_);
    EXPECT_LE(e.worst, 1e-5) << "chunk " << chunk << " worst row " << e.row;
  }
}

TEST_F(Stories260K, WrongStateIsAnError) {
  auto be = backend::make_cpu_backend();
  auto v4 = load_model("tests/data/models/v4tiny_b", be.get());
  ASSERT_TRUE(v4.ok()) << v4.status().to_string();
  auto foreign = (*v4)->new_sequence_state();
  std::vector<int32_t> ids = {1};
  SequenceInput in{std::span<const int32_t>(ids), foreign.get(), false};
  auto r = model_->forward({&in, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Llama state"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace deepinfer::model
