// Differential test against Hugging Face `tokenizers` (the Python package pinned in
// scripts/requirements-test.txt): fresh random strings every run (the seed is printed), one
// Python subprocess for all tokenizers, exact id equality for encode and exact text equality for
// decode of random id sequences. A missing python3/tokenizers is a FAILURE, not a skip:
// scripts/setup.sh installs them.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>

#include <gtest/gtest.h>

#include "tests/tokenizer/random_text.h"
#include "tests/tokenizer/synthetic.h"
#include "tests/tokenizer/test_util.h"

namespace deepinfer::tokenizer::testing {
namespace {

constexpr int kNumTexts = 10000;
constexpr int kNumDecodeSeqs = 1000;

const std::vector<std::string>& all_names() {
  static const std::vector<std::string> n = {"deepseek-v3", "llama3",  "qwen3",  "gpt2",
                                             "stories260K", "synth-flags", "synth-metaspace"};
  return n;
}

TEST(Differential, MatchesHuggingFaceTokenizers) {
  const uint64_t seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::cout << "[differential] seed=" << seed << "\n";
  RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);

  // Special-looking material: real added tokens of every tokenizer, sampled.
  std::vector<std::string> specials;
  for (const auto& name : all_names()) {
    const auto& added = get_tokenizer(name).added_tokens();
    for (int k = 0; k < 12 && !added.empty(); ++k) {
      specials.push_back(added[std::uniform_int_distribution<size_t>(0, added.size() - 1)(rng)].content);
    }
  }
  for (const char* extra : {"<mask>", " <mask> ", "[SEP]  x", "word", " word ", "words", "a word.", "<x>", " <x> ",
                            "Once", "ONCE", "<sep>", "  12345 "}) {
    specials.push_back(extra);
  }
  RandomText gen(rng(), specials);
  nlohmann::json req;
  std::vector<std::string> texts;
  for (int i = 0; i < kNumTexts; ++i) texts.push_back(gen.next());
  req["texts"] = texts;
  std::map<std::string, std::vector<std::vector<int32_t>>> seqs;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("di_tok_diff_" + std::to_string(seed));
  fs::create_directories(dir);
  for (const auto& name : all_names()) {
    if (is_synthetic(name)) {
      const fs::path p = dir / (name + ".json");
      std::ofstream(p) << synthetic_json(name).dump();
      req["tokenizers"][name] = p.string();
    } else if (name == "stories260K") {
      req["tokenizers"][name] = tokenizer_dir(name) + "/tokenizer.json";
    } else {
      req["tokenizers"][name] = tokenizer_dir(name) + "/tokenizer.json.xz";
    }
    const Tokenizer& tok = get_tokenizer(name);
    std::vector<int32_t> special_ids;
    for (const auto& a : tok.added_tokens()) special_ids.push_back(a.id);
    auto& v = seqs[name];
    for (int i = 0; i < kNumDecodeSeqs; ++i) {
      std::vector<int32_t> ids(std::uniform_int_distribution<int>(0, 16)(rng));
      for (auto& id : ids) {
        const int r = std::uniform_int_distribution<int>(0, 9)(rng);
        if (r == 0 && !special_ids.empty()) {
          id = special_ids[std::uniform_int_distribution<size_t>(0, special_ids.size() - 1)(rng)];
        } else if (r <= 3) {  // low ids: single bytes / byte-fallback tokens
          id = std::uniform_int_distribution<int>(0, std::min(300, tok.vocab_size() - 1))(rng);
        } else {
          id = std::uniform_int_distribution<int>(0, tok.vocab_size() - 1)(rng);
        }
      }
      v.push_back(ids);
    }
    req["decode"][name] = v;
  }

  const fs::path in = dir / "request.json", out = dir / "result.json";
  {
    std::ofstream f(in);
    f << req.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  }
  const std::string cmd = "python3 tests/tokenizer/hf_reference.py '" + in.string() + "' '" + out.string() + "'";
  const int rc = std::system(cmd.c_str());
  ASSERT_EQ(rc, 0) << "the Python reference failed (" << cmd
                   << "); python3 with tokenizers==0.23.2 is required: run scripts/setup.sh";
  const nlohmann::json res = nlohmann::json::parse(read_text(out.string()));
  fs::remove_all(dir);
  std::cout << "[differential] HF tokenizers " << res.value("tokenizers_version", "?") << "\n";

  for (const auto& name : all_names()) {
    const Tokenizer& tok = get_tokenizer(name);
    const auto& r = res.at(name);
    int enc_fail = 0, dec_fail = 0;
    for (int i = 0; i < kNumTexts; ++i) {
      auto ids = tok.encode(texts[i], false);
      ASSERT_TRUE(ids.ok());
      const auto want = r.at("encode")[i].get<std::vector<int32_t>>();
      if (*ids != want && ++enc_fail <= 5) {
        ADD_FAILURE() << name << " seed=" << seed << " text=" << nlohmann::json(texts[i]).dump()
                      << "\n got " << ids_str(*ids) << "\nwant " << ids_str(want);
      }
    }
    for (int i = 0; i < kNumDecodeSeqs; ++i) {
      const auto& ids = seqs[name][i];
      const std::string d = tok.decode(ids, false), ds = tok.decode(ids, true);
      if ((d != r.at("decode")[i].get<std::string>() || ds != r.at("decode_skip")[i].get<std::string>()) &&
          ++dec_fail <= 5) {
        ADD_FAILURE() << name << " seed=" << seed << " decode " << ids_str(ids) << "\n got "
                      << nlohmann::json(d).dump() << " / " << nlohmann::json(ds).dump() << "\nwant "
                      << r.at("decode")[i].dump() << " / " << r.at("decode_skip")[i].dump();
      }
    }
    EXPECT_EQ(enc_fail, 0) << name << ": encode mismatches (seed " << seed << ")";
    EXPECT_EQ(dec_fail, 0) << name << ": decode mismatches (seed " << seed << ")";
  }
}

}  // namespace
}  // namespace deepinfer::tokenizer::testing
