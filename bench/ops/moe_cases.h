// Routed-expert prefill cases (moe_cases.cpp): the grouped tensor-core GEMM of the FP4 experts at
// DeepSeek-V4-Flash shapes (256 experts, gate_up [2·2048, 4096], down [4096, 2048], FP4 + ue8m0
// 1×32, top-6) for prefill token counts T: each projection alone with the session-4 kernel
// "experts_tc v1" (linear_tc.cuh tc_kernel), the v2 variants of moe_tc.cuh and "moe_tc v3"
// (moe_tc_v3.cuh: BM 64 × BN 256, warp tiles 32 × 64; all the same bits), the
// v2 term pre-split alone, and the whole moe_experts op (the variant DEEPINFER_CUDA_MOE_TC picks).
// Each version runs on its own grouping: v1 16- / 64-row tiles, v2 32- / 64-row tiles (32 for
// decode-sized batches, ≤ 24 slots per expert, where v2 has one kernel whatever the variant).
// TFLOP/s = 2·slots·N·K useful flops / time; compare with the cuBLAS bf16 ceiling column (the
// kernels do 3 bf16 MMAs per product, so a third of the bf16 peak is their mma.sync ceiling).
#pragma once

#include <string>
#include <vector>

#include "op_cases.h"

namespace deepinfer::bench_ops {

// Phases "moe tc T=<T>", one per entry of `tokens`; `only` (substring) filters ops.
void run_moe_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& tokens,
                   const std::string& only);

}  // namespace deepinfer::bench_ops
