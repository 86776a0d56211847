// Op cases for weights in their stored formats (docs/bench-model.md): `linear` with FP8 E4M3
// (128×128 UE8M0 block scales) and BF16 weights, and `moe_experts` over 256 FP4 E2M1 experts
// (1×32 UE8M0 scales) prepared once with `prepare_experts`, as the model loads them.
#include <cstdio>

#include "device_fill.h"
#include "op_cases.h"

namespace deepinfer::bench_ops {
namespace {

using backend::Shape;
using backend::Tensor;
using backend::Weight;

std::string sh(const Shape& s) { return backend::shape_str(s); }

// FP8 [N, K] + UE8M0 [ceil(N/128), ceil(K/128)], or FP4 [N, K] + UE8M0 [N, K/32].
StatusOr<Weight> quantized_weight(BenchContext& ctx, DType dt, int64_t N, int64_t K) {
  Weight w;
  const bool fp4 = dt == DType::kF4E2M1;
  w.block_rows = fp4 ? 1 : 128;
  w.block_cols = fp4 ? 32 : 128;
  DI_ASSIGN_OR_RETURN(w.w, ctx.zeros(dt, {N, K}));
  DI_ASSIGN_OR_RETURN(w.scale, ctx.zeros(DType::kF8E8M0, {(N + w.block_rows - 1) / w.block_rows,
                                                           (K + w.block_cols - 1) / w.block_cols}));
  if (fp4) {
    fill_fp4_codes(w.w.data<uint8_t>(), static_cast<int64_t>(w.w.nbytes()), ctx.next_seed(), ctx.stream());
  } else {
    fill_fp8_codes(w.w.data<uint8_t>(), static_cast<int64_t>(w.w.nbytes()), ctx.next_seed(), ctx.stream());
  }
  fill_ue8m0(w.scale.data<uint8_t>(), w.scale.numel(), ctx.next_seed(), 118, 124, ctx.stream());
  return w;
}

Status stored_format_linears(BenchContext& ctx, const ModelDims& m, const Phase& p, const std::string& only) {
  const int64_t M = p.tokens;
  struct Lin { const char* name; DType dt; int64_t N, K, groups; bool decode_only; };
  const Lin lins[] = {
      {"attn.wq_a", DType::kF8E4M3, m.q_lora, m.hidden, 1, false},
      {"attn.wq_b", DType::kF8E4M3, m.heads * m.head_dim, m.q_lora, 1, false},
      {"attn.wkv", DType::kF8E4M3, m.head_dim, m.hidden, 1, false},
      {"attn.wo_a (grouped)", DType::kF8E4M3, m.o_lora, m.heads * m.head_dim / m.o_groups, m.o_groups, false},
      {"attn.wo_b", DType::kF8E4M3, m.hidden, m.o_groups * m.o_lora, 1, false},
      {"indexer.wq_b", DType::kF8E4M3, m.index_heads * m.index_dim, m.q_lora, 1, false},
      {"shared_experts.w1", DType::kF8E4M3, m.expert_inter, m.hidden, 1, false},
      {"shared_experts.w2", DType::kF8E4M3, m.hidden, m.expert_inter, 1, false},
      {"compressor.wkv (CSA)", DType::kBF16, 2 * m.head_dim, m.hidden, 1, false},
      {"ffn.gate", DType::kBF16, m.experts, m.hidden, 1, false},
      {"head", DType::kBF16, m.vocab, m.hidden, 1, true},
  };
  for (const Lin& l : lins) {
    const std::string op = std::string("linear ") + (l.dt == DType::kBF16 ? "bf16 " : "fp8 ") + l.name;
    if ((!only.empty() && op.find(only) == std::string::npos) || (l.decode_only && !p.decode)) continue;
    const int64_t GN = l.groups * l.N;
    Weight w;
    if (l.dt == DType::kBF16) {
      DI_ASSIGN_OR_RETURN(w.w, ctx.zeros(DType::kBF16, {GN, l.K}));
      fill_normal_bf16(w.w.data<uint16_t>(), w.w.numel(), ctx.next_seed(), 0.02f, ctx.stream());
    } else {
      DI_ASSIGN_OR_RETURN(w, quantized_weight(ctx, l.dt, GN, l.K));
    }
    DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({M, l.groups * l.K}));
    DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {M, GN}));
    const double bytes = 4.0 * M * l.groups * l.K + double(w.w.nbytes()) +
                         (w.scale.defined() ? double(w.scale.nbytes()) : 0.0) + 4.0 * M * GN;
    ctx.measure(p.name, op, cat("x", sh(x.shape()), " w", w.w.describe()), bytes, 2.0 * M * GN * l.K,
                [&] { return ctx.backend().linear(x, w, out, l.groups); });
  }
  return OkStatus();
}

Status fp4_experts(BenchContext& ctx, const ModelDims& m, const Phase& p, const std::string& only) {
  const std::string op = "moe_experts fp4 (256 experts, top-6)";
  if (!only.empty() && op.find(only) == std::string::npos) return OkStatus();
  const int64_t S = p.tokens, k = m.top_k, H = m.hidden, I = m.expert_inter, E = m.experts;
  backend::ExpertSet experts;
  for (int64_t e = 0; e < E; ++e) {
    DI_ASSIGN_OR_RETURN(Weight gu, quantized_weight(ctx, DType::kF4E2M1, 2 * I, H));
    DI_ASSIGN_OR_RETURN(Weight dn, quantized_weight(ctx, DType::kF4E2M1, H, I));
    experts.gate_up.push_back(std::move(gu));
    experts.down.push_back(std::move(dn));
  }
  DI_RETURN_IF_ERROR(ctx.backend().prepare_experts(experts));
  DI_ASSIGN_OR_RETURN(Tensor x, ctx.randn({S, H}));
  DI_ASSIGN_OR_RETURN(Tensor ids, ctx.randint({S, k}, 0, static_cast<int32_t>(E)));
  DI_ASSIGN_OR_RETURN(Tensor w, ctx.randn({S, k}, 0.2f));
  DI_ASSIGN_OR_RETURN(Tensor out, ctx.zeros(DType::kF32, {S, H}));
  // Weight bytes of the experts a step touches: min(E, S·k) distinct experts (random routing).
  const double active = double(std::min(E, S * k));
  const double per_expert = double(experts.gate_up[0].w.nbytes() + experts.gate_up[0].scale.nbytes() +
                                   experts.down[0].w.nbytes() + experts.down[0].scale.nbytes());
  const double bytes = active * per_expert + 4.0 * (2.0 * S * H + 2.0 * S * k);
  const double flops = 2.0 * S * k * (2.0 * I * H + double(H) * I);
  ctx.measure(p.name, op, "x" + sh(x.shape()) + " gate_up " + std::to_string(E) + " x " +
                              experts.gate_up[0].w.describe(),
              bytes, flops, [&] { return ctx.backend().moe_experts(x, ids, w, experts, 10.f, out); });
  return OkStatus();
}

}  // namespace

void run_stored_format_phase(BenchContext& ctx, const ModelDims& m, const Phase& p, const std::string& only) {
  report_setup(ctx, p, "linear (stored formats)", stored_format_linears(ctx, m, p, only));
  report_setup(ctx, p, "moe_experts fp4", fp4_experts(ctx, m, p, only));
}

}  // namespace deepinfer::bench_ops
