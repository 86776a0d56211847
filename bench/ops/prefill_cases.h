// Prefill products on cuBLAS (src/backend/cuda/prefill_gemm.h) against the tensor-core kernels
// they replace, at DeepSeek-V4-Flash shapes:
//  - phase "prefill gemm M=<M>": each dense FP8 projection (wq_a, wkv, wq_b, wo_a grouped, wo_b,
//    shared expert w1 / w2) with "linear_tc" (old: the default split plan, as CudaBackend::linear
//    ran it) and "prefill cuBLAS" (new: exact bf16 dequantization + one K-stacked bf16 GEMM),
//    plus "cuBLAS bf16 1-term" — a plain bf16 GEMM of the same M·N·K on bf16 operands, the
//    shape's own ceiling (the new path does 3× its flops);
//  - phase "prefill experts T=<T>": both routed-expert projections (256 FP4 experts, top-6,
//    uniform routing) with "moe_tc v2" (old, incl. its term split) and "prefill cuBLAS grouped" /
//    "prefill cuBLAS per-expert" (new, incl. dequantization, split, GEMMs and the 3-row sums).
// TFLOP/s = 2·M·N·K useful flops / time; the pct_bf16_peak column compares with the cuBLAS bf16
// GEMM ceiling measured at the start of the same run.
#pragma once

#include <string>
#include <vector>

#include "op_cases.h"

namespace deepinfer::bench_ops {

void run_prefill_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& rows,
                       const std::vector<int64_t>& expert_tokens, const std::string& only);

}  // namespace deepinfer::bench_ops
