// Every environment variable deepinfer reads, read in ONE place (STYLE.md 16). Nothing else in
// the code base calls getenv. Code takes an `const Env&` where it needs one, so tests can pass a
// hand-built Env instead of mutating the process environment.
#pragma once

#include <optional>
#include <string>

namespace deepinfer {

struct Env {
  // --- deepinfer ---
  std::optional<std::string> model_path;  // DEEPINFER_MODEL_PATH: local model dir, overrides ids
  std::string log_level = "info";         // DEEPINFER_LOG_LEVEL: debug|info|warning|error
  int num_threads = 0;                    // DEEPINFER_NUM_THREADS: CPU threads (0 = all cores)
  // DEEPINFER_GEMV_EXPERTS: the CUDA routed-expert GEMV of decode batches, 2 (default: the
  // session-5 kernel, gemv_experts.cuh) or 1 (the session-4 kernel); same bits, kept to compare.
  int gemv_experts_version = 2;
  // DEEPINFER_EXPERTS_MMA: 1 (default) | 0 — CUDA routed experts of decode batches (<= 128 slots)
  // on the tensor cores (experts_mma.cuh, FP4 with 1x32 ue8m0 scales), or 0: the streaming GEMV
  // (DEEPINFER_GEMV_EXPERTS picks which). Not the same bits as the GEMV. Under --batch-invariant
  // DEEPINFER_BI_EXPERTS decides instead.
  bool experts_mma = true;
  // DEEPINFER_GEMV_DENSE: old|single|multi|deep — CUDA dense products at decode-sized M (M <= 8,
  // not --batch-invariant): old = session 5 (gemv.cuh, one launch per weight); single = the
  // session-6 pipelined GEMV (gemv_multi.cuh) one launch per weight; multi (default) = session 5's
  // kernel for a single projection and the pipelined one for linear_multi's projections of one x
  // fused into one launch; deep = the pipelined kernel everywhere with one CTA per SM and 8 loads
  // per lane per step. All give the same bits.
  std::string gemv_dense = "multi";
  // DEEPINFER_CUDA_ATTENTION: simt|fd|auto — the CUDA attention kernel for V4's layout (simt:
  // the fp32 CUDA-core kernel; fd: the split-key tensor-core kernel, attention_fd.cu; auto: fd
  // where its layout applies, else simt). Default auto (session 6, H200 bench_ops: CSA decode at
  // batch 1 / 16 / 128 27.9 / 60.5 / 281 µs against simt's 36.0 / 264 / 1,898; the 16×128
  // prefill +10 %). "tc" named session 5's kernel, removed in session 7: it warns and means auto.
  std::string cuda_attention = "auto";
  // DEEPINFER_CUDA_MOE_TC: v1|v2|v2s3|v2n256|v3 — the grouped FP4 routed-expert tensor-core GEMM
  // for prefill-sized batches (v1: linear_tc.cuh tc_kernel; v2*: moe_tc.cuh variants; v3:
  // moe_tc_v3.cuh; all the same bits). Default v3 (session 7, H200, 2,048 tokens × top-6: gate_up
  // 7.06 vs v2s3's 7.68 ms, down 3.58 vs 3.87 ms).
  std::string cuda_moe_tc = "v3";
  // DEEPINFER_CUDA_HC: fused|fused_nopdl|fused_s6|composed — an mHC site as hc_site.cu's two
  // fused kernels (default; every S under --batch-invariant, S <= 256 otherwise; a token's bits do
  // not depend on S), the same launched without programmatic dependent launch (same bits),
  // session 6's fused kernels (S <= 64, never --batch-invariant), or the composed rms_norm →
  // matmul → hc_coeffs → hc_collapse launches.
  std::string cuda_hc = "fused";
  // DEEPINFER_PREFILL_GEMM: 0|1|2|3 — prefill-sized CUDA products on cuBLAS bf16 GEMMs over an
  // exactly dequantized weight (prefill_gemm.h): 1 (default) dense products (M >= 128) only;
  // 2 also routed experts with >= 32 slots per expert through cublasGemmGroupedBatchedEx, 3 the
  // same with one cublasGemmEx per expert; 0 off (the tensor-core kernels linear_tc / moe_tc).
  // H200, session 6: dense 3–4× faster than linear_tc (wo_b at M = 2048: 674 vs 2,751 µs), error
  // ≤ 2^-17 of Σ|x·w| (linear_tc: 2^-22); the expert path made the 16×128 prefill slower (12.0k
  // vs 17.2k tok/s), so it is opt-in.
  int prefill_gemm = 1;
  // DEEPINFER_PREFILL_GEMM_CHUNK: routed experts dequantized per chunk on that path (1..256).
  int prefill_gemm_chunk = 16;
  // DEEPINFER_BI_EXPERTS: mma|gemv — the routed experts under --batch-invariant: mma (default,
  // session 7) = the tensor-core decode kernel (experts_mma.cuh) for every slot count, whose bits
  // depend only on a slot's own row; gemv = the streaming GEMV experts (session 5).
  std::string bi_experts = "mma";
  // DEEPINFER_GEMV_PDL: 1 (default) | 0 — launch the decode GEMV kernels with programmatic
  // dependent launch (Hopper): the weight stream starts while the previous kernel finishes.
  bool gemv_pdl = true;
  // DEEPINFER_SMALL_PDL: 1 (default) | 0 — launch the small decode kernels (norms, rope, routing,
  // swiglu, adds, copies, the indexer's, the compressor's, sampling) with programmatic dependent
  // launch too (session 11): each one's launch overlaps the tail of the kernel before it. Same bits.
  bool small_pdl = true;
  // Session 8 kernel selectors; "s7" is always session 7's kernel and dispatch (kept to compare):
  // DEEPINFER_GEMV_KERNEL — dense decode products (M <= 8, not --batch-invariant): auto = tc.
  //   tc | tc1..tc3 = session 9's skinny_mma (skinny_mma.h): FP8 (128x128 block scales) and BF16
  //   weights on tensor cores, the weight rows as the MMA's A operand and x as three exact 16-bit
  //   planes; its own bits, independent of M. tc = the measured pick at M <= 8 (FP8 >= 8 MiB at
  //   any M, smaller FP8 from M = 3, BF16 >= 8 MiB at M 3..8), everything else as b; tc1 = every
  //   shape it supports up to M = 16; tc2 = tc without PDL; tc3 = tc with one m16 tile per warp
  //   (all four give the same bits on a product they take). b = session 8's auto: gemv_v3.cuh
  //   (TMA ring, its own row-independent bits, two CTAs per SM) for groups = 1 weights with
  //   K <= 1024 or rows >= 4 KB and <= 8 MB (wq_b, indexer wq_b, wq_a, wkv, compressors, router),
  //   s7 elsewhere (the BF16 head, wo_a, wo_b, shared expert); v1 = gemv_v3 for every shape it
  //   takes; v2 = v1 with two CTAs per SM; v3 = deep ring, one CTA per SM; v4 = integer e4m3
  //   decode; a = f16 bit-move e4m3 decode; s7 = session 7's kernels.
  // DEEPINFER_EXPERTS_KERNEL — routed experts of decode batches on the tensor cores (all the same
  //   bits): auto = s7 (v3 measured slower inside the batch-16 step: 5.45 vs 5.03 ms); c = per
  //   projection, experts_mma_v3.cuh for gate_up <= 128 slots and down 9..128, session 7's
  //   12-warp kernel for down <= 8, session 6's above 128 slots; a = v3 everywhere;
  //   b = v3 at 16 warps per SM; v1 = session 6's kernel; v2 / v3 = session 7's 16- / 12-warp one.
  // DEEPINFER_SMALL_LINEAR — dense tensor-core products at small M with linear_tc's bits:
  //   auto = w (session 9); w / w1..w3 = linear_tc_wa (linear_tc's bits, the weight as the MMA's
  //   A operand) at M <= 16 in both modes (other M as b): w = PDL + x split once per CTA (BF16
  //   weights >= 16 M elements, i.e. the head: 256-byte ring slots at M <= 8); w1 = w without
  //   PDL; w2 = w with x split per warp; w3 = w with the short e4m3 decode (same bits unless a
  //   weight holds an e4m3 NaN code). b = session 8's auto: linear_tc_small.cuh at M <= 8 under
  //   --batch-invariant and 17 <= M <= 64 in both modes, linear_tc elsewhere; a = linear_tc_small
  //   for every M <= 64 (9..64 in the default mode); v1 = b without PDL; v2 / v3 / v4 = a with a
  //   TMA bulk-copy fill / the x split per warp / 256-byte ring slots; s7 = session 7's
  //   dispatch (linear_tc).
  // Session 10: x1..x4 name new variants of these three selectors (and of
  //   DEEPINFER_ATTENTION_KERNEL below) while they are measured; each is described where it is
  //   dispatched.
  std::string gemv_kernel = "auto";
  std::string experts_kernel = "auto";
  std::string small_linear = "auto";
  // DEEPINFER_ATTENTION_KERNEL: auto | fd | x1..x4 — the split-key attention kernel: auto = x1
  //   (session 11: attention_fd.cu with head-split blocks at fd's cut, fd's bits), fd = its
  //   64-head blocks, x2 = head split with its own cut, x3 / x4 = attention_x4.cu (wgmma).
  std::string attention_kernel = "auto";
  // DEEPINFER_ATTENTION_BI_CHUNKS: 1..64 | 0 (default: attention_fd.h kFdInvariantChunks) — under
  // --batch-invariant the split-key attention cuts every token's key list into units of this many
  // 16-key chunks (a function of the token's key count only, so any value keeps batch
  // invariance; fewer chunks per unit = more blocks per token at small batches).
  int attention_bi_chunks = 0;
  // DEEPINFER_CUDA_GRAPHS: 1 (default) | 0 — replay decode steps from captured CUDA graphs.
  bool cuda_graphs = true;
  // DEEPINFER_SIDE_STREAM: 1 (default) | 0 — the CUDA backend's second stream (Backend::
  //   begin_side): the MoE's shared expert beside the routed experts (session 14, same bits).
  bool side_stream = true;
  // DEEPINFER_DECODE_FUSION: 1 (default) | 0 — the CUDA backend's fused decode ops (session 12:
  //   neighbouring small kernels of a decoder layer run as one launch, same bits); 0 runs each
  //   part as its own kernel.
  bool decode_fusion = true;
  // DEEPINFER_HEAD_BLAS: 1 (default) | 0 | 2 — the default mode's BF16 weights of >= 64 MiB (the
  //   LM head) at 9..max rows (1) or 2..max rows (2; max = DEEPINFER_HEAD_BLAS_MAX_ROWS below)
  //   through cuBLAS on x's three bf16 terms (cuda/head_blas.h) instead of the tensor-core
  //   kernels (0); fp32-accurate either way.
  //   Session 12, H200: batch-16 step 3.52 vs 3.73 ms (the head 258 vs ~400 us); batch 8 equal.
  int head_blas = 1;
  // DEEPINFER_HEAD_BLAS_MAX_ROWS: 16..2048 (default 384) — the largest M that path takes
  //   (session 16: at 17..64 rows the head otherwise runs on linear_tc_small, ~1 TB/s; session
  //   17: above 64 rows in cuBLAS calls of 64, instead of the prefill path's 3× stacked weight
  //   copy).
  int head_blas_max_rows = 384;
  // DEEPINFER_DENSE_WG: 0 | 1..64 (default 17) — the default mode's e4m3 products (ue8m0 block
  //   scales) from this many rows up to 64 on skinny_wg (cuda/skinny_wg.h: wgmma, the weight rows
  //   in registers, x's three bf16 planes streamed through shared memory); 0 = off (session 15's
  //   kernels: linear_tc_small at 17..64). Session 16, H200: batch 32 4.94 → 4.46 ms, batch 24
  //   4.25 → 3.80; at 9..16 rows no faster than linear_tc_wa (3.02 either way at batch 16).
  int dense_wg = 17;
  // DEEPINFER_DENSE_WG_MAX_ROWS: 64..2048 (default 384) — the largest M those e4m3 products take
  //   skinny_wg, in slabs of 64 rows (each slab re-reads the weight: at M > 64 it replaces the
  //   prefill path, which dequantizes the weight to bf16 every call). Session 17, H200: batch
  //   128 16.27 → 12.77 ms per step with the head's slabs, 384 46.99 → 44.35 (docs/cuda.md
  //   "Session 17").
  int dense_wg_max_rows = 384;
  // DEEPINFER_LINEAR_WR: 1 (default) | 0 — e4m3 products at 1..16 rows that would run on
  //   linear_tc_wa (every one under --batch-invariant) run on linear_tc_wr where it takes them
  //   (cuda/linear_tc_wa.h: the same bits — linear_tc's —, the weight rows loaded straight into
  //   registers); 0 keeps linear_tc_wa.
  int linear_wr = 1;
  // DEEPINFER_LINEAR_WG: 0 | 1..64 (default 17) — under --batch-invariant, the bf16 and e4m3
  //   products from this many rows up to DEEPINFER_LINEAR_WG_MAX_ROWS run on linear_tc_wg
  //   (cuda/linear_tc_wg.h: linear_tc's bits on warpgroup MMA, the weight rows in registers, x's
  //   terms bulk-copied per 64-k chunk); 0 = off (linear_tc_small / linear_tc, the same bits).
  int linear_wg = 17;
  // DEEPINFER_LINEAR_WG_MAX_ROWS: 64..65536 (default 65536) — the largest M linear_tc_wg takes, in
  //   slabs of 64 rows (each slab re-reads the weight; H200, session 19: at 96 / 128 decode rows
  //   and 128..8,192-row prefills the slabs beat linear_tc_small / linear_tc); above it linear_tc.
  int linear_wg_max_rows = 65536;
  // DEEPINFER_EXPERTS_WG: 0 | 1..1048576 (default 2048) — routed-expert batches of at least this
  //   many slots run on experts_wg (cuda/experts_wg.h: experts_mma's bits on warpgroup MMA, 32-token
  //   tiles) where the layout allows it — under --batch-invariant (the same bits as the
  //   experts_mma kernels it replaces) and in the default mode (instead of experts_mma and, above
  //   its decode range, the grouped GEMM moe_tc); 0 = off. H200 (session 20, bench_ops): at
  //   2,046 slots as fast as experts_mma's pick, at 12,288 2.1× faster; at 384 slots 3.5× slower.
  int experts_wg = 2048;
  // DEEPINFER_EXPERTS_WG_VARIANT: 0 (default: experts_wg's own choice) | 1..4 — experts_wg's
  //   kernel (cuda/experts_wg.h: 1 = 128 weight rows per work item, 2 / 3 = 256 rows with the two
  //   m-tiles in flight together / one after the other, 4 = 1 at two CTAs per SM; 0 = 3); the
  //   same bits. H200, session 20:
  //   --batch-invariant prefill 22.6k / 19.0k / 24.0k tok/s with 1 / 2 / 3 at batch 32 × 128.
  int experts_wg_variant = 0;
  // DEEPINFER_WA_FUSED_REDUCE: 1 (default) | 0 — linear_tc_wa at one row (--batch-invariant
  //   decode) sums its k-split partials in the last CTA of each tile (same adds, one launch less);
  //   0 runs the separate reduce launch.
  bool wa_fused_reduce = true;
  // DEEPINFER_SPIN_WAIT: 1 (default) | 0 | 2 — with a device backend (1), or always (2: tests),
  //   the engine thread and the forward's worker thread poll (up to 5 ms) before sleeping when
  //   they hand a step over (engine/step_executor.h); 0 sleeps at once.
  int spin_wait = 1;

  // --- Hugging Face hub, as huggingface_hub defines them ---
  std::string hf_home;        // HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface
  std::string hf_hub_cache;   // HF_HUB_CACHE, else $HF_HOME/hub
  std::string hf_endpoint = "https://huggingface.co";  // HF_ENDPOINT (no trailing slash)
  std::optional<std::string> hf_token;  // HF_TOKEN, else the file $HF_TOKEN_PATH / $HF_HOME/token
  bool hf_hub_offline = false;          // HF_HUB_OFFLINE (1/true/yes/on)

  // Reads the process environment. Invalid values (e.g. DEEPINFER_NUM_THREADS=abc) are reported
  // through `warnings` and replaced by the default, never silently ignored.
  static Env from_process();
};

// The process-wide Env, read once on first use.
const Env& env();

// Parses a boolean env value the way huggingface_hub does ("1", "true", "yes", "on", case-insensitive).
bool env_value_is_true(const std::string& v);

}  // namespace deepinfer
