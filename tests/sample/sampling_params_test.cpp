#include "deepinfer/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

namespace deepinfer {
namespace {

TEST(SamplingParams, DefaultsAreValid) {
  SamplingParams p;
  EXPECT_TRUE(p.validate().ok());
  EXPECT_EQ(p.max_tokens, 16);
  EXPECT_FALSE(p.is_greedy());
  p.temperature = 0;
  EXPECT_TRUE(p.is_greedy());
}

struct BadCase {
  const char* name;
  std::function<void(SamplingParams&)> mutate;
  const char* expected_message;
};

TEST(SamplingParams, EachBadFieldIsNamedWithItsRange) {
  const BadCase cases[] = {
      {"n", [](SamplingParams& p) { p.n = 0; }, "SamplingParams.n must be at least 1, got 0"},
      {"temperature", [](SamplingParams& p) { p.temperature = -0.5f; },
       "SamplingParams.temperature must be a finite number >= 0 (0 = greedy), got -0.5"},
      {"temperature nan", [](SamplingParams& p) { p.temperature = NAN; },
       "SamplingParams.temperature must be a finite number >= 0 (0 = greedy), got nan"},
      {"top_p high", [](SamplingParams& p) { p.top_p = 1.5f; }, "SamplingParams.top_p must be in (0, 1], got 1.5"},
      {"top_p zero", [](SamplingParams& p) { p.top_p = 0.0f; }, "SamplingParams.top_p must be in (0, 1], got 0"},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; },
       "SamplingParams.top_k must be 0 or -1 (off) or at least 1, got -2"},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.25f; }, "SamplingParams.min_p must be in [0, 1], got 1.25"},
      {"repetition", [](SamplingParams& p) { p.repetition_penalty = 0.0f; },
       "SamplingParams.repetition_penalty must be a finite number > 0 (1 = off), got 0"},
      {"presence", [](SamplingParams& p) { p.presence_penalty = 2.5f; },
       "SamplingParams.presence_penalty must be in [-2, 2], got 2.5"},
      {"frequency", [](SamplingParams& p) { p.frequency_penalty = -3.0f; },
       "SamplingParams.frequency_penalty must be in [-2, 2], got -3"},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = 0; },
       "SamplingParams.max_tokens must be at least 1 (or unset), got 0"},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = -1; }, "SamplingParams.min_tokens must be at least 0, got -1"},
      {"min>max", [](SamplingParams& p) { p.max_tokens = 4; p.min_tokens = 5; },
       "SamplingParams.min_tokens must be <= max_tokens (4), got 5"},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; },
       "SamplingParams.logprobs must be in [0, 20] (or unset), got 21"},
      {"stop empty", [](SamplingParams& p) { p.stop = {"a", ""}; },
       "SamplingParams.stop[1] is an empty string; stop strings must be non-empty"},
      {"stop id", [](SamplingParams& p) { p.stop_token_ids = {3, -1}; },
       "SamplingParams.stop_token_ids entry must be a token id >= 0, got -1"},
      {"bias", [](SamplingParams& p) { p.logit_bias = {{5, 101.0f}}; },
       "SamplingParams.logit_bias value must be in [-100, 100], got 101"},
  };
  for (const BadCase& c : cases) {
    SamplingParams p;
    c.mutate(p);
    const Status s = p.validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(s.message(), c.expected_message) << c.name;
  }
}

TEST(SamplingParams, VocabChecks) {
  SamplingParams p;
  p.stop_token_ids = {2, 100};
  EXPECT_TRUE(p.validate().ok());
  EXPECT_TRUE(p.validate_for_vocab(101).ok());
  const Status s = p.validate_for_vocab(100);
  EXPECT_EQ(s.message(), "SamplingParams.stop_token_ids has token id 100, outside the vocabulary [0, 100)");
  p.stop_token_ids.clear();
  p.logit_bias = {{100, 1.0f}};
  EXPECT_EQ(p.validate_for_vocab(100).message(),
            "SamplingParams.logit_bias has token id 100, outside the vocabulary [0, 100)");
}

