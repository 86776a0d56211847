// DeepSeek-V4 forward against reference outputs produced by HF transformers
// (DeepseekV4ForCausalLM, fp32 math): for every fixture, every prompt:
//   * one-shot prefill logits vs the reference: worst row of ‖got − ref‖₂ / ‖ref‖₂ ≤ 1e-4;
//   * token-by-token decode and chunked prefill (chunks 1, 3, 7, 64) vs one-shot prefill, same
//     metric, ≤ 1e-5;
//   * greedy continuation (prompt prefill, then one token at a time through the state) equals the
//     reference tokens exactly.
// Fixtures: tests/data/models/v4tiny_b (fp32), tests/data/models/deepseek-v4-tiny-stories (bf16
// weights) and every folder under tests/data/v4-fixtures/ that has reference_outputs.safetensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <iostream>
#include <memory>

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

using backend::Tensor;
using testing::argmax;
using testing::row_relative_error;

std::vector<std::string> fixture_dirs() {
  std::vector<std::string> dirs = {"tests/data/models/v4tiny_b",
                                   "tests/data/models/deepseek-v4-tiny-stories"};
  std::error_code ec;
  std::vector<std::string> extra;
  for (const auto& e : std::filesystem::directory_iterator("tests/data/v4-fixtures", ec))
    if (e.is_directory() && std::filesystem::exists(e.path() / "reference_outputs.safetensors") &&
        std::filesystem::exists(e.path() / "config.json"))
      extra.push_back(e.path().string());
  std::sort(extra.begin(), extra.end());
  dirs.insert(dirs.end(), extra.begin(), extra.end());
  return dirs;
}

struct Prompt {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<float> logits;   // [len, V]
  std::vector<int32_t> greedy;
};

class V4Fixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto be = backend::make_backend(DI_MODEL_TEST_DEVICE, {/*batch_invariant=*/true});
    ASSERT_TRUE(be.ok()) << be.status().to_string();
    be_ = std::move(be).value();
    auto m = load_model(GetParam(), be_.get());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    auto ref = io::SafetensorsFile::open(GetParam() + "/reference_outputs.safetensors");
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    for (int i = 0;; ++i) {
      const std::string p = "prompt" + std::to_string(i);
      const io::TensorInfo* ids = (*ref)->find(p + ".ids");
      if (!ids) break;
      Prompt pr;
      pr.name = p;
      pr.ids = testing::read_ids(*ids);
      if (const io::TensorInfo* l = (*ref)->find(p + ".logits")) pr.logits = testing::read_f32(*l);
      if (const io::TensorInfo* g = (*ref)->find(p + ".greedy")) pr.greedy = testing::read_ids(*g);
      prompts_.push_back(std::move(pr));
    }
    ASSERT_FALSE(prompts_.empty()) << "no promptN.ids in " << GetParam();
    V_ = model_->info().vocab_size;
  }

  // Runs `ids` through a fresh state in chunks of `chunk` tokens, all logits [len, V].
  std::vector<float> run_chunked(const std::vector<int32_t>& ids, size_t chunk) {
    auto state = model_->new_sequence_state();
    std::vector<float> out;
    for (size_t b = 0; b < ids.size(); b += chunk) {
      const size_t e = std::min(ids.size(), b + chunk);
      SequenceInput in{std::span<const int32_t>(ids.data() + b, e - b), state.get(), true};
      auto logits = model_->forward({&in, 1});
      EXPECT_TRUE(logits.ok()) << logits.status().to_string();
      if (!logits.ok()) return {};
      out.insert(out.end(), logits->data<float>(), logits->data<float>() + logits->numel());
    }
    return out;
  }

  std::unique_ptr<backend::Backend> be_;
  std::unique_ptr<Model> model_;
  std::vector<Prompt> prompts_;
  int64_t V_ = 0;
};

TEST_P(V4Fixture, PrefillLogitsMatchReference) {
  for (const Prompt& p : prompts_) {
    if (p.logits.empty()) continue;
    const int64_t n = static_cast<int64_t>(p.ids.size());
    ASSERT_EQ(static_cast<int64_t>(p.logits.size()), n * V_) << p.name;
    std::vector<float> got = run_chunked(p.ids, p.ids.size());
    ASSERT_EQ(got.size(), p.logits.size());
    auto err = row_relative_error(got.data(), p.logits.data(), n, V_);
    EXPECT_LE(err.worst, 1e-4) << GetParam() << " " << p.name << ": worst row " << err.row
                               << " (of " << n << ") relative L2 error " << err.worst;
  }
}

