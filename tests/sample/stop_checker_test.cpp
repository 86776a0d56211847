#include "sample/stop_checker.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace deepinfer::sample {
namespace {

TEST(TokenStop, OrderAndReasons) {
  SamplingParams p;
  p.max_tokens = 3;
  p.stop_token_ids = {7};
  const int eos = 2;
  const std::vector<int32_t> a = {5}, eos_out = {5, 2}, stop_out = {5, 7}, full = {5, 6, 8}, eos_last = {5, 6, 2};
  EXPECT_FALSE(check_token_stop(p, a, 10, eos, 100).finished());
  EXPECT_EQ(check_token_stop(p, eos_out, 10, eos, 100).reason, FinishReason::kStop);
  EXPECT_EQ(check_token_stop(p, eos_out, 10, eos, 100).stop_token, 2);
  EXPECT_EQ(check_token_stop(p, stop_out, 10, eos, 100).stop_token, 7);
  EXPECT_EQ(check_token_stop(p, full, 10, eos, 100).reason, FinishReason::kLength);
  EXPECT_EQ(check_token_stop(p, eos_last, 10, eos, 100).reason, FinishReason::kStop);  // stop before length
  EXPECT_EQ(check_token_stop(p, a, 100, eos, 100).reason, FinishReason::kLength);       // max_model_len
  p.ignore_eos = true;
  EXPECT_FALSE(check_token_stop(p, eos_out, 10, eos, 100).finished());
  EXPECT_TRUE(check_token_stop(p, stop_out, 10, eos, 100).finished());  // stop ids still apply
  p.ignore_eos = false;
  p.min_tokens = 3;
  EXPECT_FALSE(check_token_stop(p, eos_out, 10, eos, 100).finished());  // before min_tokens
  EXPECT_EQ(check_token_stop(p, eos_last, 10, eos, 100).reason, FinishReason::kStop);
  p.max_tokens = std::nullopt;
  p.min_tokens = 0;
  EXPECT_FALSE(check_token_stop(p, full, 99, eos, 100).finished());
  EXPECT_STREQ(finish_reason_name(FinishReason::kLength), "length");
  EXPECT_STREQ(finish_reason_name(FinishReason::kStop), "stop");
}

struct Fed { std::vector<std::string> deltas; bool stopped = false; std::string text; };
Fed feed(const SamplingParams& p, const std::vector<std::string>& chunks, bool flush_at_end = true) {
  StopStringMatcher m(p);
  Fed f;
  for (const auto& c : chunks) {
    auto u = m.append(c);
    f.deltas.push_back(u.delta);
    if (u.stopped) { f.stopped = true; break; }
  }
  if (!f.stopped && flush_at_end) f.deltas.push_back(m.flush());
  f.text = m.text();
  return f;
}

TEST(StopStrings, SpanningTokensExcludedByDefault) {
  SamplingParams p;
  p.stop = {"\n\n"};
  Fed f = feed(p, {"Hello", "\n", "\nworld"});
  EXPECT_TRUE(f.stopped);
  EXPECT_EQ(f.deltas, (std::vector<std::string>{"Hello", "", ""}));
  EXPECT_EQ(f.text, "Hello");
  p.include_stop_str_in_output = true;
  f = feed(p, {"Hello", "\n", "\nworld"});
  EXPECT_EQ(f.deltas, (std::vector<std::string>{"Hello", "\n", "\n"}));
  EXPECT_EQ(f.text, "Hello\n\n");
}

TEST(StopStrings, HoldsBackOnlyPossibleStopPrefixes) {
  SamplingParams p;
  p.stop = {"abc"};
  Fed f = feed(p, {"xa", "b", "cd"});
  EXPECT_EQ(f.deltas, (std::vector<std::string>{"x", "", ""}));
  EXPECT_EQ(f.text, "x");
  f = feed(p, {"xab", "d", "yy"});  // "ab" was a false alarm: released when "d" arrives
  EXPECT_FALSE(f.stopped);
  EXPECT_EQ(f.deltas, (std::vector<std::string>{"x", "abd", "yy", ""}));
  f = feed(p, {"xyz", "a"});  // ends by EOS while "a" is held: flush releases it
  EXPECT_EQ(f.deltas, (std::vector<std::string>{"xyz", "", "a"}));
  EXPECT_EQ(f.text, "xyza");
}

TEST(StopStrings, FirstCompletedStopWins) {
  SamplingParams p;
  p.stop = {"world", "lo"};
  EXPECT_EQ(feed(p, {"hello world"}).text, "hel");
  p.stop = {"abcd", "bc"};  // "bc" completes before "abcd" would
  EXPECT_EQ(feed(p, {"abcd"}).text, "a");
  p.stop = {"bc", "abc"};   // both complete at the same byte: the earlier start wins
  EXPECT_EQ(feed(p, {"xabc"}).text, "x");
}

// Reference: the stop completing first in the whole text, cut at its start.
std::string reference_cut(const std::string& text, const std::vector<std::string>& stops, bool* stopped) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t best = std::string::npos;
    for (const auto& s : stops) {
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) best = std::min(best, end - s.size());
    }
    if (best != std::string::npos) { *stopped = true; return text.substr(0, best); }
  }
  *stopped = false;
  return text;
}

