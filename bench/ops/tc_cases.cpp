// See tc_cases.h. Each projection is timed on the same weights and x: "linear_tc" (the
// tensor-core kernel with the split plan CudaBackend::linear uses in --batch-invariant mode),
// "linear_tc default split" (the plan of the default mode, when it differs), "small" / "wa"
// (linear_tc's bits, linear_tc_small.cuh / linear_tc_wa.cuh), "gemv_linear" (the default mode's decode GEMV, M ≤ 8) and "linear_wq" (the weight-only GEMV). Bytes: x, the stored weight and its scales, out, once each (the split
// partials are not counted). The fp32 products of the hyper-connection mixing (Backend::matmul)
// are timed as "matmul_fixed" (--batch-invariant; config 4 = the session-4 tile kernel) against
// "matmul cuBLAS" (the default mode).
#include "tc_cases.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_tc_small.h"
#include "backend/cuda/linear_tc_wa.h"
#include "backend/cuda/linear_tc_wg.h"
#include "device_fill.h"

namespace deepinfer::bench_ops {
namespace {

using backend::Tensor;
using backend::Weight;

// fmt 0 bf16 [N, K]; 1 FP8 [N, K] + UE8M0 128×128; 2 FP4 [N, K] + UE8M0 1×32.
StatusOr<Weight> make_weight(BenchContext& ctx, int fmt, int64_t N, int64_t K) {
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

// The fp32 products of the hyper-connection mixing: x [M, hc·hidden] · w [N, hc·hidden]ᵀ with
// N = (2 + hc)·hc (each layer's two sites) and N = hc (the head). Bytes: x, w, out once each.
Status matmul_phase(BenchContext& ctx, const ModelDims& m, int64_t M, const std::string& only) {
  struct Mm { const char* name; int64_t N, K; };
  const Mm mms[] = {{"hc mix (fn)", (2 + m.hc) * m.hc, m.hc * m.hidden},
                    {"hc head (fn)", m.hc, m.hc * m.hidden}};
  const std::string phase = "tc M=" + std::to_string(M);
  for (const Mm& c : mms) {
    DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({M, c.K}));
    DI_ASSIGN_OR_RETURN(Tensor w, ctx.randn({c.N, c.K}, 0.02f));
    DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {M, c.N}));
    const double bytes = 4.0 * (M * c.K + c.N * c.K + M * c.N), flops = 2.0 * M * c.N * c.K;
    const std::string shape = cat("x", backend::shape_str(x.shape()), " w", w.describe());
    const int picked = cuda::kernels::matmul_fixed_config(M, c.N, c.K, 1);
    for (int config : {picked, 4}) {
      const std::string op = cat("matmul_fixed ", c.name, config == 4 ? " (session-4 tiles)" : cat(" (config ", std::to_string(config), ")"));
      if (!only.empty() && op.find(only) == std::string::npos) continue;
      ctx.measure(phase, op, shape, bytes, flops, [&] {
        cuda::kernels::matmul_fixed(x.data<float>(), w.data<float>(), M, c.N, c.K, 1,
                                    out.data<float>(), ctx.stream(), config);
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("matmul_fixed launch failed");
      });
    }
    const std::string op = cat("matmul cuBLAS ", c.name);
    if (!only.empty() && op.find(only) == std::string::npos) continue;
    ctx.measure(phase, op, shape, bytes, flops, [&] { return ctx.backend().matmul(x, w, out, 1); });
  }
  return OkStatus();
}

