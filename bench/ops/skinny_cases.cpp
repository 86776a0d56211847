// See skinny_cases.h.
#include "skinny_cases.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "backend/cuda/gemv.h"
#include "backend/cuda/skinny_mma.h"
#include "routed_experts.h"

namespace deepinfer::bench_ops {
namespace {

using backend::Tensor;
using backend::Weight;

double weight_bytes(const Weight& w) {
  return double(w.w.nbytes()) + (w.scale.defined() ? double(w.scale.nbytes()) : 0.0);
}

bool wanted(const std::string& op, const std::string& only) {
  return only.empty() || op.find(only) != std::string::npos;
}

Status single_phase(BenchContext& ctx, const ModelDims& m, int64_t M, const std::string& only) {
  struct Lin { const char* name; int fmt; int64_t N, K; };
  const Lin lins[] = {
      {"fp8 attn.wq_a", 1, m.q_lora, m.hidden},
      {"fp8 attn.wq_b", 1, m.heads * m.head_dim, m.q_lora},
      {"fp8 attn.wkv", 1, m.head_dim, m.hidden},
      {"fp8 attn.wo_b", 1, m.hidden, m.o_groups * m.o_lora},
      {"fp8 indexer.wq_b", 1, m.index_heads * m.index_dim, m.q_lora},
      {"fp8 shared_experts.w1+w3", 1, 2 * m.expert_inter, m.hidden},
      {"fp8 shared_experts.w2", 1, m.hidden, m.expert_inter},
      {"bf16 compressor.wkv (CSA)", 0, 2 * m.head_dim, m.hidden},
      {"bf16 indexer compressor.wkv", 0, 2 * m.index_dim, m.hidden},
      {"bf16 ffn.gate", 0, m.experts, m.hidden},
      {"bf16 head", 0, m.vocab, m.hidden},
  };
  const std::string phase = "skinny M=" + std::to_string(M);
  for (const Lin& l : lins) {
    const std::string base = cat("skinny ", l.name), op_be = cat("skinny ref: backend linear ", l.name);
    const bool any = wanted(base, only) || wanted(op_be, only) || wanted(cat("skinny cluster ", l.name), only) ||
                     wanted(cat("skinny tc3 ", l.name), only) || wanted(cat("skinny s2 ", l.name), only) ||
                     wanted(cat("skinny product ", l.name), only);
    if (!any) continue;
    DI_ASSIGN_OR_RETURN(Weight w, stored_weight(ctx, l.fmt, l.N, l.K));
    DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({M, l.K}));
    DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {M, l.N}));
    DI_ASSIGN_OR_RETURN(Tensor ws, ctx.zeros(DType::kU8, {static_cast<int64_t>(cuda::kernels::skinny_workspace_bytes(M, l.K))}));
    const double bytes = 4.0 * M * l.K + weight_bytes(w) + 4.0 * M * l.N;
    const double flops = 2.0 * M * l.N * l.K;
    const void* scale = w.scale.defined() ? w.scale.raw() : nullptr;
    // The kernel (whether or not tc's pick takes the shape); "cluster": the k split up to 64 over a
    // cluster of CTAs where that changes it; tc3 (one m-tile per warp) where tc uses two (e4m3,
    // M >= 9); "s2": the k split forced to >= 2 (smaller CTAs) where that changes it.
    for (int v : {0, 1, 3, 4}) {
      cuda::kernels::SkinnyOptions o;
      o.variant = v == 3 ? 3 : 0;
      if (v == 1) o.max_split = 64;
      if (v == 4) o.min_split = 2;
      const std::string op = v == 0 ? base : v == 4 ? cat("skinny s2 ", l.name)
                             : v == 1 ? cat("skinny cluster ", l.name) : cat("skinny tc3 ", l.name);
      if (!wanted(op, only)) continue;
      if ((v == 1 || v == 4) &&
          cuda::kernels::skinny_split(l.fmt, l.N, l.K, o) == cuda::kernels::skinny_split(l.fmt, l.N, l.K, {}))
        continue;  // the same kernel as tc
      if (v == 3 && (l.fmt != 1 || M < 9)) continue;  // one m-tile per warp there anyway
      const std::string shape = cat("x", backend::shape_str(x.shape()), " w", w.w.describe(), " (split ",
                                    std::to_string(cuda::kernels::skinny_split(l.fmt, l.N, l.K, o)), ", cluster ",
                                    std::to_string(cuda::kernels::skinny_cluster_size(l.fmt, l.N, l.K, o)), ")");
      ctx.measure(phase, op, shape, bytes, flops, [&] {
        if (!cuda::kernels::skinny_linear(l.fmt, x.data<float>(), w.w.raw(), scale, false, M, l.N, l.K,
                                          w.block_rows, w.block_cols, out.data<float>(), ws.raw(),
                                          ctx.stream(), true, o))
          return Internal("skinny_linear refused the layout");
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("skinny launch failed");
      });
    }
    const std::string op_p = cat("skinny product ", l.name);
    if (wanted(op_p, only)) {
      cuda::kernels::skinny_split_x(l.fmt, x.data<float>(), M, l.K, ws.raw(), ctx.stream(), false);
      const cuda::kernels::SkinnyProjection pr{w.w.raw(), scale, out.data<float>(), l.N};
      ctx.measure(phase, op_p, cat("x", backend::shape_str(x.shape()), " w", w.w.describe()), bytes, flops, [&] {
        if (!cuda::kernels::skinny_product(l.fmt, &pr, 1, false, M, l.K, w.block_rows, ws.raw(), ctx.stream(),
                                           true, {}))
          return Internal("skinny_product refused the layout");
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("skinny launch failed");
      });
    }
    if (wanted(op_be, only)) {
      ctx.measure(phase, op_be, cat("x", backend::shape_str(x.shape()), " w", w.w.describe()), bytes, flops,
                  [&] { return ctx.backend().linear(x, w, out, 1); });
    }
  }
  return OkStatus();
}

