#include "routed_experts.h"

#include <random>

#include "backend/cuda/cuda_check.h"
#include "device_fill.h"

namespace deepinfer::bench_ops {

using backend::Weight;

StatusOr<Weight> stored_weight(BenchContext& ctx, int fmt, int64_t N, int64_t K) {
  Weight w;
  if (fmt == 0) {
    DI_ASSIGN_OR_RETURN(w.w, ctx.zeros(DType::kBF16, {N, K}));
    fill_normal_bf16(w.w.data<uint16_t>(), w.w.numel(), ctx.next_seed(), 0.02f, ctx.stream());
    return w;
  }
  w.block_rows = fmt == 2 ? 1 : 128;
  w.block_cols = fmt == 2 ? 32 : 128;
  DI_ASSIGN_OR_RETURN(w.w, ctx.zeros(fmt == 2 ? DType::kF4E2M1 : DType::kF8E4M3, {N, K}));
  DI_ASSIGN_OR_RETURN(w.scale, ctx.zeros(DType::kF8E8M0, {(N + w.block_rows - 1) / w.block_rows,
                                                           (K + w.block_cols - 1) / w.block_cols}));
  if (fmt == 2) fill_fp4_codes(w.w.data<uint8_t>(), static_cast<int64_t>(w.w.nbytes()), ctx.next_seed(), ctx.stream());
  else fill_fp8_codes(w.w.data<uint8_t>(), static_cast<int64_t>(w.w.nbytes()), ctx.next_seed(), ctx.stream());
  fill_ue8m0(w.scale.data<uint8_t>(), w.scale.numel(), ctx.next_seed(), 118, 124, ctx.stream());
  return w;
}

StatusOr<RandomExperts> random_fp4_experts(BenchContext& ctx, int64_t E, int64_t H, int64_t I) {
  RandomExperts r;
  std::vector<const void*> gw, gs, dw, ds;
  for (int64_t e = 0; e < E; ++e) {
    DI_ASSIGN_OR_RETURN(Weight gu, stored_weight(ctx, 2, 2 * I, H));
    DI_ASSIGN_OR_RETURN(Weight dn, stored_weight(ctx, 2, H, I));
    gw.push_back(gu.w.raw()), gs.push_back(gu.scale.raw()), dw.push_back(dn.w.raw()), ds.push_back(dn.scale.raw());
    r.set.gate_up.push_back(std::move(gu));
    r.set.down.push_back(std::move(dn));
  }
  DI_RETURN_IF_ERROR(ctx.backend().prepare_experts(r.set));
  DI_ASSIGN_OR_RETURN(r.table, ctx.zeros(DType::kU8, {4 * E * 8}));
  std::vector<const void*> all;
  for (auto* v : {&gw, &gs, &dw, &ds}) all.insert(all.end(), v->begin(), v->end());
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpy(r.table.raw(), all.data(), all.size() * sizeof(void*), cudaMemcpyHostToDevice));
  return r;
}

std::vector<int32_t> random_routing(BenchContext& ctx, int64_t tokens, int64_t k, int64_t E,
                                    std::set<int32_t>* distinct) {
  std::mt19937 rng(static_cast<uint32_t>(ctx.next_seed()));
  std::vector<int32_t> ids(tokens * k);
  for (int64_t s = 0; s < tokens; ++s) {
    std::set<int32_t> mine;
    while (static_cast<int64_t>(mine.size()) < k) mine.insert(static_cast<int32_t>(rng() % E));
    int64_t j = 0;
    for (int32_t e : mine) ids[s * k + j++] = e, distinct->insert(e);
  }
  return ids;
}

}  // namespace deepinfer::bench_ops
