// See gemv_cases.h. Bytes: x, the stored weight and its scales, out, once each; for the experts
// the weights (and scales) of the distinct experts the batch selects, counted on the host from
// the routing, plus the activations in and out.
#include "gemv_cases.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"
#include "device_fill.h"
#include "routed_experts.h"

namespace deepinfer::bench_ops {
namespace {

using backend::Tensor;
using backend::Weight;

double weight_bytes(const Weight& w) {
  return double(w.w.nbytes()) + (w.scale.defined() ? double(w.scale.nbytes()) : 0.0);
}

Status linear_phase(BenchContext& ctx, const ModelDims& m, int64_t M, const std::string& only) {
  struct Lin { const char* name; int fmt; int64_t N, K, groups; };
  const Lin lins[] = {
      {"fp8 attn.wq_a", 1, m.q_lora, m.hidden, 1},
      {"fp8 attn.wq_b", 1, m.heads * m.head_dim, m.q_lora, 1},
      {"fp8 attn.wkv", 1, m.head_dim, m.hidden, 1},
      {"fp8 attn.wo_a (grouped)", 1, m.o_lora, m.heads * m.head_dim / m.o_groups, m.o_groups},
      {"fp8 attn.wo_b", 1, m.hidden, m.o_groups * m.o_lora, 1},
      {"fp8 indexer.wq_b", 1, m.index_heads * m.index_dim, m.q_lora, 1},
      {"fp8 shared_experts.w1+w3", 1, 2 * m.expert_inter, m.hidden, 1},
      {"fp8 shared_experts.w2", 1, m.hidden, m.expert_inter, 1},
      {"fp8 4096x4096", 1, 4096, 4096, 1},
      {"fp4 expert w1+w3 (one expert)", 2, 2 * m.expert_inter, m.hidden, 1},
      {"fp4 expert w2 (one expert)", 2, m.hidden, m.expert_inter, 1},
      {"bf16 compressor.wkv (CSA)", 0, 2 * m.head_dim, m.hidden, 1},
      {"bf16 ffn.gate", 0, m.experts, m.hidden, 1},
      {"bf16 head", 0, m.vocab, m.hidden, 1},
  };
  const std::string phase = "gemv M=" + std::to_string(M);
  for (const Lin& l : lins) {
    const std::string op_new = cat("gemv ", l.name), op_old = cat("linear_wq ", l.name);
    const bool want_new = only.empty() || op_new.find(only) != std::string::npos;
    const bool want_old = M == 1 && (only.empty() || op_old.find(only) != std::string::npos);
    if (!want_new && !want_old) continue;
    const int64_t GN = l.groups * l.N, K = l.K;
    if (!cuda::kernels::gemv_supported(l.fmt, K, l.fmt != 0, l.fmt == 0 ? 1 : l.fmt == 1 ? 128 : 32)) {
      std::printf("gemv %s: not supported\n", l.name);
      continue;
    }
    DI_ASSIGN_OR_RETURN(Weight w, stored_weight(ctx, l.fmt, GN, K));
    DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({M, l.groups * K}));
    DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {M, GN}));
    const double bytes = 4.0 * M * l.groups * K + weight_bytes(w) + 4.0 * M * GN;
    const double flops = 2.0 * M * GN * K;
    const int64_t mt = cuda::kernels::gemv_tile_rows(M, K);
    const std::string shape = cat("x", backend::shape_str(x.shape()), " w", w.w.describe(), " (",
                                  std::to_string((M + mt - 1) / mt), " pass)");
    const void* scale = w.scale.defined() ? w.scale.raw() : nullptr;
    if (want_new) {
      ctx.measure(phase, op_new, shape, bytes, flops, [&] {
        cuda::kernels::gemv_linear(l.fmt, x.data<float>(), w.w.raw(), scale, false, M, l.N, K,
                                   l.groups, w.block_rows, w.block_cols, out.data<float>(), ctx.stream());
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("gemv launch failed");
      });
    }
    // Session 8: the v3 kernel (gemv_v3.cuh, TMA ring), each option variant (DEEPINFER_GEMV_KERNEL
    // v1 = auto, v2 two CTAs per SM, v3 deep ring, v4 integer e4m3 decode, a f16 bit-move decode).
    if (l.fmt == 0 || l.fmt == 1) {
      for (int v = 1; v <= 5; ++v) {
        const std::string vn = v == 5 ? std::string("a") : cat("v", std::to_string(v));
        const std::string op3 = v == 1 ? cat("gemv3 ", l.name) : cat("gemv3 ", vn, " ", l.name);
        if (!only.empty() && op3.find(only) == std::string::npos) continue;
        cuda::kernels::Gemv3Options o3;
        cuda::kernels::gemv3_options_for(vn.c_str(), &o3);
        const int passes = cuda::kernels::gemv3_passes(l.fmt, M, K, o3);
        const std::string shape3 = cat("x", backend::shape_str(x.shape()), " w", w.w.describe(), " (",
                                       std::to_string(passes), " pass)");
        ctx.measure(phase, op3, shape3, bytes, flops, [&] {
          if (!cuda::kernels::gemv3_linear(l.fmt, x.data<float>(), w.w.raw(), scale, false, M, l.N, K,
                                           l.groups, w.block_rows, w.block_cols, out.data<float>(),
                                           ctx.stream(), false, o3))
            return Internal("gemv3 refused the layout");
          return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("gemv3 launch failed");
        });
      }
    }
    // Session 6: the pipelined kernel (gemv_multi.cuh) with one projection, both variants, and
    // whatever CudaBackend::linear dispatches to at this M (GEMV, or linear_tc above it).
    const bool plain = l.groups == 1 && cuda::kernels::gemv_multi_supported(l.fmt, K, l.fmt == 1, 128);
    for (bool deep : {false, true}) {
      const std::string op2 = cat(deep ? "gemv2 deep " : "gemv2 ", l.name);
      if (!plain || (!only.empty() && op2.find(only) == std::string::npos)) continue;
      const cuda::kernels::GemvProjection pr{w.w.raw(), scale, out.data<float>(), l.N};
      ctx.measure(phase, op2, shape, bytes, flops, [&] {
        if (!cuda::kernels::gemv_multi(l.fmt, x.data<float>(), &pr, 1, false, M, K, w.block_rows,
                                       w.block_cols, deep, ctx.stream()))
          return Internal("gemv_multi refused the layout");
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("gemv_multi launch failed");
      });
    }
    const std::string op_be = cat("backend linear ", l.name);
    if (l.fmt != 2 && (only.empty() || op_be.find(only) != std::string::npos)) {
      ctx.measure(phase, op_be, shape, bytes, flops,
                  [&] { return ctx.backend().linear(x, w, out, l.groups); });
    }
    if (want_old) {
      ctx.measure(phase, op_old, shape, bytes, flops, [&] {
        cuda::kernels::linear_wq(l.fmt, x.data<float>(), w.w.raw(), scale, false, M, l.N, K,
                                 l.groups, w.block_rows, w.block_cols, out.data<float>(), ctx.stream());
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("linear_wq launch failed");
      });
    }
  }
  return OkStatus();
}