TEST_P(V4Fixture, DecodeAndChunkedPrefillMatchOneShot) {
  for (const Prompt& p : prompts_) {
    const int64_t n = static_cast<int64_t>(p.ids.size());
    std::vector<float> once = run_chunked(p.ids, p.ids.size());
    for (size_t chunk : {1, 3, 7, 64}) {
      std::vector<float> got = run_chunked(p.ids, chunk);
      ASSERT_EQ(got.size(), once.size());
      auto err = row_relative_error(got.data(), once.data(), n, V_);
      EXPECT_LE(err.worst, 1e-5) << GetParam() << " " << p.name << " chunk " << chunk
                                 << ": worst row " << err.row << " relative L2 error " << err.worst;
    }
  }
}

TEST_P(V4Fixture, GreedyContinuationMatchesReference) {
  for (const Prompt& p : prompts_) {
    if (p.greedy.empty()) continue;
    auto state = model_->new_sequence_state();
    SequenceInput in{std::span<const int32_t>(p.ids), state.get(), false};
    auto logits = model_->forward({&in, 1});
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    std::vector<int32_t> got;
    int32_t next = argmax(logits->data<float>(), V_);
    for (size_t i = 0; i < p.greedy.size(); ++i) {
      got.push_back(next);
      if (i + 1 == p.greedy.size()) break;
      SequenceInput step{std::span<const int32_t>(&got.back(), 1), state.get(), false};
      auto l = model_->forward({&step, 1});
      ASSERT_TRUE(l.ok()) << l.status().to_string();
      next = argmax(l->data<float>(), V_);
    }
    EXPECT_EQ(got, p.greedy) << GetParam() << " " << p.name;
  }
}

TEST_P(V4Fixture, ReferenceBackendAndBatchingAgree) {
  // The reference-mode CPU backend (serial, plain fp32 accumulation) and a batch of two
  // sequences give the fast backend's single-sequence logits.
  const Prompt& a = prompts_.back();
  const Prompt& b = prompts_.front();
  std::vector<float> fast_a = run_chunked(a.ids, a.ids.size());
  std::vector<float> fast_b = run_chunked(b.ids, b.ids.size());
  auto ref_be = backend::make_cpu_backend({/*reference=*/true, 0});
  auto ref_model = load_model(GetParam(), ref_be.get());
  ASSERT_TRUE(ref_model.ok()) << ref_model.status().to_string();
  auto sa = (*ref_model)->new_sequence_state();
  SequenceInput ia{std::span<const int32_t>(a.ids), sa.get(), true};
  auto ra = (*ref_model)->forward({&ia, 1});
  ASSERT_TRUE(ra.ok()) << ra.status().to_string();
  auto e = row_relative_error(ra->data<float>(), fast_a.data(), a.ids.size(), V_);
  EXPECT_LE(e.worst, 1e-5) << "reference vs fast backend, row " << e.row;

  auto s1 = model_->new_sequence_state(), s2 = model_->new_sequence_state();
  SequenceInput batch[2] = {{std::span<const int32_t>(a.ids), s1.get(), true},
                            {std::span<const int32_t>(b.ids), s2.get(), false}};
  auto l = model_->forward(batch);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  ASSERT_EQ(l->dim(0), static_cast<int64_t>(a.ids.size()) + 1);
  auto ea = row_relative_error(l->data<float>(), fast_a.data(), a.ids.size(), V_);
  EXPECT_LE(ea.worst, 1e-6) << "batched sequence 0, row " << ea.row;
  auto eb = row_relative_error(l->data<float>() + a.ids.size() * V_,
                               fast_b.data() + (b.ids.size() - 1) * V_, 1, V_);
  EXPECT_LE(eb.worst, 1e-6) << "batched sequence 1 (last-token logits)";
  EXPECT_EQ(s1->num_tokens(), static_cast<int64_t>(a.ids.size()));
  EXPECT_EQ(s2->num_tokens(), static_cast<int64_t>(b.ids.size()));
}

