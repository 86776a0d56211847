// Session 9 (skinny_cases.cpp): skinny_mma (skinny_mma.h — the default-mode small-M dense product
// on tensor cores, DEEPINFER_GEMV_KERNEL tc | tc1..tc3) at the DeepSeek-V4-Flash dense shapes for
// a few token counts M, beside "skinny ref: backend linear <shape>" (CudaBackend::linear: the
// current default path unless DEEPINFER_GEMV_KERNEL selects tc), as µs and GB/s against the copy
// ceiling of the same run. Rows: "skinny <shape>" (the kernel, whether or not tc's pick takes the
// shape: x split + product, two launches, workspace
// allocated once outside the timing), "skinny cluster <shape>" (k split over a cluster of CTAs), "skinny tc3 <shape>" (one m16
// tile per warp), "skinny s2 <shape>" (k split forced ≥ 2: smaller CTAs), "skinny
// product <shape>" (the product launch alone, the split done once before), and the projections of
// one x: "skinny multi <set>" (one split, one product launch) vs "skinny ref: backend
// linear_multi <set>". Every op name contains "skinny" (--only skinny runs them all). Bytes: x,
// weight and scales, out, once each.
#pragma once

#include <string>
#include <vector>

#include "op_cases.h"

namespace deepinfer::bench_ops {

// Phases "skinny M=<M>", one per entry of `rows` (each 1..16); `only` (substring) filters ops.
void run_skinny_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& rows,
                      const std::string& only);

}  // namespace deepinfer::bench_ops
