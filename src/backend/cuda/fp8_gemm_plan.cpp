#include "backend/cuda/fp8_gemm_plan.h"

#include <string>

namespace deepinfer::cuda {

int64_t Fp8GemmPlan::act_scale_index(int64_t m, int64_t b) const {
  const Fp8GemmPart& p = (parts == 2 && m >= part[1].row0) ? part[1] : part[0];
  return p.scale_offset + b * p.rows_padded + (m - p.row0);
}

StatusOr<Fp8GemmPlan> plan_fp8_gemm(int64_t M, int64_t N, int64_t K, int64_t groups) {
  const std::string shape = "x [" + std::to_string(M) + ", " + std::to_string(groups) + "·" +
                            std::to_string(K) + "], w [" + std::to_string(groups) + "·" +
                            std::to_string(N) + ", " + std::to_string(K) + "]";
  if (M < 1 || N < 1 || K < 1 || groups < 1)
    return InvalidArgument("fp8 gemm: sizes must be positive: " + shape);
  if (K % kFp8Block != 0)
    return Unimplemented("fp8 gemm: K must be a multiple of 128 (1×128 activation groups): " + shape);
  if (N % 4 != 0)
    return Unimplemented("fp8 gemm: N must be a multiple of 4 (cuBLASLt block scaling): " + shape);
  if (groups > 1 && N % kFp8Block != 0)
    return Unimplemented("fp8 gemm: grouped product needs N a multiple of 128 (weight blocks "
                         "must not straddle groups): " + shape);
  Fp8GemmPlan p;
  p.M = M;
  p.N = N;
  p.K = K;
  p.groups = groups;
  p.L = K / kFp8Block;
  p.L4 = (p.L + 3) / 4 * 4;
  p.n_blocks = (N + kFp8Block - 1) / kFp8Block;
  p.w_scale_floats = ((groups * N + kFp8Block - 1) / kFp8Block) * p.L4;
  const int64_t M4 = M / kFp8TokenAlign * kFp8TokenAlign;
  const int64_t Mp = (M + kFp8TokenAlign - 1) / kFp8TokenAlign * kFp8TokenAlign;
  const int64_t GL = groups * p.L;
  if (M4 == M) {  // one direct part
    p.parts = 1;
    p.part[0] = {0, M, M, false, 0, 0};
  } else if (M < kFp8SplitMinRows || M4 == 0) {  // one padded part into scratch
    p.parts = 1;
    p.part[0] = {0, M, Mp, true, 0, 0};
    p.scratch_rows = Mp;
  } else {  // direct bulk + padded tail into scratch
    p.parts = 2;
    p.part[0] = {0, M4, M4, false, 0, 0};
    p.part[1] = {M4, M - M4, kFp8TokenAlign, true, M4 * groups * K, GL * M4};
    p.scratch_rows = kFp8TokenAlign;
  }
  p.q_rows = Mp;
  p.act_scale_floats = GL * Mp;
  return p;
}

}  // namespace deepinfer::cuda
