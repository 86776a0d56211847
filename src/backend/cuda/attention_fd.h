// Split-key ("flash-decoding") attention on tensor cores for DeepSeek-V4's layout
// (attention_fd.cu; docs/cuda.md "Split-key decode attention"): one shared K = V head of width
// 512 read by every query head (64 per block, heads as the M dimension), each token's key list
// cut into units that run in separate blocks, unit states merged by a combine kernel.
// Host-side declarations only (C++17; included by the backend, the tests and bench_ops).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace deepinfer::cuda::kernels {

// The kernel's fixed geometry (shared by attention_fd.cu and the host plan, attention_fd_plan.cpp).
constexpr int kFdHeads = 64;          // query heads per block (the M dimension)
constexpr int kFdWidth = 512;         // K = V width
constexpr int kFdChunkKeys = 16;      // keys per chunk
constexpr int kFdPartRow = 4 + 512;   // scratch floats per (token, unit, head): m, l, 2 pad, a[512]
constexpr int kFdMaxGridUnits = 64;   // units per token at most

// The kernels CudaBackend::attention can run for V4's layout. The values are kept from session 6:
// 1 was the session-5 tensor-core kernel attention_tc.cu, removed in session 7 (attention_fd beat
// it at every measured shape); set_attention_kernel_override(1) now clears the override.
enum AttentionKernel : int {
  kAttentionSimt = 0,  // attention.cu (fp32 CUDA cores; every layout)
  kAttentionFd = 2,    // attention_fd.cu (this file's kernel)
  kAttentionAuto = 3,  // per shape: fd where it applies (attention_fd_supports), else simt
};

// The kernel asked for: set_attention_kernel_override (≥ 0) first, then
// DEEPINFER_CUDA_ATTENTION=simt|fd|auto (src/common/env.h; "tc" is read as auto with a warning).
int attention_kernel_requested();
// Tests and bench_ops: force kAttentionSimt, kAttentionFd or kAttentionAuto in-process; any other
// value (−1 included) returns to the environment's choice.
void set_attention_kernel_override(int mode);

// True when attention_fd handles the layout: nH a multiple of 64, one KV head, K and V the same
// tensor, D = Dv = 512.
bool attention_fd_supports(int64_t nH, int64_t nKV, int64_t D, int64_t Dv, bool kv_same);

// How one call is cut. A token with `chunks` = ⌈keys / 16⌉ chunks runs
//   n_units = ⌈chunks / per_unit⌉ units of per_unit = ⌈chunks / min(⌈chunks / chunks_per_unit⌉,
//   grid_units)⌉ chunks (a token without keys: one unit),
// so the cut of a token depends on its own key count, chunks_per_unit and grid_units only.
struct AttentionFdPlan {
  int chunks_per_unit = 1;  // target chunks (of 16 keys) per unit
  int grid_units = 1;       // gridDim.y: units per token at most
  int64_t parts_floats = 0; // scratch floats (0: every token is one unit, no combine kernel)
  int variant = 0;          // 0 / 1 / 2: attention_fd.cu, 3 / 4: attention_x4.cu (attention_fd_variant)
  int heads_per_block = kFdHeads;  // 64, or 32 / 16: attention_fd.cu's head-split blocks (x1 / x2)
};

// The plan for S tokens of nH heads whose lists hold at most max_keys keys, on num_sms SMs.
// batch_invariant: chunks_per_unit is the constant kFdInvariantChunks (or
// DEEPINFER_ATTENTION_BI_CHUNKS) and grid_units at most kFdInvariantMaxUnits (a token's bits then
// depend on its own inputs only: not on S, the grid or the other tokens); otherwise the unit count
// minimises a makespan model of the launch (one block per SM at a time; see attention_fd.cu).
AttentionFdPlan attention_fd_plan(int64_t S, int64_t nH, int64_t max_keys, int num_sms,
                                  bool batch_invariant);
// Session 11 (was 8 chunks, up to 64 units): under --batch-invariant a token of c chunks runs
// min(c, 16) units of ⌈c / min(c, 16)⌉ chunks — a function of its own key count (the grid cap
// binds every token alike as long as max_keys is not understated).
constexpr int kFdInvariantChunks = 1;
constexpr int kFdInvariantMaxUnits = 16;
// bench_ops only (session 8, to measure other cuts): chunks_per_unit of the default plan forced
// to n (> 0); 0 returns to the makespan model. The batch-invariant plan ignores it.
void set_attention_fd_chunks_per_unit_override(int n);

