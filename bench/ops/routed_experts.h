// Random routed experts for the expert benchmarks (gemv_cases.cpp, moe_cases.cpp): weights in a
// stored format, their device pointer table, and routing as the router makes it.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "bench_context.h"
#include "common/status.h"

namespace deepinfer::bench_ops {

// fmt 0 bf16 [N, K]; 1 FP8 [N, K] + UE8M0 128×128; 2 FP4 [N, K] + UE8M0 1×32; random values.
StatusOr<backend::Weight> stored_weight(BenchContext& ctx, int fmt, int64_t N, int64_t K);

struct RandomExperts {
  backend::ExpertSet set;  // E FP4 experts: gate_up [2I, H], down [H, I], prepared
  backend::Tensor table;   // const void* [4E] on the device: gate_up w, gate_up s, down w, down s
};
StatusOr<RandomExperts> random_fp4_experts(BenchContext& ctx, int64_t E, int64_t H, int64_t I);

// [tokens, k] ids: k distinct experts of E per token, uniformly at random (seeded from ctx);
// *distinct gets every expert some token picked.
std::vector<int32_t> random_routing(BenchContext& ctx, int64_t tokens, int64_t k, int64_t E,
                                    std::set<int32_t>* distinct);

}  // namespace deepinfer::bench_ops
