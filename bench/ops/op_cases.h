// The op benchmark cases: every CUDA backend op at the shapes one DeepSeek-V4-Flash layer uses
// (docs/bench-model.md), for a decode step of B sequences and a prefill of S tokens of one sequence.
#pragma once

#include <cstdint>
#include <string>

#include "bench_context.h"

namespace deepinfer::bench_ops {

// DeepSeek-V4-Flash widths (issue 7's bench model).
struct ModelDims {
  int64_t hidden = 4096;
  int64_t heads = 64, head_dim = 512, rope_dim = 64;
  int64_t q_lora = 1024;
  int64_t o_groups = 8, o_lora = 1024;
  int64_t experts = 256, expert_inter = 2048, top_k = 6;
  int64_t window = 128;
  int64_t csa_ratio = 4, hca_ratio = 128;
  int64_t index_heads = 64, index_dim = 128, index_topk = 512;
  int64_t hc = 4, sinkhorn_iters = 20;
  int64_t vocab = 129280;
};

struct Phase {
  std::string name;    // "decode B=16" / "prefill S=4096"
  bool decode = true;
  int64_t tokens = 1;  // B (decode: one new token per sequence) or S (prefill)
  int64_t context = 8192;  // decode: tokens already in each sequence's context
};

// Records a family whose setup failed (st not ok) as an error row and resynchronizes.
void report_setup(BenchContext& ctx, const Phase& p, const char* name, const Status& st);

// Runs every op family for one phase, appending Results to ctx. Families whose setup fails
// (e.g. out of memory) record an error row and the rest go on. `only` (substring) filters ops.
void run_phase(BenchContext& ctx, const ModelDims& m, const Phase& p, const std::string& only);

}  // namespace deepinfer::bench_ops

namespace deepinfer::bench_ops {
// Load-time ops (weight dequantization of the release formats), phase "weights".
void run_weight_ops(BenchContext& ctx, const ModelDims& m, const std::string& only);
// `linear` on FP8 / BF16 weights and `moe_experts` on FP4 experts (quantized_cases.cpp).
void run_stored_format_phase(BenchContext& ctx, const ModelDims& m, const Phase& p, const std::string& only);
}  // namespace deepinfer::bench_ops
