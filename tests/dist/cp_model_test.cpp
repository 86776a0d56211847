// Context-parallel prefill (model/deepseek_v4/context_parallel.h) on the tiny V4 fixtures, threads
// as ranks over dist::InProcessGroup, each rank its own CPU backend, model and state:
//   * W = 2, 3, 4, random prompts that cross the window and several compression blocks, random
//     block sizes: every rank's prefill logits (all rows, or the last row) are bitwise the plain
//     single-rank prefill's, and 3 greedy decode steps from each rank's state after the CP
//     prefill are bitwise the plain model's (the state holds the whole prompt on every rank);
//   * the same with an expert-parallel model over the same ranks (W = 2, identity placement);
//   * a CP prefill after a plain prefix (state not empty) equals the plain chunked run;
//   * attention work: each rank's (query, key) pair count (and its indexer's (query, index key)
//     count) equals the count of its own rows computed here from the config, and max − min over
//     the ranks ≤ 3·block·c(last position) (context_parallel_split.h) — printed as the spread
//     relative to the mean;
//   * bad inputs: more ranks than blocks, prompts that differ between ranks, an out-of-vocabulary
//     id on one rank, no tokens, a null state — an error on every rank, states untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "backend/backend.h"
#include "dist/eplb.h"
#include "dist/expert_parallel_moe.h"
#include "ep_test_util.h"
#include "io/config.h"
#include "model/deepseek_v4/context_parallel.h"
#include "model/deepseek_v4/context_parallel_split.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::model::v4 {
namespace {

using dist::Communicator;

const char* kFixtures[] = {"tests/data/models/v4tiny_b", "tests/data/v4-fixtures/v4tiny_quant",
                           "tests/data/models/deepseek-v4-tiny-stories"};

using dist::testing::bitwise;

int32_t argmax_last(const backend::Tensor& logits) {
  const int64_t V = logits.dim(1);
  const float* last = logits.data<float>() + (logits.dim(0) - 1) * V;
  return static_cast<int32_t>(std::max_element(last, last + V) - last);
}

class CpModel : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(GetParam()) + "/config.json"))
      GTEST_SKIP() << GetParam() << " is not in this checkout";
    auto cfg = io::load_model_config(std::string(GetParam()) + "/config.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    cfg_ = *cfg;
    be_ = backend::make_cpu_backend();
    auto m = DeepseekV4Model::load(GetParam(), cfg_, be_.get());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    plain_ = std::move(m).value();
    seed_ = std::random_device{}();
    rng_.seed(seed_);
  }

  // Long enough to cross the window and several blocks of the largest compression rate.
  std::vector<int32_t> random_prompt() {
    const auto& c = cfg_.deepseek_v4();
    const int64_t span = std::max<int64_t>(c.sliding_window, 3 * c.compress_rate_hca);
    std::vector<int32_t> p(span + 8 + rng_() % span);
    for (auto& t : p) t = static_cast<int32_t>(rng_() % c.vocab_size);
    return p;
  }

  // Keys the attention of a query at position p lists, summed over the layers (window ∪ visible
  // HCA entries ∪ CSA top-k), computed from the config alone.
  int64_t keys_at(int64_t p) const {
    const auto& c = cfg_.deepseek_v4();
    int64_t keys = 0;
    for (size_t l = 0; l < c.layer_types.size(); ++l) {
      keys += std::min<int64_t>(p + 1, c.sliding_window);
      if (c.layer_types[l] == io::AttentionType::kHeavilyCompressed) keys += (p + 1) / c.compress_rate_hca;
      if (c.layer_types[l] == io::AttentionType::kCompressedSparse)
        keys += std::min<int64_t>(c.index_topk, (p + 1) / c.compress_rate_csa);
    }
    return keys;
  }

  // Index keys the indexer scores for a query at position p, summed over the CSA layers.
  int64_t index_keys_at(int64_t p) const {
    const auto& c = cfg_.deepseek_v4();
    int64_t keys = 0;
    for (auto t : c.layer_types)
      if (t == io::AttentionType::kCompressedSparse) keys += (p + 1) / c.compress_rate_csa;
    return keys;
  }

  // Plain model: `prefix` tokens first (if any), then the rest in one chunk (logits of every row
  // or the last), then 3 greedy decode steps. Returns the chunk's logits and the decode logits.
  void plain_run(const std::vector<int32_t>& prompt, size_t prefix, bool all_logits,
                 std::vector<float>* chunk, std::vector<float>* decode) {
    auto state = plain_->new_sequence_state();
    std::span<const int32_t> all(prompt);
    if (prefix > 0) {
      SequenceInput in{all.first(prefix), state.get(), false};
      ASSERT_TRUE(plain_->forward({&in, 1}).ok());
    }
    SequenceInput in{all.subspan(prefix), state.get(), all_logits};
    auto logits = plain_->forward({&in, 1});
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    chunk->assign(logits->data<float>(), logits->data<float>() + logits->numel());
    int32_t next = argmax_last(*logits);
    for (int step = 0; step < 3; ++step) {
      SequenceInput d{std::span<const int32_t>(&next, 1), state.get(), false};
      auto l = plain_->forward({&d, 1});
      ASSERT_TRUE(l.ok()) << l.status().to_string();
      decode->insert(decode->end(), l->data<float>(), l->data<float>() + l->numel());
      next = argmax_last(*l);
    }
  }

  // The same on W ranks, the chunk through prefill_context_parallel; checks every rank.
  void check(int W, const std::vector<int32_t>& prompt, size_t prefix, bool all_logits, int64_t block,
             bool expert_parallel = false) {
    std::vector<float> want_chunk, want_decode;
    plain_run(prompt, prefix, all_logits, &want_chunk, &want_decode);
    const int64_t S = static_cast<int64_t>(prompt.size() - prefix);
    std::vector<std::vector<float>> chunk(W), decode(W);
    std::vector<ContextParallelResult> res(W);
    auto st = dist::testing::run_ranks(W, [&](int r, Communicator& comm) -> Status {
      auto be = backend::make_cpu_backend();
      dist::ExpertParallelContext ctx;  // expert parallel over the same ranks (outlives m)
      std::unique_ptr<DeepseekV4Model> m;
      if (expert_parallel) {
        const auto& c = cfg_.deepseek_v4();
        DI_ASSIGN_OR_RETURN(dist::ExpertPlacement placement,
                            dist::identity_placement(static_cast<int>(c.num_hidden_layers),
                                                     static_cast<int>(c.n_routed_experts), W));
        ctx = {&comm, placement, dist::ReplicaChoice::kTokenModulo};
        DI_ASSIGN_OR_RETURN(m, DeepseekV4Model::load(GetParam(), cfg_, be.get(), &ctx));
      } else {
        DI_ASSIGN_OR_RETURN(m, DeepseekV4Model::load(GetParam(), cfg_, be.get()));
      }
      auto state = m->new_sequence_state();
      std::span<const int32_t> all(prompt);
      if (prefix > 0) {
        SequenceInput in{all.first(prefix), state.get(), false};
        DI_RETURN_IF_ERROR(m->forward({&in, 1}).status());
      }
      ContextParallelInput in{all.subspan(prefix), state.get(), all_logits, block};
      DI_ASSIGN_OR_RETURN(res[r], m->prefill_context_parallel(comm, in));
      if (state->num_tokens() != static_cast<int64_t>(prompt.size()))
        return Internal("state not advanced to the prompt length");
      const backend::Tensor& l0 = res[r].logits;
      chunk[r].assign(l0.data<float>(), l0.data<float>() + l0.numel());
      int32_t next = argmax_last(l0);
      for (int step = 0; step < 3; ++step) {  // every rank decodes alone from its own state
        SequenceInput d{std::span<const int32_t>(&next, 1), state.get(), false};
        DI_ASSIGN_OR_RETURN(backend::Tensor l, m->forward({&d, 1}));
        decode[r].insert(decode[r].end(), l.data<float>(), l.data<float>() + l.numel());
        next = argmax_last(l);
      }
      return OkStatus();
    });
    const std::string what = std::string(GetParam()) + " W " + std::to_string(W) + " S " +
                             std::to_string(S) + " prefix " + std::to_string(prefix) + " block " +
                             std::to_string(block) + (all_logits ? " all rows" : " last row") +
                             (expert_parallel ? " expert parallel" : "") +
                             " seed " + std::to_string(seed_);
    auto sp = plan_context_parallel_split(S, W, block);
    ASSERT_TRUE(sp.ok()) << sp.status().to_string();
    int64_t lo = INT64_MAX, hi = 0, sum = 0, index_lo = INT64_MAX, index_hi = 0;
    for (int r = 0; r < W; ++r) {
      ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string() << " — " << what;
      ASSERT_EQ(chunk[r].size(), want_chunk.size()) << what;
      EXPECT_TRUE(bitwise(chunk[r].data(), want_chunk.data(), want_chunk.size()))
          << "prefill logits, rank " << r << " — " << what;
      ASSERT_EQ(decode[r].size(), want_decode.size()) << what;
      EXPECT_TRUE(bitwise(decode[r].data(), want_decode.data(), want_decode.size()))
          << "decode logits, rank " << r << " — " << what;
      int64_t expected = 0, expected_index = 0;
      for (int32_t s : sp->rows[r]) {
        expected += keys_at(static_cast<int64_t>(prefix) + s);
        expected_index += index_keys_at(static_cast<int64_t>(prefix) + s);
      }
      EXPECT_EQ(res[r].attention_pairs, expected) << "rank " << r << " — " << what;
      EXPECT_EQ(res[r].indexer_pairs, expected_index) << "rank " << r << " — " << what;
      index_lo = std::min(index_lo, res[r].indexer_pairs);
      index_hi = std::max(index_hi, res[r].indexer_pairs);
      EXPECT_EQ(res[r].own_tokens, static_cast<int64_t>(sp->rows[r].size()));
      lo = std::min(lo, res[r].attention_pairs);
      hi = std::max(hi, res[r].attention_pairs);
      sum += res[r].attention_pairs;
    }
    const int64_t bound = 3 * block * keys_at(static_cast<int64_t>(prompt.size()) - 1);
    EXPECT_LE(hi - lo, bound) << what;
    EXPECT_LE(index_hi - index_lo,
              3 * block * index_keys_at(static_cast<int64_t>(prompt.size()) - 1)) << what;
    std::printf("%s: attention pairs per rank min %lld max %lld mean %.1f (spread %.2f%% of the "
                "mean, bound %lld pairs)\n",
                what.c_str(), static_cast<long long>(lo), static_cast<long long>(hi),
                static_cast<double>(sum) / W, 100.0 * (hi - lo) * W / sum,
                static_cast<long long>(bound));
  }

  io::ModelConfig cfg_;
  std::unique_ptr<backend::Backend> be_;
  std::unique_ptr<DeepseekV4Model> plain_;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
};

