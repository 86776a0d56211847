// Tensor parallelism (model/deepseek_v4/tensor_parallel.h) through the whole DeepSeek-V4 model,
// threads as ranks over the in-process communicator (CPU backend), against the plain model:
//   * world size 1: prefill (all logits) and decode logits bitwise equal to the plain model's
//     (the shard is the whole matrix, the all-reduce of one rank is the identity);
//   * world sizes 2 and 4 where the fixture allows them: every rank's logits bitwise equal to the
//     other ranks' (replicated compute after each all-reduce), and within a relative bound of the
//     plain model per row (‖err‖₂/‖ref‖₂; the partial sums change the order of additions), over
//     a random prompt's prefill and 4 decode steps fed the plain run's greedy tokens, and a batch
//     of two sequences in one step;
//   * the trained tiny-stories model at world size 2: greedy tokens equal to the plain model's;
//   * sizes that do not divide the heads / o_groups / expert width, shards that cut FP8 scale
//     blocks, tensor parallel with expert parallel, a missing communicator: refused, naming why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "backend/backend.h"
#include "ep_test_util.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/tensor_parallel.h"

namespace deepinfer::dist {
namespace {

using model::v4::DeepseekV4Model;
using model::v4::TensorParallelContext;
using testing::bitwise;
using testing::worst_row_error;


// Measured worst row error over many seeds: ~1e-6 (docs/dist.md "Tensor parallelism").
constexpr double kBound = 2e-5;

struct Fixture {
  const char* dir;
  std::vector<int> worlds;  // tensor-parallel sizes this fixture supports
};

class TpModel : public ::testing::TestWithParam<Fixture> {
 protected:
  void SetUp() override {
    dir_ = GetParam().dir;
    if (!std::filesystem::exists(dir_ + "/config.json"))
      GTEST_SKIP() << dir_ << " is not in this checkout";
    auto cfg = io::load_model_config(dir_ + "/config.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    cfg_ = *cfg;
    be_ = backend::make_cpu_backend();
    auto m = DeepseekV4Model::load(dir_, cfg_, be_.get());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    plain_ = std::move(m).value();
    ASSERT_EQ(plain_->tensor_parallel_size(), 1);
    V_ = plain_->dims().V;
    seed_ = std::random_device{}();
    rng_.seed(seed_);
  }

  std::vector<int32_t> random_prompt() {
    std::vector<int32_t> p(3 + rng_() % 14);
    for (auto& t : p) t = static_cast<int32_t>(rng_() % V_);
    return p;
  }

  // fn(rank, model) on W threads, each with its own CPU backend and tensor-parallel model.
  std::vector<Status> run_tp(int W, const std::function<Status(int, DeepseekV4Model&)>& fn) {
    return testing::run_ranks(W, [&](int r, Communicator& comm) -> Status {
      auto be = backend::make_cpu_backend();
      TensorParallelContext tp{&comm};
      DI_ASSIGN_OR_RETURN(auto m, DeepseekV4Model::load(dir_, cfg_, be.get(), nullptr, &tp));
      if (m->tensor_parallel_size() != W)
        return Internal("tensor_parallel_size() " + std::to_string(m->tensor_parallel_size()));
      return fn(r, *m);
    });
  }

  std::string dir_;
  io::ModelConfig cfg_;
  std::unique_ptr<backend::Backend> be_;
  std::unique_ptr<DeepseekV4Model> plain_;
  int64_t V_ = 0;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

TEST_P(TpModel, LogitsMatchThePlainModel) {
  for (int W : GetParam().worlds) {
    const std::vector<int32_t> prompt = random_prompt();
    std::vector<int32_t> greedy;
    auto want = testing::run_greedy(*plain_, prompt, 4, &greedy);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    std::vector<std::vector<float>> got(W);
    auto st = run_tp(W, [&](int r, DeepseekV4Model& m) -> Status {
      DI_ASSIGN_OR_RETURN(got[r], testing::run_greedy(m, prompt, 4, nullptr, &greedy));
      return OkStatus();
    });
    for (int r = 0; r < W; ++r) ASSERT_TRUE(st[r].ok()) << "W " << W << " rank " << r << ": " << st[r].to_string();
    if (W == 1) {
      EXPECT_TRUE(bitwise(got[0], *want)) << dir_ << " seed " << seed_;
      continue;
    }
    for (int r = 1; r < W; ++r)
      EXPECT_TRUE(bitwise(got[r], got[0])) << dir_ << " W " << W << " rank " << r << " seed " << seed_;
    const double err = worst_row_error(got[0], *want, V_);
    std::printf("[ tp ] %s W=%d prompt %zu + 4 decode: worst row rel err %.3g\n", dir_.c_str(), W,
                prompt.size(), err);
    EXPECT_LE(err, kBound) << dir_ << " W " << W << " seed " << seed_;
  }
}

TEST_P(TpModel, BatchOfTwoSequencesMatchesThePlainModel) {
  // Two sequences in one step (the flattened batch), then one decode step of both.
  const std::vector<int32_t> a = random_prompt(), b = random_prompt();
  auto run_batch = [&](model::Model& m) -> StatusOr<std::vector<float>> {
    auto sa = m.new_sequence_state(), sb = m.new_sequence_state();
    std::vector<float> out;
    std::vector<int32_t> ta = a, tb = b;
    for (int step = 0; step < 2; ++step) {
      model::SequenceInput in[2] = {{ta, sa.get(), true}, {tb, sb.get(), true}};
      DI_ASSIGN_OR_RETURN(backend::Tensor l, m.forward(in));
      out.insert(out.end(), l.data<float>(), l.data<float>() + l.numel());
      ta = {static_cast<int32_t>((a[0] + 7 * step + 1) % V_)};
      tb = {static_cast<int32_t>((b[0] + 3 * step + 2) % V_)};
    }
    return out;
  };
  auto want = run_batch(*plain_);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  for (int W : GetParam().worlds) {
    std::vector<std::vector<float>> got(W);
    auto st = run_tp(W, [&](int r, DeepseekV4Model& m) -> Status {
      DI_ASSIGN_OR_RETURN(got[r], run_batch(m));
      return OkStatus();
    });
    for (int r = 0; r < W; ++r) ASSERT_TRUE(st[r].ok()) << "W " << W << " rank " << r << ": " << st[r].to_string();
    if (W == 1) {
      EXPECT_TRUE(bitwise(got[0], *want)) << dir_ << " seed " << seed_;
    } else {
      EXPECT_LE(worst_row_error(got[0], *want, V_), kBound) << dir_ << " W " << W << " seed " << seed_;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, TpModel,
    ::testing::Values(Fixture{"tests/data/models/v4tiny_b", {1, 2}},
                      Fixture{"tests/data/models/deepseek-v4-tiny-stories", {1, 2}},
                      Fixture{"tests/data/v4-fixtures/v4tiny_variant", {1, 2, 4}},
                      Fixture{"tests/data/v4-fixtures/v4tiny_quant", {1}}),
    [](const ::testing::TestParamInfo<Fixture>& i) {
      std::string n = std::filesystem::path(i.param.dir).filename().string();
      for (char& c : n)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return n;
    });

// The trained model's greedy continuation of its reference prompts is the same at world size 2.
TEST(TpTinyStories, GreedyTokensEqualThePlainModel) {
  const std::string dir = "tests/data/models/deepseek-v4-tiny-stories";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is not in this checkout";
  auto cfg = io::load_model_config(dir + "/config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto ref = io::SafetensorsFile::open(dir + "/reference_outputs.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  auto be = backend::make_cpu_backend();
  auto plain = DeepseekV4Model::load(dir, *cfg, be.get());
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  constexpr int kDecode = 24;
  for (int p = 0;; ++p) {
    const io::TensorInfo* ids = (*ref)->find("prompt" + std::to_string(p) + ".ids");
    if (ids == nullptr) break;
    std::vector<int32_t> prompt(ids->numel());
    for (int64_t i = 0; i < ids->numel(); ++i) {
      if (ids->dtype == DType::kI64) {
        int64_t x;
        std::memcpy(&x, ids->data + 8 * i, 8);
        prompt[i] = static_cast<int32_t>(x);
      } else {
        std::memcpy(&prompt[i], ids->data + 4 * i, 4);
      }
    }
    std::vector<int32_t> want;
    ASSERT_TRUE(testing::run_greedy(**plain, prompt, kDecode, &want).ok());
    std::vector<std::vector<int32_t>> got(2);
    auto st = testing::run_ranks(2, [&](int r, Communicator& comm) -> Status {
      auto rb = backend::make_cpu_backend();
      TensorParallelContext tp{&comm};
      DI_ASSIGN_OR_RETURN(auto m, DeepseekV4Model::load(dir, *cfg, rb.get(), nullptr, &tp));
      return testing::run_greedy(*m, prompt, kDecode, &got[r]).status();
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
      EXPECT_EQ(got[r], want) << "prompt " << p << " rank " << r;
    }
  }
}

// Every rank of a refused load gets the same error; it must name `what`.
void expect_refused(const std::string& dir, int W, StatusCode code, const std::string& what) {
  auto cfg = io::load_model_config(dir + "/config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto st = testing::run_ranks(W, [&](int, Communicator& comm) -> Status {
    auto be = backend::make_cpu_backend();
    TensorParallelContext tp{&comm};
    auto m = DeepseekV4Model::load(dir, *cfg, be.get(), nullptr, &tp);
    if (m.ok()) return Internal("loaded at tensor parallel size " + std::to_string(W));
    if (m.status().code() != code || m.status().message().find(what) == std::string::npos)
      return Internal("unexpected error: " + m.status().to_string());
    return OkStatus();
  });
  for (int r = 0; r < W; ++r) EXPECT_TRUE(st[r].ok()) << dir << " W " << W << " rank " << r << ": " << st[r].to_string();
}

TEST(TpRefused, SizesThatDoNotDivideTheModel) {
  const std::string b = "tests/data/models/v4tiny_b";  // 4 heads, 2 o_groups, expert width 64
  if (!std::filesystem::exists(b + "/config.json")) GTEST_SKIP() << b << " is not in this checkout";
  expect_refused(b, 3, StatusCode::kInvalidArgument, "does not divide num_attention_heads 4");
  expect_refused(b, 4, StatusCode::kInvalidArgument, "does not divide o_groups 2");
  const std::string v = "tests/data/v4-fixtures/v4tiny_variant";  // 8 heads, 4 groups, width 48
  if (std::filesystem::exists(v + "/config.json")) {
    expect_refused(v, 8, StatusCode::kInvalidArgument, "does not divide o_groups 4");
  }
}

TEST(TpRefused, ShardsThatCutFp8ScaleBlocks) {
  // v4tiny_quant: wo_a is FP8 [160, 128] with 128×128 blocks; two shards of 80 rows cut a block.
  const std::string q = "tests/data/v4-fixtures/v4tiny_quant";
  if (!std::filesystem::exists(q + "/config.json")) GTEST_SKIP() << q << " is not in this checkout";
  expect_refused(q, 2, StatusCode::kInvalidArgument, "cuts through the F8_E4M3 scale blocks of 128x128");
}

TEST(TpRefused, ExpertParallelOrNoCommunicator) {
  const std::string b = "tests/data/models/v4tiny_b";
  if (!std::filesystem::exists(b + "/config.json")) GTEST_SKIP() << b << " is not in this checkout";
  auto cfg = io::load_model_config(b + "/config.json");
  ASSERT_TRUE(cfg.ok());
  auto be = backend::make_cpu_backend();
  TensorParallelContext none{nullptr};
  auto m = DeepseekV4Model::load(b, *cfg, be.get(), nullptr, &none);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("without a communicator"), std::string::npos) << m.status().to_string();
  auto st = testing::run_ranks(2, [&](int, Communicator& comm) -> Status {
    auto rb = backend::make_cpu_backend();
    DI_ASSIGN_OR_RETURN(ExpertPlacement placement, identity_placement(4, 8, 2));
    ExpertParallelContext ep{&comm, placement, ReplicaChoice::kTokenModulo};
    TensorParallelContext tp{&comm};
    auto m2 = DeepseekV4Model::load(b, *cfg, rb.get(), &ep, &tp);
    if (m2.ok()) return Internal("loaded with both tensor and expert parallel");
    if (m2.status().code() != StatusCode::kUnimplemented ||
        m2.status().message().find("expert parallel") == std::string::npos)
      return Internal("unexpected error: " + m2.status().to_string());
    return OkStatus();
  });
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.to_string();
}

// load_tensor_parallel_model (the engine's entry point): the same model as DeepseekV4Model::load
// with the context (bitwise the same logits at W = 2); another family or no communicator refused.
TEST(TpEntryPoint, LoadsDeepSeekV4AndRefusesOthers) {
  const std::string b = "tests/data/models/v4tiny_b";
  if (!std::filesystem::exists(b + "/config.json")) GTEST_SKIP() << b << " is not in this checkout";
  auto cfg = io::load_model_config(b + "/config.json");
  ASSERT_TRUE(cfg.ok());
  const std::vector<int32_t> prompt = {5, 17, 250, 3, 99, 42, 7};
  std::vector<std::vector<float>> direct(2), entry(2);
  auto st = testing::run_ranks(2, [&](int r, Communicator& comm) -> Status {
    auto be = backend::make_cpu_backend();
    TensorParallelContext tp{&comm};
    DI_ASSIGN_OR_RETURN(auto m, DeepseekV4Model::load(b, *cfg, be.get(), nullptr, &tp));
    DI_ASSIGN_OR_RETURN(direct[r], testing::run_greedy(*m, prompt, 2));
    DI_ASSIGN_OR_RETURN(auto m2, model::v4::load_tensor_parallel_model(b, be.get(), &comm));
    DI_ASSIGN_OR_RETURN(entry[r], testing::run_greedy(*m2, prompt, 2));
    return OkStatus();
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
    EXPECT_TRUE(bitwise(entry[r], direct[r])) << "rank " << r;
  }
  auto be = backend::make_cpu_backend();
  auto none = model::v4::load_tensor_parallel_model(b, be.get(), nullptr);
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  const std::string llama = "tests/data/models/stories260K/hf";
  if (std::filesystem::exists(llama + "/config.json")) {
    auto st2 = testing::run_ranks(1, [&](int, Communicator& comm) -> Status {
      auto m = model::v4::load_tensor_parallel_model(llama, be.get(), &comm);
      if (m.ok()) return Internal("a Llama model loaded tensor parallel");
      if (m.status().message().find("DeepSeek-V4 only") == std::string::npos) return m.status();
      return OkStatus();
    });
    EXPECT_TRUE(st2[0].ok()) << st2[0].to_string();
  }
}

}  // namespace
}  // namespace deepinfer::dist
