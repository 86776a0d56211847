// The DeepSeek-V4 fixtures the model tests run on, a test-name suffix for each, and a model loaded
// on its own backend (the GPU graph and fed-token tests; deepseek_v4_test.cpp keeps its own list:
// only fixtures with reference outputs).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/make_backend.h"
#include "model/model.h"

namespace deepinfer::model::fixtures {

// tests/data/models/{v4tiny_b, deepseek-v4-tiny-stories}, then every tests/data/v4-fixtures/*
// with a config.json (sorted). Paths are relative to the repository root (ctest's directory).
inline std::vector<std::string> v4_fixture_dirs() {
  std::vector<std::string> dirs = {"tests/data/models/v4tiny_b",
                                   "tests/data/models/deepseek-v4-tiny-stories"};
  std::vector<std::string> extra;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("tests/data/v4-fixtures", ec))
    if (e.is_directory() && std::filesystem::exists(e.path() / "config.json"))
      extra.push_back(e.path().string());
  std::sort(extra.begin(), extra.end());
  dirs.insert(dirs.end(), extra.begin(), extra.end());
  return dirs;
}

// The directory's last component with every non-alphanumeric character as '_' (a valid
// GoogleTest parameter name).
inline std::string fixture_test_name(const std::string& dir) {
  std::string n = std::filesystem::path(dir).filename().string();
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

// A model of `dir` on its own backend of `device` (fields null, with a test failure, when either
// cannot be made).
struct LoadedModel {
  std::unique_ptr<backend::Backend> be;
  std::unique_ptr<Model> model;
};
inline LoadedModel load_fixture(const std::string& device, const std::string& dir,
                                const backend::BackendOptions& options = {}) {
  LoadedModel s;
  auto be = backend::make_backend(device, options);
  EXPECT_TRUE(be.ok()) << be.status().to_string();
  if (!be.ok()) return s;
  s.be = std::move(be).value();
  auto m = load_model(dir, s.be.get());
  EXPECT_TRUE(m.ok()) << dir << ": " << m.status().to_string();
  if (m.ok()) s.model = std::move(m).value();
  return s;
}

// S prompts of random token ids (per prompt: its length from length(), then its ids from token(),
// in that order) and, for each of two models, a fresh state per prompt and the prefill inputs
// over the prompts (spans into `prompts`: keep the struct alive, do not resize it under them).
struct PairedPrefill {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::unique_ptr<SequenceState>> states[2];
  std::vector<SequenceInput> inputs[2];
};
template <class Length, class Token>
PairedPrefill paired_prefill(Model& a, Model& b, int S, Length length, Token token) {
  PairedPrefill p;
  p.prompts.resize(S);
  Model* models[2] = {&a, &b};
  for (int i = 0; i < S; ++i) {
    p.prompts[i].resize(length());
    for (int32_t& t : p.prompts[i]) t = token();
    for (int m = 0; m < 2; ++m) {
      p.states[m].push_back(models[m]->new_sequence_state());
      p.inputs[m].push_back(
          {std::span<const int32_t>(p.prompts[i]), p.states[m].back().get(), false});
    }
  }
  return p;
}

}  // namespace deepinfer::model::fixtures
