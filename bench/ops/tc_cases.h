// Tensor-core stored-format linear cases (tc_cases.cpp): linear_tc (mma.sync bf16, x split in
// 3 terms) against the weight-only GEMV (linear_wq) on the same weights, per token count M, at
// the DeepSeek-V4-Flash projection shapes — the rows that pick the switch point in
// CudaBackend::linear. Compare the TFLOP/s column with the cuBLAS bf16 ceiling. Also
// "gemv_linear" (the default mode's decode GEMV, M ≤ 8) and the small-M kernels with linear_tc's
// bits ("small", "wa"): the cost of --batch-invariant per shape.
#pragma once

#include <string>
#include <vector>

#include "op_cases.h"

namespace deepinfer::bench_ops {

// Phases "tc M=<M>", one per entry of `tokens`; `only` (substring) filters ops.
void run_tc_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& tokens,
                  const std::string& only);

}  // namespace deepinfer::bench_ops