TEST_P(V4Fixture, BatchCompositionDoesNotChangeLogits) {
  // A request's logits are bitwise the same alone and inside batches of 7 and 64 mixed requests
  // (prefill chunks of other lengths and decode steps of other sequences around it).
  std::mt19937 gen(std::random_device{}());
  const uint32_t seed = gen();
  gen.seed(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V_ - 1));
  std::uniform_int_distribution<int> len(1, 24);
  std::vector<int32_t> target = prompts_.front().ids;
  const int32_t next_token = tok(gen);
  // Alone: prefill, then one decode step.
  auto alone = [&](std::vector<float>* prefill, std::vector<float>* decode) {
    auto st = model_->new_sequence_state();
    SequenceInput in{std::span<const int32_t>(target), st.get(), true};
    auto l = model_->forward({&in, 1});
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    prefill->assign(l->data<float>(), l->data<float>() + l->numel());
    SequenceInput step{std::span<const int32_t>(&next_token, 1), st.get(), false};
    auto d = model_->forward({&step, 1});
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    decode->assign(d->data<float>(), d->data<float>() + d->numel());
  };
  std::vector<float> want_prefill, want_decode;
  alone(&want_prefill, &want_decode);
  for (int batch : {1, 7, 64}) {
    std::vector<std::unique_ptr<SequenceState>> states;
    std::vector<std::vector<int32_t>> others(batch - 1);
    for (auto& o : others) {
      o.resize(len(gen));
      for (int32_t& t : o) t = tok(gen);
    }
    // Step 1: the target's prefill among the others' prefills (target in the middle).
    auto target_state = model_->new_sequence_state();
    std::vector<SequenceInput> inputs;
    const size_t where = others.size() / 2;
    for (size_t i = 0; i < others.size(); ++i) {
      if (i == where) inputs.push_back({std::span<const int32_t>(target), target_state.get(), true});
      states.push_back(model_->new_sequence_state());
      inputs.push_back({std::span<const int32_t>(others[i]), states.back().get(), i % 2 == 0});
    }
    if (where == others.size())
      inputs.push_back({std::span<const int32_t>(target), target_state.get(), true});
    auto l = model_->forward(inputs);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    int64_t row = 0;
    for (size_t i = 0; i < inputs.size() && inputs[i].state != target_state.get(); ++i)
      row += inputs[i].all_logits ? static_cast<int64_t>(inputs[i].tokens.size()) : 1;
    EXPECT_EQ(0, std::memcmp(l->data<float>() + row * V_, want_prefill.data(),
                             want_prefill.size() * sizeof(float)))
        << GetParam() << ": prefill logits differ in a batch of " << batch << " (seed " << seed << ")";
    // Step 2: the target's decode step among the others' decode steps.
    std::vector<int32_t> steps(others.size());
    for (int32_t& t : steps) t = tok(gen);
    std::vector<SequenceInput> dec;
    for (size_t i = 0, o = 0; i < inputs.size(); ++i) {
      if (inputs[i].state == target_state.get()) {
        dec.push_back({std::span<const int32_t>(&next_token, 1), target_state.get(), false});
      } else {
        dec.push_back({std::span<const int32_t>(&steps[o], 1), inputs[i].state, false});
        ++o;
      }
    }
    auto d = model_->forward(dec);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(0, std::memcmp(d->data<float>() + where * V_, want_decode.data(),
                             want_decode.size() * sizeof(float)))
        << GetParam() << ": decode logits differ in a batch of " << batch << " (seed " << seed << ")";
  }
}

TEST_P(V4Fixture, BadInputsAreErrors) {
  auto state = model_->new_sequence_state();
  std::vector<int32_t> bad = {0, static_cast<int32_t>(V_)};
  SequenceInput in{std::span<const int32_t>(bad), state.get(), false};
  auto r = model_->forward({&in, 1});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside the vocabulary"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(state->num_tokens(), 0);
  std::vector<int32_t> none;
  SequenceInput empty{std::span<const int32_t>(none), state.get(), false};
  EXPECT_FALSE(model_->forward({&empty, 1}).ok());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, V4Fixture, ::testing::ValuesIn(fixture_dirs()),
                         [](const auto& info) {
                           std::string n = std::filesystem::path(info.param).filename().string();
                           for (char& c : n) if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

}  // namespace
}  // namespace deepinfer::model
