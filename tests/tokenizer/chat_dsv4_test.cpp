// DeepSeek-V4 chat encoding against the official golden files and the generated extra cases,
// byte for byte.
#include <gtest/gtest.h>

#include "tests/tokenizer/test_util.h"
#include "tokenizer/chat_dsv4.h"
#include "tokenizer/py_json.h"

namespace deepinfer::tokenizer::testing {
namespace {

using ojson = nlohmann::ordered_json;
const std::string kDir = "tests/data/tokenizers/chat-encoding/deepseek-v4/";

TEST(ChatDsv4, OfficialGoldenFiles) {
  const ojson args = ojson::parse(read_text(kDir + "official/encode_args.json"));
  int n = 0;
  for (auto it = args.begin(); it != args.end(); ++it) {
    const std::string id = it.key();
    ojson input = ojson::parse(read_text(kDir + "official/test_input_" + id + ".json"));
    const std::string expected = read_text(kDir + "official/test_output_" + id + ".txt");
    ChatOptions opt;
    opt.thinking = it.value().at("thinking_mode") == "thinking";
    ojson messages = input;
    if (input.is_object()) {  // {tools, messages}: tools go on messages[0]
      messages = input.at("messages");
      opt.tools = input.at("tools");
    }
    auto prompt = apply_chat_template(messages, opt);
    ASSERT_TRUE(prompt.ok()) << id << ": " << prompt.status().to_string();
    EXPECT_EQ(*prompt, expected) << "golden case " << id;
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST(ChatDsv4, GeneratedExtraCases) {
  const auto rows = read_jsonl<ojson>(kDir + "generated/extra_cases.jsonl");
  ASSERT_GE(rows.size(), 6u);
  for (const auto& row : rows) {
    auto opt = chat_options_from_kwargs(row.at("encode_kwargs"));
    ASSERT_TRUE(opt.ok()) << opt.status().to_string();
    auto prompt = apply_chat_template(row.at("messages"), *opt);
    ASSERT_TRUE(prompt.ok()) << row.at("name") << ": " << prompt.status().to_string();
    EXPECT_EQ(*prompt, row.at("expected_prompt").get<std::string>()) << row.at("name");
  }
}

TEST(ChatDsv4, ThinkingModesAndEffort) {
  const ojson msgs = ojson::parse(R"([{"role": "user", "content": "hi"}])");
  ChatOptions chat;
  EXPECT_EQ(*apply_chat_template(msgs, chat), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
  ChatOptions think;
  think.thinking = true;
  EXPECT_EQ(*apply_chat_template(msgs, think), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>");
  think.reasoning_effort = "max";
  const std::string p = *apply_chat_template(msgs, think);
  EXPECT_EQ(p.rfind("<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum", 0), 0u);
  think.reasoning_effort = "high";  // accepted, no prefix (V4-Pro encoder)
  EXPECT_EQ(*apply_chat_template(msgs, think), "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>");
}

TEST(ChatDsv4, BadInputsAreClearErrors) {
  ChatOptions opt;
  auto r = apply_chat_template(ojson::parse(R"([{"role": "robot", "content": "x"}])"), opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown role \"robot\""), std::string::npos);
  opt.reasoning_effort = "low";
  r = apply_chat_template(ojson::parse(R"([{"role": "user", "content": "x"}])"), opt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("reasoning_effort"), std::string::npos);
  r = apply_chat_template(ojson::parse(R"({"role": "user"})"), ChatOptions{});
  EXPECT_FALSE(r.ok());
  r = apply_chat_template(ojson::parse(R"([{"role": "user", "content": "x", "task": "bogus"}])"), ChatOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("invalid task"), std::string::npos);
}

TEST(PythonJsonDumps, MatchesPythonFormatting) {
  EXPECT_EQ(python_json_dumps(ojson::parse(R"({"b": [1, 2.5, true, null], "a": "x\ny\u0001é\"", "c": {}})")),
            "{\"b\": [1, 2.5, true, null], \"a\": \"x\\ny\\u0001é\\\"\", \"c\": {}}");
  EXPECT_EQ(python_json_dumps(ojson(1.0)), "1.0");
  EXPECT_EQ(python_json_dumps(ojson(1e16)), "1e+16");
  EXPECT_EQ(python_json_dumps(ojson(0.0001)), "0.0001");
  EXPECT_EQ(python_json_dumps(ojson(1.5e-7)), "1.5e-07");
  EXPECT_EQ(python_json_dumps(ojson(123456.789)), "123456.789");
  EXPECT_EQ(python_json_dumps(ojson(-0.0)), "-0.0");
}

}  // namespace
}  // namespace deepinfer::tokenizer::testing