TEST_P(CpModel, EqualsSingleRankPrefillAndDecode) {
  for (int W : {2, 3, 4}) {
    const int64_t block = W == 3 ? 1 : 1 + static_cast<int64_t>(rng_() % 6);
    check(W, random_prompt(), 0, /*all_logits=*/W != 4, block);
  }
}

TEST_P(CpModel, AfterAPlainPrefixAndAtWorldSizeOne) {
  const auto prompt = random_prompt();
  check(3, prompt, 5 + rng_() % 20, /*all_logits=*/true, 2);
  check(1, random_prompt(), 0, /*all_logits=*/true, 1);
}

TEST_P(CpModel, WithAnExpertParallelModel) {
  // The MoE layers through ExpertParallelMoe over the same ranks (identity placement), the
  // decode steps in lockstep (every rank decodes its own copy of the sequence).
  if (cfg_.deepseek_v4().n_routed_experts % 2 != 0) GTEST_SKIP() << "experts not divisible by 2";
  check(2, random_prompt(), 0, /*all_logits=*/true, 1 + static_cast<int64_t>(rng_() % 4),
        /*expert_parallel=*/true);
}

TEST_P(CpModel, BadInputsFailOnEveryRank) {
  const int V = static_cast<int>(cfg_.deepseek_v4().vocab_size);
  // One model per rank (own backend), loaded once for every case below.
  std::vector<std::unique_ptr<backend::Backend>> backends;
  std::vector<std::unique_ptr<DeepseekV4Model>> models;
  for (int r = 0; r < 4; ++r) {
    backends.push_back(backend::make_cpu_backend());
    auto m = DeepseekV4Model::load(GetParam(), cfg_, backends.back().get());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    models.push_back(std::move(m).value());
  }
  // run(W, fn): W ranks, each with a fresh state; fn gives rank r's input; returns the statuses
  // (and checks every state is still empty).
  auto run = [&](int W, const std::function<ContextParallelInput(int, SequenceState*, std::vector<int32_t>&)>& fn) {
    std::vector<Status> got(W);
    std::vector<int64_t> tokens_after(W, -1);
    auto st = dist::testing::run_ranks(W, [&](int r, Communicator& comm) -> Status {
      DeepseekV4Model* m = models[r].get();
      auto state = m->new_sequence_state();
      std::vector<int32_t> buf;
      ContextParallelInput in = fn(r, state.get(), buf);
      got[r] = m->prefill_context_parallel(comm, in).status();
      tokens_after[r] = state->num_tokens();
      return OkStatus();
    });
    for (int r = 0; r < W; ++r) {
      EXPECT_TRUE(st[r].ok()) << st[r].to_string();
      EXPECT_EQ(tokens_after[r], 0) << "rank " << r << " state was advanced";
    }
    return got;
  };
  std::vector<int32_t> prompt = random_prompt();
  auto few = run(4, [&](int, SequenceState* s, std::vector<int32_t>&) {
    return ContextParallelInput{std::span<const int32_t>(prompt).first(3), s, false, 1};
  });
  for (const Status& s : few) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("fewer than the world size 4"), std::string::npos) << s.to_string();
  }
  auto differ = run(3, [&](int r, SequenceState* s, std::vector<int32_t>& buf) {
    buf = prompt;
    if (r == 2) buf[buf.size() / 2] = (buf[buf.size() / 2] + 1) % V;
    return ContextParallelInput{buf, s, false, 1};
  });
  for (const Status& s : differ) EXPECT_NE(s.message().find("differs from rank"), std::string::npos) << s.to_string();
  auto blocks = run(2, [&](int r, SequenceState* s, std::vector<int32_t>&) {
    return ContextParallelInput{prompt, s, false, r == 0 ? 1 : 2};
  });
  for (const Status& s : blocks) EXPECT_NE(s.message().find("in block"), std::string::npos) << s.to_string();
  auto vocab = run(3, [&](int r, SequenceState* s, std::vector<int32_t>& buf) {
    buf = prompt;
    if (r == 1) buf[0] = V;
    return ContextParallelInput{buf, s, false, 1};
  });
  EXPECT_EQ(vocab[1].code(), StatusCode::kOutOfRange) << vocab[1].to_string();
  EXPECT_NE(vocab[0].message().find("rank 1 rejected its input"), std::string::npos) << vocab[0].to_string();
  EXPECT_NE(vocab[2].message().find("rank 1 rejected its input"), std::string::npos) << vocab[2].to_string();
  auto empty = run(2, [&](int, SequenceState* s, std::vector<int32_t>&) {
    return ContextParallelInput{{}, s, false, 1};
  });
  for (const Status& s : empty) EXPECT_NE(s.message().find("no tokens"), std::string::npos) << s.to_string();
  auto no_state = run(2, [&](int r, SequenceState* s, std::vector<int32_t>&) {
    return ContextParallelInput{prompt, r == 0 ? nullptr : s, false, 1};
  });
  EXPECT_NE(no_state[0].message().find("not a DeepSeek-V4 state"), std::string::npos) << no_state[0].to_string();
  EXPECT_NE(no_state[1].message().find("rank 0 rejected"), std::string::npos) << no_state[1].to_string();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CpModel, ::testing::ValuesIn(kFixtures));

}  // namespace
}  // namespace deepinfer::model::v4
