// EPLB statistics: router ids -> per-layer counts over a sliding window of steps.
#include "dist/expert_load.h"

#include <gtest/gtest.h>

namespace deepinfer::dist {
namespace {

TEST(ExpertLoadRecorder, CountsOverSlidingWindow) {
  auto r = ExpertLoadRecorder::create(2, 3, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // step 1: layer0 ids {0,2,2,1}, layer1 {1,1}
  ASSERT_TRUE(r->record(0, {0, 2, 2, 1}).ok());
  ASSERT_TRUE(r->record(1, {1, 1}).ok());
  EXPECT_EQ(r->load(), (std::vector<int64_t>{0, 0, 0, 0, 0, 0}));  // open step not counted yet
  r->end_step();
  EXPECT_EQ(r->load(), (std::vector<int64_t>{1, 1, 2, 0, 2, 0}));
  // step 2: layer0 {0}, layer1 {2, 0}
  ASSERT_TRUE(r->record(0, {0}).ok());
  ASSERT_TRUE(r->record(1, {2, 0}).ok());
  r->end_step();
  EXPECT_EQ(r->load(), (std::vector<int64_t>{2, 1, 2, 1, 2, 1}));
  // step 3: layer0 {1}; step 1 leaves the window of 2
  ASSERT_TRUE(r->record(0, {1}).ok());
  r->end_step();
  EXPECT_EQ(r->load(), (std::vector<int64_t>{1, 1, 0, 1, 0, 1}));
  EXPECT_EQ(r->steps_in_window(), 2);
}

TEST(ExpertLoadRecorder, Errors) {
  EXPECT_FALSE(ExpertLoadRecorder::create(0, 3, 2).ok());
  EXPECT_FALSE(ExpertLoadRecorder::create(1, 3, 0).ok());
  auto r = ExpertLoadRecorder::create(1, 3, 1);
  ASSERT_TRUE(r.ok());
  const Status bad_id = r->record(0, {0, 3});
  EXPECT_NE(bad_id.message().find("topk_ids[1] = 3"), std::string::npos) << bad_id.message();
  const Status bad_layer = r->record(1, {0});
  EXPECT_EQ(bad_layer.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r->load(), (std::vector<int64_t>{0, 0, 0}));  // a failed record changes nothing
}

}  // namespace
}  // namespace deepinfer::dist
