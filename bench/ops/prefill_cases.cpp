// See prefill_cases.h. Bytes: x, the stored weight(s) and scales, out, once each.
#include "prefill_cases.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_tc.h"
#include "backend/cuda/prefill_gemm.h"
#include "backend/cuda/runtime.h"
#include "device_fill.h"
#include "routed_experts.h"

namespace deepinfer::bench_ops {
namespace {

using backend::Tensor;
using backend::Weight;

bool wanted(const std::string& op, const std::string& only) {
  return only.empty() || op.find(only) != std::string::npos;
}
Status launch_ok(const char* what) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? OkStatus() : Internal(cat(what, ": ", cudaGetErrorString(e)));
}

Status dense_phase(BenchContext& ctx, const ModelDims& m, int64_t M, const std::string& only) {
  struct Lin { const char* name; int64_t N, K, groups; };
  const Lin lins[] = {
      {"fp8 attn.wq_a", m.q_lora, m.hidden, 1},
      {"fp8 attn.wkv", m.head_dim, m.hidden, 1},
      {"fp8 attn.wq_b", m.heads * m.head_dim, m.q_lora, 1},
      {"fp8 attn.wo_a (grouped)", m.o_lora, m.heads * m.head_dim / m.o_groups, m.o_groups},
      {"fp8 attn.wo_b", m.hidden, m.o_groups * m.o_lora, 1},
      {"fp8 shared_experts.w1", m.expert_inter, m.hidden, 1},
      {"fp8 shared_experts.w2", m.hidden, m.expert_inter, 1},
  };
  const std::string phase = "prefill gemm M=" + std::to_string(M);
  DI_ASSIGN_OR_RETURN(cuda::CublasHandle blas, cuda::CublasHandle::create(ctx.stream()));
  int sms = 132;
  DI_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  for (const Lin& l : lins) {
    const int64_t GN = l.groups * l.N, K = l.K;
    DI_ASSIGN_OR_RETURN(Weight w, stored_weight(ctx, 1, GN, K));
    DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({M, l.groups * K}));
    DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {M, GN}));
    const double bytes = 4.0 * M * l.groups * K + double(w.w.nbytes()) + double(w.scale.nbytes()) + 4.0 * M * GN;
    const double flops = 2.0 * M * GN * K;
    const std::string shape = cat("x", backend::shape_str(x.shape()), " w", w.w.describe());
    const std::string op_old = cat("linear_tc ", l.name);
    if (wanted(op_old, only) &&
        cuda::kernels::linear_tc_supported(1, w.w.raw(), x.data<float>(), M, K, true, w.block_cols)) {
      const int64_t k_split = cuda::kernels::linear_tc_k_split(M, GN, K, w.block_cols, false);
      const int64_t slab = cuda::kernels::linear_tc_slab_rows(M, GN, K, k_split);
      Tensor ws;
      if (k_split < K) {
        DI_ASSIGN_OR_RETURN(ws, ctx.zeros(DType::kF32, {(K + k_split - 1) / k_split, slab, GN}));
      }
      ctx.measure(phase, op_old, shape, bytes, flops, [&] {
        for (int64_t r0 = 0; r0 < M; r0 += slab)
          cuda::kernels::linear_tc(1, x.data<float>() + r0 * l.groups * K, w.w.raw(), w.scale.raw(), false,
                                   std::min(slab, M - r0), l.N, K, l.groups, w.block_rows, w.block_cols,
                                   k_split, out.data<float>() + r0 * GN,
                                   ws.defined() ? ws.data<float>() : nullptr, ctx.stream());
        return launch_ok("linear_tc");
      });
    }
    const std::string op_new = cat("prefill cuBLAS ", l.name);
    if (wanted(op_new, only)) {
      cuda::prefill::DenseProblem p;
      p.fmt = 1;
      p.x = x.data<float>();
      p.w = w.w.raw();
      p.scale = w.scale.raw();
      p.M = M, p.N = l.N, p.K = K, p.G = l.groups, p.br = w.block_rows, p.bc = w.block_cols;
      p.out = out.data<float>();
      const cuda::prefill::DensePlan plan = cuda::prefill::plan_dense(p);
      if (!plan.ok) {
        std::printf("%s: no plan\n", op_new.c_str());
      } else {
        DI_ASSIGN_OR_RETURN(Tensor ws, ctx.zeros(DType::kU8, {static_cast<int64_t>(plan.bytes)}));
        ctx.measure(phase, cat(op_new, plan.whole ? "" : " (chunked)"), shape, bytes, flops, [&] {
          return cuda::prefill::dense_linear(blas.get(), p, plan, ws.raw(), sms, ctx.stream());
        });
      }
    }
    const std::string op_ceil = cat("cuBLAS bf16 1-term ", l.name);
    if (wanted(op_ceil, only)) {  // the same M·GN·K on bf16 operands, fp32 out: this shape's ceiling
      DI_ASSIGN_OR_RETURN(Tensor a, ctx.zeros(DType::kBF16, {GN, K}));
      DI_ASSIGN_OR_RETURN(Tensor b, ctx.zeros(DType::kBF16, {M, K}));
      fill_normal_bf16(a.data<uint16_t>(), a.numel(), ctx.next_seed(), 0.02f, ctx.stream());
      fill_normal_bf16(b.data<uint16_t>(), b.numel(), ctx.next_seed(), 1.f, ctx.stream());
      const float alpha = 1.f, beta = 0.f;
      ctx.measure(phase, op_ceil, cat("[", std::to_string(M), ", ", std::to_string(K), "] x [",
                                      std::to_string(K), ", ", std::to_string(GN), "] bf16"),
                  2.0 * (M * K + GN * K) + 4.0 * M * GN, flops, [&] {
        DI_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
            blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(GN), static_cast<int>(M),
            static_cast<int>(K), &alpha, a.raw(), CUDA_R_16BF, static_cast<int>(K), b.raw(),
            CUDA_R_16BF, static_cast<int>(K), &beta, out.raw(), CUDA_R_32F, static_cast<int>(GN),
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return OkStatus();
      });
    }
  }
  return OkStatus();
}

