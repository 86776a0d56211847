// Prefill-sized products on cuBLAS (docs/cuda.md "Prefill products on cuBLAS"). The weight is
// dequantized exactly to bf16 (e4m3 / e2m1 codes × ue8m0 or f32 scales are bf16 numbers whenever
// the product is a normal bf16 number — checked per element on the device) into a bounded
// workspace, x is split into three bf16 terms (x = t0 + t1 + t2, the tensor-core kernels' split)
// and cuBLAS runs bf16 GEMMs with fp32 accumulation (CUBLAS_COMPUTE_32F):
//   dense:   one K-stacked GEMM  out[M, N] = [t0 | t1 | t2] [M, 3K] · [W | W | W]^T [3K, N]
//            (the product of the three terms accumulated in one fp32 sum; C written once);
//   experts: per expert, the weight read once for the three terms stacked along M:
//            Y [3·m_e, N] = [t0; t1; t2] · W_e^T, then out = (y0 + y1) + y2 in slot order.
// Should any weight element not be exact (an out-of-range scale exponent, an f32 scale with too
// many significant bits, an infinite scale), a device flag is set and a flag-guarded kernel
// recomputes the whole output from the stored weight with double accumulation — no host wait
// and no wrong result, only slow on such weights (never the case for V4 checkpoints).
// Plain C++17 (no backend.h): host code with raw device pointers.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace deepinfer::cuda::prefill {

// Dense products take this path from this many rows of x (M) up (below, the tensor-core / GEMV
// kernels: at M = 64 the dequantization — ~60 µs for wq_b — is no longer amortized).
constexpr int64_t kDenseMinRows = 128;
// Routed experts take it when the batch has at least this many slots per expert on average
// (slots ≥ 32·E: 8,192 slots = 1,366 tokens at top-6 of 256): each active expert's bf16 weight
// is written and read once, which pays for itself only with enough rows per expert.
constexpr int64_t kExpertMinAvgRows = 32;
// Upper bound on the workspace one call allocates (dequantized weights, x terms, expert partial
// products; dense calls allocate only what they need, up to this).
constexpr uint64_t kWorkspaceBytes = uint64_t{1} << 30;  // 1 GiB

// What to ask the caching allocator for a plan of `bytes` (≤ kWorkspaceBytes): the next power of
// two from 64 MiB, so that at most five block sizes (64 MiB … 1 GiB) stay cached across shapes
// and prefill lengths instead of one per distinct size.
uint64_t workspace_request(uint64_t bytes);

// DEEPINFER_PREFILL_GEMM (common/env.h): 0 = off (the tensor-core kernels), 1 = on (experts
// through cublasGemmGroupedBatchedEx, one call per chunk), 2 = on, experts as one cublasGemmEx
// per expert.
int mode();
// DEEPINFER_PREFILL_GEMM_CHUNK: at most this many experts dequantized per chunk (default 16).
int64_t chunk_experts();

// ---- dense: out [M, G·N] = x [M, G·K] · W [G·N, K]^T per group ----
struct DenseProblem {
  int fmt = 1;  // 0 bf16, 1 e4m3 (+ scale), 2 e2m1 packed [G·N, K/2] (+ scale)
  const float* x = nullptr;
  const void* w = nullptr;
  const void* scale = nullptr;  // [ceil(G·N/br), ceil(K/bc)] ue8m0 bytes or f32
  bool scale_f32 = false;
  int64_t M = 0, N = 0, K = 0, G = 1, br = 1, bc = 1;
  float* out = nullptr;
};
struct DensePlan {
  bool ok = false;
  bool whole = false;      // the whole weight dequantized once, one strided-batched GEMM per slab
  int64_t slab_rows = 0;   // rows of x per slab
  int64_t chunk_rows = 0;  // weight rows per chunk (not whole)
  uint64_t bytes = 0;      // workspace bytes the call uses (≤ kWorkspaceBytes)
};
// Layout conditions (formats, K % 8, block widths % 8, alignment, int ranges) and the plan; M
// is not compared with kDenseMinRows here (the caller decides).
DensePlan plan_dense(const DenseProblem& p);
// Queues the product on `stream` (the handle must be bound to it). ws: plan.bytes, 256-aligned.
Status dense_linear(cublasHandle_t blas, const DenseProblem& p, const DensePlan& plan, void* ws,
                    int num_sms, cudaStream_t stream);

// ---- routed experts (one projection): out[slot, n] = x[slot / x_div] · deq(W_{ids[slot]})[n] ----
struct ExpertsProblem {
  int fmt = 2;  // 1 e4m3 or 2 e2m1, scaled
  const float* x = nullptr;  // [slots / x_div, K]
  int64_t x_div = 1;
  const int32_t* ids = nullptr;   // [slots] expert of each slot (device)
  const int32_t* perm = nullptr;  // [slots] moe_group: sorted position -> slot (device)
  const int32_t* row_off = nullptr;  // [E+1] HOST copy of moe_group's row offsets
  int64_t slots = 0, E = 0;
  const void* const* w_table = nullptr;  // [E] device pointer tables
  const void* const* s_table = nullptr;
  bool scale_f32 = false;
  int64_t N = 0, K = 0, br = 1, bc = 1;
  float* out = nullptr;  // [slots, N]; rows of slots with a bad id are not written
};
struct ExpertPiece {
  int32_t e = 0;
  int64_t p_begin = 0, p_end = 0;  // sorted positions
};
struct ExpertChunk {
  int64_t first = 0, count = 0;  // pieces
  int64_t p0 = 0, p1 = 0;        // sorted positions covered (contiguous)
};
struct ExpertsPlan {
  bool ok = false;
  std::vector<ExpertPiece> pieces;
  std::vector<ExpertChunk> chunks;
  int64_t max_pieces = 0, max_rows = 0;  // per chunk
  uint64_t bytes = 0;
};
bool experts_supported(int fmt, const float* x, bool scaled, int64_t N, int64_t K, int64_t bc);
// Chunks of consecutive active experts (an expert with more rows than a chunk holds is split into
// pieces of rows), each chunk's dequantized weights + terms + partial products ≤ the bound.
ExpertsPlan plan_experts(const ExpertsProblem& p, int64_t max_chunk_experts);
Status experts_linear(cublasHandle_t blas, const ExpertsProblem& p, const ExpertsPlan& plan,
                      void* ws, int num_sms, bool grouped, cudaStream_t stream);

}  // namespace deepinfer::cuda::prefill
