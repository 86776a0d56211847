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
std::atomic<int> g_heads_override{0};     // set_attention_fd_heads_override
std::atomic<int> g_x5_units_override{0};  // set_attention_x5_units_override

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

// Session 11, the head-split variants x1 / x2 (attention_fd.cu blocks of 64, 32 or 16 heads): a
// makespan model in 0.1 µs, calibrated on the H200 by bench_ops' cut rows ("[fd cut N]",
// "[x1 hH cut N]", one block over 1 … 40 chunks at batch 1): a chunk of 16 keys costs a block of
// 64 / 32 / 16 heads 6.0 / 4.7 / 3.6 µs (a smaller block still gathers and converts the whole
// K = V chunk), a block's fixed part (launch, Q, first load, epilogue) ~14 / 10 / 8.5 µs, the
// combine ~5.6 µs; 16-head blocks fit twice on an SM, each ~1.25× slower when they share one
// (fitted to batch 16: 512 16-head blocks of 5 chunks 76.7 µs). A split must beat 64 heads by
// more than 10 %. (Batch 1 CSA 640 keys: fd 26.0 µs, 32 heads 21.6, 16 heads 21.2; HCA 192 keys:
// 23.8, 18.9, 16.1; batch 16 CSA: fd 56.6, 32 heads 76.0, 16 heads 76.7.)
struct HeadCosts {
  int heads;
  int64_t chunk, overhead, per_sm;
};
constexpr HeadCosts kHeadCosts[] = {{64, 60, 140, 1}, {32, 47, 100, 1}, {16, 36, 85, 2}};
constexpr int64_t kHeadSplitCombine = 56;

int64_t head_split_cost(const HeadCosts& h, int64_t blocks64, int64_t units, int64_t cpu,
                        int64_t sms) {
  const int64_t blocks = blocks64 * (kFdHeads / h.heads) * units;
  const int64_t slots = h.per_sm * sms;
  const int64_t waves = (blocks + slots - 1) / slots;
  int64_t wave = cpu * h.chunk + h.overhead;
  if (h.per_sm > 1 && blocks > sms) wave = wave * 5 / 4;  // blocks sharing SMs
  return waves * wave + (units > 1 ? kHeadSplitCombine : 0);
}

// Heads per block (and, when cut_free, the cut) of a head-split plan for C chunks; otherwise the
// cut is the plan's chunks_per_unit with at most max_units units (as unit_layout applies it).
void plan_head_split(AttentionFdPlan& plan, int64_t blocks64, int64_t C, int64_t sms,
                     bool cut_free, int64_t max_units) {
  int64_t fixed_u = 1;
  if (C > 0) {
    const int64_t t = plan.chunks_per_unit > 0 ? plan.chunks_per_unit : 1;
    fixed_u = (C + t - 1) / t > max_units ? max_units : (C + t - 1) / t;
    const int64_t per_unit = (C + fixed_u - 1) / fixed_u;
    fixed_u = (C + per_unit - 1) / per_unit;
  }
  int64_t best = INT64_MAX, best64 = INT64_MAX;
  for (const HeadCosts& h : kHeadCosts) {  // 64 heads first
    for (int64_t u = 1; u <= kFdMaxGridUnits && u <= (C > 1 ? C : 1); ++u) {
      const int64_t cpu = C > 0 ? (C + u - 1) / u : 0;
      if (C > 0 && (C + cpu - 1) / cpu != u) continue;  // the same cut as a smaller u
      if (!cut_free && u != fixed_u) continue;
      const int64_t cost = head_split_cost(h, blocks64, u, cpu, sms);
      if (cost < best && (h.heads == kFdHeads || cost * 10 < best64 * 9)) {
        best = cost;
        if (h.heads == kFdHeads) best64 = cost;
        plan.heads_per_block = h.heads;
        if (cut_free) plan.chunks_per_unit = static_cast<int>(cpu > 0 ? cpu : 1);
      }
    }
  }
}

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
  // Session 11: auto = x1 (head-split blocks, fd's cut: fd's bits; 1.15 vs 1.19 ms per batch-1
  // step on the H200, equal at 8 / 16); "fd" = the 64-head blocks alone. Session 13: auto runs x5
  // for calls of <= kFdAutoX5MaxTokens tokens in the default mode (attention_fd_plan).
  const std::string& e = env().attention_kernel;
  if (e == "fd") return 0;
  if (e == "x2") return 2;
  if (e == "x3") return 3;
  if (e == "x4") return 4;
  if (e == "x5") return 5;
  if (e == "x6") return 6;
  if (e == "x7") return 7;
  if (e == "x8") return 8;
  if (e != "auto" && e != "x1") {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      log_warning("DEEPINFER_ATTENTION_KERNEL=" + e +
                  ": no split-key attention variant of that name; running auto (x1)");
  }
  return 1;
}

void set_attention_fd_variant_override(int v) {
  g_variant_override.store(v >= 0 && v < kFdVariantCount ? v : -1);
}

void set_attention_fd_heads_override(int h) {
  g_heads_override.store(h == 16 || h == 32 || h == 64 ? h : 0);
}

void set_attention_fd_chunks_per_unit_override(int n) { g_cpu_override.store(n > 0 ? n : 0); }

void set_attention_x5_units_override(int n) { g_x5_units_override.store(n > 0 && n <= 16 ? n : 0); }

void set_attention_kernel_override(int mode) {
  const bool known = mode == kAttentionSimt || mode == kAttentionFd || mode == kAttentionAuto;
  g_override.store(known ? mode : -1);
}