// Projections of one x: one split and one product launch vs the backend's linear_multi.
Status multi_phase(BenchContext& ctx, const ModelDims& m, int64_t M, const std::string& only) {
  struct Set { const char* name; int fmt; std::vector<int64_t> N; };
  const Set sets[] = {
      {"fp8 attn.wq_a + attn.wkv", 1, {m.q_lora, m.head_dim}},
      {"bf16 CSA compressor wkv+wgate", 0, {2 * m.head_dim, 2 * m.head_dim}},
  };
  const int64_t K = m.hidden;
  const std::string phase = "skinny M=" + std::to_string(M);
  for (const Set& st : sets) {
    const std::string op_sk = cat("skinny multi ", st.name), op_be = cat("skinny ref: backend linear_multi ", st.name);
    if (!wanted(op_sk, only) && !wanted(op_be, only)) continue;
    std::vector<Weight> ws;
    std::vector<Tensor> outs;
    std::vector<cuda::kernels::SkinnyProjection> pr;
    double bytes = 4.0 * M * K;
    DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({M, K}));
    for (int64_t N : st.N) {
      DI_ASSIGN_OR_RETURN(Weight w, stored_weight(ctx, st.fmt, N, K));
      DI_ASSIGN_OR_RETURN(Tensor o, ctx.zeros(DType::kF32, {M, N}));
      bytes += weight_bytes(w) + 4.0 * M * N;
      ws.push_back(w);
      outs.push_back(o);
    }
    for (size_t j = 0; j < ws.size(); ++j)
      pr.push_back({ws[j].w.raw(), ws[j].scale.defined() ? ws[j].scale.raw() : nullptr, outs[j].data<float>(), st.N[j]});
    DI_ASSIGN_OR_RETURN(Tensor wsp, ctx.zeros(DType::kU8, {static_cast<int64_t>(cuda::kernels::skinny_workspace_bytes(M, K))}));
    const std::string shape = cat("x", backend::shape_str(x.shape()), ", ", std::to_string(ws.size()), " weights");
    if (wanted(op_sk, only)) {
      ctx.measure(phase, op_sk, shape, bytes, 0, [&] {
        cuda::kernels::skinny_split_x(st.fmt, x.data<float>(), M, K, wsp.raw(), ctx.stream(), true);
        if (!cuda::kernels::skinny_product(st.fmt, pr.data(), static_cast<int>(pr.size()), false, M, K, 128,
                                           wsp.raw(), ctx.stream(), true, {}))
          return Internal("skinny_product refused the set");
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("skinny launch failed");
      });
    }
    if (wanted(op_be, only)) {
      std::vector<const Weight*> wp;
      std::vector<Tensor*> op;
      for (size_t j = 0; j < ws.size(); ++j) wp.push_back(&ws[j]), op.push_back(&outs[j]);
      ctx.measure(phase, op_be, shape, bytes, 0, [&] { return ctx.backend().linear_multi(x, wp, op); });
    }
  }
  return OkStatus();
}