TEST(SamplingParams, BoundaryValuesAreAccepted) {
  SamplingParams p;
  p.temperature = 0; p.top_p = 1; p.top_k = -1; p.min_p = 1; p.presence_penalty = 2; p.frequency_penalty = -2;
  p.logprobs = 0; p.max_tokens = 1; p.min_tokens = 1; p.max_tokens = std::nullopt;
  EXPECT_TRUE(p.validate().ok()) << p.validate().to_string();
  p.logprobs = 20;
  EXPECT_TRUE(p.validate().ok());
}

TEST(StructuredOutputsParams, ExactlyOneSpecIsRequired) {
  SamplingParams p;
  p.structured_outputs = StructuredOutputsParams{};
  EXPECT_EQ(p.validate().message(),
            "SamplingParams.structured_outputs sets none of 'json', 'regex', 'grammar', 'json_object'; "
            "set exactly one");
  p.structured_outputs->json = R"({"type":"integer"})";
  EXPECT_TRUE(p.validate().ok()) << p.validate().to_string();
  EXPECT_STREQ(p.structured_outputs->kind(), "json");
  p.structured_outputs->regex = "[a-z]+";
  EXPECT_EQ(p.validate().message(),
            "SamplingParams.structured_outputs sets 'json' and 'regex' (more than one); set exactly one");
  p.structured_outputs->grammar = "root ::= \"a\"";
  p.structured_outputs->json_object = true;
  EXPECT_EQ(p.validate().message(),
            "SamplingParams.structured_outputs sets 'json', 'regex', 'grammar' and 'json_object' (more "
            "than one); set exactly one");

  StructuredOutputsParams so;
  so.regex = "";
  EXPECT_EQ(so.validate().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(so.validate().message(),
            "SamplingParams.structured_outputs.regex is empty (expected a regular expression)");
  so = {};
  so.json = "";
  EXPECT_EQ(so.validate().message(),
            "SamplingParams.structured_outputs.json is empty (expected JSON Schema text)");
  so = {};
  so.grammar = "";
  EXPECT_EQ(so.validate().message(),
            "SamplingParams.structured_outputs.grammar is empty (expected GBNF or Lark text)");
  so = {};
  so.json_object = true;
  so.grammar_syntax = StructuredOutputsParams::GrammarSyntax::kLark;
  EXPECT_EQ(so.validate().message(),
            "SamplingParams.structured_outputs.grammar_syntax is set but 'grammar' is not");
  so.grammar_syntax = StructuredOutputsParams::GrammarSyntax::kAuto;
  EXPECT_TRUE(so.validate().ok());
  EXPECT_STREQ(so.kind(), "json_object");
}

TEST(StructuredOutputsParams, CacheKeySeparatesKindsAndOptions) {
  StructuredOutputsParams a, b;
  a.json = "{}";
  b.json = "{}";
  EXPECT_EQ(a.cache_key(), b.cache_key());
  b.lenient = true;
  EXPECT_NE(a.cache_key(), b.cache_key());
  b.lenient = false;
  b.whitespace = StructuredOutputsParams::Whitespace::kCompact;
  EXPECT_NE(a.cache_key(), b.cache_key());
  b.whitespace = StructuredOutputsParams::Whitespace::kFlexible;
  b.format = StructuredOutputsParams::Format::kAnnotation;  // `format` as an annotation
  EXPECT_NE(a.cache_key(), b.cache_key());
  StructuredOutputsParams r, g;
  r.regex = "{}";  // same text, other kind
  g.grammar = "{}";
  EXPECT_NE(a.cache_key(), r.cache_key());
  EXPECT_NE(r.cache_key(), g.cache_key());
  StructuredOutputsParams r2;
  r2.regex = "{}";
  r2.lenient = true;  // irrelevant to a regex: same grammar, same key
  EXPECT_EQ(r.cache_key(), r2.cache_key());
}

}  // namespace
}  // namespace deepinfer
