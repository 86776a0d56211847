// Host side of the split-key attention (attention_fd.h): which kernel CudaBackend::attention
// runs for V4's layout, and the plan that cuts each token's key list into units (the makespan
// model is explained in docs/cuda.md "Split-key decode attention").
#include <atomic>
#include <cstdint>
#include <string>

#include "backend/cuda/attention_fd.h"
#include "common/env.h"
#include "common/logging.h"

namespace deepinfer::cuda::kernels {
namespace {

std::atomic<int> g_override{-1};
std::atomic<int> g_cpu_override{0};  // set_attention_fd_chunks_per_unit_override
std::atomic<int> g_variant_override{-1};  // set_attention_fd_variant_override

constexpr int64_t kPartsBudgetFloats = int64_t{16} << 20;  // 64 MiB of scratch per slice
// Makespan model of the plan (in chunk times): a block costs its chunks plus a block overhead
// (Q: 128 KiB read and split, the pipeline's fill), a launch with units pays a combine cost once.
// Per variant (attention_fd_variant), for the wgmma variants x3 / x4 (session 10): bench_ops'
// "[x4 cut N]" rows on the H200 found attention_fd's cut best for them too (batch 1: 40 units of
// one chunk; batch 16: 8 × 5), so they share its constants for now.
struct PlanCosts {
  int64_t block_overhead, combine;
};
constexpr PlanCosts kFdCosts{2, 2};
constexpr PlanCosts kXCosts{2, 2};

}  // namespace

int attention_kernel_requested() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return o;
  const std::string& e = env().cuda_attention;
  if (e == "simt") return kAttentionSimt;
  if (e == "fd") return kAttentionFd;
  return kAttentionAuto;  // "auto" (the default; env.cpp maps the removed "tc" to it)
}

int attention_fd_variant() {
  const int o = g_variant_override.load(std::memory_order_relaxed);
  if (o >= 0) return o;
  const std::string& e = env().attention_kernel;
  if (e == "x3") return 3;
  if (e == "x4") return 4;
  if (e != "auto") {  // x1 / x2: removed in session 10
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log_warning("DEEPINFER_ATTENTION_KERNEL=" + e +
                  ": no split-key attention variant of that name; running attention_fd");
  }
  return 0;
}

void set_attention_fd_variant_override(int v) {
  g_variant_override.store(v == 0 || v == 3 || v == 4 ? v : -1);
}

void set_attention_fd_chunks_per_unit_override(int n) { g_cpu_override.store(n > 0 ? n : 0); }

void set_attention_kernel_override(int mode) {
  const bool known = mode == kAttentionSimt || mode == kAttentionFd || mode == kAttentionAuto;
  g_override.store(known ? mode : -1);
}

bool attention_fd_supports(int64_t nH, int64_t nKV, int64_t D, int64_t Dv, bool kv_same) {
  return nH > 0 && nH % kFdHeads == 0 && nKV == 1 && D == kFdWidth && Dv == kFdWidth && kv_same;
}

AttentionFdPlan attention_fd_plan(int64_t S, int64_t nH, int64_t max_keys, int num_sms,
                                  bool batch_invariant) {
  AttentionFdPlan plan;
  plan.variant = attention_fd_variant();
  const int64_t C = (max_keys + kFdChunkKeys - 1) / kFdChunkKeys;  // chunks of the longest list
  if (S <= 0 || C <= 1) return plan;
  if (batch_invariant) {
    plan.chunks_per_unit = kFdInvariantChunks;
  } else {
    const PlanCosts costs = plan.variant == 0 ? kFdCosts : kXCosts;
    const int64_t blocks = S * (nH / kFdHeads);
    const int64_t sms = num_sms > 0 ? num_sms : 132;
    int64_t best_cost = INT64_MAX;
    int best_cpu = static_cast<int>(C < INT32_MAX ? C : INT32_MAX);
    for (int64_t u = 1; u <= C && u <= kFdMaxGridUnits; ++u) {
      const int64_t cpu = (C + u - 1) / u;
      if ((C + cpu - 1) / cpu != u) continue;  // the same cut as a smaller u
      const int64_t waves = (blocks * u + sms - 1) / sms;
      const int64_t cost = waves * (cpu + costs.block_overhead) + (u > 1 ? costs.combine : 0);
      if (cost < best_cost) best_cost = cost, best_cpu = static_cast<int>(cpu);
    }
    plan.chunks_per_unit = best_cpu;
    const int forced = g_cpu_override.load(std::memory_order_relaxed);
    if (forced > 0) plan.chunks_per_unit = forced;
  }
  const int64_t units = (C + plan.chunks_per_unit - 1) / plan.chunks_per_unit;
  plan.grid_units = static_cast<int>(units > kFdMaxGridUnits ? kFdMaxGridUnits : units);
  if (plan.grid_units > 1) {
    const int64_t per_token = static_cast<int64_t>(plan.grid_units) * nH * kFdPartRow;
    int64_t slice = kPartsBudgetFloats / per_token;
    slice = slice < 1 ? 1 : (slice > S ? S : slice);
    plan.parts_floats = slice * per_token;
  }
  return plan;
}

}  // namespace deepinfer::cuda::kernels
