// Streaming GEMV cases (gemv_cases.cpp): the stored-format GEMV (kernels::gemv_linear) at the
// DeepSeek-V4-Flash projection shapes for a few rows M, next to the previous weight-only kernel
// (linear_wq) at M = 1, and the routed experts at decode batches (each selected expert read once
// for its tokens: moe_experts whole, and each projection alone with the session-4 kernel
// gemv_experts "v1" and the session-5 kernel "v2", bytes = the distinct experts' weights and
// scales + x + out), as µs and GB/s against the copy ceiling. Session 6: the pipelined dense
// kernel (gemv_multi, "gemv2" / "gemv2 deep") and CudaBackend::linear's own dispatch per shape,
// and the projections of one x ("multi ...": separate launches vs one launch) at each M.
// Session 7: phase "gemv chain M=<M>" (M ≤ 8): chains of back-to-back decode GEMVs (one attention
// block's dense products; 8 wq_a-sized FP8 GEMVs) with programmatic dependent launch off / on,
// µs per chain with the L2 flushed only before the chain.
// Session 8: "gemv3 <shape>" / "gemv3 v2..v4 <shape>" (gemv_v3.cuh, the TMA-ring kernel and its
// option variants) beside "gemv <shape>" (session 7's gemv_linear) and "backend linear <shape>"
// (the dispatch, DEEPINFER_GEMV_KERNEL); "multi ...: one launch, gemv3"; the chains with gemv3.
#pragma once

#include <string>
#include <vector>

#include "op_cases.h"

namespace deepinfer::bench_ops {

// Phases "gemv M=<M>" and "gemv chain M=<M>" (one per entry of `rows`) and "gemv experts B=<B>" (one per entry of
// `batches`, top-k of 256 FP4 experts); `only` (substring) filters ops.
void run_gemv_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& rows,
                    const std::vector<int64_t>& batches, const std::string& only);

}  // namespace deepinfer::bench_ops