bool attention_fd_supports(int64_t nH, int64_t nKV, int64_t D, int64_t Dv, bool kv_same) {
  return nH > 0 && nH % kFdHeads == 0 && nKV == 1 && D == kFdWidth && Dv == kFdWidth && kv_same;
}

// Session 13, variants x5..x8 (attention_x5.cu, one launch): U = min(C, Umax) units per token
// (a cluster), 1 chunk per unit up to Umax units; heads per block by the head-split makespan
// model above (x8: 32 heads; set_attention_fd_heads_override first). The heads never
// change a bit, so the pick may follow the batch.
static AttentionFdPlan plan_x5(AttentionFdPlan plan, int64_t S, int64_t nH, int64_t C,
                               int64_t sms) {
  const int want = plan.variant == 6 ? 16 : 8;
  const int forced_heads = g_heads_override.load(std::memory_order_relaxed);
  int heads = plan.variant == 8 ? 32 : 0;  // x7: x5's pick (launched without PDL)
  if (forced_heads > 0) heads = forced_heads;
  const int64_t c = C > 0 ? C : 1;
  if (heads == 0) {
    const int64_t blocks64 = S * (nH / kFdHeads);
    int64_t best = INT64_MAX;
    for (const HeadCosts& h : kHeadCosts) {
      const int64_t u = c < want ? c : want;
      const int64_t cpu = (c + u - 1) / u, units = (c + cpu - 1) / cpu;
      const int64_t blocks = blocks64 * (kFdHeads / h.heads) * units;
      const int64_t slots = h.per_sm * sms;
      const int64_t waves = (blocks + slots - 1) / slots;
      int64_t wave = cpu * h.chunk + h.overhead;
      if (h.per_sm > 1 && blocks > sms) wave = wave * 5 / 4;
      const int64_t cost = waves * wave;
      if (cost < best || (cost == best && h.heads < heads)) best = cost, heads = h.heads;
    }
  }
  plan.heads_per_block = heads;
  const int forced_units = g_x5_units_override.load(std::memory_order_relaxed);
  const int umax = forced_units > 0 ? attention_x5_max_units(forced_units, heads)
                                    : attention_x5_max_units(want, heads);
  plan.grid_units = static_cast<int>(c < umax ? c : umax);
  plan.chunks_per_unit = 1;
  plan.parts_floats = 0;
  return plan;
}

AttentionFdPlan attention_fd_plan(int64_t S, int64_t nH, int64_t max_keys, int num_sms,
                                  bool batch_invariant) {
  AttentionFdPlan plan;
  plan.variant = attention_fd_variant();
  // Session 13: auto (no override, DEEPINFER_ATTENTION_KERNEL=auto) takes x5 in the default mode
  // for calls of at most kFdAutoX5MaxTokens tokens (H200: batch-1 step 1.00 vs 1.02-1.04 ms; x5
  // lost ~1.5 % at 8 / 16), x1 otherwise; --batch-invariant keeps x1's plan.
  if (plan.variant == 1 && !batch_invariant && S <= kFdAutoX5MaxTokens &&
      g_variant_override.load(std::memory_order_relaxed) < 0 && env().attention_kernel == "auto")
    plan.variant = 5;
  // x5..x8 under --batch-invariant: x1 (that mode's bits stay the batch-invariant plan's).
  if (plan.variant >= 5 && batch_invariant) plan.variant = 1;
  if (plan.variant >= 5) {
    const int64_t C5 = (max_keys + kFdChunkKeys - 1) / kFdChunkKeys;
    return plan_x5(plan, S, nH, C5, num_sms > 0 ? num_sms : 132);
  }
  const int64_t C = (max_keys + kFdChunkKeys - 1) / kFdChunkKeys;  // chunks of the longest list
  const int64_t sms = num_sms > 0 ? num_sms : 132;
  const bool head_split = plan.variant == 1 || plan.variant == 2;
  const int forced_heads = g_heads_override.load(std::memory_order_relaxed);
  const int64_t max_units = batch_invariant ? kFdInvariantMaxUnits : kFdMaxGridUnits;
  auto pick_heads = [&](bool cut_free) {
    if (head_split) plan_head_split(plan, S * (nH / kFdHeads), C, sms, cut_free, max_units);
    if (head_split && forced_heads > 0) plan.heads_per_block = forced_heads;
  };
  if (S <= 0 || C <= 1) {
    pick_heads(false);
    return plan;
  }
  const int forced = g_cpu_override.load(std::memory_order_relaxed);
  if (batch_invariant) {  // a function of the token's key count only (DEEPINFER_ATTENTION_BI_CHUNKS)
    plan.chunks_per_unit = env().attention_bi_chunks > 0 ? env().attention_bi_chunks : kFdInvariantChunks;
  } else {
    const PlanCosts costs = plan.variant == 0 ? kFdCosts : kXCosts;
    const int64_t blocks = S * (nH / kFdHeads);
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
    if (forced > 0) plan.chunks_per_unit = forced;
  }
  // x1: fd's cut; x2: its own unless the cut is fixed (--batch-invariant, bench_ops' cut rows).
  pick_heads(plan.variant == 2 && !batch_invariant && forced <= 0);
  const int64_t units = (C + plan.chunks_per_unit - 1) / plan.chunks_per_unit;
  plan.grid_units = static_cast<int>(units > max_units ? max_units : units);
  if (plan.grid_units > 1) {
    const int64_t per_token = static_cast<int64_t>(plan.grid_units) * nH * kFdPartRow;
    int64_t slice = kPartsBudgetFloats / per_token;
    slice = slice < 1 ? 1 : (slice > S ? S : slice);
    plan.parts_floats = slice * per_token;
  }
  return plan;
}

}  // namespace deepinfer::cuda::kernels
