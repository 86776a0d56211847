// Host-side planning of the FP8 block-scaled GEMM (backend/cuda/fp8_gemm_plan.h): how tokens are
// split into cuBLASLt parts, where each scale lives, which shapes are refused — and the activation
// scale formula against common/dtypes.h. Runs everywhere (no GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>

#include "backend/cuda/fp8_gemm_plan.h"
#include "common/dtypes.h"

namespace deepinfer::cuda {
namespace {

TEST(Fp8GemmPlan, RefusesShapesTheFp8PathDoesNotTake) {
  EXPECT_EQ(plan_fp8_gemm(4, 256, 200, 1).status().code(), StatusCode::kUnimplemented);   // K % 128
  EXPECT_EQ(plan_fp8_gemm(4, 250, 256, 1).status().code(), StatusCode::kUnimplemented);   // N % 4
  EXPECT_EQ(plan_fp8_gemm(4, 196, 256, 2).status().code(), StatusCode::kUnimplemented);   // groups, N % 128
  EXPECT_EQ(plan_fp8_gemm(0, 256, 256, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plan_fp8_gemm(4, 256, 256, 0).status().code(), StatusCode::kInvalidArgument);
  const Status st = plan_fp8_gemm(4, 256, 200, 1).status();
  EXPECT_NE(st.message().find("multiple of 128"), std::string::npos) << st.to_string();
  EXPECT_TRUE(plan_fp8_gemm(5, 196, 256, 1).ok());  // N not a multiple of 128 is fine ungrouped
}

TEST(Fp8GemmPlan, PartsCoverEveryTokenOnceWithAlignedPaddedWidths) {
  for (int64_t M : {1, 2, 3, 4, 7, 8, 127, 128, 129, 130, 131, 300, 2047, 2048}) {
    auto p = plan_fp8_gemm(M, 384, 640, 1);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->L, 5);
    EXPECT_EQ(p->L4, 8);
    EXPECT_EQ(p->n_blocks, 3);
    EXPECT_EQ(p->q_rows % 4, 0);
    EXPECT_GE(p->q_rows, M);
    EXPECT_LT(p->q_rows, M + 4);
    int64_t covered = 0;
    for (int i = 0; i < p->parts; ++i) {
      const Fp8GemmPart& part = p->part[i];
      EXPECT_EQ(part.row0, covered) << "M=" << M;
      EXPECT_EQ(part.rows_padded % 4, 0);
      EXPECT_GE(part.rows_padded, part.rows);
      EXPECT_EQ(part.q_offset, part.row0 * 640);
      EXPECT_EQ(part.scale_offset % 4, 0) << "16-byte aligned scale pointer";
      // A part written straight into `out` must not be padded (it would write past M rows).
      if (!part.to_scratch) {
        EXPECT_EQ(part.rows_padded, part.rows);
      } else {
        EXPECT_GE(p->scratch_rows, part.rows_padded);
      }
      covered += part.rows;
    }
    EXPECT_EQ(covered, M);
    if (M % 4 == 0) {
      EXPECT_EQ(p->scratch_rows, 0) << "M=" << M;
    }
    if (M >= kFp8SplitMinRows && M % 4 != 0) {
      EXPECT_EQ(p->parts, 2);
      EXPECT_EQ(p->part[0].rows, M / 4 * 4);  // the bulk goes straight to `out`
    }
  }
}

TEST(Fp8GemmPlan, ActivationScaleIndicesAreABijectionOntoTheBuffer) {
  for (int64_t M : {3, 7, 128, 131}) {
    for (int64_t G : {1, 2}) {
      auto p = plan_fp8_gemm(M, 256, 384, G);
      ASSERT_TRUE(p.ok());
      std::set<int64_t> seen;
      for (int64_t m = 0; m < p->q_rows; ++m) {
        for (int64_t b = 0; b < G * p->L; ++b) {
          const int64_t i = p->act_scale_index(m, b);
          ASSERT_GE(i, 0);
          ASSERT_LT(i, p->act_scale_floats);
          EXPECT_TRUE(seen.insert(i).second) << "m=" << m << " b=" << b;
        }
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), p->act_scale_floats);
      // Within a part, tokens are contiguous for a fixed k-block (cuBLASLt VEC128: N-major), and a
      // group's region starts at act_scale_group_offset.
      for (int i = 0; i < p->parts; ++i) {
        const Fp8GemmPart& part = p->part[i];
        for (int64_t g = 0; g < G; ++g) {
          EXPECT_EQ(p->act_scale_index(part.row0, g * p->L), p->act_scale_group_offset(part, g));
          if (part.rows > 1) {
            EXPECT_EQ(p->act_scale_index(part.row0 + 1, g * p->L) - p->act_scale_index(part.row0, g * p->L), 1);
          }
        }
      }
    }
  }
}

TEST(Fp8GemmPlan, WeightScaleLayoutIsKMajorWithPaddedColumns) {
  auto p = plan_fp8_gemm(16, 256, 640, 2);  // 2 groups × 2 row blocks, L = 5, L4 = 8
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->w_scale_floats, 4 * 8);
  EXPECT_EQ(p->w_scale_index(3, 4), 3 * 8 + 4);
  EXPECT_EQ(p->w_scale_group_offset(1), 2 * 8);
  EXPECT_EQ(p->w_scale_group_offset(1) % 4, 0);
}

TEST(Fp8ActScale, MatchesDeepSeekFormulaAndUe8m0Rounding) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(1.f, 2.f);
  std::uniform_int_distribution<int> ex(-30, 30);
  for (int i = 0; i < 20000; ++i) {
    const float amax = std::ldexp(mant(rng), ex(rng));
    const float s = fp8_act_scale(amax, false);
    const float want = std::max(amax, 1e-4f) / 448.0f;
    ASSERT_EQ(s, want) << "seed " << seed << " amax " << amax;
    const float s2 = fp8_act_scale(amax, true);
    const float want2 = ue8m0_to_f32(f32_to_ue8m0_ceil(want));
    ASSERT_EQ(s2, want2) << "seed " << seed << " amax " << amax;
    ASSERT_GE(s2, want);
    ASSERT_LE(std::fabs(amax / s2), 448.f) << "the scaled maximum stays in e4m3 range";
  }
  EXPECT_EQ(fp8_act_scale(0.f, false), 1e-4f / 448.0f);   // the floor: no division by zero
  EXPECT_EQ(fp8_act_scale(448.f, true), 1.0f);            // exact power of two stays
  EXPECT_TRUE(std::isnan(fp8_act_scale(std::nanf(""), false)));  // NaN is not hidden
}

}  // namespace
}  // namespace deepinfer::cuda
