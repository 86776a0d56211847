// GGUF vocabularies (llama.cpp ggml-vocab-*.gguf) converted to a Tokenizer: the upstream
// .inp/.out vectors of the vocabularies that exist only as GGUF, and corrupt-file errors.
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "tests/tokenizer/test_util.h"
#include "tokenizer/gguf_vocab.h"

namespace deepinfer::tokenizer::testing {
namespace {

const std::string kDir = "tests/data/tokenizers/llama.cpp/ggml-vocab-";

const Tokenizer& gguf_tokenizer(const std::string& vocab) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(vocab);
  if (it != cache.end()) return *it->second;
  auto t = tokenizer_from_gguf(kDir + vocab + ".gguf.xz");
  if (!t.ok()) {
    ADD_FAILURE() << "loading " << vocab << ": " << t.status().to_string();
    std::abort();
  }
  return *(cache[vocab] = std::move(t).value());
}

// Non-special added tokens that do not decode to their own text, with what they decode to.
std::vector<std::pair<std::string, std::string>> byte_char_tokens(const Tokenizer& tok) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& a : tok.added_tokens()) {
    if (a.special) continue;
    const int32_t id = a.id;
    std::string d = tok.decode(std::span<const int32_t>(&id, 1), false);
    if (d != a.content) out.emplace_back(a.content, d);
  }
  return out;
}

class GgufVectors : public ::testing::TestWithParam<std::string> {};

// Same format and conventions as LlamaCppVectors in reference_test.cpp: no BOS (the .out files
// are transformers' encode(text, add_special_tokens=False)).
TEST_P(GgufVectors, MatchUpstream) {
  const std::string vocab = GetParam();
  const std::string base = kDir + vocab + ".gguf";
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> expected;
  ASSERT_NO_FATAL_FAILURE(read_llama_cpp_vectors(base, &texts, &expected));
  const Tokenizer& tok = gguf_tokenizer(vocab);
  const auto byte_chars = byte_char_tokens(tok);
  for (size_t i = 0; i < texts.size(); ++i) {
    auto ids = tok.encode(texts[i], /*add_special_tokens=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(*ids, expected[i]) << vocab << " case " << i << " text=" << nlohmann::json(texts[i]).dump()
                                 << "\n got " << ids_str(*ids) << "\nwant " << ids_str(expected[i]);
    // Decoding follows Hugging Face: the user-defined tokens whose text is one byte-level
    // character (DeepSeek's "\u00f5".."\u00ff" for bytes 0xF5..0xFF, which the text matches as
    // added tokens) decode through the byte alphabet to an invalid byte, i.e. U+FFFD. llama.cpp
    // prints their text instead; everything else must round-trip.
    std::string want = texts[i];
    for (const auto& [content, piece] : byte_chars) {
      for (size_t at = 0; (at = want.find(content, at)) != std::string::npos; at += piece.size()) {
        want.replace(at, content.size(), piece);
      }
    }
    EXPECT_EQ(tok.decode(*ids, false), want) << vocab << " case " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, GgufVectors, ::testing::Values("deepseek-llm", "deepseek-coder", "llama-spm"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) if (c == '-') c = '_';
                           return n;
                         });

TEST(GgufVocab, SpecialTokensAndBos) {
  const Tokenizer& llm = gguf_tokenizer("deepseek-llm");
  EXPECT_EQ(llm.bos_id(), 100000);
  ASSERT_FALSE(llm.eos_ids().empty());
  EXPECT_EQ(llm.eos_ids().front(), 100001);
  EXPECT_TRUE(llm.adds_bos());
  EXPECT_TRUE(llm.is_special(100000));
  auto ids = llm.encode("<｜begin▁of▁sentence｜>Hi", /*add_special_tokens=*/true);
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 2u);
  EXPECT_EQ((*ids)[0], 100000);
  EXPECT_EQ((*ids)[1], 100000);  // written in the text: recognised as the control token
  const Tokenizer& spm = gguf_tokenizer("llama-spm");
  EXPECT_EQ(spm.bos_id(), 1);
  auto s = spm.encode("Hello", true);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->front(), 1);
  EXPECT_EQ(spm.decode(*s, /*skip_special_tokens=*/true), "Hello");
}

// A small valid GGUF image built by hand, then corrupted.
struct Writer {
  std::string b;
  template <typename T>
  void put(T v) { b.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& s) { put<uint64_t>(s.size()); b += s; }
};

std::string tiny_gguf() {
  Writer w;
  w.b = "GGUF";
  w.put<uint32_t>(3);
  w.put<uint64_t>(0);  // tensors
  w.put<uint64_t>(3);  // kv
  w.str("tokenizer.ggml.model"); w.put<uint32_t>(8); w.str("gpt2");
  w.str("tokenizer.ggml.pre"); w.put<uint32_t>(8); w.str("deepseek-coder");
  w.str("tokenizer.ggml.tokens"); w.put<uint32_t>(9); w.put<uint32_t>(8); w.put<uint64_t>(2);
  w.str("a"); w.str("b");
  return w.b;
}

