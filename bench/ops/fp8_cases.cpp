// FP8 block-scaled GEMM (backend/cuda/fp8_gemm.h, DeepSeek's recipe through cuBLASLt) at the
// DeepSeek-V4-Flash projection shapes, for M tokens (decode batches and prefill lengths):
//   "fp8 act_quant <w>"  the activation quantizer alone (x [M, K] f32 → e4m3 + 1×128 scales)
//   "fp8 gemm <w>"       the cuBLASLt product alone, on activations quantized beforehand
//   "fp8 linear <w>"     everything one call costs: quantize + weight-scale conversion + product
// TFLOP/s and % of the dense FP8 peak (ceilings.cpp) are printed in a summary after the main table
// (whose % column is against the bf16 peak).
#include <cstdio>

#include "backend/backend.h"
#include "backend/cuda/fp8_gemm.h"
#include "device_fill.h"
#include "fp8_cases.h"

namespace deepinfer::bench_ops {
namespace {

using backend::Tensor;

std::string sh(const backend::Shape& s) { return backend::shape_str(s); }

Status fp8_cases_for(BenchContext& ctx, cuda::Fp8Gemm& gemm, const ModelDims& m, int64_t M,
                     const std::string& only) {
  struct Lin { const char* name; int64_t N, K, groups; };
  const Lin lins[] = {
      {"attn.wq_a", m.q_lora, m.hidden, 1},
      {"attn.wq_b", m.heads * m.head_dim, m.q_lora, 1},
      {"attn.wo_a (grouped)", m.o_lora, m.heads * m.head_dim / m.o_groups, m.o_groups},
      {"attn.wo_b", m.hidden, m.o_groups * m.o_lora, 1},
      {"shared_experts.w1", m.expert_inter, m.hidden, 1},
      {"shared_experts.w2", m.hidden, m.expert_inter, 1},
  };
  const std::string phase = "fp8 M=" + std::to_string(M);
  const cudaStream_t s = ctx.stream();
  for (const Lin& l : lins) {
    const std::string quant_op = cat("fp8 act_quant ", l.name), gemm_op = cat("fp8 gemm ", l.name),
                      lin_op = cat("fp8 linear ", l.name);
    auto wanted = [&](const std::string& op) { return only.empty() || op.find(only) != std::string::npos; };
    if (!wanted(quant_op) && !wanted(gemm_op) && !wanted(lin_op)) continue;
    const int64_t G = l.groups, GN = G * l.N, GK = G * l.K;
    DI_ASSIGN_OR_RETURN(Tensor w, ctx.zeros(DType::kF8E4M3, {GN, l.K}));
    DI_ASSIGN_OR_RETURN(Tensor ws, ctx.zeros(DType::kF8E8M0, {(GN + 127) / 128, (l.K + 127) / 128}));
    fill_fp8_codes(w.data<uint8_t>(), w.numel(), ctx.next_seed(), s);
    fill_ue8m0(ws.data<uint8_t>(), ws.numel(), ctx.next_seed(), 118, 124, s);
    DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({M, GK}));
    DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {M, GN}));
    DI_ASSIGN_OR_RETURN(cuda::Fp8GemmPlan plan, cuda::plan_fp8_gemm(M, l.N, l.K, G));
    DI_RETURN_IF_ERROR(gemm.prepare(plan));
    const std::string shape = cat("x", sh(x.shape()), " w", w.describe());
    const double flops = 2.0 * M * GN * l.K;
    const double wbytes = double(w.nbytes()) + double(ws.nbytes());
    if (wanted(quant_op)) {
      ctx.measure(phase, quant_op, cat("x", sh(x.shape())), 4.0 * M * GK + 1.0 * M * GK + 4.0 * M * GK / 128,
                  0, [&] { return gemm.quantize_activations(x.data<float>(), plan, s); });
    }
    if (wanted(gemm_op)) {
      DI_RETURN_IF_ERROR(gemm.quantize_activations(x.data<float>(), plan, s));
      DI_RETURN_IF_ERROR(gemm.convert_weight_scales(ws.raw(), false, plan, s));
      ctx.measure(phase, gemm_op, shape, 1.0 * M * GK + 4.0 * M * GK / 128 + wbytes + 4.0 * M * GN, flops,
                  [&] { return gemm.matmul(w.data<uint8_t>(), plan, out.data<float>(), s); });
    }
    if (wanted(lin_op)) {
      ctx.measure(phase, lin_op, shape, 4.0 * M * GK + wbytes + 4.0 * M * GN, flops, [&] {
        return gemm.gemm(x.data<float>(), M, w.data<uint8_t>(), ws.raw(), false, l.N, l.K, G,
                         out.data<float>(), s);
      });
    }
  }
  return OkStatus();
}

}  // namespace

void run_fp8_cases(BenchContext& ctx, const ModelDims& m, const std::vector<int64_t>& tokens,
                   const std::string& only) {
  auto gemm = cuda::Fp8Gemm::create();
  if (!gemm.ok()) {
    report_setup(ctx, Phase{"fp8", false, 0, 0}, "fp8 gemm context", gemm.status());
    return;
  }
  for (int64_t M : tokens) {
    const Phase p{"fp8 M=" + std::to_string(M), M <= 128, M, 0};
    report_setup(ctx, p, "fp8 gemm", fp8_cases_for(ctx, **gemm, m, M, only));
  }
}

void print_fp8_summary(const std::vector<Result>& results, double fp8_peak_tflops) {
  bool header = false;
  for (const Result& r : results) {
    if (r.phase.rfind("fp8 M=", 0) != 0 || !r.error.empty() || r.us_median <= 0) continue;
    if (!header) {
      std::printf("\nFP8 block-scaled GEMM against the dense FP8 peak (%.0f TFLOP/s, cuBLASLt e4m3 8192³):\n",
                  fp8_peak_tflops);
      std::printf("%-14s %-40s %10s %9s %8s\n", "phase", "op", "us", "TFLOP/s", "%fp8");
      header = true;
    }
    const double tf = r.flops / (r.us_median * 1e-6) / 1e12;
    if (r.flops > 0) {
      std::printf("%-14s %-40s %10.1f %9.1f %7.1f%%\n", r.phase.c_str(), r.op.c_str(), r.us_median, tf,
                  fp8_peak_tflops > 0 ? 100.0 * tf / fp8_peak_tflops : 0.0);
    } else {
      std::printf("%-14s %-40s %10.1f %9s %8s\n", r.phase.c_str(), r.op.c_str(), r.us_median, "-", "-");
    }
  }
}

}  // namespace deepinfer::bench_ops
