// Replays every file of the seed corpus (fuzz/corpus/safetensors_header) through the fuzz
// target: it must never crash (errors are fine), and the known-good seeds must parse.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;
constexpr const char* kCorpus = "fuzz/corpus/safetensors_header";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SafetensorsHeaderFuzzCorpus, EveryInputReplaysWithoutCrashing) {
  ASSERT_TRUE(fs::is_directory(kCorpus)) << "run from the repository root";
  size_t count = 0;
  for (const auto& entry : fs::directory_iterator(kCorpus)) {
    if (!entry.is_regular_file()) continue;
    const std::string bytes = read_file(entry.path());
    SCOPED_TRACE(entry.path().string());
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
              0);
    ++count;
  }
  EXPECT_GE(count, 15u);
}

TEST(SafetensorsHeaderFuzzCorpus, ValidSeedsParse) {
  for (const char* name : {"valid_two_tensors", "valid_metadata_fp4", "valid_empty_and_scalar"}) {
    const std::string bytes = read_file(fs::path(kCorpus) / name);
    ASSERT_FALSE(bytes.empty()) << name;
    const size_t nl = bytes.find('\n');
    auto parsed = deepinfer::io::parse_safetensors_header(std::string_view(bytes).substr(nl + 1),
                                                          std::stoull(bytes.substr(0, nl)), name);
    EXPECT_TRUE(parsed.ok()) << name << ": " << parsed.status().to_string();
  }
}

}  // namespace