// Session 10: linear_multi's sets under --batch-invariant — "wa2 multi <set>" (one wa2 launch
// for the set as DEEPINFER_SMALL_LINEAR=x2 makes it: cp.async slots, split sums in the kernel at
// M = 1) and "wa2 multi tma <set>" (TMA slots) vs "wa2 ref w multi <set>" (one linear_tc_wa call
// per weight, each with its split and reduce launch: the current path).
// Bytes: x once, every weight and scale, every out.
Status wa2_multi_phase(BenchContext& ctx, const ModelDims& m, int64_t M, const std::string& only) {
  if (M > cuda::kernels::kLinearTcWaMaxRows) return OkStatus();
  struct Set { const char* name; int fmt; int64_t K; std::vector<int64_t> N; };
  const Set sets[] = {
      {"fp8 wq_a + wkv", 1, m.hidden, {m.q_lora, m.head_dim}},
      {"bf16 CSA compressor wkv + wgate + indexer compressor wkv + wgate + weights_proj", 0, m.hidden,
       {2 * m.head_dim, 2 * m.head_dim, 2 * m.index_dim, 2 * m.index_dim, m.index_heads}},
      {"fp8 wq_b + indexer wq_b", 1, m.q_lora, {m.heads * m.head_dim, m.index_heads * m.index_dim}},
  };
  const std::string phase = "tc M=" + std::to_string(M);
  for (const Set& set : sets) {
    if (!only.empty() && std::string("wa2 multi ").append(set.name).find(only) == std::string::npos) continue;
    const int64_t K = set.K;
    const int n = static_cast<int>(set.N.size());
    std::vector<Weight> w(n);
    std::vector<Tensor> out(n), wsr(n);
    DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({M, K}));
    double bytes = 4.0 * M * K;
    double flops = 0;
    std::vector<cuda::kernels::WaProjection> pr(n);
    const int64_t bc = set.fmt == 1 ? 128 : 0;
    int64_t max_rows = 0;
    for (int i = 0; i < n; ++i) {
      DI_ASSIGN_OR_RETURN(w[i], make_weight(ctx, set.fmt, set.N[i], K));
      DI_ASSIGN_OR_RETURN(out[i], ctx.zeros(DType::kF32, {M, set.N[i]}));
      bytes += double(w[i].w.nbytes()) + (w[i].scale.defined() ? double(w[i].scale.nbytes()) : 0.0) + 4.0 * M * set.N[i];
      flops += 2.0 * M * set.N[i] * K;
      pr[i].w = w[i].w.raw();
      pr[i].scale = w[i].scale.defined() ? w[i].scale.raw() : nullptr;
      pr[i].x = x.data<float>();
      pr[i].lda = K;
      pr[i].out = out[i].data<float>();
      pr[i].N = set.N[i];
      pr[i].G = 1;
      pr[i].k_split = cuda::kernels::linear_tc_k_split(M, set.N[i], K, bc, /*batch_invariant=*/true);
      max_rows = std::max(max_rows, set.N[i]);
      if (pr[i].k_split < K) {
        DI_ASSIGN_OR_RETURN(wsr[i], ctx.zeros(DType::kF32, {(K + pr[i].k_split - 1) / pr[i].k_split, M, set.N[i]}));
      }
    }
    if (!cuda::kernels::linear_tc_wa2_supported(set.fmt, pr.data(), n, M, K, bc)) continue;
    const int64_t wsf = cuda::kernels::linear_tc_wa2_workspace_floats(pr.data(), n, M, K);
    Tensor ws;
    if (wsf > 0) {
      DI_ASSIGN_OR_RETURN(ws, ctx.zeros(DType::kF32, {wsf}));
    }
    const std::string shape = cat("x", backend::shape_str(x.shape()), " ", std::to_string(n), " weights");
    const int64_t br = set.fmt == 1 ? 128 : 1;
    ctx.measure(phase, cat("wa2 ref w multi ", set.name), shape, bytes, flops, [&] {
      for (int i = 0; i < n; ++i)
        cuda::kernels::linear_tc_wa(set.fmt, x.data<float>(), pr[i].w, pr[i].scale, false, M, set.N[i], K, 1, br, bc,
                                    pr[i].k_split, pr[i].out, wsr[i].defined() ? wsr[i].data<float>() : nullptr,
                                    ctx.stream());
      return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("linear_tc_wa launch failed");
    });
    const cuda::kernels::Wa2Options o = cuda::kernels::linear_tc_wa2_options(2, set.fmt, max_rows, K, M);
    cuda::kernels::Wa2Options otma = o;
    otma.geom = cuda::kernels::Wa2Geometry::kTmaSmall;
    for (const auto& [name, opt] : {std::pair<const char*, cuda::kernels::Wa2Options>{"wa2 multi ", o},
                                    std::pair<const char*, cuda::kernels::Wa2Options>{"wa2 multi tma ", otma}}) {
      const cuda::kernels::Wa2Options use = opt;
      ctx.measure(phase, cat(name, set.name), shape, bytes, flops, [&] {
        if (!cuda::kernels::linear_tc_wa2(set.fmt, pr.data(), n, false, M, K, br, bc,
                                          ws.defined() ? ws.data<float>() : nullptr, ctx.stream(), use))
          return Internal("linear_tc_wa2 refused");
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("linear_tc_wa2 launch failed");
      });
    }
  }
  return OkStatus();
}