Status experts_phase(BenchContext& ctx, const ModelDims& m, int64_t T, const std::string& only) {
  const int64_t k = m.top_k, H = m.hidden, I = m.expert_inter, E = m.experts, slots = T * k;
  const std::string phase = "prefill experts T=" + std::to_string(T);
  DI_ASSIGN_OR_RETURN(cuda::CublasHandle blas, cuda::CublasHandle::create(ctx.stream()));
  int sms = 132;
  DI_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  DI_ASSIGN_OR_RETURN(RandomExperts rx, random_fp4_experts(ctx, E, H, I));
  std::set<int32_t> distinct;
  const std::vector<int32_t> ids = random_routing(ctx, T, k, E, &distinct);
  DI_ASSIGN_OR_RETURN(Tensor ids_t, ctx.upload_i32({T, k}, ids));
  DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({T, H}));
  DI_ASSIGN_OR_RETURN(Tensor act, ctx.randn({slots, I}));
  DI_ASSIGN_OR_RETURN(Tensor gu, ctx.zeros(DType::kF32, {slots, 2 * I}));
  DI_ASSIGN_OR_RETURN(Tensor y, ctx.zeros(DType::kF32, {slots, H}));
  const int tile_rows = cuda::kernels::moe_tc_tile_rows(slots, E);
  DI_ASSIGN_OR_RETURN(Tensor grp, ctx.zeros(DType::kI32, {slots + 2 * (E + 1)}));
  DI_ASSIGN_OR_RETURN(Tensor flag, ctx.zeros(DType::kI32, {1}));
  int32_t* perm = grp.data<int32_t>();
  int32_t* row_off = perm + slots;
  int32_t* tile_off = row_off + E + 1;
  cuda::kernels::moe_group(ids_t.data<int32_t>(), slots, E, tile_rows, perm, row_off, tile_off,
                           flag.data<int32_t>(), ctx.stream());
  std::vector<int32_t> off(E + 1);
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpy(off.data(), row_off, (E + 1) * 4, cudaMemcpyDeviceToHost));
  const auto* tab = static_cast<const void* const*>(rx.table.raw());
  const double n_active = double(distinct.size());
  const double gu_bytes = 2.0 * I * H / 2 + 2.0 * I * H / 32, dn_bytes = double(H) * I / 2 + double(H) * I / 32;
  struct Proj { const char* name; const Tensor* in; int64_t x_div, N, K; const void* const* w; double wbytes; float* out; };
  const Proj projs[] = {
      {"gate_up", &x, k, 2 * I, H, tab, gu_bytes, gu.data<float>()},
      {"down", &act, 1, H, I, tab + 2 * E, dn_bytes, y.data<float>()},
  };
  const int variant = cuda::kernels::moe_tc_variant();
  for (const Proj& pr : projs) {
    const int64_t x_rows = pr.in->dim(0);
    const double bytes = n_active * pr.wbytes + 4.0 * (x_rows * pr.K + slots * pr.N);
    const double flops = 2.0 * slots * double(pr.N) * pr.K;
    const std::string shape = cat(std::to_string(distinct.size()), " of ", std::to_string(E), " experts, ",
                                  std::to_string(slots), " slots, [", std::to_string(pr.N), ", ",
                                  std::to_string(pr.K), "] fp4");
    const std::string op_old = cat("moe_tc v2 (+ split) ", pr.name);
    if (wanted(op_old, only) &&
        cuda::kernels::moe_tc_supported(2, pr.in->data<float>(), slots, E, pr.K, true, 32, tile_rows)) {
      DI_ASSIGN_OR_RETURN(Tensor terms, ctx.zeros(DType::kBF16, {3, x_rows, pr.K}));
      ctx.measure(phase, op_old, shape, bytes, flops, [&] {
        cuda::kernels::moe_tc_split_terms(pr.in->data<float>(), x_rows, pr.K, terms.data<uint16_t>(), ctx.stream());
        cuda::kernels::moe_tc_experts(variant, terms.data<uint16_t>(), x_rows, pr.x_div, perm, row_off,
                                      tile_off, tile_rows, slots, E, pr.w, pr.w + E, false, pr.N,
                                      pr.K, 1, 32, pr.out, ctx.stream());
        return launch_ok("moe_tc_experts");
      });
    }
    cuda::prefill::ExpertsProblem p;
    p.fmt = 2;
    p.x = pr.in->data<float>();
    p.x_div = pr.x_div;
    p.ids = ids_t.data<int32_t>();
    p.perm = perm;
    p.row_off = off.data();
    p.slots = slots;
    p.E = E;
    p.w_table = pr.w;
    p.s_table = pr.w + E;
    p.N = pr.N, p.K = pr.K, p.br = 1, p.bc = 32;
    p.out = pr.out;
    const cuda::prefill::ExpertsPlan plan = cuda::prefill::plan_experts(p, cuda::prefill::chunk_experts());
    if (!plan.ok) {
      std::printf("prefill cuBLAS %s: no plan\n", pr.name);
      continue;
    }
    DI_ASSIGN_OR_RETURN(Tensor ws, ctx.zeros(DType::kU8, {static_cast<int64_t>(plan.bytes)}));
    for (bool grouped : {true, false}) {
      const std::string op = cat("prefill cuBLAS ", grouped ? "grouped " : "per-expert ", pr.name,
                                 " (", std::to_string(plan.chunks.size()), " chunks)");
      if (!wanted(op, only)) continue;
      ctx.measure(phase, op, shape, bytes, flops, [&] {
        return cuda::prefill::experts_linear(blas.get(), p, plan, ws.raw(), sms, grouped, ctx.stream());
      });
    }
  }
  return OkStatus();
}

}  // namespace

void run_prefill_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& rows,
                       const std::vector<int64_t>& expert_tokens, const std::string& only) {
  for (int64_t M : rows) {
    const Phase p{"prefill gemm M=" + std::to_string(M), false, M, 0};
    report_setup(ctx, p, "prefill gemm (dense)", dense_phase(ctx, m, M, only));
  }
  for (int64_t T : expert_tokens) {
    const Phase p{"prefill experts T=" + std::to_string(T), false, T, 0};
    report_setup(ctx, p, "prefill gemm (experts)", experts_phase(ctx, m, T, only));
  }
}

}  // namespace deepinfer::bench_ops
