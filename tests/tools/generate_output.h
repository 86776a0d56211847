// Reading `deepinfer generate --output FILE` (JSONL, one request per line) in the CLI tests.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace deepinfer::testing {

// token_ids of the first sequence of every line, in file order; no line may carry an error.
// check_index: every line's "index" must also equal its line number (prompt order).
inline std::vector<std::vector<int32_t>> read_token_ids(const std::string& path, bool check_index = false) {
  std::vector<std::vector<int32_t>> ids;
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "no output written to " << path;
  std::string line;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_FALSE(j.contains("error")) << line;
    if (check_index) EXPECT_EQ(j["index"].get<size_t>(), ids.size()) << line;
    ids.push_back(j["outputs"][0]["token_ids"].get<std::vector<int32_t>>());
  }
  return ids;
}

}  // namespace deepinfer::testing