Status tc_phase(BenchContext& ctx, const ModelDims& m, int64_t M, const std::string& only) {
  struct Lin { const char* name; int fmt; int64_t N, K, groups; };
  const Lin lins[] = {
      {"fp8 attn.wq_a", 1, m.q_lora, m.hidden, 1},
      {"fp8 attn.wkv", 1, m.head_dim, m.hidden, 1},
      {"fp8 attn.wq_b", 1, m.heads * m.head_dim, m.q_lora, 1},
      {"fp8 attn.wo_a (grouped)", 1, m.o_lora, m.heads * m.head_dim / m.o_groups, m.o_groups},
      {"fp8 attn.wo_b", 1, m.hidden, m.o_groups * m.o_lora, 1},
      {"fp8 shared_experts.w1", 1, m.expert_inter, m.hidden, 1},
      {"fp8 shared_experts.w2", 1, m.hidden, m.expert_inter, 1},
      {"fp8 indexer.wq_b", 1, m.index_heads * m.index_dim, m.q_lora, 1},  // session 9
      {"fp4 expert w1+w3 (one expert)", 2, 2 * m.expert_inter, m.hidden, 1},
      {"bf16 compressor.wkv (CSA)", 0, 2 * m.head_dim, m.hidden, 1},
      {"bf16 head", 0, m.vocab, m.hidden, 1},
  };
  const std::string phase = "tc M=" + std::to_string(M);
  for (const Lin& l : lins) {
    const bool want_tc = only.empty() || std::string("linear_tc ").append(l.name).find(only) != std::string::npos;
    const bool want_wq = only.empty() || std::string("linear_wq ").append(l.name).find(only) != std::string::npos;
    const bool want_gemv = only.empty() || std::string("gemv_linear ").append(l.name).find(only) != std::string::npos;
    const bool want_small = only.empty() || std::string("small ").append(l.name).find(only) != std::string::npos;
    const bool want_wa = only.empty() || std::string("wa ").append(l.name).find(only) != std::string::npos;
    const bool want_wa2 = only.empty() || std::string("wa2 x1 ").append(l.name).find(only) != std::string::npos;
    const bool want_wg =
        only.empty() || std::string("wg ").append(l.name).find(only) != std::string::npos;
    if (!want_tc && !want_wq && !want_gemv && !want_small && !want_wa && !want_wa2 && !want_wg)
      continue;
    const int64_t GN = l.groups * l.N, K = l.K;
    DI_ASSIGN_OR_RETURN(Weight w, make_weight(ctx, l.fmt, GN, K));
    DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({M, l.groups * K}));
    DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {M, GN}));
    const double bytes = 4.0 * M * l.groups * K + double(w.w.nbytes()) +
                         (w.scale.defined() ? double(w.scale.nbytes()) : 0.0) + 4.0 * M * GN;
    const double flops = 2.0 * M * GN * K;
    const std::string shape = cat("x", backend::shape_str(x.shape()), " w", w.w.describe());
    const void* scale = w.scale.defined() ? w.scale.raw() : nullptr;
    const int64_t bc = w.scale.defined() ? w.block_cols : 0;
    if (want_tc) {
      if (!cuda::kernels::linear_tc_supported(l.fmt, w.w.raw(), x.data<float>(), M, K, bc > 0, w.block_cols)) {
        std::printf("linear_tc %s: layout not supported\n", l.name);
      } else {
        const int64_t bi_split = cuda::kernels::linear_tc_k_split(M, GN, K, bc, /*batch_invariant=*/true);
        const int64_t def_split = cuda::kernels::linear_tc_k_split(M, GN, K, bc, /*batch_invariant=*/false);
        for (int plan = 0; plan < 2; ++plan) {
          if (plan == 1 && def_split == bi_split) continue;
          const int64_t k_split = plan == 0 ? bi_split : def_split;
          // Split partials in row slabs, as CudaBackend::linear does.
          const int64_t slab = cuda::kernels::linear_tc_slab_rows(M, GN, K, k_split);
          Tensor ws;
          if (k_split < K) {
            DI_ASSIGN_OR_RETURN(ws, ctx.zeros(DType::kF32, {(K + k_split - 1) / k_split, slab, GN}));
          }
          const char* mode = plan == 0 ? "" : " default split";
          ctx.measure(phase, cat("linear_tc", mode, " ", l.name, " (", std::to_string((K + k_split - 1) / k_split), " splits)"),
                      shape, bytes, flops, [&] {
            for (int64_t r0 = 0; r0 < M; r0 += slab)
              cuda::kernels::linear_tc(l.fmt, x.data<float>() + r0 * l.groups * K, w.w.raw(), scale, false,
                                       std::min(slab, M - r0), l.N, K, l.groups, w.block_rows,
                                       w.block_cols, k_split, out.data<float>() + r0 * GN,
                                       ws.defined() ? ws.data<float>() : nullptr, ctx.stream());
            return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("linear_tc launch failed");
          });
        }
      }
    }
    // Session 8: linear_tc_small (linear_tc_small.cuh): linear_tc's bits, weights through a ring in
    // shared memory; "small" with the batch-invariant split (cp.async fill), "small default split"
    // with the default mode's (when it differs), "small tma" the batch-invariant split with the
    // TMA bulk-copy fill, "small v3" with x split into terms per warp, "small wide" with 256-byte
    // ring slots per row (DEEPINFER_SMALL_LINEAR=v2 / v3 / v4); PDL launches, as
    // CudaBackend::linear makes them.
    if (want_small && cuda::kernels::linear_tc_small_supported(l.fmt, w.w.raw(), x.data<float>(), M, K, bc > 0, w.block_cols)) {
      const int64_t bi_split = cuda::kernels::linear_tc_k_split(M, GN, K, bc, /*batch_invariant=*/true);
      const int64_t def_split = cuda::kernels::linear_tc_k_split(M, GN, K, bc, /*batch_invariant=*/false);
      // 0: bi split, 1: default split, 2: bi split + TMA fill, 3: bi split + x split per warp,
      // 4: bi split + 256-byte slots, 5: default split + 256-byte slots
      for (int plan = 0; plan < 6; ++plan) {
        if (plan == 5 && def_split == bi_split) continue;
        if (plan == 1 && def_split == bi_split) continue;
        const int64_t k_split = plan == 1 || plan == 5 ? def_split : bi_split;
        Tensor ws;
        if (k_split < K) {
          DI_ASSIGN_OR_RETURN(ws, ctx.zeros(DType::kF32, {(K + k_split - 1) / k_split, M, GN}));
        }
        const char* mode = plan == 0 ? "" : plan == 1 ? " default split" : plan == 2 ? " tma"
                           : plan == 3 ? " v3" : plan == 4 ? " wide" : " wide default split";
        ctx.measure(phase, cat("small", mode, " ", l.name, " (", std::to_string((K + k_split - 1) / k_split),
                               " splits)"),
                    shape, bytes, flops, [&] {
          cuda::kernels::linear_tc_small(l.fmt, x.data<float>(), w.w.raw(), scale, false, M, l.N, K,
                                         l.groups, w.block_rows, w.block_cols, k_split,
                                         out.data<float>(), ws.defined() ? ws.data<float>() : nullptr,
                                         ctx.stream(), /*pdl=*/true, /*bulk=*/plan == 2,
                                         /*share_x=*/plan != 3, /*wide=*/plan >= 4);
          return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("linear_tc_small launch failed");
        });
      }
    }
    // Session 9: linear_tc_wa (linear_tc_wa.cuh): linear_tc's bits with the weight as the MMA's A
    // operand (M <= 16); "wa" with the batch-invariant split (PDL, x split per CTA, 128-row CTAs:
    // DEEPINFER_SMALL_LINEAR=w), "wa default split" with the default mode's (when it differs),
    // "wa w2" with x split per warp, "wa w3" with the short e4m3 decode (FP8 only), "wa w1"
    // without PDL, "wa 64-row" with 64-row CTAs (one m16 weight tile per warp), "wa wide" (bf16)
    // with 256-byte ring slots per row, 2 CTAs per SM (what w picks for the head), "wa deep" (FP8)
    // with 3 CTAs per SM and a deeper ring (bench only).
    if (want_wa && cuda::kernels::linear_tc_wa_supported(l.fmt, w.w.raw(), x.data<float>(), M, K, bc > 0, w.block_cols)) {
      const int64_t bi_split = cuda::kernels::linear_tc_k_split(M, GN, K, bc, /*batch_invariant=*/true);
      const int64_t def_split = cuda::kernels::linear_tc_k_split(M, GN, K, bc, /*batch_invariant=*/false);
      // 0: bi split (w), 1: default split, 2: w2, 3: w3, 4: w1, 5: 64-row CTAs, 6: wide (bf16),
      // 7: deep (fp8)
      for (int plan = 0; plan < 8; ++plan) {
        if (plan == 6 && l.fmt != 0) continue;
        if (plan == 7 && l.fmt != 1) continue;
        if (plan == 1 && def_split == bi_split) continue;
        if (plan == 3 && l.fmt != 1) continue;
        const int64_t k_split = plan == 1 ? def_split : bi_split;
        Tensor ws;
        if (k_split < K) {
          DI_ASSIGN_OR_RETURN(ws, ctx.zeros(DType::kF32, {(K + k_split - 1) / k_split, M, GN}));
        }
        const char* mode = plan == 0 ? "" : plan == 1 ? " default split" : plan == 2 ? " w2" : plan == 3 ? " w3"
                           : plan == 4 ? " w1" : plan == 5 ? " 64-row" : plan == 6 ? " wide" : " deep";
        ctx.measure(phase, cat("wa", mode, " ", l.name, " (", std::to_string((K + k_split - 1) / k_split), " splits)"),
                    shape, bytes, flops, [&] {
          cuda::kernels::linear_tc_wa(l.fmt, x.data<float>(), w.w.raw(), scale, false, M, l.N, K, l.groups,
                                      w.block_rows, w.block_cols, k_split, out.data<float>(),
                                      ws.defined() ? ws.data<float>() : nullptr, ctx.stream(),
                                      /*pdl=*/plan != 4, /*share_x=*/plan != 2, /*tiles_per_warp=*/plan == 5 ? 1 : 2,
                                      /*fast_e4m3=*/plan == 3, /*wide=*/plan == 6, /*deep=*/plan == 7);
          return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("linear_tc_wa launch failed");
        });
      }
    }
    // Session 17: linear_tc_wr (linear_tc_wr.cuh, DEEPINFER_LINEAR_WR): wa's bits with the weight
    // rows straight into registers (e4m3); "wr" with the batch-invariant split and the separate
    // reduce launch, "wr fused" with the split sums in each tile's last CTA (what
    // CudaBackend::linear runs at M = 1), "wr default split" with the default mode's split.
    if (want_wa && l.fmt == 1) {
      const int64_t bi_split =
          cuda::kernels::linear_tc_k_split(M, GN, K, bc, /*batch_invariant=*/true);
      const int64_t def_split =
          cuda::kernels::linear_tc_k_split(M, GN, K, bc, /*batch_invariant=*/false);
      for (int plan = 0; plan < 3; ++plan) {
        const int64_t k_split = plan == 2 ? def_split : bi_split;
        if (plan == 2 && def_split == bi_split) continue;
        if (!cuda::kernels::linear_tc_wr_supported(l.fmt, w.w.raw(), x.data<float>(), M, l.N, K,
                                                   l.groups, w.block_cols, k_split))
          continue;
        Tensor ws;
        if (k_split < K) {
          DI_ASSIGN_OR_RETURN(ws, ctx.zeros(DType::kF32, {(K + k_split - 1) / k_split, M, GN}));
        }
        const char* mode = plan == 0 ? "" : plan == 1 ? " fused" : " default split";
        ctx.measure(
            phase,
            cat("wr", mode, " ", l.name, " (", std::to_string((K + k_split - 1) / k_split),
                " splits)"),
            shape, bytes, flops, [&] {
              cuda::kernels::linear_tc_wr(x.data<float>(), w.w.raw(), scale, false, M, l.N, K,
                                          l.groups, w.block_rows, k_split, out.data<float>(),
                                          ws.defined() ? ws.data<float>() : nullptr, ctx.stream(),
                                          /*pdl=*/true, /*fused_reduce=*/plan == 1);
              return cudaGetLastError() == cudaSuccess ? OkStatus()
                                                       : Internal("linear_tc_wr launch failed");
            });
      }
    }
    // Session 18: linear_tc_wg (linear_tc_wg.h, DEEPINFER_LINEAR_WG): linear_tc's bits on
    // warpgroup MMA (bf16 / e4m3), the batch-invariant split, PDL launches (x split, product,
    // split sums) as CudaBackend::linear makes them; compare with the "small" rows (what
    // --batch-invariant ran at 17..64 rows before).
    if (want_wg && M <= cuda::kernels::kLinearTcWgMaxRows) {
      const int64_t k_split =
          cuda::kernels::linear_tc_k_split(M, GN, K, bc, /*batch_invariant=*/true);
      if (cuda::kernels::linear_tc_wg_supported(l.fmt, w.w.raw(), x.data<float>(), M, l.N, K,
                                                l.groups, w.block_cols, k_split)) {
        DI_ASSIGN_OR_RETURN(
            Tensor ws,
            ctx.zeros(DType::kU8, {static_cast<int64_t>(cuda::kernels::linear_tc_wg_workspace_bytes(
                                      M, l.N, K, l.groups, k_split))}));
        ctx.measure(
            phase,
            cat("wg ", l.name, " (", std::to_string((K + k_split - 1) / k_split), " splits)"),
            shape, bytes, flops, [&] {
              return cuda::kernels::linear_tc_wg(l.fmt, x.data<float>(), w.w.raw(), scale, false, M,
                                                 l.N, K, l.groups, w.block_rows, k_split,
                                                 out.data<float>(), ws.raw(), ctx.stream(),
                                                 /*pdl=*/true) &&
                             cudaGetLastError() == cudaSuccess
                         ? OkStatus()
                         : Internal("linear_tc_wg launch failed");
            });
      }
    }
    // Session 10: wa2 (linear_tc_wa.h, DEEPINFER_SMALL_LINEAR=x1..x4), the batch-invariant split:
    // "wa2 ref w" = the current path (linear_tc_wa as DEEPINFER_SMALL_LINEAR=w runs it), then
    // wa2's two fills (split sums in the kernel at M = 1, else a reduce launch): "small" (cp.async:
    // linear_multi's groups) and "tma small" (TMA boxes: the head under x1 / x2 / x4) — side by side
    // in the table (µs, GB/s, % of copy).
    if (want_wa2 && (l.fmt == 0 || l.fmt == 1) && M <= cuda::kernels::kLinearTcWaMaxRows &&
        cuda::kernels::linear_tc_wa_supported(l.fmt, w.w.raw(), x.data<float>(), M, K, bc > 0, w.block_cols)) {
      const int64_t k_split = cuda::kernels::linear_tc_k_split(M, GN, K, bc, /*batch_invariant=*/true);
      const std::string splits = cat(" (", std::to_string((K + k_split - 1) / k_split), " splits)");
      Tensor ws;
      if (k_split < K) {
        DI_ASSIGN_OR_RETURN(ws, ctx.zeros(DType::kF32, {(K + k_split - 1) / k_split, M, GN}));
      }
      float* wsp = ws.defined() ? ws.data<float>() : nullptr;
      const bool head_like = l.fmt == 0 && GN * K >= (int64_t{16} << 20);
      ctx.measure(phase, cat("wa2 ref w ", l.name, splits), shape, bytes, flops, [&] {
        cuda::kernels::linear_tc_wa(l.fmt, x.data<float>(), w.w.raw(), scale, false, M, l.N, K, l.groups,
                                    w.block_rows, w.block_cols, k_split, out.data<float>(), wsp, ctx.stream(),
                                    true, true, 2, false, head_like && M <= 8, false);
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("linear_tc_wa launch failed");
      });
      cuda::kernels::WaProjection pr;
      pr.w = w.w.raw();
      pr.scale = scale;
      pr.x = x.data<float>();
      pr.lda = l.groups * K;
      pr.out = out.data<float>();
      pr.N = l.N;
      pr.G = l.groups;
      pr.k_split = k_split;
      using G2 = cuda::kernels::Wa2Geometry;
      struct Row { const char* name; cuda::kernels::Wa2Options o; };
      const bool fuse1 = M == 1;
      std::vector<Row> rows;
      rows.push_back({"small", {G2::kSmall, fuse1, true}});
      rows.push_back({"tma small", {G2::kTmaSmall, fuse1, true}});
      if (head_like) {  // bench only: the TMA ring sized for fewer CTAs per SM (more slots each)
        rows.push_back({"tma small 3/SM", {G2::kTmaSmall, fuse1, true, 3}});
        rows.push_back({"tma small 2/SM", {G2::kTmaSmall, fuse1, true, 2}});
      }
      for (const Row& r : rows) {
        ctx.measure(phase, cat("wa2 ", r.name, " ", l.name, splits), shape, bytes, flops, [&] {
          if (!cuda::kernels::linear_tc_wa2(l.fmt, &pr, 1, false, M, K, w.block_rows, w.block_cols, wsp,
                                            ctx.stream(), r.o))
            return Internal("linear_tc_wa2 refused");
          return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("linear_tc_wa2 launch failed");
        });
      }
    }
    // The default mode's decode GEMV (gemv.cu; CudaBackend::linear without --batch-invariant).
    if (want_gemv && M <= cuda::kernels::kGemvMaxRows && cuda::kernels::gemv_supported(l.fmt, K, bc > 0, w.block_cols)) {
      ctx.measure(phase, cat("gemv_linear ", l.name, " (default mode)"), shape, bytes, flops, [&] {
        cuda::kernels::gemv_linear(l.fmt, x.data<float>(), w.w.raw(), scale, false, M, l.N, K, l.groups,
                                   w.block_rows, w.block_cols, out.data<float>(), ctx.stream());
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("gemv_linear launch failed");
      });
    }
    if (want_wq) {
      ctx.measure(phase, cat("linear_wq ", l.name), shape, bytes, flops, [&] {
        cuda::kernels::linear_wq(l.fmt, x.data<float>(), w.w.raw(), scale, false, M, l.N, K, l.groups,
                                 w.block_rows, w.block_cols, out.data<float>(), ctx.stream());
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("linear_wq launch failed");
      });
    }
  }
  DI_RETURN_IF_ERROR(wa2_multi_phase(ctx, m, M, only));
  return matmul_phase(ctx, m, M, only);
}

}  // namespace

void run_tc_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& tokens,
                  const std::string& only) {
  for (int64_t M : tokens) {
    const Phase p{"tc M=" + std::to_string(M), true, M, 0};
    report_setup(ctx, p, "tensor-core linear", tc_phase(ctx, m, M, only));
  }
}

}  // namespace deepinfer::bench_ops