// Projections of one x (decode step of the V4 attention): one launch per projection with the
// session-5 kernel and with the session-6 kernel, and all of them in one gemv_multi launch.
// Bytes: every weight and its scales, x once, every output.
Status multi_phase(BenchContext& ctx, const ModelDims& m, int64_t M, const std::string& only) {
  struct Set { const char* name; int fmt; std::vector<int64_t> N; };
  const Set sets[] = {
      {"fp8 attn.wq_a + attn.wkv", 1, {m.q_lora, m.head_dim}},
      {"bf16 CSA compressor wkv+wgate + indexer compressor wkv+wgate", 0,
       {2 * m.head_dim, 2 * m.head_dim, 2 * m.index_dim, 2 * m.index_dim}},
      {"bf16 HCA compressor wkv+wgate", 0, {m.head_dim, m.head_dim}},
  };
  const int64_t K = m.hidden;
  const std::string phase = "gemv M=" + std::to_string(M);
  for (const Set& st : sets) {
    std::vector<Weight> ws;
    std::vector<Tensor> outs;
    std::vector<cuda::kernels::GemvProjection> pr;
    double bytes = 0;
    int64_t total_n = 0;
    DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({M, K}));
    for (int64_t N : st.N) {
      DI_ASSIGN_OR_RETURN(Weight w, stored_weight(ctx, st.fmt, N, K));
      DI_ASSIGN_OR_RETURN(Tensor o, ctx.zeros(DType::kF32, {M, N}));
      bytes += weight_bytes(w) + 4.0 * M * N;
      total_n += N;
      ws.push_back(w);
      outs.push_back(o);
    }
    for (size_t j = 0; j < ws.size(); ++j)
      pr.push_back({ws[j].w.raw(), ws[j].scale.defined() ? ws[j].scale.raw() : nullptr,
                    outs[j].data<float>(), st.N[j]});
    bytes += 4.0 * M * K;
    const double flops = 2.0 * M * total_n * K;
    const std::string shape = cat("x [", std::to_string(M), ", ", std::to_string(K), "], ",
                                  std::to_string(st.N.size()), " weights, ", std::to_string(total_n),
                                  " rows");
    const int64_t br = ws[0].block_rows, bc = ws[0].block_cols;
    auto ok = [] { return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("launch failed"); };
    const std::string ops[] = {cat("multi ", st.name, ": separate, gemv (session 5)"),
                               cat("multi ", st.name, ": separate, gemv2"),
                               cat("multi ", st.name, ": one launch, gemv2"),
                               cat("multi ", st.name, ": one launch, gemv2 deep"),
                               cat("multi ", st.name, ": one launch, gemv3"),
                               cat("multi ", st.name, ": one launch, gemv3 v2")};
    for (int v = 0; v < 6; ++v) {
      if (!only.empty() && ops[v].find(only) == std::string::npos) continue;
      ctx.measure(phase, ops[v], shape, bytes, flops, [&]() -> Status {
        if (v >= 4) {
          cuda::kernels::Gemv3Options o3;
          o3.ctas_per_sm = v == 5 ? 2 : 1;
          if (!cuda::kernels::gemv3_multi(st.fmt, x.data<float>(), pr.data(), static_cast<int>(pr.size()),
                                          false, M, K, br, bc, ctx.stream(), false, o3))
            return Internal("gemv3_multi refused the layout");
        } else if (v == 0) {
          for (size_t j = 0; j < ws.size(); ++j)
            cuda::kernels::gemv_linear(st.fmt, x.data<float>(), pr[j].w, pr[j].scale, false, M,
                                       st.N[j], K, 1, br, bc, pr[j].out, ctx.stream());
        } else if (v == 1) {
          for (size_t j = 0; j < ws.size(); ++j)
            if (!cuda::kernels::gemv_multi(st.fmt, x.data<float>(), &pr[j], 1, false, M, K, br, bc,
                                           false, ctx.stream()))
              return Internal("gemv_multi refused the layout");
        } else if (!cuda::kernels::gemv_multi(st.fmt, x.data<float>(), pr.data(),
                                              static_cast<int>(pr.size()), false, M, K, br, bc,
                                              v == 3, ctx.stream())) {
          return Internal("gemv_multi refused the layout");
        }
        return ok();
      });
    }
  }
  return OkStatus();
}

