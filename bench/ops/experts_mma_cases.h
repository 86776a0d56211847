// Decode routed experts on tensor cores (experts_mma_cases.cpp): each projection of the routed
// experts at decode batches (top-6 of 256 FP4 experts, V4-Flash widths) with the session-5
// streaming GEMV (gemv_experts_v2) and the tensor-core kernel's variants (experts_mma, its x split
// included: "s6" = session 6, "s7" = session 7's default, "s7-12w" = session 7 at 12 warps per
// SM; "s8" = session 8's v3 (experts_mma_v3.cuh, 12 warps per SM), "s8-16w" = v3 at 16 warps per
// SM; all give the same bits), as µs and GB/s; bytes = the distinct experts' weights and scales + x in + out, so the
// table's "% of copy" column is against the copy ceiling measured in the same run. Session 8: the
// s6, s7-12w, s8 and s8-16w rows are measured a second time as "<op> clean-l2", after a read-only
// L2 flush instead of the memset (whose dirty lines' write-back competes with a batch-1 kernel).
// Session 10: "x <rows>r-<warps>w" = experts_mma_x.cuh's variants 6..8, "... memonly" their weight
// stream alone, "pick auto" / "pick x1" = the variant the model ran before session 10 / runs under
// DEEPINFER_EXPERTS_KERNEL=x1 for that slot count and projection; each also as "<op> clean-l2".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "op_cases.h"

namespace deepinfer::bench_ops {

// Phase "experts mma B=<B>" per entry of `batches`; `only` (substring) filters ops.
void run_experts_mma_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& batches,
                           const std::string& only);

}  // namespace deepinfer::bench_ops
