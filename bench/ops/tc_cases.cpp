// See tc_cases.h. Each projection is timed twice on the same weights and x: "linear_tc" (the
// tensor-core kernel with the split plan CudaBackend::linear uses in --batch-invariant mode) and
// "linear_wq" (the weight-only GEMV). Bytes: x, the stored weight and its scales, out, once each.
#include <cstdio>

#include "backend/cuda/kernels.h"
#include "device_fill.h"
#include "tc_cases.h"

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

Status tc_phase(BenchContext& ctx, const ModelDims& m, int64_t M, const std::string& only) {
  struct Lin { const char* name; int fmt; int64_t N, K, groups; };
  const Lin lins[] = {
      {"fp8 attn.wq_b", 1, m.heads * m.head_dim, m.q_lora, 1},
      {"fp8 attn.wo_a (grouped)", 1, m.o_lora, m.heads * m.head_dim / m.o_groups, m.o_groups},
      {"fp8 attn.wo_b", 1, m.hidden, m.o_groups * m.o_lora, 1},
      {"fp8 shared_experts.w1", 1, m.expert_inter, m.hidden, 1},
      {"fp4 expert w1+w3 (one expert)", 2, 2 * m.expert_inter, m.hidden, 1},
      {"bf16 compressor.wkv (CSA)", 0, 2 * m.head_dim, m.hidden, 1},
      {"bf16 head", 0, m.vocab, m.hidden, 1},
  };
  const std::string phase = "tc M=" + std::to_string(M);
  for (const Lin& l : lins) {
    const bool want_tc = only.empty() || std::string("linear_tc ").append(l.name).find(only) != std::string::npos;
    const bool want_wq = only.empty() || std::string("linear_wq ").append(l.name).find(only) != std::string::npos;
    if (!want_tc && !want_wq) continue;
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
        const int64_t k_split = cuda::kernels::linear_tc_k_split(M, GN, K, bc, /*batch_invariant=*/true);
        Tensor ws;
        if (k_split < K) {
          DI_ASSIGN_OR_RETURN(ws, ctx.zeros(DType::kF32, {(K + k_split - 1) / k_split, M, GN}));
        }
        ctx.measure(phase, cat("linear_tc ", l.name, " (", std::to_string((K + k_split - 1) / k_split), " splits)"),
                    shape, bytes, flops, [&] {
          cuda::kernels::linear_tc(l.fmt, x.data<float>(), w.w.raw(), scale, false, M, l.N, K,
                                   l.groups, w.block_rows, w.block_cols, k_split, out.data<float>(),
                                   ws.defined() ? ws.data<float>() : nullptr, ctx.stream());
          return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("linear_tc launch failed");
        });
      }
    }
    if (want_wq) {
      ctx.measure(phase, cat("linear_wq ", l.name), shape, bytes, flops, [&] {
        cuda::kernels::linear_wq(l.fmt, x.data<float>(), w.w.raw(), scale, false, M, l.N, K, l.groups,
                                 w.block_rows, w.block_cols, out.data<float>(), ctx.stream());
        return cudaGetLastError() == cudaSuccess ? OkStatus() : Internal("linear_wq launch failed");
      });
    }
  }
  return OkStatus();
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