// Session 7: back-to-back decode launches, each reading the previous output, with programmatic
// dependent launch (pdl.cuh) off and on (and the on-launch's L2 prefetch budget varied); the L2
// is flushed only before the chain (BenchContext::measure), µs per chain. Chains: one attention
// block's dense products (wq_a + wkv in one gemv_multi launch as linear_multi makes it, rms_norm
// on q as the q_norm, wq_b, the grouped wo_a, wo_b: FP8, 128×128 scales), 8 FP8 GEMVs of wq_a's
// size (4096 → 1024 and 1024 → 4096 alternating, 4 MB each), and the attention chain through
// CudaBackend (linear_multi / linear: whatever DEEPINFER_GEMV_PDL and the dispatch pick).
// Bytes: every weight and its scales + every activation read and written once.
Status chain_phase(BenchContext& ctx, const ModelDims& m, int64_t M, const std::string& only) {
  const std::string phase = "gemv chain M=" + std::to_string(M);
  const std::string attn = "chain attention fp8: wq_a+wkv (gemv2) > rms_norm > wq_b > wo_a (8 groups) > wo_b";
  const std::string eight = "chain 8 x fp8 4 MB (4096>1024, 1024>4096 alternating)";
  const std::string backend_attn = "chain attention fp8 via CudaBackend (env DEEPINFER_GEMV_PDL)";
  auto wanted = [&](const std::string& op) { return only.empty() || op.find(only) != std::string::npos; };
  if (!wanted(attn) && !wanted(eight) && !wanted(backend_attn) && !wanted("pdl") &&
      !wanted("chain attention fp8 gemv3") && !wanted("gemv3]"))
    return OkStatus();
  namespace k = cuda::kernels;
  const int64_t H = m.hidden, QL = m.q_lora, KV = m.head_dim, HD = m.heads * m.head_dim;
  const int64_t OG = m.o_groups, OL = m.o_lora;
  DI_ASSIGN_OR_RETURN(Weight wq_a, stored_weight(ctx, 1, QL, H));
  DI_ASSIGN_OR_RETURN(Weight wkv, stored_weight(ctx, 1, KV, H));
  DI_ASSIGN_OR_RETURN(Weight wq_b, stored_weight(ctx, 1, HD, QL));
  DI_ASSIGN_OR_RETURN(Weight wo_a, stored_weight(ctx, 1, OG * OL, HD / OG));
  DI_ASSIGN_OR_RETURN(Weight wo_b, stored_weight(ctx, 1, H, OG * OL));
  DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({M, H}));
  DI_ASSIGN_OR_RETURN(Tensor q, ctx.zeros(DType::kF32, {M, QL}));
  DI_ASSIGN_OR_RETURN(Tensor kv, ctx.zeros(DType::kF32, {M, KV}));
  DI_ASSIGN_OR_RETURN(Tensor qn, ctx.zeros(DType::kF32, {M, QL}));
  DI_ASSIGN_OR_RETURN(Tensor norm_w, ctx.randn({QL}, 0.1f));
  DI_ASSIGN_OR_RETURN(Tensor hb, ctx.zeros(DType::kF32, {M, HD}));
  DI_ASSIGN_OR_RETURN(Tensor o, ctx.zeros(DType::kF32, {M, OG * OL}));
  DI_ASSIGN_OR_RETURN(Tensor y, ctx.zeros(DType::kF32, {M, H}));
  std::vector<Weight> ring;  // the 8-chain: even 4096 → 1024, odd 1024 → 4096
  for (int i = 0; i < 8; ++i) {
    DI_ASSIGN_OR_RETURN(Weight w, stored_weight(ctx, 1, i % 2 == 0 ? QL : H, i % 2 == 0 ? H : QL));
    ring.push_back(std::move(w));
  }
  DI_ASSIGN_OR_RETURN(Tensor a0, ctx.randn({M, H}));
  DI_ASSIGN_OR_RETURN(Tensor a1, ctx.zeros(DType::kF32, {M, H}));
  DI_ASSIGN_OR_RETURN(Tensor b0, ctx.zeros(DType::kF32, {M, QL}));
  DI_RETURN_IF_ERROR(ctx.backend().synchronize());  // the weights are filled on the device: done
  const cudaStream_t s = ctx.stream();
  auto ok = [] { return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("gemv launch failed"); };
  auto lin = [&](const Weight& w, const Tensor& in, int64_t G, Tensor& out, bool pdl) {
    k::gemv_linear(1, in.data<float>(), w.w.raw(), w.scale.raw(), false, M, w.rows() / G, w.cols(), G,
                   w.block_rows, w.block_cols, out.data<float>(), s, pdl);
  };
  auto attn_chain = [&](bool pdl) -> Status {
    const k::GemvProjection pr[2] = {{wq_a.w.raw(), wq_a.scale.raw(), q.data<float>(), QL},
                                     {wkv.w.raw(), wkv.scale.raw(), kv.data<float>(), KV}};
    if (!k::gemv_multi(1, x.data<float>(), pr, 2, false, M, H, 128, 128, false, s, pdl))
      return Internal("gemv_multi refused wq_a + wkv");
    DI_RETURN_IF_ERROR(ctx.backend().rms_norm(q, &norm_w, 1e-6f, qn));
    lin(wq_b, qn, 1, hb, pdl);
    lin(wo_a, hb, OG, o, pdl);
    lin(wo_b, o, 1, y, pdl);
    return ok();
  };
  auto eight_chain = [&](bool pdl) -> Status {
    for (int i = 0; i < 8; ++i) {
      if (i % 2 == 0) lin(ring[i], i % 4 == 0 ? a0 : a1, 1, b0, pdl);
      else lin(ring[i], b0, 1, i % 4 == 1 ? a1 : a0, pdl);
    }
    return ok();
  };
  double attn_w = 0, attn_f = 0, eight_w = 0, eight_f = 0;
  for (const Weight* w : {&wq_a, &wkv, &wq_b, &wo_a, &wo_b}) {
    attn_w += weight_bytes(*w);
    attn_f += 2.0 * M * double(w->rows()) * double(w->cols());  // wo_a: G·N rows of K / G
  }
  for (const Weight& w : ring) eight_w += weight_bytes(w), eight_f += 2.0 * M * double(w.rows()) * w.cols();
  const double attn_bytes = attn_w + 4.0 * M * (H + 2 * QL + KV + 2 * QL + 2 * HD + 2 * OG * OL + H + QL);
  const double eight_bytes = eight_w + 4.0 * M * 8 * (H + QL);
  const std::string attn_shape = cat("x [", std::to_string(M), ", ", std::to_string(H), "], 5 weights ",
                                     std::to_string(static_cast<int64_t>(attn_w / 1e6)), " MB, 5 launches");
  const std::string eight_shape = cat("x [", std::to_string(M), ", ", std::to_string(H), "], 8 weights ",
                                      std::to_string(static_cast<int64_t>(eight_w / 1e6)), " MB, 8 launches");
  struct Variant { std::string name; bool pdl; int64_t pf; };
  const std::vector<Variant> variants = {
      {"pdl off", false, 0},
      {"pdl on, no L2 prefetch", true, 0},
      {"pdl on, L2 prefetch 8 MB (default)", true, k::kGemvPdlPrefetchDefault},
      {"pdl on, L2 prefetch 32 MB", true, int64_t{32} << 20},
      {"pdl on, L2 prefetch all", true, int64_t{1} << 32},
  };
  const int64_t saved = k::gemv_pdl_prefetch_bytes();
  for (const Variant& v : variants) {
    k::gemv_set_pdl_prefetch_bytes(v.pf);
    const std::string op_a = cat(attn, " [", v.name, "]"), op_e = cat(eight, " [", v.name, "]");
    if (wanted(op_a)) ctx.measure(phase, op_a, attn_shape, attn_bytes, attn_f, [&] { return attn_chain(v.pdl); });
    if (wanted(op_e)) ctx.measure(phase, op_e, eight_shape, eight_bytes, eight_f, [&] { return eight_chain(v.pdl); });
  }
  k::gemv_set_pdl_prefetch_bytes(saved);
  // Session 8: the same chains on the v3 kernel (gemv_v3.cuh), PDL off / on, v1 and v2.
  for (int v : {1, 2}) {
    k::Gemv3Options o3;
    o3.ctas_per_sm = v;
    auto lin3 = [&](const Weight& w, const Tensor& in, int64_t G, Tensor& out, bool pdl) {
      return k::gemv3_linear(1, in.data<float>(), w.w.raw(), w.scale.raw(), false, M, w.rows() / G, w.cols(), G,
                             w.block_rows, w.block_cols, out.data<float>(), s, pdl, o3);
    };
    for (bool pdl : {false, true}) {
      const std::string tagv = cat(" [gemv3", v == 2 ? " v2" : "", pdl ? ", pdl on]" : ", pdl off]");
      const std::string op_a = cat("chain attention fp8 gemv3: wq_a+wkv > rms_norm > wq_b > wo_a > wo_b", tagv);
      const std::string op_e = cat(eight, tagv);
      if (wanted(op_a))
        ctx.measure(phase, op_a, attn_shape, attn_bytes, attn_f, [&]() -> Status {
          const k::GemvProjection pr[2] = {{wq_a.w.raw(), wq_a.scale.raw(), q.data<float>(), QL},
                                           {wkv.w.raw(), wkv.scale.raw(), kv.data<float>(), KV}};
          if (!k::gemv3_multi(1, x.data<float>(), pr, 2, false, M, H, 128, 128, s, pdl, o3))
            return Internal("gemv3_multi refused wq_a + wkv");
          DI_RETURN_IF_ERROR(ctx.backend().rms_norm(q, &norm_w, 1e-6f, qn));
          if (!lin3(wq_b, qn, 1, hb, pdl) || !lin3(wo_a, hb, OG, o, pdl) || !lin3(wo_b, o, 1, y, pdl))
            return Internal("gemv3 refused a chain weight");
          return ok();
        });
      if (wanted(op_e))
        ctx.measure(phase, op_e, eight_shape, eight_bytes, eight_f, [&]() -> Status {
          for (int i = 0; i < 8; ++i) {
            const bool okl = i % 2 == 0 ? lin3(ring[i], i % 4 == 0 ? a0 : a1, 1, b0, pdl)
                                        : lin3(ring[i], b0, 1, i % 4 == 1 ? a1 : a0, pdl);
            if (!okl) return Internal("gemv3 refused a chain weight");
          }
          return ok();
        });
    }
  }
  if (wanted(backend_attn)) {
    ctx.measure(phase, backend_attn, attn_shape, attn_bytes, attn_f, [&]() -> Status {
      const Weight* ws[2] = {&wq_a, &wkv};
      Tensor* outs[2] = {&q, &kv};
      DI_RETURN_IF_ERROR(ctx.backend().linear_multi(x, ws, outs));
      DI_RETURN_IF_ERROR(ctx.backend().rms_norm(q, &norm_w, 1e-6f, qn));
      DI_RETURN_IF_ERROR(ctx.backend().linear(qn, wq_b, hb, 1));
      DI_RETURN_IF_ERROR(ctx.backend().linear(hb, wo_a, o, OG));
      return ctx.backend().linear(o, wo_b, y, 1);
    });
  }
  return OkStatus();
}