// Session 15: the grouped wo_a (G groups of o_lora × heads·head_dim / G) on skinny_mma vs session
// 5's grouped GEMV (what the backend ran before) and the backend's linear.
Status grouped_phase(BenchContext& ctx, const ModelDims& m, int64_t M, const std::string& only) {
  const int64_t G = m.o_groups, N = m.o_lora, K = m.heads * m.head_dim / m.o_groups;
  const std::string name = "fp8 attn.wo_a (grouped)";
  const std::string op_sk = cat("skinny grouped ", name), op_gv = cat("skinny ref: gemv ", name),
                    op_be = cat("skinny ref: backend linear ", name);
  if (!wanted(op_sk, only) && !wanted(op_gv, only) && !wanted(op_be, only)) return OkStatus();
  DI_ASSIGN_OR_RETURN(Weight w, stored_weight(ctx, 1, G * N, K));
  DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({M, G * K}));
  DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {M, G * N}));
  const cuda::kernels::SkinnyOptions o;
  const size_t wsb = cuda::kernels::skinny_grouped_workspace_bytes(1, G, N, M, K, o);
  DI_ASSIGN_OR_RETURN(Tensor ws,
                      ctx.zeros(DType::kU8, {static_cast<int64_t>(std::max<size_t>(wsb, 16))}));
  const double bytes = 4.0 * M * G * K + weight_bytes(w) + 4.0 * M * G * N;
  const double flops = 2.0 * M * G * N * K;
  const std::string phase = "skinny M=" + std::to_string(M);
  const std::string shape =
      cat("x", backend::shape_str(x.shape()), " w", w.w.describe(), " G=", std::to_string(G),
          " (split ", std::to_string(cuda::kernels::skinny_split(1, G * N, K, o)), ")");
  if (wanted(op_sk, only))
    ctx.measure(phase, op_sk, shape, bytes, flops, [&] {
      if (!cuda::kernels::skinny_grouped_linear(1, x.data<float>(), w.w.raw(), w.scale.raw(), false,
                                                M, G, N, K, w.block_rows, w.block_cols,
                                                out.data<float>(), ws.raw(), ctx.stream(), true, o))
        return Internal("skinny_grouped_linear refused the layout");
      return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("skinny launch failed");
    });
  if (wanted(op_gv, only) && M <= 8)
    ctx.measure(phase, op_gv, shape, bytes, flops, [&] {
      cuda::kernels::gemv_linear(1, x.data<float>(), w.w.raw(), w.scale.raw(), false, M, N, K, G,
                                 w.block_rows, w.block_cols, out.data<float>(), ctx.stream(), true);
      return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("gemv launch failed");
    });
  if (wanted(op_be, only))
    ctx.measure(phase, op_be, shape, bytes, flops,
                [&] { return ctx.backend().linear(x, w, out, G); });
  return OkStatus();
}

}  // namespace

void run_skinny_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& rows,
                      const std::string& only) {
  for (int64_t M : rows) {
    if (M < 1 || M > cuda::kernels::kSkinnyMaxRows) {
      std::fprintf(stderr, "bench_ops: --skinny-m %lld out of 1..16, skipped\n", static_cast<long long>(M));
      continue;
    }
    const Phase p{"skinny M=" + std::to_string(M), true, M, 0};
    Status s = single_phase(ctx, m, M, only);
    if (s.ok()) s = multi_phase(ctx, m, M, only);
    if (s.ok()) s = grouped_phase(ctx, m, M, only);
    if (!s.ok()) report_setup(ctx, p, "skinny", s);
  }
}

}  // namespace deepinfer::bench_ops