// The split-key kernel variant attention_fd runs (DEEPINFER_ATTENTION_KERNEL; the override first):
//   1 = x1 = auto (session 11): attention_fd.cu with head-split blocks of 64, 32 or 16 heads (8
//       warps = channel eighths) that give fd's bits for their heads, so more blocks share a
//       token at small batches; fd's unit cut, so its output is fd's bit for bit in every call;
//       the plan picks the heads per block (16 / 32 at batch 1 … 4, 64 from ~8 on);
//   0 = "fd": the 64-head blocks alone (session 8's kernel);
//   2 = x2: head split with heads per block and units chosen together (fd's bits at the same cut;
//       its own cut in the default mode, fd's under --batch-invariant);
//   3 / 4 = x3 / x4 (session 10): attention_x4.cu (wgmma, warp-specialized: a producer
//       warpgroup converts the K = V tiles; x4 also stages its loads by cp.async).
// attention_fd_plan records the variant in AttentionFdPlan::variant and the heads in
// heads_per_block.
//   5..8 = x5..x8 (session 13, attention_x5.cu): one launch per call — the units of a token are
//       one thread-block cluster that merges its states through distributed shared memory (no
//       scratch, no combine kernel); per-head Q and per-row K = V scales; a token of c chunks runs
//       min(c, Umax) units, so its bits depend on its own inputs only (not on the batch or the
//       heads per block). x5: Umax 8, heads per block by the plan; x6: Umax 16 (non-portable
//       clusters, 8 where the device cannot schedule them); x7: x5 launched without PDL (x5's
//       bits; to measure what PDL costs around a cluster kernel); x8: Umax 8, 32 heads. Under
//       --batch-invariant they run x1 (the batch-invariant plan's bits).
constexpr int kFdVariantCount = 9;
// Session 13: under auto (no override, DEEPINFER_ATTENTION_KERNEL=auto) attention_fd_plan runs x5
// for calls of at most this many tokens in the default mode (x1 above it and under
// --batch-invariant); attention_fd_variant() still reports 1 (auto).
constexpr int64_t kFdAutoX5MaxTokens = 4;
int attention_fd_variant();
// Tests and bench_ops: force variant v in-process (0 … 4); any other value (−1 included)
// returns to the environment's choice.
void set_attention_fd_variant_override(int v);
// Tests and bench_ops: the heads per block of variants 1 / 2 forced to h (16, 32 or 64); any
// other value (0 included) returns to the plan's choice. Variants 0, 3, 4 always use 64.
void set_attention_fd_heads_override(int h);

// out[S, nH, 512] = attention of q[S, nH, 512] over rows kv[T, 1, 512] listed per token by
// key_offsets[S+1] / key_ids[nnz], optional sinks[nH], softmax scale `scale`;
// parts: plan.parts_floats floats of scratch (null when 0).
void attention_fd(const float* q, const float* kv, const int32_t* key_offsets,
                  const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
                  int64_t T, float scale, float* out, float* parts, const AttentionFdPlan& plan,
                  int32_t* error_flag, cudaStream_t s);
// Variants x3 / x4 (attention_x4.cu): the same contract; called by attention_fd when plan.variant
// is 3 or 4.
void attention_fd_x4(const float* q, const float* kv, const int32_t* key_offsets,
                     const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
                     int64_t T, float scale, float* out, float* parts, const AttentionFdPlan& plan,
                     int32_t* error_flag, cudaStream_t s);

// Variants x5..x8 (attention_x5.cu): the same contract without scratch (plan.parts_floats is 0);
// called by attention_fd when plan.variant is 5..8. plan.grid_units = the cluster size U.
void attention_fd_x5(const float* q, const float* kv, const int32_t* key_offsets,
                     const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
                     int64_t T, float scale, float* out, const AttentionFdPlan& plan,
                     int32_t* error_flag, cudaStream_t s);
// The largest cluster (units per token) x5..x8 may use on this device for blocks of
// heads_per_block heads, at most `want` (≤ 16): up to 8 always, 16 where the device can schedule
// a non-portable cluster of 16 (queried once per device).
int attention_x5_max_units(int want, int heads_per_block);
// bench_ops only: x5..x8 with plan.grid_units = 1 launched with the cluster attribute all the same
// (to measure what the cluster launch costs).
void set_attention_x5_force_cluster(bool on);
// bench_ops only: x5..x8 with Umax = n (1 … 16; 16 only where the device schedules it) instead of
// the variant's 8 / 16; 0 returns to the variant's.
void set_attention_x5_units_override(int n);
// bench_ops only: phase stamps of the x5 kernel. attention_x5_trace(true) zeroes the record and
// turns it on (the next launches overwrite it), false turns it off; attention_x5_trace_read copies
// it out: [256 CTAs (blockIdx.x · gridDim.y + blockIdx.y)][slots], returns the slots per CTA
// (0 on failure). Slots (thread 0 of the CTA): 0 globaltimer at entry, 1 clock64 at entry,
// 2 after the PDL wait, 3 the cut known, 4 the first chunk issued, 5 Q split, 6 the first chunk
// landed, 7 after its barrier B, 8 the unit's chunks done, 9 the state written, 10 after the first
// cluster barrier, 11 the merge done, 12 after the last barrier, 13 globaltimer at exit
// (unwritten slots stay 0).
void attention_x5_trace(bool on);
int attention_x5_trace_read(std::vector<unsigned long long>& out);

}  // namespace deepinfer::cuda::kernels