TEST(StopStrings, RandomChunkingMatchesWholeTextReference) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("random seed " + std::to_string(seed));
  std::mt19937 gen(seed);
  const std::vector<std::string> stops = {"abc", "cab", "bb", "acca"};
  SamplingParams p;
  p.stop = stops;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    const int len = 1 + static_cast<int>(gen() % 30);
    for (int i = 0; i < len; ++i) text.push_back("abc"[gen() % 3]);
    std::vector<std::string> chunks;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + gen() % 4;
      chunks.push_back(text.substr(i, n));
      i += n;
    }
    bool ref_stopped = false;
    const std::string expected = reference_cut(text, stops, &ref_stopped);
    const Fed f = feed(p, chunks);
    std::string streamed;
    for (const auto& d : f.deltas) streamed += d;
    ASSERT_EQ(f.stopped, ref_stopped) << text;
    ASSERT_EQ(f.text, expected) << text;
    ASSERT_EQ(streamed, expected) << text;
  }
}

TEST(DetokenizingStopChecker, WaitsForCompleteUtf8) {
  // Token 1 and 2 are the two bytes of "é"; token 3 is "!", token 4 is "x".
  auto detok = [](std::span<const int32_t> ids) {
    std::string s;
    for (int32_t id : ids) s += id == 1 ? "\xC3" : id == 2 ? "\xA9" : id == 3 ? "!" : "x";
    return s;
  };
  SamplingParams p;
  p.stop = {"\xC3\xA9!"};
  DetokenizingStopChecker c(p, detok);
  std::vector<int32_t> ids = {4};
  EXPECT_EQ(c.update(ids).delta, "x");
  ids.push_back(1);
  EXPECT_EQ(c.update(ids).delta, "");   // half a character: not fed yet
  ids.push_back(2);
  EXPECT_EQ(c.update(ids).delta, "");   // "é" is a stop prefix: held back
  ids.push_back(3);
  auto u = c.update(ids);
  EXPECT_TRUE(u.stopped);
  EXPECT_EQ(c.matcher().text(), "x");
}

TEST(DetokenizingStopChecker, StopStringsWaitForMinTokens) {
  auto detok = [](std::span<const int32_t> ids) { return std::string(ids.size(), 'a'); };
  SamplingParams p;
  p.stop = {"aa"};
  p.min_tokens = 3;
  DetokenizingStopChecker c(p, detok);
  std::vector<int32_t> ids = {0};
  EXPECT_EQ(c.update(ids).delta, "");   // "a" may start a stop string: held back
  ids.push_back(0);
  auto u = c.update(ids);
  EXPECT_FALSE(u.stopped);              // "aa" completed before min_tokens: ignored
  EXPECT_EQ(u.delta, "a");
  ids.push_back(0);
  u = c.update(ids);                    // third token: the "aa" ending here counts
  EXPECT_TRUE(u.stopped);
  EXPECT_EQ(u.delta, "");
  EXPECT_EQ(c.matcher().text(), "a");   // cut at the start of the match (bytes 1-2)
}

}  // namespace
}  // namespace deepinfer::sample
