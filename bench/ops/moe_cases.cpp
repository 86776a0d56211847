// See moe_cases.h. Bytes: the selected experts' weights and scales, x in and out, once each.
#include "moe_cases.h"

#include <cstdio>
#include <random>
#include <set>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_tc.h"
#include "device_fill.h"
#include "routed_experts.h"

namespace deepinfer::bench_ops {
namespace {

using backend::Tensor;
using backend::Weight;

Status moe_phase(BenchContext& ctx, const ModelDims& m, int64_t T, const std::string& only) {
  const int64_t k = m.top_k, H = m.hidden, I = m.expert_inter, E = m.experts, slots = T * k;
  const std::string phase = "moe tc T=" + std::to_string(T);
  DI_ASSIGN_OR_RETURN(RandomExperts rx, random_fp4_experts(ctx, E, H, I));
  const backend::ExpertSet& experts = rx.set;
  std::set<int32_t> distinct;
  const std::vector<int32_t> ids = random_routing(ctx, T, k, E, &distinct);
  DI_ASSIGN_OR_RETURN(Tensor ids_t, ctx.upload_i32({T, k}, ids));
  DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({T, H}));
  DI_ASSIGN_OR_RETURN(Tensor wts, ctx.randn({T, k}, 0.2f));
  DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {T, H}));
  const double n_active = double(distinct.size());
  const double gu_bytes = 2.0 * I * H / 2 + 2.0 * I * H / 32, dn_bytes = double(H) * I / 2 + double(H) * I / 32;
  const std::string shape_all = cat(std::to_string(distinct.size()), " of ", std::to_string(E),
                                    " experts, ", std::to_string(slots), " slots");
  const std::string op_be = "moe_experts fp4 (whole op, backend dispatch)";
  if (only.empty() || op_be.find(only) != std::string::npos) {
    const double flops = 2.0 * slots * (2.0 * I * H + double(H) * I);
    const double bytes = n_active * (gu_bytes + dn_bytes) + 4.0 * (2.0 * T * H + slots * (3.0 * I + H));
    ctx.measure(phase, op_be, shape_all, bytes, flops,
                [&] { return ctx.backend().moe_experts(x, ids_t, wts, experts, 10.f, out); });
  }

  const auto* tab = static_cast<const void* const*>(rx.table.raw());
  // The grouping of each kernel version (v1: 16 / 64-row tiles, v2: 32 / 64), done once outside
  // the timing.
  const int tr[2] = {cuda::kernels::experts_tc_tile_rows(slots, E), cuda::kernels::moe_tc_tile_rows(slots, E)};
  DI_ASSIGN_OR_RETURN(Tensor grp, ctx.zeros(DType::kI32, {2 * (slots + 2 * (E + 1))}));
  DI_ASSIGN_OR_RETURN(Tensor flag, ctx.zeros(DType::kI32, {1}));
  int32_t *perm[2], *row_off[2], *tile_off[2];
  for (int v = 0; v < 2; ++v) {
    perm[v] = grp.data<int32_t>() + v * (slots + 2 * (E + 1));
    row_off[v] = perm[v] + slots;
    tile_off[v] = row_off[v] + E + 1;
    cuda::kernels::moe_group(ids_t.data<int32_t>(), slots, E, tr[v], perm[v], row_off[v], tile_off[v],
                             flag.data<int32_t>(), ctx.stream());
  }
  DI_ASSIGN_OR_RETURN(Tensor act, ctx.randn({slots, I}));
  DI_ASSIGN_OR_RETURN(Tensor gu, ctx.zeros(DType::kF32, {slots, 2 * I}));
  DI_ASSIGN_OR_RETURN(Tensor y, ctx.zeros(DType::kF32, {slots, H}));
  struct Proj { const char* name; const Tensor* in; int64_t x_div, N, K; const void* const* w; double wbytes; float* out; };
  const Proj projs[] = {
      {"gate_up", &x, k, 2 * I, H, tab, gu_bytes, gu.data<float>()},
      {"down", &act, 1, H, I, tab + 2 * E, dn_bytes, y.data<float>()},
  };
  for (const Proj& pr : projs) {
    const int64_t x_rows = pr.in->dim(0);
    DI_ASSIGN_OR_RETURN(Tensor terms, ctx.zeros(DType::kBF16, {3, x_rows, pr.K}));
    cuda::kernels::moe_tc_split_terms(pr.in->data<float>(), x_rows, pr.K, terms.data<uint16_t>(), ctx.stream());
    const double bytes = n_active * pr.wbytes + 4.0 * (x_rows * pr.K + slots * pr.N);
    const double flops = 2.0 * slots * double(pr.N) * pr.K;
    const std::string shape = cat(shape_all, ", [", std::to_string(pr.N), ", ", std::to_string(pr.K), "] fp4");
    const std::string op_split = cat("moe_tc split_terms ", pr.name);
    if (only.empty() || op_split.find(only) != std::string::npos) {
      ctx.measure(phase, op_split, cat("x [", std::to_string(x_rows), ", ", std::to_string(pr.K), "]"),
                  4.0 * x_rows * pr.K + 6.0 * x_rows * pr.K, 0, [&] {
        cuda::kernels::moe_tc_split_terms(pr.in->data<float>(), x_rows, pr.K, terms.data<uint16_t>(), ctx.stream());
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("split_terms launch failed");
      });
    }
    // Index v = the moe_tc_experts variant (0: v1 through experts_tc; 4: v3, moe_tc_v3.cuh).
    const char* names[] = {"experts_tc v1", "moe_tc v2", "moe_tc v2s3", "moe_tc v2n256", "moe_tc v3"};
    for (int v = 0; v < 5; ++v) {
      const int g = v == 0 ? 0 : 1;
      const std::string op = cat(names[v], " fp4 ", pr.name, " (", std::to_string(tr[g]), "-row tiles)");
      if (!only.empty() && op.find(only) == std::string::npos) continue;
      if (v > 1 && tr[1] == 32) continue;  // 32-row tiles: one v2 kernel, whatever the variant
      if (v > 0 && !cuda::kernels::moe_tc_supported(2, pr.in->data<float>(), slots, E, pr.K, true, 32, tr[1])) {
        std::printf("%s: not supported\n", op.c_str());
        continue;
      }
      ctx.measure(phase, op, shape, bytes, flops, [&] {
        if (v == 0) {
          cuda::kernels::experts_tc(2, pr.in->data<float>(), pr.x_div, perm[0], row_off[0], tile_off[0], tr[0],
                                    slots, E, pr.w, pr.w + E, false, pr.N, pr.K, 1, 32, pr.out, ctx.stream());
        } else {
          cuda::kernels::moe_tc_experts(v, terms.data<uint16_t>(), x_rows, pr.x_div, perm[1], row_off[1],
                                        tile_off[1], tr[1], slots, E, pr.w, pr.w + E, false, pr.N, pr.K, 1, 32,
                                        pr.out, ctx.stream());
        }
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("experts launch failed");
      });
    }
  }
  return OkStatus();
}

}  // namespace

void run_moe_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& tokens,
                   const std::string& only) {
  for (int64_t T : tokens) {
    const Phase p{"moe tc T=" + std::to_string(T), false, T, 0};
    report_setup(ctx, p, "moe tensor-core experts", moe_phase(ctx, m, T, only));
  }
}

}  // namespace deepinfer::bench_ops
