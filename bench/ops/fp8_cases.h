// FP8 block-scaled GEMM cases (fp8_cases.cpp): the activation quantizer, the cuBLASLt product and
// the whole call at the DeepSeek-V4-Flash projection shapes for each token count M.
#pragma once

#include <string>
#include <vector>

#include "op_cases.h"

namespace deepinfer::bench_ops {

// Phases "fp8 M=<M>", one per entry of `tokens`; `only` (substring) filters ops.
void run_fp8_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& tokens,
                   const std::string& only);
// TFLOP/s and % of the dense FP8 peak of every "fp8 M=" row (after the main table).
void print_fp8_summary(const std::vector<Result>& results, double fp8_peak_tflops);

}  // namespace deepinfer::bench_ops
