// JSON-Schema-Test-Suite (draft 2020-12) and MaskBench: every schema compiles or is refused with
// a keyword-naming error; for compiled schemas, valid instances must be accepted and invalid
// ones rejected by driving the real matcher over their serialization. An accepted invalid
// instance or a rejected valid one fails the test; refusals are counted and printed.
// Instances are fed with their own number lexemes (NumberLexemes in test_util.h), strings with
// canonical escapes, every key order tried.
// Format handling: draft 2020-12's default vocabulary treats `format` as an annotation, and the
// suite's format.json tests exactly that ("06/19/1963" is a valid "date"), so format.json runs
// with JsonSchemaOptions::format = kAnnotation; optional/format/*.json tests format assertion and
// runs with kAssert (our default); every other file runs with the defaults (kAssert).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <chrono>
#include <regex>
#include <sstream>

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
    for (size_t i = 0; i < false_rejects.size() && i < 60; ++i) std::cout << "  false reject: " << false_rejects[i] << "\n";
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

struct Instance {
  OJson data;
  bool valid;
  NumberLexemes lexemes;  // the instance's number lexemes as written in the test file
};

void run_schema_impl(const OJson& schema, const std::vector<Instance>& tests,
                     const std::string& label, const JsonSchemaOptions& opt, Tally* t);

void run_schema(const OJson& schema, const std::vector<Instance>& tests,
                const std::string& label, Tally* t, const JsonSchemaOptions& opt = {}) {
  auto t0 = std::chrono::steady_clock::now();
  run_schema_impl(schema, tests, label, opt, t);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (s > 0.3) std::cout << "  slow: " << label << " " << s << " s\n";
}

void run_schema_impl(const OJson& schema, const std::vector<Instance>& tests,
                     const std::string& label, const JsonSchemaOptions& opt, Tally* t) {
  ++t->schemas;
  auto g = compile_json_schema(schema.dump(), opt);
  if (!g.ok() && g.status().message().find("matches no input") != std::string::npos) {
    // An empty language (e.g. the `false` schema): correct iff no instance is valid.
    bool all_invalid = true;
    for (const auto& tc : tests) all_invalid &= !tc.valid;
    ++t->compiled;
    for (const auto& tc : tests) {
      if (tc.valid) { ++t->valid_rejected; t->false_rejects.push_back(label + " (empty language) " + tc.data.dump().substr(0, 200)); }
      else ++t->invalid_ok;
    }
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
  for (const auto& [data, valid, lexemes] : tests) {
    bool acc = driver.accepts(data, &lexemes);
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

std::string read_text(const std::filesystem::path& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The instances of `tests_ptr` (a JSON pointer to a "tests" array of `doc`), with their lexemes.
std::vector<Instance> instances(const OJson& doc, const NumberLexemes& lexemes, const std::string& tests_ptr) {
  std::vector<Instance> out;
  const OJson& tests = doc.at(OJson::json_pointer(tests_ptr));
  for (size_t i = 0; i < tests.size(); ++i) {
    std::string ptr = tests_ptr + "/" + std::to_string(i) + "/data";
    out.push_back({tests[i]["data"], tests[i]["valid"].get<bool>(), lexemes_under(lexemes, ptr)});
  }
  return out;
}

TEST(NumberLexemes, KeptAsWritten) {
  NumberLexemes lex;
  OJson doc;
  ASSERT_TRUE(parse_with_lexemes(
      R"({"a": [9007199254740992.0, -0, 1e2, "1.0\"", 12345678910111213141516171819202122232425262728293031],
          "b~/": {"c": 0.10}, "d": 7})", &doc, &lex));
  ASSERT_EQ(doc["d"], 7);
  NumberLexemes want = {{"/a/0", "9007199254740992.0"}, {"/a/1", "-0"}, {"/a/2", "1e2"},
                        {"/a/4", "12345678910111213141516171819202122232425262728293031"},
                        {"/b~0~1/c", "0.10"}, {"/d", "7"}};
  EXPECT_EQ(lex, want);
  NumberLexemes a = lexemes_under(lex, "/a");
  EXPECT_EQ(a.size(), 4u);
  EXPECT_EQ(a["/0"], "9007199254740992.0");
  EXPECT_EQ(lexemes_under(lex, "/d"), (NumberLexemes{{"", "7"}}));
}

TEST(JsonSchemaTestSuite, Draft2020_12) {
  std::string dir = extract_archive("JSON-Schema-Test-Suite.tar.xz");
  ASSERT_FALSE(dir.empty()) << "could not extract tests/data/structured/JSON-Schema-Test-Suite.tar.xz";
  Tally t;
  std::string root = dir + "/JSON-Schema-Test-Suite/tests/draft2020-12";
  int annotation_files = 0, assert_format_files = 0;
  for (const auto& path : json_files(root)) {
    NumberLexemes lexemes;
    OJson groups;
    ASSERT_TRUE(parse_with_lexemes(read_text(path), &groups, &lexemes)) << path << ": number lexemes not recovered";
    std::string rel = std::filesystem::relative(path, root).string();
    JsonSchemaOptions opt;  // kAssert
    if (rel == "format.json") {
      opt.format = JsonSchemaOptions::Format::kAnnotation;  // 2020-12's default vocabulary
      ++annotation_files;
    } else if (rel.rfind("optional/format/", 0) == 0) {
      ++assert_format_files;  // format-assertion tests
    }
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const OJson& g = groups[gi];
      run_schema(g["schema"], instances(groups, lexemes, "/" + std::to_string(gi) + "/tests"),
                 rel + " / " + g["description"].get<std::string>(), &t, opt);
    }
  }
  t.print("JSON-Schema-Test-Suite draft2020-12");
  EXPECT_EQ(annotation_files, 1);
  EXPECT_GT(assert_format_files, 10);
  EXPECT_GT(t.schemas, 250);
  EXPECT_EQ(t.invalid_accepted, 0) << "an invalid instance was accepted";
  EXPECT_EQ(t.valid_rejected, 0) << "a valid instance of a compiled schema was rejected";
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
    NumberLexemes lexemes;
    OJson doc;
    ASSERT_TRUE(parse_with_lexemes(read_text(path), &doc, &lexemes)) << path << ": number lexemes not recovered";
    run_schema(doc["schema"], instances(doc, lexemes, "/tests"), path.filename().string(), &t);
  }
  t.print("MaskBench");
  EXPECT_GT(t.schemas, 500);
  EXPECT_EQ(t.invalid_accepted, 0) << "an invalid instance was accepted";
  EXPECT_EQ(t.valid_rejected, 0) << "a valid instance of a compiled schema was rejected";
}

}  // namespace
}  // namespace deepinfer::structured::testing
