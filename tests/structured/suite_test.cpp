// JSON-Schema-Test-Suite (draft 2020-12) and MaskBench: every schema compiles or is refused with
// a keyword-naming error; for compiled schemas, valid instances must be accepted and invalid
// ones rejected by driving the real matcher over their serialization. An accepted invalid
// instance fails the test; refusals and rejected valid instances are counted and printed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <chrono>
#include <regex>

#include "test_util.h"

namespace deepinfer::structured::testing {
namespace {

struct Tally {
  int schemas = 0, compiled = 0, refused = 0, errors = 0, fully_correct = 0;
  int valid_ok = 0, valid_rejected = 0, invalid_ok = 0, invalid_accepted = 0;
  std::map<std::string, int> refused_by_keyword;
  std::vector<std::string> false_accepts, false_rejects, compile_errors;

  void print(const std::string& name) const {
    std::cout << "[" << name << "] schemas " << schemas << ": compiled " << compiled
              << ", refused " << refused << ", other errors " << errors
              << ", fully correct " << fully_correct << " ("
              << (schemas ? 100.0 * fully_correct / schemas : 0) << "% of all, "
              << (compiled ? 100.0 * fully_correct / compiled : 0) << "% of compiled)\n";
    std::cout << "  instances: valid accepted " << valid_ok << ", valid REJECTED " << valid_rejected
              << ", invalid rejected " << invalid_ok << ", invalid ACCEPTED " << invalid_accepted << "\n";
    std::cout << "  refused by keyword:";
    for (const auto& [k, n] : refused_by_keyword) std::cout << " " << k << "=" << n;
    std::cout << "\n";
    for (size_t i = 0; i < false_accepts.size() && i < 20; ++i) std::cout << "  FALSE ACCEPT: " << false_accepts[i] << "\n";
    for (size_t i = 0; i < false_rejects.size() && i < 15; ++i) std::cout << "  false reject: " << false_rejects[i] << "\n";
    for (size_t i = 0; i < compile_errors.size() && i < 10; ++i) std::cout << "  error: " << compile_errors[i] << "\n";
  }
};

std::string refused_keyword(const std::string& msg) {
  static const std::regex re("keyword '([^']+)'");
  std::smatch m;
  if (std::regex_search(msg, m, re)) return m[1];
  if (msg.find("regex") != std::string::npos) return "pattern(regex)";
  return "other";
}

void run_schema_impl(const OJson& schema, const std::vector<std::pair<OJson, bool>>& tests,
                     const std::string& label, Tally* t);

void run_schema(const OJson& schema, const std::vector<std::pair<OJson, bool>>& tests,
                const std::string& label, Tally* t) {
  auto t0 = std::chrono::steady_clock::now();
  run_schema_impl(schema, tests, label, t);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (s > 0.3) std::cout << "  slow: " << label << " " << s << " s\n";
}

void run_schema_impl(const OJson& schema, const std::vector<std::pair<OJson, bool>>& tests,
                     const std::string& label, Tally* t) {
  ++t->schemas;
  auto g = compile_json_schema(schema.dump());
  if (!g.ok() && g.status().message().find("matches no input") != std::string::npos) {
    // An empty language (e.g. the `false` schema): correct iff no instance is valid.
    bool all_invalid = true;
    for (const auto& tc : tests) all_invalid &= !tc.second;
    ++t->compiled;
    for (const auto& tc : tests) { if (tc.second) ++t->valid_rejected; else ++t->invalid_ok; }
    if (all_invalid) ++t->fully_correct;
    return;
  }
  if (!g.ok()) {
    const Status& s = g.status();
    if (s.code() == StatusCode::kUnimplemented || s.code() == StatusCode::kResourceExhausted) {
      ++t->refused;
      ++t->refused_by_keyword[refused_keyword(s.message())];
    } else {
      ++t->errors;
      t->compile_errors.push_back(label + ": " + s.message());
    }
    return;
  }
  ++t->compiled;
  auto vocab = byte_vocab();
  GrammarMatcher m(g->grammar, vocab);
  bool old_draft = schema.is_object() && schema.contains("$schema") && schema["$schema"].is_string() &&
                   (schema["$schema"].get<std::string>().find("draft-04") != std::string::npos ||
                    schema["$schema"].get<std::string>().find("draft-03") != std::string::npos);
  InstanceDriver driver(&m, old_draft);
  bool all_ok = true;
  for (const auto& [data, valid] : tests) {
    bool acc = driver.accepts(data);
    ASSERT_EQ(m.num_accepted(), 0) << "driver must roll everything back";
    if (valid && acc) ++t->valid_ok;
    if (valid && !acc) { ++t->valid_rejected; all_ok = false; t->false_rejects.push_back(label + " " + data.dump().substr(0, 200)); }
    if (!valid && !acc) ++t->invalid_ok;
    if (!valid && acc) {
      ++t->invalid_accepted;
      all_ok = false;
      t->false_accepts.push_back(label + " schema " + schema.dump().substr(0, 300) + " instance " + data.dump().substr(0, 200));
    }
  }
  if (all_ok) ++t->fully_correct;
}

std::vector<std::filesystem::path> json_files(const std::string& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(JsonSchemaTestSuite, Draft2020_12) {
  std::string dir = extract_archive("JSON-Schema-Test-Suite.tar.xz");
  ASSERT_FALSE(dir.empty()) << "could not extract tests/data/structured/JSON-Schema-Test-Suite.tar.xz";
  Tally t;
  for (const auto& path : json_files(dir + "/JSON-Schema-Test-Suite/tests/draft2020-12")) {
    std::ifstream f(path);
    OJson groups = OJson::parse(f);
    for (const auto& g : groups) {
      std::vector<std::pair<OJson, bool>> tests;
      for (const auto& tc : g["tests"]) tests.emplace_back(tc["data"], tc["valid"].get<bool>());
      run_schema(g["schema"], tests, path.filename().string() + " / " + g["description"].get<std::string>(), &t);
    }
  }
  t.print("JSON-Schema-Test-Suite draft2020-12");
  EXPECT_GT(t.schemas, 250);
  EXPECT_EQ(t.invalid_accepted, 0) << "an invalid instance was accepted";
  EXPECT_EQ(t.errors, 0);
}

TEST(MaskBench, ValidAndInvalidInstances) {
  std::string dir = extract_archive("jsonschemabench-maskbench.tar.xz");
  ASSERT_FALSE(dir.empty());
  Tally t;
  // Every 4th file keeps the unit test within its time budget on 2 cores; the full set runs
  // with `deepinfer structured maskbench` / bench/structured (docs/structured.md).
  size_t index = 0;
  for (const auto& path : json_files(dir + "/jsonschemabench-maskbench")) {
    if (index++ % 4 != 0) continue;
    std::ifstream f(path);
    OJson doc = OJson::parse(f);
    std::vector<std::pair<OJson, bool>> tests;
    for (const auto& tc : doc["tests"]) tests.emplace_back(tc["data"], tc["valid"].get<bool>());
    run_schema(doc["schema"], tests, path.filename().string(), &t);
  }
  t.print("MaskBench");
  EXPECT_GT(t.schemas, 500);
  EXPECT_EQ(t.invalid_accepted, 0) << "an invalid instance was accepted";
}

}  // namespace
}  // namespace deepinfer::structured::testing
