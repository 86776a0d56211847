// End-to-end engine tests on the real trained tiny DeepSeek-V4 (tests/data/models/
// deepseek-v4-tiny-stories): exact greedy tokens against the reference, seeded sampling
// independent of the batch, bad requests failing alone, stop strings, aborts.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "deepinfer/llm.h"
#include "common/logging.h"
#include "io/safetensors.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

// The engine logs its pool plan at info level on every create; the budget search makes dozens.
const bool kQuietLogs = (set_log_level(LogLevel::kWarning), true);

const char* kTinyV4 = "tests/data/models/deepseek-v4-tiny-stories";

std::vector<int32_t> read_ids(const io::SafetensorsFile& f, const std::string& name) {
  const io::TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<int32_t> out;
  for (int64_t i = 0; i < t->numel(); ++i) {
    int64_t v;
    std::memcpy(&v, t->data + 8 * i, 8);  // int64 in the reference file
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

std::unique_ptr<LLM> make_llm(const std::string& model, int64_t kv_bytes = int64_t{256} << 20,
                              int max_num_seqs = 64, int64_t max_model_len = 0,
                              int64_t max_batched = 8192) {
  EngineConfig cfg;
  cfg.model = model;
  cfg.kv_cache_memory = kv_bytes;
  cfg.max_num_seqs = max_num_seqs;
  cfg.max_model_len = max_model_len;
  cfg.max_num_batched_tokens = max_batched;
  auto llm = LLM::create(cfg);
  EXPECT_TRUE(llm.ok()) << llm.status().to_string();
  return llm.ok() ? std::move(llm).value() : nullptr;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

TEST(Engine, TinyStoriesGreedyMatchesReference) {
  auto ref = io::SafetensorsFile::open(std::string(kTinyV4) + "/reference_outputs.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  auto llm = make_llm(kTinyV4);
  ASSERT_TRUE(llm);
  std::vector<std::vector<int32_t>> prompts, expected;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(read_ids(**ref, "prompt" + std::to_string(i) + ".ids"));
    expected.push_back(read_ids(**ref, "prompt" + std::to_string(i) + ".greedy"));
  }
  auto outs = llm->generate(prompts, greedy(static_cast<int>(expected[0].size())));
  ASSERT_TRUE(outs.ok()) << outs.status().to_string();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ((*outs)[i].outputs.size(), 1u);
    EXPECT_EQ((*outs)[i].outputs[0].token_ids, expected[i]) << "prompt " << i;
    EXPECT_EQ((*outs)[i].outputs[0].finish_reason, "length");
  }
  // The text is the tokenizer's decode of the tokens: real English.
  EXPECT_NE((*outs)[0].outputs[0].text.find(' '), std::string::npos);
}

// Batched == alone under preemption (greedy and seeded, async scheduling on and off) lives in
// batch_equivalence_test.cpp.

TEST(Engine, SeededSamplingIndependentOfBatch) {
  auto llm = make_llm(kTinyV4);
  ASSERT_TRUE(llm);
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.top_k = 50;
  p.max_tokens = 20;
  p.seed = 1234;
  const std::vector<int32_t> prompt{1, 400, 80, 100};
  auto alone = llm->generate(std::vector<std::vector<int32_t>>{prompt}, p);
  ASSERT_TRUE(alone.ok());
  std::vector<std::vector<int32_t>> batch;
  std::vector<SamplingParams> ps;
  for (int i = 0; i < 9; ++i) {
    batch.push_back({1, static_cast<int32_t>(30 + i), 200});
    SamplingParams q = p;
    q.seed = 7 + i;
    ps.push_back(q);
  }
  batch.insert(batch.begin() + 4, prompt);
  ps.insert(ps.begin() + 4, p);
  auto outs = llm->generate(batch, ps);
  ASSERT_TRUE(outs.ok());
  EXPECT_EQ((*outs)[4].outputs[0].token_ids, (*alone)[0].outputs[0].token_ids);
  // n = 3 sequences of one seeded request: different samples, reported together, reproducible.
  SamplingParams n3 = p;
  n3.n = 3;
  auto a = llm->generate(std::vector<std::vector<int32_t>>{prompt}, n3);
  auto b = llm->generate(std::vector<std::vector<int32_t>>{prompt}, n3);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ((*a)[0].outputs.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*a)[0].outputs[i].token_ids, (*b)[0].outputs[i].token_ids);
  EXPECT_NE((*a)[0].outputs[0].token_ids, (*a)[0].outputs[1].token_ids);
}

TEST(Engine, BadRequestsFailAloneWithClearErrors) {
  auto llm = make_llm(kTinyV4, int64_t{256} << 20, 64, /*max_model_len=*/64);
  ASSERT_TRUE(llm);
  std::vector<std::vector<int32_t>> prompts{{1, 50, 60}, {1, 70}, std::vector<int32_t>(100, 5), {1, 999999}, {1, 80}};
  std::vector<SamplingParams> ps(prompts.size(), greedy(8));
  ps[1].top_p = 1.5f;  // invalid
  auto outs = llm->generate(prompts, ps);
  ASSERT_TRUE(outs.ok()) << outs.status().to_string();
  EXPECT_TRUE((*outs)[0].error.empty());
  EXPECT_EQ((*outs)[0].outputs[0].token_ids.size(), 8u);
  EXPECT_NE((*outs)[1].error.find("top_p"), std::string::npos) << (*outs)[1].error;
  EXPECT_NE((*outs)[2].error.find("max_model_len"), std::string::npos) << (*outs)[2].error;
  EXPECT_FALSE((*outs)[3].error.empty());  // token id outside the vocabulary
  EXPECT_EQ((*outs)[3].outputs[0].finish_reason, "error");
  EXPECT_TRUE((*outs)[4].error.empty());
  EXPECT_EQ((*outs)[4].outputs[0].token_ids.size(), 8u);
}

TEST(Engine, StopStringsTruncateTheText) {
  auto llm = make_llm(kTinyV4);
  ASSERT_TRUE(llm);
  auto free_run = llm->generate(std::vector<std::string>{"Once upon a time"}, greedy(40));
  ASSERT_TRUE(free_run.ok());
  const std::string text = (*free_run)[0].outputs[0].text;
  ASSERT_GT(text.size(), 12u) << text;
  // Stop at a word in the middle of the greedy text (spanning token boundaries is allowed).
  const std::string stop = text.substr(text.size() / 2, 4);
  SamplingParams p = greedy(40);
  p.stop = {stop};
  auto outs = llm->generate(std::vector<std::string>{"Once upon a time"}, p);
  ASSERT_TRUE(outs.ok());
  const auto& c = (*outs)[0].outputs[0];
  EXPECT_EQ(c.finish_reason, "stop");
  ASSERT_TRUE(c.stop_reason.has_value());
  EXPECT_EQ(*c.stop_reason, stop);
  EXPECT_EQ(c.text, text.substr(0, text.find(stop)));

  // detokenize = false: token ids only, no text; stop strings then are an error for that request.
  SamplingParams raw = greedy(12);
  raw.detokenize = false;
  auto ids_only = llm->generate(std::vector<std::string>{"Once upon a time"}, raw);
  ASSERT_TRUE(ids_only.ok());
  EXPECT_EQ((*ids_only)[0].outputs[0].token_ids.size(), 12u);
  EXPECT_EQ((*ids_only)[0].outputs[0].text, "");
  raw.stop = {"x"};
  auto refused = llm->generate(std::vector<std::string>{"Once upon a time"}, raw);
  ASSERT_TRUE(refused.ok());
  EXPECT_NE((*refused)[0].error.find("detokenize"), std::string::npos) << (*refused)[0].error;
}

// Async scheduling: aborts land while a step is in flight (step() returns with the next forward
// running); the aborted request reports "abort" with the tokens it had, the others are unchanged,
// and an engine destroyed with a forward in flight shuts down cleanly.
TEST(Engine, AbortWhileAStepIsInFlight) {
  EngineConfig cfg;
  cfg.model = kTinyV4;
  cfg.kv_cache_memory = int64_t{64} << 20;
  cfg.max_model_len = 128;
  cfg.async_scheduling = true;
  auto engine_or = Engine::create(cfg);
  ASSERT_TRUE(engine_or.ok()) << engine_or.status().to_string();
  auto& engine = **engine_or;
  const std::vector<std::vector<int32_t>> prompts{{1, 400, 80, 100}, {1, 30, 31}, {1, 77, 78, 79, 80}};
  std::map<std::string, std::vector<int32_t>> alone;
  {
    cfg.async_scheduling = false;
    auto ref = LLM::create(cfg);
    ASSERT_TRUE(ref.ok());
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto o = (*ref)->generate(std::vector<std::vector<int32_t>>{prompts[i]}, greedy(12));
      ASSERT_TRUE(o.ok());
      alone["r" + std::to_string(i)] = (*o)[0].outputs[0].token_ids;
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(engine.add_request("r" + std::to_string(i), prompts[i], greedy(12)).ok());
  }
  std::map<std::string, RequestOutput> done;
  for (int s = 0; s < 5; ++s) {
    auto outs = engine.step();
    ASSERT_TRUE(outs.ok());
    for (auto& o : *outs) done[o.request_id] = o;
  }
  engine.abort_request("r1");
  while (engine.has_unfinished_requests()) {
    auto outs = engine.step();
    ASSERT_TRUE(outs.ok());
    for (auto& o : *outs) done[o.request_id] = o;
  }
  ASSERT_EQ(done.size(), 3u);
  const Status clean = engine.check_invariants();  // every block back in its pool
  EXPECT_TRUE(clean.ok()) << clean.to_string();
  EXPECT_EQ(done["r0"].outputs[0].token_ids, alone["r0"]);
  EXPECT_EQ(done["r2"].outputs[0].token_ids, alone["r2"]);
  EXPECT_EQ(done["r1"].outputs[0].finish_reason, "abort");
  const auto& partial = done["r1"].outputs[0].token_ids;
  ASSERT_LT(partial.size(), 12u);
  EXPECT_EQ(partial, std::vector<int32_t>(alone["r1"].begin(), alone["r1"].begin() + partial.size()));

  // Destroyed mid-generation (a forward in flight): no hang, no crash.
  ASSERT_TRUE(engine.add_request("late", prompts[0], greedy(30)).ok());
  ASSERT_TRUE(engine.step().ok());
  ASSERT_TRUE(engine.step().ok());
  (*engine_or).reset();
}

// A model directory without tokenizer.json (the random V4 fixtures) runs on token ids; text
// prompts and stop strings fail alone with a message that says why.
TEST(Engine, ModelWithoutTokenizerRunsOnTokenIds) {
  EngineConfig cfg;
  cfg.model = "tests/data/models/v4tiny_b";
  cfg.kv_cache_memory = int64_t{16} << 20;
  cfg.max_num_seqs = 8;
  cfg.max_model_len = 64;
  auto llm = LLM::create(cfg);
  ASSERT_TRUE(llm.ok()) << llm.status().to_string();
  EXPECT_EQ((*llm)->engine().tokenizer(), nullptr);
  EXPECT_EQ((*llm)->engine().vocab_size(), 320);
  auto ids = (*llm)->generate(std::vector<std::vector<int32_t>>{{5, 6, 7}}, greedy(5));
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE((*ids)[0].error.empty()) << (*ids)[0].error;
  EXPECT_EQ((*ids)[0].outputs[0].token_ids.size(), 5u);
  auto text = (*llm)->generate(std::vector<std::string>{"hello"}, greedy(5));
  ASSERT_TRUE(text.ok());
  EXPECT_NE((*text)[0].error.find("tokenizer"), std::string::npos) << (*text)[0].error;
  SamplingParams stop = greedy(5);
  stop.stop = {"x"};
  auto stopped = (*llm)->generate(std::vector<std::vector<int32_t>>{{5, 6, 7}}, stop);
  ASSERT_TRUE(stopped.ok());
  EXPECT_NE((*stopped)[0].error.find("stop strings need a tokenizer"), std::string::npos) << (*stopped)[0].error;
}

}  // namespace
}  // namespace deepinfer
