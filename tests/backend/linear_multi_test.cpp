// Backend::linear_multi's default implementation (used by the CPU backend): every output must be
// bitwise the output of `linear` on its own weight, for both CPU modes, several widths N_i and
// row counts M (decode-sized and larger); bad arguments are errors naming what is wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "op_test_util.h"

namespace deepinfer::backend {
namespace {

using testing::Rand;

using testing::expect_same_bits;
class LinearMultiDefault : public testing::CpuModesTest {};

TEST_P(LinearMultiDefault, EveryOutputIsLinearsBits) {
  const int64_t K = 96 + rnd_.integer(0, 40);  // odd widths too
  const std::vector<int64_t> widths{64, 1 + rnd_.integer(0, 30), 33, 128};
  for (int64_t M : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{16}, int64_t{37}}) {
    const Tensor x = rnd_.tensor({M, K}, -2.f, 2.f);
    std::vector<Weight> ws;
    std::vector<Tensor> got, want;
    for (int64_t N : widths) {
      ws.push_back(Weight::of(rnd_.tensor({N, K})));
      got.push_back(Tensor::empty(DType::kF32, {M, N}));
      want.push_back(Tensor::empty(DType::kF32, {M, N}));
      ASSERT_TRUE(be_->linear(x, ws.back(), want.back()).ok());
    }
    std::vector<const Weight*> wp;
    std::vector<Tensor*> op;
    for (size_t i = 0; i < ws.size(); ++i) {
      wp.push_back(&ws[i]);
      op.push_back(&got[i]);
    }
    const Status s = be_->linear_multi(x, wp, op);
    ASSERT_TRUE(s.ok()) << s.message();
    for (size_t i = 0; i < ws.size(); ++i) {
      SCOPED_TRACE("M " + std::to_string(M) + ", projection " + std::to_string(i));
      expect_same_bits("linear_multi vs linear", got[i], want[i], rnd_.seed());
    }
  }
}

TEST_P(LinearMultiDefault, EmptyListIsANoOp) {
  const Tensor x = rnd_.tensor({2, 8});
  EXPECT_TRUE(be_->linear_multi(x, {}, {}).ok());
}

TEST_P(LinearMultiDefault, BadArgumentsAreNamed) {
  const int64_t K = 16;
  const Tensor x = rnd_.tensor({3, K});
  Weight a = Weight::of(rnd_.tensor({8, K})), b = Weight::of(rnd_.tensor({4, K + 1}));
  Tensor oa = Tensor::empty(DType::kF32, {3, 8}), ob = Tensor::empty(DType::kF32, {3, 4});
  {  // counts differ
    const Weight* w[] = {&a, &b};
    Tensor* o[] = {&oa};
    const Status s = be_->linear_multi(x, w, o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("2 weights but 1 outputs"), std::string::npos) << s.message();
  }
  {  // a null entry
    const Weight* w[] = {&a, nullptr};
    Tensor* o[] = {&oa, &ob};
    const Status s = be_->linear_multi(x, w, o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("weight or output 1 is null"), std::string::npos) << s.message();
  }
  {  // a weight whose K does not match x: linear's own error
    const Weight* w[] = {&a, &b};
    Tensor* o[] = {&oa, &ob};
    const Status s = be_->linear_multi(x, w, o);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("matmul"), std::string::npos) << s.message();
  }
  {  // a stored-format weight the CPU backend has no kernel for: linear's Unimplemented
    Weight bf{Tensor::empty(DType::kBF16, {4, K}), Tensor(), 1, 1};
    std::memset(bf.w.raw(), 0x3F, bf.w.numel() * 2);
    const Weight* w[] = {&a, &bf};
    Tensor* o[] = {&oa, &ob};
    const Status s = be_->linear_multi(x, w, o);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.message();
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, LinearMultiDefault, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("reference") : std::string("fast");
                         });

}  // namespace
}  // namespace deepinfer::backend