Status experts_phase(BenchContext& ctx, const ModelDims& m, int64_t B, const std::string& only) {
  const std::string op_be = "moe_experts fp4 (group + gemv + swiglu + gemv + combine)";
  const std::string op_k = "gemv_experts fp4";
  const bool want_be = only.empty() || op_be.find(only) != std::string::npos;
  const bool want_k = only.empty() || op_k.find(only) != std::string::npos;
  if (!want_be && !want_k) return OkStatus();
  const int64_t k = m.top_k, H = m.hidden, I = m.expert_inter, E = m.experts, slots = B * k;
  DI_ASSIGN_OR_RETURN(RandomExperts rx, random_fp4_experts(ctx, E, H, I));
  const backend::ExpertSet& experts = rx.set;
  std::set<int32_t> distinct;
  const std::vector<int32_t> ids = random_routing(ctx, B, k, E, &distinct);
  DI_ASSIGN_OR_RETURN(Tensor ids_t, ctx.upload_i32({B, k}, ids));
  DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({B, H}));
  DI_ASSIGN_OR_RETURN(Tensor w, ctx.randn({B, k}, 0.2f));
  DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {B, H}));
  const double per_expert = weight_bytes(experts.gate_up[0]) + weight_bytes(experts.down[0]);
  const double n_active = double(distinct.size());
  const double act_bytes = 4.0 * (2.0 * B * H + 2.0 * B * k + slots * (2.0 * 2 * I + 2.0 * I + 2.0 * H));
  const double flops = 2.0 * slots * (2.0 * I * H + double(H) * I);
  const std::string phase = "gemv experts B=" + std::to_string(B);
  const std::string shape = cat(std::to_string(distinct.size()), " distinct of ", std::to_string(E),
                                " experts, ", std::to_string(slots), " slots, gate_up ",
                                experts.gate_up[0].w.describe());
  if (want_be) {
    ctx.measure(phase, op_be, shape, n_active * per_expert + act_bytes, flops,
                [&] { return ctx.backend().moe_experts(x, ids_t, w, experts, 10.f, out); });
  }
  if (want_k) {
    const auto* tab = static_cast<const void* const*>(rx.table.raw());
    DI_ASSIGN_OR_RETURN(Tensor grp, ctx.zeros(DType::kI32, {slots + 2 * (E + 1)}));
    DI_ASSIGN_OR_RETURN(Tensor gu, ctx.zeros(DType::kF32, {slots, 2 * I}));
    DI_ASSIGN_OR_RETURN(Tensor act, ctx.randn({slots, I}));
    DI_ASSIGN_OR_RETURN(Tensor y, ctx.zeros(DType::kF32, {slots, H}));
    DI_ASSIGN_OR_RETURN(Tensor flag, ctx.zeros(DType::kI32, {1}));
    int32_t* perm = grp.data<int32_t>();
    int32_t* row_off = perm + slots;
    int32_t* act_off = row_off + E + 1;
    // Each projection alone (grouping done once, outside the timing), both kernel versions.
    // Bytes: the distinct experts' weights and scales (what must be read), x in and y out.
    cuda::kernels::moe_group(ids_t.data<int32_t>(), slots, E, static_cast<int>(slots), perm, row_off,
                             act_off, flag.data<int32_t>(), ctx.stream());
    struct Proj { const char* name; const float* in; int64_t x_div, N, K; const void* const* w; double bytes; float* out; };
    const Proj projs[] = {
        {"gate_up", x.data<float>(), k, 2 * I, H, tab, weight_bytes(experts.gate_up[0]), gu.data<float>()},
        {"down", act.data<float>(), 1, H, I, tab + 2 * E, weight_bytes(experts.down[0]), y.data<float>()},
    };
    for (const Proj& pr : projs) {
      const double bytes = n_active * pr.bytes + 4.0 * slots * (pr.K + pr.N);
      const double pflops = 2.0 * slots * double(pr.N) * pr.K;
      const std::string pshape = cat(std::to_string(distinct.size()), " distinct experts, ",
                                     std::to_string(slots), " slots, [", std::to_string(pr.N), ", ",
                                     std::to_string(pr.K), "] fp4");
      for (int v : {1, 2}) {
        const std::string op = cat("gemv_experts v", std::to_string(v), " fp4 ", pr.name);
        if (!only.empty() && op.find(only) == std::string::npos && op_k.find(only) == std::string::npos) continue;
        if (v == 2 && !cuda::kernels::gemv_experts_v2_supported(2, slots, E, true, true, pr.N, pr.K, 32)) {
          std::printf("%s: not supported\n", op.c_str());
          continue;
        }
        ctx.measure(phase, op, pshape, bytes, pflops, [&] {
          if (v == 1) {
            cuda::kernels::gemv_experts(2, pr.in, pr.x_div, perm, row_off, act_off, slots, E, pr.w, pr.w + E,
                                        false, true, pr.N, pr.K, 1, 32, pr.out, ctx.stream());
          } else {
            cuda::kernels::gemv_experts_v2(pr.in, pr.x_div, perm, row_off, act_off, slots, E, pr.w, pr.w + E,
                                           false, pr.N, pr.K, 1, 32, pr.out, ctx.stream());
          }
          return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("gemv_experts launch failed");
        });
      }
    }
  }
  return OkStatus();
}

}  // namespace

void run_gemv_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& rows,
                    const std::vector<int64_t>& batches, const std::string& only) {
  for (int64_t M : rows) {
    const Phase p{"gemv M=" + std::to_string(M), true, M, 0};
    report_setup(ctx, p, "gemv linear", linear_phase(ctx, m, M, only));
    report_setup(ctx, p, "gemv multi", multi_phase(ctx, m, M, only));
    if (M <= cuda::kernels::kGemvMaxRows) {
      const Phase pc{"gemv chain M=" + std::to_string(M), true, M, 0};
      report_setup(ctx, pc, "gemv chain", chain_phase(ctx, m, M, only));
    }
  }
  for (int64_t B : batches) {
    const Phase p{"gemv experts B=" + std::to_string(B), true, B, 0};
    report_setup(ctx, p, "gemv experts", experts_phase(ctx, m, B, only));
  }
}

}  // namespace deepinfer::bench_ops
