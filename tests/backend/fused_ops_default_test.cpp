// Backend::hc_pre's default implementation (one whole mHC site: rms_norm → matmul → hc_coeffs →
// hc_collapse) must give exactly the bits of those four calls made one by one, in both CPU modes,
// for a decoder-layer site (scale [3], post/comb) and the HyperHead (scale [1]); hc_expand_pre's
// those of hc_expand then hc_pre; rms_norm_rope's those of rms_norm then rope; bad arguments are
// InvalidArgument naming what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "op_test_util.h"

namespace deepinfer::backend {
namespace {

using testing::Rand;

using testing::expect_same_bits;
class HcPreDefault : public testing::CpuModesTest {};

TEST_P(HcPreDefault, SiteEqualsComposedCallsBitwise) {
  for (int64_t hc : {4, 3}) {
    for (int64_t S : {1, 3, 16}) {
      const int64_t H = 64 + rnd_.integer(0, 70), N = (2 + hc) * hc;
      const HcParams p{hc, 20, 1e-6f};
      const float eps = 1e-6f;
      Tensor x = rnd_.tensor({S, hc, H}, -3, 3), fn = rnd_.tensor({N, hc * H}, -0.05f, 0.05f),
             base = rnd_.tensor({N}), scale = rnd_.tensor({3}, 0.5f, 2);
      // composed, as hyper_connection.cpp ran it
      Tensor normed = Tensor::empty(DType::kF32, {S, hc * H}), mix = Tensor::empty(DType::kF32, {S, N}),
             pre = Tensor::empty(DType::kF32, {S, hc}), post_w = Tensor::empty(DType::kF32, {S, hc}),
             comb_w = Tensor::empty(DType::kF32, {S, hc, hc}),
             col_w = Tensor::empty(DType::kF32, {S, H});
      ASSERT_TRUE(be_->rms_norm(x.view({S, hc * H}), nullptr, eps, normed).ok());
      ASSERT_TRUE(be_->matmul(normed, fn, mix).ok());
      ASSERT_TRUE(be_->hc_coeffs(mix, base, scale, p, pre, &post_w, &comb_w).ok());
      ASSERT_TRUE(be_->hc_collapse(x, pre, col_w).ok());
      // one call
      Tensor post = Tensor::empty(DType::kF32, {S, hc}), comb = Tensor::empty(DType::kF32, {S, hc, hc}),
             col = Tensor::empty(DType::kF32, {S, H});
      ASSERT_TRUE(be_->hc_pre(x, fn, base, scale, p, eps, &post, &comb, col).ok());
      expect_same_bits("hc_pre post", post, post_w, rnd_.seed());
      expect_same_bits("hc_pre comb", comb, comb_w, rnd_.seed());
      expect_same_bits("hc_pre collapsed", col, col_w, rnd_.seed());
    }
  }
}

TEST_P(HcPreDefault, HeadEqualsComposedCallsBitwise) {
  const int64_t hc = 4, S = 5, H = 96;
  const HcParams p{hc, 20, 1e-6f};
  Tensor x = rnd_.tensor({S, hc, H}, -3, 3), fn = rnd_.tensor({hc, hc * H}, -0.05f, 0.05f),
         base = rnd_.tensor({hc}), scale = rnd_.tensor({1}, 0.5f, 2);
  Tensor normed = Tensor::empty(DType::kF32, {S, hc * H}), mix = Tensor::empty(DType::kF32, {S, hc}),
         pre = Tensor::empty(DType::kF32, {S, hc}), want = Tensor::empty(DType::kF32, {S, H});
  ASSERT_TRUE(be_->rms_norm(x.view({S, hc * H}), nullptr, 1e-6f, normed).ok());
  ASSERT_TRUE(be_->matmul(normed, fn, mix).ok());
  ASSERT_TRUE(be_->hc_coeffs(mix, base, scale, p, pre, nullptr, nullptr).ok());
  ASSERT_TRUE(be_->hc_collapse(x, pre, want).ok());
  Tensor got = Tensor::empty(DType::kF32, {S, H});
  ASSERT_TRUE(be_->hc_pre(x, fn, base, scale, p, 1e-6f, nullptr, nullptr, got).ok());
  expect_same_bits("hc_pre head", got, want, rnd_.seed());
}

TEST_P(HcPreDefault, ExpandPreEqualsExpandThenPreBitwise) {
  const int64_t hc = 4, S = 3, H = 80, N = (2 + hc) * hc;
  const HcParams p{hc, 20, 1e-6f};
  Tensor prev = rnd_.tensor({S, hc, H}, -3, 3), y = rnd_.tensor({S, H}, -2, 2),
         post_prev = rnd_.tensor({S, hc}, 0, 2), comb_prev = rnd_.tensor({S, hc, hc}, 0, 1);
  Tensor fn = rnd_.tensor({N, hc * H}, -0.05f, 0.05f), base = rnd_.tensor({N}),
         scale = rnd_.tensor({3}, 0.5f, 2);
  // two calls
  Tensor x_w = Tensor::empty(DType::kF32, {S, hc, H}), post_w = Tensor::empty(DType::kF32, {S, hc}),
         comb_w = Tensor::empty(DType::kF32, {S, hc, hc}), col_w = Tensor::empty(DType::kF32, {S, H});
  ASSERT_TRUE(be_->hc_expand(prev, y, post_prev, comb_prev, x_w).ok());
  ASSERT_TRUE(be_->hc_pre(x_w, fn, base, scale, p, 1e-6f, &post_w, &comb_w, col_w).ok());
  // one call
  Tensor x = Tensor::empty(DType::kF32, {S, hc, H}), post = Tensor::empty(DType::kF32, {S, hc}),
         comb = Tensor::empty(DType::kF32, {S, hc, hc}), col = Tensor::empty(DType::kF32, {S, H});
  ASSERT_TRUE(be_->hc_expand_pre(prev, y, post_prev, comb_prev, x, fn, base, scale, p, 1e-6f,
                                 &post, &comb, col).ok());
  expect_same_bits("hc_expand_pre streams", x, x_w, rnd_.seed());
  expect_same_bits("hc_expand_pre post", post, post_w, rnd_.seed());
  expect_same_bits("hc_expand_pre comb", comb, comb_w, rnd_.seed());
  expect_same_bits("hc_expand_pre collapsed", col, col_w, rnd_.seed());
  // the new streams may not alias the previous ones
  const Status st = be_->hc_expand_pre(prev, y, post_prev, comb_prev, prev, fn, base, scale, p,
                                       1e-6f, &post, &comb, col);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("alias"), std::string::npos) << st.message();
}

TEST_P(HcPreDefault, BadArgumentsAreNamed) {
  const int64_t hc = 4, S = 2, H = 32, N = 24;
  const HcParams p{hc, 20, 1e-6f};
  Tensor x = rnd_.tensor({S, hc, H}), fn = rnd_.tensor({N, hc * H}), base = rnd_.tensor({N}),
         scale = rnd_.tensor({3});
  Tensor post = Tensor::empty(DType::kF32, {S, hc}), comb = Tensor::empty(DType::kF32, {S, hc, hc}),
         col = Tensor::empty(DType::kF32, {S, H});
  auto expect_bad = [&](Status st, const char* needle) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  // streams of rank 2
  expect_bad(be_->hc_pre(x.view({S, hc * H}), fn, base, scale, p, 1e-6f, &post, &comb, col), "x");
  // params.hc disagrees with the streams
  expect_bad(be_->hc_pre(x, fn, base, scale, HcParams{3, 20, 1e-6f}, 1e-6f, &post, &comb, col),
             "params.hc");
  // fn of the wrong width
  Tensor fn_bad = rnd_.tensor({N, hc * H + 1});
  expect_bad(be_->hc_pre(x, fn_bad, base, scale, p, 1e-6f, &post, &comb, col), "matmul");
  // site without post/comb
  expect_bad(be_->hc_pre(x, fn, base, scale, p, 1e-6f, nullptr, nullptr, col), "post");
  // collapsed of the wrong shape
  Tensor col_bad = Tensor::empty(DType::kF32, {S, H + 1});
  expect_bad(be_->hc_pre(x, fn, base, scale, p, 1e-6f, &post, &comb, col_bad), "out");
}

TEST_P(HcPreDefault, RmsNormRopeEqualsTheTwoCallsBitwise) {
  for (auto style : {RopeStyle::kInterleavedTrailing, RopeStyle::kHalfLeading}) {
    for (bool weighted : {false, true}) {
      const int64_t S = 3, nh = 5, D = 96, half = 16;
      Tensor x = rnd_.tensor({S, nh, D}, -3, 3), w = rnd_.tensor({D}), inv = rnd_.tensor({half}, 0, 0.5f);
      Tensor pos = Tensor::from_i32({S}, {7, 1000, 31});
      Tensor want = Tensor::empty(DType::kF32, {S, nh, D});
      Tensor want_rows = want.view({S * nh, D});
      ASSERT_TRUE(be_->rms_norm(x.view({S * nh, D}), weighted ? &w : nullptr, 1e-6f, want_rows).ok());
      ASSERT_TRUE(be_->rope(want, pos, inv, style, 0.7f, false).ok());
      Tensor got = Tensor::empty(DType::kF32, {S, nh, D});
      ASSERT_TRUE(be_->rms_norm_rope(x, weighted ? &w : nullptr, 1e-6f, pos, inv, style, 0.7f, got).ok());
      expect_same_bits("rms_norm_rope", got, want, rnd_.seed());
      // in place
      ASSERT_TRUE(be_->rms_norm_rope(x, weighted ? &w : nullptr, 1e-6f, pos, inv, style, 0.7f, x).ok());
      expect_same_bits("rms_norm_rope in place", x, want, rnd_.seed());
    }
  }
  Tensor x = rnd_.tensor({2, 3, 8}), inv = rnd_.tensor({2}), bad = Tensor::empty(DType::kF32, {2, 3, 9});
  const Status st = be_->rms_norm_rope(x, nullptr, 1e-6f, Tensor::from_i32({2}, {0, 1}), inv,
                                       RopeStyle::kInterleavedTrailing, 1.f, bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("out"), std::string::npos) << st.message();
}

TEST_P(HcPreDefault, MoeExpertsSetEqualsExpertsIntoZerosBitwise) {
  // Session 13: Backend::moe_experts_set overwrites out (here random values and a NaN) with the
  // bits moe_experts adds into a zero-filled tensor; a bad out is named.
  const int64_t E = 4, H = 48, I = 32, k = 2;
  ExpertSet set;
  for (int64_t e = 0; e < E; ++e) {
    set.gate_up.push_back(Weight::of(rnd_.tensor({2 * I, H}, -0.2f, 0.2f)));
    set.down.push_back(Weight::of(rnd_.tensor({H, I}, -0.2f, 0.2f)));
  }
  for (int64_t S : {1, 5}) {
    Tensor x = rnd_.tensor({S, H}, -2, 2), w = rnd_.tensor({S, k});
    std::vector<int32_t> idv(S * k);
    for (auto& v : idv) v = static_cast<int32_t>(rnd_.integer(0, E - 1));
    Tensor ids = Tensor::from_i32({S, k}, idv);
    Tensor want = Tensor::empty(DType::kF32, {S, H});
    std::memset(want.raw(), 0, want.nbytes());
    ASSERT_TRUE(be_->moe_experts(x, ids, w, set, 7.0f, want).ok());
    Tensor got = rnd_.tensor({S, H}, -5, 5);
    got.data<float>()[0] = std::nanf("");
    ASSERT_TRUE(be_->moe_experts_set(x, ids, w, set, 7.0f, got).ok());
    expect_same_bits("moe_experts_set", got, want, rnd_.seed());
  }
  Tensor x = rnd_.tensor({1, H}), w = rnd_.tensor({1, k}), bad = Tensor::empty(DType::kF32, {H});
  const Status st = be_->moe_experts_set(x, Tensor::from_i32({1, k}, {0, 1}), w, set, 7.0f, bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("moe_experts_set"), std::string::npos) << st.message();
}

INSTANTIATE_TEST_SUITE_P(Modes, HcPreDefault, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "reference" : "fast"; });

}  // namespace
}  // namespace deepinfer::backend
