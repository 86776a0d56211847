// See experts_mma_cases.h. Same setup as gemv_cases.cpp's expert phase (routed_experts.h: random
// FP4 experts and router-like routing), grouping done once outside the timing.
#include "experts_mma_cases.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>

#include "backend/cuda/experts_mma.h"
#include "backend/cuda/experts_wg.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "routed_experts.h"

namespace deepinfer::bench_ops {

// experts_mma_cases.cu: reads `bytes` of buf (a read-only L2 flush).
void experts_read_flush(const void* buf, int64_t bytes, uint32_t* sink, cudaStream_t s);

namespace {

using backend::Tensor;

double weight_bytes(const backend::Weight& w) {
  return double(w.w.nbytes()) + (w.scale.defined() ? double(w.scale.nbytes()) : 0.0);
}

// Session 8: the timing of BenchContext::measure (warm-up, median of 20 between two events) with a
// read-only flush before each call instead of the memset: the memset leaves up to 50 MB of dirty
// lines in L2 whose write-back shares DRAM with a batch-1 kernel's 30-60 MB of reads (the model
// step has no such write-back in front of the experts). Recorded as op + " clean-l2".
Status measure_clean(BenchContext& ctx, const std::string& phase, const std::string& op, const std::string& shape,
                     double bytes, double flops, const backend::Tensor& flush, const backend::Tensor& sink,
                     const std::function<Status()>& fn) {
  Result r{phase, op + " clean-l2", shape, 0, 0, 0, bytes, flops, ""};
  auto run = [&]() -> StatusOr<std::vector<float>> {
    for (int i = 0; i < 3; ++i) DI_RETURN_IF_ERROR(fn());
    DI_RETURN_IF_ERROR(ctx.backend().synchronize());
    DI_ASSIGN_OR_RETURN(cuda::Event start, cuda::Event::create(true));
    DI_ASSIGN_OR_RETURN(cuda::Event stop, cuda::Event::create(true));
    std::vector<float> us;
    for (int i = 0; i < 20; ++i) {
      experts_read_flush(flush.raw(), static_cast<int64_t>(flush.nbytes()), sink.data<uint32_t>(), ctx.stream());
      DI_RETURN_IF_ERROR(start.record(ctx.stream()));
      DI_RETURN_IF_ERROR(fn());
      DI_RETURN_IF_ERROR(stop.record(ctx.stream()));
      DI_RETURN_IF_ERROR(ctx.backend().synchronize());
      DI_ASSIGN_OR_RETURN(float t, stop.elapsed_ms_since(start));
      us.push_back(t * 1e3f);
    }
    return us;
  };
  auto t = run();
  if (!t.ok()) {
    r.error = t.status().to_string();
    std::fprintf(stderr, "[bench_ops] %s %s: %s\n", phase.c_str(), r.op.c_str(), r.error.c_str());
    (void)ctx.backend().synchronize();
  } else {
    r.us_median = median(*t);
    r.us_min = *std::min_element(t->begin(), t->end());
    r.us_max = *std::max_element(t->begin(), t->end());
  }
  ctx.results().push_back(std::move(r));
  return OkStatus();
}

// Session 12: `only` may list several substrings separated by '|' (any of them selects the op).
bool matches_only(const std::string& op, const std::string& only) {
  if (only.empty()) return true;
  size_t from = 0;
  while (true) {
    const size_t bar = only.find('|', from);
    const std::string part =
        only.substr(from, bar == std::string::npos ? std::string::npos : bar - from);
    if (!part.empty() && op.find(part) != std::string::npos) return true;
    if (bar == std::string::npos) return false;
    from = bar + 1;
  }
}

Status mma_phase(BenchContext& ctx, const ModelDims& m, int64_t B, const std::string& only) {
  const int64_t k = m.top_k, H = m.hidden, I = m.expert_inter, E = m.experts, slots = B * k;
  DI_ASSIGN_OR_RETURN(RandomExperts rx, random_fp4_experts(ctx, E, H, I));
  const backend::ExpertSet& experts = rx.set;
  std::set<int32_t> distinct;
  const std::vector<int32_t> ids = random_routing(ctx, B, k, E, &distinct);
  DI_ASSIGN_OR_RETURN(Tensor ids_t, ctx.upload_i32({B, k}, ids));
  DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({B, H}));            // [B, H] token rows
  DI_ASSIGN_OR_RETURN(Tensor act, ctx.randn({slots, I}, 0.3f));  // [slots, I] SwiGLU outputs
  DI_ASSIGN_OR_RETURN(Tensor gu, ctx.zeros(DType::kF32, {slots, 2 * I}));
  DI_ASSIGN_OR_RETURN(Tensor y, ctx.zeros(DType::kF32, {slots, H}));
  DI_ASSIGN_OR_RETURN(Tensor grp, ctx.zeros(DType::kI32, {slots + 2 * (E + 1)}));
  DI_ASSIGN_OR_RETURN(Tensor flag, ctx.zeros(DType::kI32, {1}));
  const int64_t ws_floats = static_cast<int64_t>(
      (cuda::kernels::experts_mma_workspace_bytes(slots, std::max(H, I)) + 3) / 4);
  DI_ASSIGN_OR_RETURN(Tensor ws, ctx.zeros(DType::kF32, {ws_floats}));
  int32_t* perm = grp.data<int32_t>();
  int32_t* row_off = perm + slots;
  int32_t* act_off = row_off + E + 1;
  cuda::kernels::moe_group(ids_t.data<int32_t>(), slots, E, static_cast<int>(slots), perm, row_off, act_off,
                           flag.data<int32_t>(), ctx.stream());
  // Session 7's variants run on moe_group's 8-row tiles, as CudaBackend::moe_experts groups for them.
  DI_ASSIGN_OR_RETURN(Tensor grp8, ctx.zeros(DType::kI32, {slots + 2 * (E + 1)}));
  int32_t* perm8 = grp8.data<int32_t>();
  const int t8 = cuda::kernels::kExpertsMmaTileRows;
  cuda::kernels::moe_group(ids_t.data<int32_t>(), slots, E, t8, perm8, perm8 + slots, perm8 + slots + E + 1,
                           flag.data<int32_t>(), ctx.stream());
  // Session 20: experts_wg groups with its 32-token tiles.
  DI_ASSIGN_OR_RETURN(Tensor grp32, ctx.zeros(DType::kI32, {slots + 2 * (E + 1)}));
  int32_t* perm32 = grp32.data<int32_t>();
  cuda::kernels::moe_group(ids_t.data<int32_t>(), slots, E, cuda::kernels::kExpertsWgTileRows, perm32,
                           perm32 + slots, perm32 + slots + E + 1, flag.data<int32_t>(), ctx.stream());
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    std::fprintf(stderr, "[bench_ops] CUDA error in the experts setup (B=%lld): %s\n",
                 static_cast<long long>(B), cudaGetErrorString(e));
    return Internal(std::string("CUDA error in the experts setup: ") + cudaGetErrorString(e));
  }
  const auto* tab = static_cast<const void* const*>(rx.table.raw());  // gate_up w, s, down w, s
  DI_ASSIGN_OR_RETURN(Tensor flush, ctx.zeros(DType::kU8, {int64_t{256} << 20}));  // > L2 (50 MB)
  DI_ASSIGN_OR_RETURN(Tensor sink, ctx.zeros(DType::kI32, {4}));
  struct Proj {
    const char* name;
    const float* in;
    int64_t x_rows, x_div, N, K;
    const void* const* w;
    double bytes;
    float* out;
  };
  const Proj projs[] = {
      {"gate_up", x.data<float>(), B, k, 2 * I, H, tab, weight_bytes(experts.gate_up[0]), gu.data<float>()},
      {"down", act.data<float>(), slots, 1, H, I, tab + 2 * E, weight_bytes(experts.down[0]), y.data<float>()},
  };
  const std::string phase = "experts mma B=" + std::to_string(B);
  for (const Proj& pr : projs) {
    const double bytes = double(distinct.size()) * pr.bytes + 4.0 * (pr.x_rows * pr.K + slots * pr.N);
    const double flops = 2.0 * slots * double(pr.N) * pr.K;
    const std::string shape = std::to_string(distinct.size()) + " distinct experts, " + std::to_string(slots) +
                              " slots, [" + std::to_string(pr.N) + ", " + std::to_string(pr.K) + "] fp4";
    // 0: gemv_experts_v2 (session 5); else experts_mma variant v (experts_mma.h: 1 = session 6,
    // 2 = session 7, 3 = session 7 compiled for 12 warps per SM, 4 = session 8 (v3, 12 warps
    // per SM), 5 = session 8 at 16 warps per SM).
    namespace kn = cuda::kernels;
    // Session 10: experts_mma_x.cuh's kernels by geometry (rows per warp item, warps per SM; the
    // DEEPINFER_EXPERTS_KERNEL value that selects one for every slot count in brackets): variants
    // 6 "x 16r-12w" [x2], 7 "x 32r-8w" [x3], 8 "x 64r-8w" [x4]; "x 16r-12w memonly" / "x 32r-8w
    // memonly": the weight stream of 6 / 7 alone (experts_mma_memonly: no compute, no outputs —
    // the access pattern's own speed). And the two per-slot-count picks side by side: "pick auto"
    // (what the model ran before session 10: session 7's 12-warp kernel up to 8 slots, session
    // 6's above) and "pick x1" (experts_mma_pick_x). Session 12: those two rows renamed "pick s7"
    // and "pick s10"; "pick auto" = experts_mma_pick_s12 (today's auto); "xb 16r-12w 3st" /
    // "2st" / "2st l2" = experts_mma_xb.cuh's variants 9 / 10 / 11; "xb2t ..." = its passes of 2
    // tokens: 12 (16 warps per SM, 2 stages), 13 (12 with L2-only B copies), 14 (12 warps, 3
    // stages), 15 / 16 (32-row items, balanced ranges: 12 warps 2 stages / 8 warps 3 stages), 17
    // (64-row items, 8 warps); "xg2t ..." = 18 / 19 (B from global memory, passes of 2 tokens, 16
    // warps, 4 / 3 stages); "xb1t ..." = 20 / 21 (passes of 1 token, 16 warps: 32-row 2 stages,
    // 16-row 3), 22 / 23 (passes of 1 token, 16-row, 12 warps, 4 stages; B copies through L2 only /
    // L1).
    // Session 13 (helper experts1): "xi 16r-12w 3st" = variant 24 (variant 6 with kIlp: per half
    // stage the 4 blocks' MMAs before their fmas; x5 at <= 8 slots), "xw 16r-12w 3st" / "2st" =
    // 25 / 26 (kIlpW: the whole stage so, scales decoded per lane; x6 / x7); "xw 16r-12w 3st
    // early" = 27 (25 with kEarly: one round of loads for the warp's start, the first pass's B
    // columns before the PDL wait; x8); "x 16r-12w early" = 28 (variant 6 with kEarly), "x 16r-12w
    // chain" = 29 (+ kChain: launch_dependents after the PDL wait, the x split a PDL launch), "xi
    // 16r-12w chain" = 30 (24 + kEarly + kChain), "xb2t 32r-12w 2st quick" = 31 (15 with kQuick),
    // "x 16r-12w 2st chain" = 32 (29 with 2-stage rings).
    // "x 16r-12w memonly tiled": variant 6's stream with each stage read as 2 KB contiguous bytes
    // (experts_mma_memonly 3; a probe of a per-stage tiled weight layout).
    // Session 20: "experts wg" = experts_wg (experts_wg.h: the same bits on warpgroup MMA, 32-token
    // tiles) as the backend runs it; "wg m2" / "wg m2s" = its variants 2 / 3 (256 weight rows per
    // item, the two m-tiles in flight together / one after the other); "wg 2cta" = variant 4.
    constexpr int kPickAuto = -1, kPickX1 = -2, kMem16 = -3, kMem32 = -4, kPickS12 = -5,
                  kMemTiled = -6, kWg = -7, kWg2 = -8, kWg3 = -9, kWg4 = -10;
    struct Variant {
      int v;
      const char* name;
    };
    static const Variant variants[] = {
        {0, "experts gemv v2 fp4 "},
        {kn::kExpertsMmaV1, "experts mma s6 fp4 "},
        {kn::kExpertsMmaV2, "experts mma s7 fp4 "},
        {kn::kExpertsMmaV2Regs, "experts mma s7-12w fp4 "},
        {kn::kExpertsMmaV3, "experts mma s8 fp4 "},
        {kn::kExpertsMmaV3w16, "experts mma s8-16w fp4 "},
        {kn::kExpertsMmaX16, "experts mma x 16r-12w fp4 "},
        {kn::kExpertsMmaX32, "experts mma x 32r-8w fp4 "},
        {kn::kExpertsMmaX64, "experts mma x 64r-8w fp4 "},
        {kMem16, "experts mma x 16r-12w memonly fp4 "},
        {kMem32, "experts mma x 32r-8w memonly fp4 "},
        {kMemTiled, "experts mma x 16r-12w memonly tiled fp4 "},
        {kn::kExpertsMmaXB3, "experts mma xb 16r-12w 3st fp4 "},
        {kn::kExpertsMmaXB2, "experts mma xb 16r-12w 2st fp4 "},
        {kn::kExpertsMmaXB2L2, "experts mma xb 16r-12w 2st l2 fp4 "},
        {kn::kExpertsMmaXB2T16, "experts mma xb2t 16r-16w 2st fp4 "},
        {kn::kExpertsMmaXB2T16L2, "experts mma xb2t 16r-16w 2st l2 fp4 "},
        {kn::kExpertsMmaXB3T, "experts mma xb2t 16r-12w 3st fp4 "},
        {kn::kExpertsMmaXB32w12, "experts mma xb2t 32r-12w 2st fp4 "},
        {kn::kExpertsMmaXB32w8, "experts mma xb2t 32r-8w 3st fp4 "},
        {kn::kExpertsMmaXB64, "experts mma xb2t 64r-8w 2st fp4 "},
        {kn::kExpertsMmaXG16s4, "experts mma xg2t 16r-16w 4st fp4 "},
        {kn::kExpertsMmaXG16s3, "experts mma xg2t 16r-16w 3st fp4 "},
        {kn::kExpertsMmaXB32w16, "experts mma xb1t 32r-16w 2st fp4 "},
        {kn::kExpertsMmaXB16s3t1, "experts mma xb1t 16r-16w 3st fp4 "},
        {kn::kExpertsMmaXB16s4t1L2, "experts mma xb1t 16r-12w 4st l2 fp4 "},
        {kn::kExpertsMmaXB16s4t1, "experts mma xb1t 16r-12w 4st fp4 "},
        {kn::kExpertsMmaXI3, "experts mma xi 16r-12w 3st fp4 "},
        {kn::kExpertsMmaXW3, "experts mma xw 16r-12w 3st fp4 "},
        {kn::kExpertsMmaXW2, "experts mma xw 16r-12w 2st fp4 "},
        {kn::kExpertsMmaXW3E, "experts mma xw 16r-12w 3st early fp4 "},
        {kn::kExpertsMmaXE3, "experts mma x 16r-12w early fp4 "},
        {kn::kExpertsMmaXC3, "experts mma x 16r-12w chain fp4 "},
        {kn::kExpertsMmaXIC3, "experts mma xi 16r-12w chain fp4 "},
        {kn::kExpertsMmaXB32Q, "experts mma xb2t 32r-12w 2st quick fp4 "},
        {kn::kExpertsMmaXC2, "experts mma x 16r-12w 2st chain fp4 "},
        {kPickAuto, "experts mma pick s7 fp4 "},
        {kPickX1, "experts mma pick s10 fp4 "},
        {kPickS12, "experts mma pick auto fp4 "},
        {kWg, "experts wg fp4 "},
        {kWg2, "experts wg m2 fp4 "},
        {kWg3, "experts wg m2s fp4 "},
        {kWg4, "experts wg 2cta fp4 "},
    };
    for (const Variant& var : variants) {
      const char* name = var.name;
      // The picks resolve to a kernel variant for this slot count and projection.
      const int v = var.v == kPickAuto  ? (slots <= 8 ? kn::kExpertsMmaV2Regs : kn::kExpertsMmaV1)
                    : var.v == kPickX1  ? kn::experts_mma_pick_x(slots, pr.K)
                    : var.v == kPickS12 ? kn::experts_mma_pick_s12(slots, pr.K, 0)
                    : var.v < 0         ? kn::kExpertsMmaX16  // memonly rows: their own call below
                                        : var.v;
      const std::string op = std::string(name) + pr.name;
      if (!matches_only(op, only)) continue;
      // experts_wg's variant of a "wg" row (kWg: 0 = the default; kWg2..kWg4: 2..4), else −1.
      const int wg_variant = var.v <= kWg && var.v >= kWg4 ? (var.v == kWg ? 0 : kWg - var.v + 1) : -1;
      const bool ok =
          wg_variant >= 0 ? cuda::kernels::experts_wg_supported(2, slots, E, true, false, true, pr.N, pr.K, 1, 32) &&
                                cuda::kernels::experts_wg_device_ok()
          : v == 0        ? cuda::kernels::gemv_experts_v2_supported(2, slots, E, true, true, pr.N, pr.K, 32)
                          : cuda::kernels::experts_mma_supported(2, slots, E, true, false, true, pr.N, pr.K, 1, 32);
      if (!ok) {
        std::printf("%s: not supported\n", op.c_str());
        continue;
      }
      auto call = [&]() -> Status {
        if (wg_variant >= 0) {
          cuda::kernels::experts_wg(pr.in, pr.x_rows, pr.x_div, perm32, perm32 + slots, perm32 + slots + E + 1,
                                    slots, E, pr.w, pr.w + E, pr.N, pr.K, ws.data<float>(), pr.out,
                                    ctx.stream(), nullptr, wg_variant);
        } else if (var.v == kMem16 || var.v == kMem32 || var.v == kMemTiled) {
          cuda::kernels::experts_mma_memonly(var.v == kMem16   ? 1
                                             : var.v == kMem32 ? 2
                                                               : 3,
                                             perm8, perm8 + slots, perm8 + slots + E + 1, slots, E,
                                             pr.w, pr.w + E, pr.N, pr.K, pr.out, ctx.stream(), t8);
        } else if (v == 0) {
          cuda::kernels::gemv_experts_v2(pr.in, pr.x_div, perm, row_off, act_off, slots, E, pr.w, pr.w + E,
                                         false, pr.N, pr.K, 1, 32, pr.out, ctx.stream());
        } else if (v == cuda::kernels::kExpertsMmaV1) {
          cuda::kernels::experts_mma(pr.in, pr.x_rows, pr.x_div, perm, row_off, act_off, slots, E, pr.w,
                                     pr.w + E, pr.N, pr.K, ws.data<float>(), pr.out, ctx.stream(), v);
        } else {
          cuda::kernels::experts_mma(pr.in, pr.x_rows, pr.x_div, perm8, perm8 + slots, perm8 + slots + E + 1,
                                     slots, E, pr.w, pr.w + E, pr.N, pr.K, ws.data<float>(), pr.out,
                                     ctx.stream(), v, t8);
        }
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("experts launch failed");
      };
      ctx.measure(phase, op, shape, bytes, flops, call);
      // Session 12: a device fault is named by the row that caused it (every later call fails).
      if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
        std::fprintf(stderr, "[bench_ops] CUDA error after %s (B=%lld): %s\n", op.c_str(),
                     static_cast<long long>(B), cudaGetErrorString(e));
        return Internal("CUDA error after " + op + ": " + cudaGetErrorString(e));
      }
      // The same after a read-only flush (session 8) for the tensor-core variants of interest.
      if (v == kn::kExpertsMmaV1 || v == kn::kExpertsMmaV2Regs || v == kn::kExpertsMmaV3 || v >= kn::kExpertsMmaX16 ||
          var.v < 0)
        DI_RETURN_IF_ERROR(measure_clean(ctx, phase, op, shape, bytes, flops, flush, sink, call));
      if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
        std::fprintf(stderr, "[bench_ops] CUDA error after %s clean-l2 (B=%lld): %s\n", op.c_str(),
                     static_cast<long long>(B), cudaGetErrorString(e));
        return Internal("CUDA error after " + op + " clean-l2: " + cudaGetErrorString(e));
      }
    }
  }
  return OkStatus();
}

}  // namespace

void run_experts_mma_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& batches,
                           const std::string& only) {
  for (int64_t B : batches) {
    const Phase p{"experts mma B=" + std::to_string(B), true, B, 0};
    report_setup(ctx, p, "experts mma", mma_phase(ctx, m, B, only));
  }
}

}  // namespace deepinfer::bench_ops
