// Backend::hc_pre_norm / hc_expand_pre_norm (session 12): the default implementation must give
// exactly the bits of hc_pre (or hc_expand_pre) followed by rms_norm of the collapsed rows, in
// both CPU modes, for a decoder-layer site (scale [3], post/comb, with and without a norm weight),
// the HyperHead (scale [1]) and the expand variant; a bad norm weight or output is
// InvalidArgument naming it, a bad site argument the site's error. rms_norm_and_rope's default
// must give the bits of rms_norm then rms_norm_rope; the expand of y + y2 and hc_expand_sum those
// of add first.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "op_test_util.h"

namespace deepinfer::backend {
namespace {

using testing::expect_same_bits;
class HcNormDefault : public testing::CpuModesTest {};

TEST_P(HcNormDefault, SiteThenNormEqualsTheTwoCallsBitwise) {
  for (int64_t hc : {4, 3}) {
    for (int64_t S : {1, 3, 16}) {
      for (bool weighted : {true, false}) {
        const int64_t H = 64 + rnd_.integer(0, 70), N = (2 + hc) * hc;
        const HcParams p{hc, 20, 1e-6f};
        Tensor x = rnd_.tensor({S, hc, H}, -3, 3), fn = rnd_.tensor({N, hc * H}, -0.05f, 0.05f),
               base = rnd_.tensor({N}), scale = rnd_.tensor({3}, 0.5f, 2),
               w = rnd_.tensor({H}, 0.5f, 1.5f);
        const Tensor* wp = weighted ? &w : nullptr;
        Tensor post_w = Tensor::empty(DType::kF32, {S, hc}),
               comb_w = Tensor::empty(DType::kF32, {S, hc, hc}),
               col_w = Tensor::empty(DType::kF32, {S, H}),
               xn_w = Tensor::empty(DType::kF32, {S, H});
        ASSERT_TRUE(be_->hc_pre(x, fn, base, scale, p, 1e-6f, &post_w, &comb_w, col_w).ok());
        ASSERT_TRUE(be_->rms_norm(col_w, wp, 1e-5f, xn_w).ok());
        Tensor post = Tensor::empty(DType::kF32, {S, hc}),
               comb = Tensor::empty(DType::kF32, {S, hc, hc}),
               col = Tensor::empty(DType::kF32, {S, H}), xn = Tensor::empty(DType::kF32, {S, H});
        ASSERT_TRUE(
            be_->hc_pre_norm(x, fn, base, scale, p, 1e-6f, &post, &comb, col, wp, 1e-5f, xn).ok());
        const std::string at = " hc " + std::to_string(hc) + " S " + std::to_string(S);
        expect_same_bits(("hc_pre_norm post" + at).c_str(), post, post_w, rnd_.seed());
        expect_same_bits(("hc_pre_norm comb" + at).c_str(), comb, comb_w, rnd_.seed());
        expect_same_bits(("hc_pre_norm collapsed" + at).c_str(), col, col_w, rnd_.seed());
        expect_same_bits(("hc_pre_norm normed" + at).c_str(), xn, xn_w, rnd_.seed());
      }
    }
  }
}

TEST_P(HcNormDefault, HeadThenNormEqualsTheTwoCallsBitwise) {
  const int64_t hc = 4, S = 5, H = 96;
  const HcParams p{hc, 20, 1e-6f};
  Tensor x = rnd_.tensor({S, hc, H}, -3, 3), fn = rnd_.tensor({hc, hc * H}, -0.05f, 0.05f),
         base = rnd_.tensor({hc}), scale = rnd_.tensor({1}, 0.5f, 2),
         w = rnd_.tensor({H}, 0.5f, 1.5f);
  Tensor h_w = Tensor::empty(DType::kF32, {S, H}), hn_w = Tensor::empty(DType::kF32, {S, H});
  ASSERT_TRUE(be_->hc_pre(x, fn, base, scale, p, 1e-6f, nullptr, nullptr, h_w).ok());
  ASSERT_TRUE(be_->rms_norm(h_w, &w, 1e-6f, hn_w).ok());
  Tensor h = Tensor::empty(DType::kF32, {S, H}), hn = Tensor::empty(DType::kF32, {S, H});
  ASSERT_TRUE(
      be_->hc_pre_norm(x, fn, base, scale, p, 1e-6f, nullptr, nullptr, h, &w, 1e-6f, hn).ok());
  expect_same_bits("head collapsed", h, h_w, rnd_.seed());
  expect_same_bits("head normed", hn, hn_w, rnd_.seed());
}

TEST_P(HcNormDefault, ExpandSiteThenNormEqualsTheCallsBitwise) {
  for (int64_t S : {1, 3, 16}) {
    const int64_t hc = 4, H = 80, N = (2 + hc) * hc;
    const HcParams p{hc, 20, 1e-6f};
    Tensor prev = rnd_.tensor({S, hc, H}, -3, 3), y = rnd_.tensor({S, H}, -2, 2),
           post_prev = rnd_.tensor({S, hc}, 0, 2), comb_prev = rnd_.tensor({S, hc, hc}, 0, 1);
    Tensor fn = rnd_.tensor({N, hc * H}, -0.05f, 0.05f), base = rnd_.tensor({N}),
           scale = rnd_.tensor({3}, 0.5f, 2), w = rnd_.tensor({H}, 0.5f, 1.5f);
    Tensor x_w = Tensor::empty(DType::kF32, {S, hc, H}),
           post_w = Tensor::empty(DType::kF32, {S, hc}),
           comb_w = Tensor::empty(DType::kF32, {S, hc, hc}),
           col_w = Tensor::empty(DType::kF32, {S, H}), xn_w = Tensor::empty(DType::kF32, {S, H});
    ASSERT_TRUE(be_->hc_expand(prev, y, post_prev, comb_prev, x_w).ok());
    ASSERT_TRUE(be_->hc_pre(x_w, fn, base, scale, p, 1e-6f, &post_w, &comb_w, col_w).ok());
    ASSERT_TRUE(be_->rms_norm(col_w, &w, 1e-6f, xn_w).ok());
    Tensor x = Tensor::empty(DType::kF32, {S, hc, H}), post = Tensor::empty(DType::kF32, {S, hc}),
           comb = Tensor::empty(DType::kF32, {S, hc, hc}), col = Tensor::empty(DType::kF32, {S, H}),
           xn = Tensor::empty(DType::kF32, {S, H});
    ASSERT_TRUE(be_->hc_expand_pre_norm(prev, y, nullptr, post_prev, comb_prev, x, fn, base, scale,
                                        p, 1e-6f, &post, &comb, col, &w, 1e-6f, xn)
                    .ok());
    expect_same_bits("expand streams", x, x_w, rnd_.seed());
    expect_same_bits("expand post", post, post_w, rnd_.seed());
    expect_same_bits("expand comb", comb, comb_w, rnd_.seed());
    expect_same_bits("expand collapsed", col, col_w, rnd_.seed());
    expect_same_bits("expand normed", xn, xn_w, rnd_.seed());
    // of y + y2: add(y2, y) first (the MoE's add(routed, y))
    Tensor y2 = rnd_.tensor({S, H}, -2, 2), ysum = Tensor::empty(DType::kF32, {S, H});
    ASSERT_TRUE(be_->add(y2, y, ysum).ok());
    ASSERT_TRUE(be_->hc_expand(prev, ysum, post_prev, comb_prev, x_w).ok());
    ASSERT_TRUE(be_->hc_pre(x_w, fn, base, scale, p, 1e-6f, &post_w, &comb_w, col_w).ok());
    ASSERT_TRUE(be_->rms_norm(col_w, &w, 1e-6f, xn_w).ok());
    ASSERT_TRUE(be_->hc_expand_pre_norm(prev, y, &y2, post_prev, comb_prev, x, fn, base, scale, p,
                                        1e-6f, &post, &comb, col, &w, 1e-6f, xn)
                    .ok());
    expect_same_bits("expand+y2 streams", x, x_w, rnd_.seed());
    expect_same_bits("expand+y2 post", post, post_w, rnd_.seed());
    expect_same_bits("expand+y2 comb", comb, comb_w, rnd_.seed());
    expect_same_bits("expand+y2 collapsed", col, col_w, rnd_.seed());
    expect_same_bits("expand+y2 normed", xn, xn_w, rnd_.seed());
    // hc_expand_sum
    Tensor xs = Tensor::empty(DType::kF32, {S, hc, H});
    ASSERT_TRUE(be_->hc_expand_sum(prev, y, y2, post_prev, comb_prev, xs).ok());
    ASSERT_TRUE(be_->hc_expand(prev, ysum, post_prev, comb_prev, x_w).ok());
    expect_same_bits("hc_expand_sum", xs, x_w, rnd_.seed());
  }
}

TEST_P(HcNormDefault, BadArgumentsAreNamed) {
  const int64_t hc = 4, S = 2, H = 32, N = 24;
  const HcParams p{hc, 20, 1e-6f};
  Tensor x = rnd_.tensor({S, hc, H}), fn = rnd_.tensor({N, hc * H}), base = rnd_.tensor({N}),
         scale = rnd_.tensor({3}), w = rnd_.tensor({H});
  Tensor post = Tensor::empty(DType::kF32, {S, hc}), comb = Tensor::empty(DType::kF32, {S, hc, hc}),
         col = Tensor::empty(DType::kF32, {S, H}), xn = Tensor::empty(DType::kF32, {S, H});
  auto expect_bad = [&](Status st, const char* needle) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  Tensor w_bad = rnd_.tensor({H + 1});
  expect_bad(be_->hc_pre_norm(x, fn, base, scale, p, 1e-6f, &post, &comb, col, &w_bad, 1e-6f, xn),
             "weight");
  Tensor xn_bad = Tensor::empty(DType::kF32, {S, H + 2});
  expect_bad(be_->hc_pre_norm(x, fn, base, scale, p, 1e-6f, &post, &comb, col, &w, 1e-6f, xn_bad),
             "out");
  expect_bad(be_->hc_pre_norm(x, fn, base, scale, p, 1e-6f, nullptr, nullptr, col, &w, 1e-6f, xn),
             "post");
  Tensor y = rnd_.tensor({S, H}), pp = rnd_.tensor({S, hc}), cp = rnd_.tensor({S, hc, hc});
  expect_bad(be_->hc_expand_pre_norm(x, y, nullptr, pp, cp, x, fn, base, scale, p, 1e-6f, &post,
                                     &comb, col, &w, 1e-6f, xn),
             "alias");
  Tensor x2 = Tensor::empty(DType::kF32, {S, hc, H}), y2_bad = rnd_.tensor({S, H + 1});
  expect_bad(be_->hc_expand_pre_norm(x, y, &y2_bad, pp, cp, x2, fn, base, scale, p, 1e-6f, &post,
                                     &comb, col, &w, 1e-6f, xn),
             "add");
  expect_bad(be_->hc_expand_sum(x, y, y2_bad, pp, cp, x2), "add");
}

TEST_P(HcNormDefault, NormAndNormRopeEqualTheTwoCallsBitwise) {
  for (bool weighted : {true, false}) {
    const int64_t S = 3, Na = 40 + rnd_.integer(0, 30), nh = 2, D = 64, half = 8;
    Tensor a = rnd_.tensor({S, Na}, -3, 3), wa = rnd_.tensor({Na}),
           b = rnd_.tensor({S, nh, D}, -3, 3), wb = rnd_.tensor({D}),
           inv = rnd_.tensor({half}, 0, 0.5f);
    Tensor pos = Tensor::from_i32({S}, {5, 900, 33});
    Tensor ya_w = Tensor::empty(DType::kF32, {S, Na}),
           yb_w = Tensor::empty(DType::kF32, {S, nh, D});
    ASSERT_TRUE(be_->rms_norm(a, weighted ? &wa : nullptr, 1e-6f, ya_w).ok());
    ASSERT_TRUE(be_->rms_norm_rope(b, weighted ? &wb : nullptr, 1e-6f, pos, inv,
                                   RopeStyle::kInterleavedTrailing, 0.7f, yb_w)
                    .ok());
    Tensor ya = Tensor::empty(DType::kF32, {S, Na}), yb = Tensor::empty(DType::kF32, {S, nh, D});
    ASSERT_TRUE(be_->rms_norm_and_rope(a, weighted ? &wa : nullptr, ya, b, weighted ? &wb : nullptr,
                                       1e-6f, pos, inv, RopeStyle::kInterleavedTrailing, 0.7f, yb)
                    .ok());
    expect_same_bits("rms_norm_and_rope a", ya, ya_w, rnd_.seed());
    expect_same_bits("rms_norm_and_rope b", yb, yb_w, rnd_.seed());
  }
  Tensor a = rnd_.tensor({2, 8}), b = rnd_.tensor({2, 1, 8}), inv = rnd_.tensor({2});
  Tensor ya = Tensor::empty(DType::kF32, {2, 8}), yb_bad = Tensor::empty(DType::kF32, {2, 1, 9});
  const Status st =
      be_->rms_norm_and_rope(a, nullptr, ya, b, nullptr, 1e-6f, Tensor::from_i32({2}, {0, 1}), inv,
                             RopeStyle::kInterleavedTrailing, 1.f, yb_bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("out"), std::string::npos) << st.message();
}

INSTANTIATE_TEST_SUITE_P(Modes, HcNormDefault, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "reference" : "fast"; });

}  // namespace
}  // namespace deepinfer::backend
