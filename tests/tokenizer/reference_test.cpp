// Byte-exact encodings against the reference files: HF tokenizers 0.23.2 encodings (reference/*.jsonl),
// llama.cpp's upstream test vectors (.inp/.out) and the stories260K expected encodings.
#include <gtest/gtest.h>

#include "tests/tokenizer/test_util.h"

namespace deepinfer::tokenizer::testing {
namespace {

class ReferenceJsonl : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceJsonl, EncodeAndDecodeMatchHuggingFace) {
  const std::string name = GetParam();
  const Tokenizer& tok = load_tokenizer(name);
  const auto rows = read_jsonl("tests/data/tokenizers/reference/" + name + ".jsonl");
  ASSERT_GT(rows.size(), 90u);
  int checked = 0;
  for (const auto& row : rows) {
    const std::string kind = row.at("kind");
    const std::string text = kind == "chat" ? row.at("rendered").get<std::string>()
                                            : row.at("text").get<std::string>();
    const auto expected = row.at("ids").get<std::vector<int32_t>>();
    auto ids = tok.encode(text, /*add_special_tokens=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(*ids, expected) << row.at("id") << " text=" << nlohmann::json(text).dump()
                              << "\n got " << ids_str(*ids) << "\nwant " << ids_str(expected);
    const std::string decoded = tok.decode(expected, /*skip_special_tokens=*/false);
    if (kind == "chat") {
      EXPECT_EQ(decoded, text) << row.at("id");
    } else {
      EXPECT_EQ(decoded, row.at("decoded").get<std::string>()) << row.at("id");
      EXPECT_EQ(decoded, text) << row.at("id") << ": decode must round-trip";
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(rows.size()));
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, ReferenceJsonl,
                         ::testing::Values("deepseek-v3", "llama3", "qwen3", "gpt2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) if (c == '-') c = '_';
                           return n;
                         });

// llama.cpp vocab test vectors: .inp holds the strings separated by "\n__ggml_vocab_test__\n",
// .out one line of space-prefixed ids per string.
struct LlamaCppCase {
  std::string vocab;      // ggml-vocab-<vocab>.gguf.{inp,out}
  std::string tokenizer;  // our tokenizer.json for that vocabulary
};

class LlamaCppVectors : public ::testing::TestWithParam<LlamaCppCase> {};

TEST_P(LlamaCppVectors, MatchUpstream) {
  const auto& c = GetParam();
  const std::string base = "tests/data/tokenizers/llama.cpp/ggml-vocab-" + c.vocab + ".gguf";
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> expected;
  ASSERT_NO_FATAL_FAILURE(read_llama_cpp_vectors(base, &texts, &expected));
  const Tokenizer& tok = load_tokenizer(c.tokenizer);
  for (size_t i = 0; i < texts.size(); ++i) {
    auto ids = tok.encode(texts[i], /*add_special_tokens=*/false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, expected[i]) << c.vocab << " case " << i << " text=" << nlohmann::json(texts[i]).dump();
    EXPECT_EQ(tok.decode(*ids, false), texts[i]) << c.vocab << " case " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, LlamaCppVectors,
                         ::testing::Values(LlamaCppCase{"llama-bpe", "llama3"}, LlamaCppCase{"qwen2", "qwen3"},
                                           LlamaCppCase{"deepseek-r1-qwen", "qwen3"},
                                           LlamaCppCase{"gpt-2", "gpt2"}),
                         [](const auto& info) {
                           std::string n = info.param.vocab;
                           for (char& c : n) if (c == '-') c = '_';
                           return n;
                         });

TEST(Stories260K, EncodeWithBosMatchesExpected) {
  const Tokenizer& tok = load_tokenizer("stories260K");
  const auto rows = read_jsonl("tests/data/models/stories260K/expected/tok512_encode.jsonl");
  ASSERT_GT(rows.size(), 90u);
  for (const auto& row : rows) {
    const std::string text = row.at("text");
    const auto expected = row.at("ids_with_bos").get<std::vector<int32_t>>();
    auto ids = tok.encode(text, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, expected) << nlohmann::json(text).dump() << "\n got " << ids_str(*ids);
    // Llama-2 style decode drops the prepended "▁" of the first token: round-trip without BOS.
    EXPECT_EQ(tok.decode(*ids, /*skip_special_tokens=*/true), text) << nlohmann::json(text).dump();
  }
}

TEST(BosEos, FromConfigs) {
  struct Want {
    std::string name;
    std::optional<int32_t> bos;
    std::vector<int32_t> eos;
    bool adds_bos;
  };
  const std::vector<Want> wants = {{"deepseek-v3", 0, {1}, true},
                                   {"llama3", 128000, {128001}, true},
                                   {"qwen3", std::nullopt, {151645}, false},
                                   {"gpt2", 50256, {50256}, false},
                                   {"stories260K", 1, {2}, true}};
  for (const auto& w : wants) {
    const Tokenizer& tok = load_tokenizer(w.name);
    EXPECT_EQ(tok.bos_id(), w.bos) << w.name;
    EXPECT_EQ(tok.eos_ids(), w.eos) << w.name;
    EXPECT_EQ(tok.adds_bos(), w.adds_bos) << w.name;
    auto plain = tok.encode("Hello world", false);
    auto with = tok.encode("Hello world", true);
    ASSERT_TRUE(plain.ok() && with.ok());
    if (w.adds_bos) {
      ASSERT_EQ(with->size(), plain->size() + 1) << w.name;
      EXPECT_EQ(with->front(), *w.bos) << w.name;
    } else {
      EXPECT_EQ(*with, *plain) << w.name;
    }
  }
}

TEST(TokenBytes, ExactBytesPerToken) {
  const Tokenizer& gpt2 = load_tokenizer("gpt2");
  EXPECT_EQ(gpt2.token_bytes(*gpt2.token_to_id("\xC4\xA0the")), " the");  // "Ġthe"
  EXPECT_EQ(gpt2.token_bytes(50256), "<|endoftext|>");
  EXPECT_TRUE(gpt2.is_special(50256));
  EXPECT_FALSE(gpt2.is_special(262));
  EXPECT_EQ(gpt2.vocab_size(), 50257);
  EXPECT_EQ(gpt2.token_bytes(-1), "");
  EXPECT_EQ(gpt2.token_bytes(50257), "");
  const Tokenizer& st = load_tokenizer("stories260K");
  EXPECT_EQ(st.token_bytes(*st.token_to_id("<0xE4>")), "\xE4");
  EXPECT_EQ(st.token_bytes(*st.token_to_id("\xE2\x96\x81t")), " t");
  EXPECT_EQ(st.vocab_size(), 512);
  const Tokenizer& ds = load_tokenizer("deepseek-v3");
  EXPECT_EQ(ds.token_bytes(0), "<｜begin▁of▁sentence｜>");
  EXPECT_TRUE(ds.is_special(0));
  // Concatenated token bytes of an encoding are the text itself.
  const std::string text = "Grüße, 世界! 👋 123456";
  for (const std::string& name : byte_level_names()) {
    const Tokenizer& t = load_tokenizer(name);
    auto ids = t.encode(text, false);
    ASSERT_TRUE(ids.ok());
    std::string cat;
    for (int32_t id : *ids) cat += t.token_bytes(id);
    EXPECT_EQ(cat, text) << name;
  }
}

TEST(DecodeSkipSpecial, DropsOnlySpecialTokens) {
  const Tokenizer& q = load_tokenizer("qwen3");
  auto ids = q.encode("<|im_start|>user\nhi<think>x</think><|im_end|>", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(q.decode(*ids, true), "user\nhi<think>x</think>");  // <think> is not special in Qwen3
  EXPECT_EQ(q.decode(*ids, false), "<|im_start|>user\nhi<think>x</think><|im_end|>");
}

}  // namespace
}  // namespace deepinfer::tokenizer::testing
