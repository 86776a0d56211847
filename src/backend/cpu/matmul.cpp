// Grouped GEMM y = x · wᵀ over F32 weights (deepseek-v4.md notation: weight [out, in]).
// Fast mode: 16-lane dot products (fixed order, so a row's result does not depend on how many
// rows are in the batch), 4 rows of x per weight row to reuse the weight cache line, threads over
// output columns when M is small (decode) or over rows otherwise.
#include <algorithm>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

Status matmul(const CpuContext& ctx, const Tensor& x, const Tensor& w, Tensor& out,
              int64_t groups) {
  DI_ASSIGN_OR_RETURN(const MatmulDims dims, check_matmul(x, w, out, groups));
  const int64_t M = dims.M, K = dims.K, N = dims.N, GK = groups * K, GN = groups * N;
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  float* op = out.data<float>();
  auto cell = [&](int64_t m, int64_t n) {  // n in [0, G*N)
    const int64_t g = n / N;
    return dot(ctx, xp + m * GK + g * K, wp + n * K, K);
  };
  if (ctx.reference) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < GN; ++n) op[m * GN + n] = cell(m, n);
    return OkStatus();
  }
  if (M < 8) {
    ctx.parallel_for(GN, M * K, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t m = 0; m < M; ++m) op[m * GN + n] = cell(m, n);
    });
    return OkStatus();
  }
  // Tiles of 4 rows x 64 columns: the 64 weight rows stay in L1/L2 while 4 x rows stream by.
  const int64_t row_tiles = (M + 3) / 4;
  ctx.parallel_for(row_tiles, GN * K * 4, [&](int64_t t0, int64_t t1) {
    for (int64_t n0 = 0; n0 < GN; n0 += 64) {
      const int64_t n1 = std::min(GN, n0 + 64);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t m0 = t * 4, m1 = std::min(M, m0 + 4);
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t m = m0; m < m1; ++m) op[m * GN + n] = cell(m, n);
      }
    }
  });
  return OkStatus();
}

}  // namespace deepinfer::backend::cpu
