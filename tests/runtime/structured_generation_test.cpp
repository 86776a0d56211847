// Structured outputs through the whole engine on deepseek-v4-tiny-stories: a JSON-Schema request's
// output parses and validates, a regex request's output matches, and a schema that does not compile
// fails only its own request (the others in the same batch finish normally). Async scheduling on
// (the default): masks are filled while the forward runs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <regex>
#include <string>
#include <vector>

#include "common/logging.h"
#include "deepinfer/llm.h"

namespace deepinfer {
namespace {

const bool kQuietLogs = (set_log_level(LogLevel::kWarning), true);

const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "happy": {"type": "boolean"},
    "color": {"enum": ["red", "blue", "green"]}
  },
  "required": ["name", "happy", "color"],
  "additionalProperties": false
})";

SamplingParams constrained(bool sampled, uint64_t seed) {
  SamplingParams p;
  p.temperature = sampled ? 0.8f : 0.0f;
  p.top_p = 0.9f;
  p.seed = seed;
  p.max_tokens = 120;
  p.structured_outputs = StructuredOutputsParams{};
  p.structured_outputs->json = kSchema;
  p.structured_outputs->whitespace = StructuredOutputsParams::Whitespace::kCompact;
  return p;
}

void expect_valid(const CompletionOutput& c) {
  SCOPED_TRACE("output: " + c.text);
  EXPECT_EQ(c.finish_reason, "stop");
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(c.text));
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 3u);
  ASSERT_TRUE(j.contains("name") && j["name"].is_string());
  const std::string name = j["name"].get<std::string>();
  EXPECT_GE(name.size(), 1u);
  ASSERT_TRUE(j.contains("happy") && j["happy"].is_boolean());
  ASSERT_TRUE(j.contains("color") && j["color"].is_string());
  const std::string color = j["color"].get<std::string>();
  EXPECT_TRUE(color == "red" || color == "blue" || color == "green") << color;
}

TEST(StructuredGeneration, JsonSchemaRegexAndABadSchemaInOneBatch) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  EngineConfig cfg;
  cfg.model = "tests/data/models/deepseek-v4-tiny-stories";
  cfg.kv_cache_memory = int64_t{64} << 20;
  cfg.max_model_len = 256;
  auto llm = LLM::create(cfg);
  ASSERT_TRUE(llm.ok()) << llm.status().to_string();

  std::vector<std::string> prompts;
  std::vector<SamplingParams> params;
  // 0: greedy JSON, 1-2: sampled JSON, 3: regex, 4: a schema that cannot compile, 5: unconstrained.
  prompts.push_back("Once upon a time");
  params.push_back(constrained(false, 0));
  for (int i = 0; i < 2; ++i) {
    prompts.push_back("The little dog");
    params.push_back(constrained(true, seed + i));
  }
  prompts.push_back("Lily saw a");
  SamplingParams re;
  re.temperature = 0;
  re.max_tokens = 40;
  re.structured_outputs = StructuredOutputsParams{};
  re.structured_outputs->regex = "[a-z]{3,6}( [a-z]{2,6}){2}\\.";
  params.push_back(re);
  prompts.push_back("Tom had");
  SamplingParams bad = constrained(false, 0);
  bad.structured_outputs->json = R"({"type": "object", "not": {"required": ["a"]}})";
  params.push_back(bad);
  prompts.push_back("One day");
  SamplingParams plain;
  plain.temperature = 0;
  plain.max_tokens = 10;
  plain.ignore_eos = true;
  params.push_back(plain);

  auto outs = (*llm)->generate(prompts, params);
  ASSERT_TRUE(outs.ok()) << outs.status().to_string();
  ASSERT_EQ(outs->size(), prompts.size());
  for (int i : {0, 1, 2, 3, 5}) EXPECT_TRUE((*outs)[i].error.empty()) << i << ": " << (*outs)[i].error;
  for (int i : {0, 1, 2}) expect_valid((*outs)[i].outputs[0]);
  const std::string re_text = (*outs)[3].outputs[0].text;
  EXPECT_TRUE(std::regex_match(re_text, std::regex("[a-z]{3,6}( [a-z]{2,6}){2}\\."))) << re_text;
  EXPECT_EQ((*outs)[3].outputs[0].finish_reason, "stop");
  // The bad schema fails alone, naming the keyword.
  EXPECT_EQ((*outs)[4].outputs[0].finish_reason, "error");
  EXPECT_NE((*outs)[4].error.find("'not'"), std::string::npos) << (*outs)[4].error;
  EXPECT_EQ((*outs)[5].outputs[0].token_ids.size(), 10u);

  // The greedy JSON request is the same alone and with async scheduling off.
  cfg.async_scheduling = false;
  auto sync_llm = LLM::create(cfg);
  ASSERT_TRUE(sync_llm.ok());
  auto alone = (*sync_llm)->generate(std::vector<std::string>{prompts[0]}, params[0]);
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ((*alone)[0].outputs[0].token_ids, (*outs)[0].outputs[0].token_ids);
}

}  // namespace
}  // namespace deepinfer
