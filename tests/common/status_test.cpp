#include "common/status.h"

#include <gtest/gtest.h>

#include <memory>

#include "common/check.h"

namespace deepinfer {
namespace {

StatusOr<int> parse_positive(int x) {
  if (x <= 0) return InvalidArgument("x must be positive, got " + std::to_string(x));
  return x;
}

StatusOr<int> doubled(int x) {
  DI_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

Status check_both(int a, int b) {
  DI_RETURN_IF_ERROR(parse_positive(a).status());
  DI_RETURN_IF_ERROR(parse_positive(b).status().with_context("second"));
  return OkStatus();
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(OkStatus().ok());
  Status s = NotFound("tensor 'x' not in file 'a.safetensors'");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.to_string(), "NOT_FOUND: tensor 'x' not in file 'a.safetensors'");
  EXPECT_EQ(s.with_context("loading").message(), "loading: tensor 'x' not in file 'a.safetensors'");
}

TEST(Status, MacrosPropagate) {
  EXPECT_EQ(*doubled(21), 42);
  auto bad = doubled(-3);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "x must be positive, got -3");
  EXPECT_TRUE(check_both(1, 2).ok());
  EXPECT_EQ(check_both(1, -2).message(), "second: x must be positive, got -2");
  EXPECT_EQ(check_both(-1, -2).message(), "x must be positive, got -1");
}

TEST(Status, MoveOnlyValues) {
  StatusOr<std::unique_ptr<int>> p = std::make_unique<int>(7);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> q = std::move(p).value();
  EXPECT_EQ(*q, 7);
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  StatusOr<int> e = Internal("boom");
  EXPECT_DEATH((void)e.value(), "boom");
}

TEST(StatusDeathTest, OkStatusWithoutValueIsAnError) {
  StatusOr<int> e = OkStatus();
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInternal);
}

TEST(CheckDeathTest, ReportsFileLineAndMessage) {
  int n = 5, cap = 3;
  EXPECT_DEATH(DI_CHECK(n <= cap) << "n=" << n, "status_test.cpp:[0-9]+: check failed: n <= cap n=5");
  EXPECT_DEATH(DI_CHECK_EQ(n, cap), "n=5 cap=3");
  DI_CHECK(n > cap) << "never printed";
}

}  // namespace
}  // namespace deepinfer