TEST(GgufVocab, TinyFileParses) {
  auto f = parse_gguf(tiny_gguf(), "tiny.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->version, 3u);
  ASSERT_EQ(f->kv.count("tokenizer.ggml.tokens"), 1u);
  EXPECT_EQ(f->kv.at("tokenizer.ggml.tokens").strings, (std::vector<std::string>{"a", "b"}));
  // No merges: the conversion names the missing key.
  auto j = gguf_to_tokenizer_json(*f, "tiny.gguf");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("tokenizer.ggml.merges"), std::string::npos) << j.status().to_string();
}

void expect_error(const std::string& bytes, const std::string& needle) {
  auto f = parse_gguf(bytes, "bad.gguf");
  ASSERT_FALSE(f.ok()) << "accepted corrupt file expecting \"" << needle << "\"";
  EXPECT_NE(f.status().message().find("bad.gguf"), std::string::npos) << f.status().to_string();
  EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status().to_string();
}

TEST(GgufVocab, CorruptFilesAreClearErrors) {
  const std::string good = tiny_gguf();
  expect_error("GGUX" + good.substr(4), "magic");
  std::string v = good;
  v[4] = 9;
  expect_error(v, "version 9");
  // Every truncation is refused, naming the truncation.
  for (size_t n = 0; n < good.size(); ++n) {
    auto f = parse_gguf(good.substr(0, n), "bad.gguf");
    EXPECT_FALSE(f.ok()) << "truncated to " << n << " bytes was accepted";
  }
  expect_error(good.substr(0, good.size() - 1), "truncated");
  // Unknown value type for the first key (type field right after its name).
  std::string t = good;
  const size_t type_at = 24 + 8 + std::strlen("tokenizer.ggml.model");
  t[type_at] = 42;
  expect_error(t, "unknown GGUF value type 42");
  // Array with an absurd element count.
  std::string a = good;
  const size_t count_at = good.size() - (8 + 1) * 2 - 8;
  uint64_t huge = uint64_t(1) << 60;
  std::memcpy(&a[count_at], &huge, 8);
  expect_error(a, "claims");
  // String length beyond the file.
  std::string s = good;
  std::memcpy(&s[24], &huge, 8);
  expect_error(s, "truncated");
  // Duplicate key.
  Writer w;
  w.b = "GGUF";
  w.put<uint32_t>(3); w.put<uint64_t>(0); w.put<uint64_t>(2);
  w.str("k"); w.put<uint32_t>(4); w.put<uint32_t>(1);
  w.str("k"); w.put<uint32_t>(4); w.put<uint32_t>(2);
  expect_error(w.b, "duplicate GGUF key \"k\"");
  // Bad bool byte.
  Writer bb;
  bb.b = "GGUF";
  bb.put<uint32_t>(3); bb.put<uint64_t>(0); bb.put<uint64_t>(1);
  bb.str("flag"); bb.put<uint32_t>(7); bb.put<uint8_t>(5);
  expect_error(bb.b, "bool byte is 5");
}

// Random byte corruption of a valid image: always a clean result (parsed, or an error naming
// the file), never a crash or a huge allocation.
TEST(GgufVocab, RandomCorruptionNeverCrashes) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::string good = tiny_gguf();
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string b = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<char>(rng() & 0xFF);
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    auto f = parse_gguf(b, "bad.gguf");
    if (!f.ok()) {
      ++errors;
      ASSERT_NE(f.status().message().find("bad.gguf"), std::string::npos) << f.status().to_string();
      continue;
    }
    auto j = gguf_to_tokenizer_json(*f, "bad.gguf");
    if (!j.ok()) {
      ASSERT_NE(j.status().message().find("bad.gguf"), std::string::npos) << j.status().to_string();
    }
  }
  EXPECT_GT(errors, 0);
}

TEST(GgufVocab, ConversionValidatesTheVocabulary) {
  auto f = read_gguf(kDir + "deepseek-coder.gguf.xz");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  GgufFile g = *f;
  g.kv["tokenizer.ggml.pre"].s = "falcon";
  auto r = gguf_to_tokenizer_json(g, "x.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("\"falcon\""), std::string::npos) << r.status().to_string();
  g = *f;
  g.kv["tokenizer.ggml.token_type"].ints.pop_back();
  r = gguf_to_tokenizer_json(g, "x.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.ggml.token_type"), std::string::npos);
  g = *f;
  g.kv["tokenizer.ggml.merges"].strings[5] = "nosuchtoken zzzq";
  r = gguf_to_tokenizer_json(g, "x.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.ggml.merges[5]"), std::string::npos);
  g = *f;
  g.kv["tokenizer.ggml.bos_token_id"].u = 1u << 30;
  r = gguf_to_tokenizer_json(g, "x.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.ggml.bos_token_id"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::tokenizer::testing
