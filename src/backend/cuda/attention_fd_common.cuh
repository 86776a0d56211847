// Device helpers of the split-key attention kernels (attention_fd.cu, and since session 10
// attention_x4.cu): the fixed geometry, the fragment loaders and mma (fragment layouts:
// attention_fd.cu's header), the fp16 hi/lo split and its power-of-two scales, the split of Q
// (split_q), the unit cut of a token (unit_layout, token_cut), the sink, the kernel arguments, the
// combine kernel that merges the units of a split token and the host launch loop
// (launch_split_key). Included only by those .cu files (C++17).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/attention_fd.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::cuda::kernels {
namespace {
constexpr int kH = kFdHeads;       // heads per block (M)
constexpr int kD = kFdWidth;       // K = V width
constexpr int kNc = kFdChunkKeys;  // keys per chunk
constexpr int kRowB = kD * 2;      // bytes of one fp16 row
constexpr int kPartRow = kFdPartRow;
constexpr int kMaxGridUnits = kFdMaxGridUnits;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return static_cast<uint32_t>(row * kRowB + ((chunk ^ (row & 7)) << 4));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// d += a·b (fp16 in, fp32 accumulate).
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst),
               "l"(__cvta_generic_to_global(src)));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst),
               "l"(__cvta_generic_to_global(src)));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Every group of this thread complete (its copies visible to it; others' after a barrier).
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// (hi, lo) of two scaled values as packed fp16 pairs (the lower k index in the low half).
__device__ __forceinline__ void split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x0, x1);
  const float2 hf = __half22float2(h);
  const __half2 l = __floats2half2_rn(__fsub_rn(x0, hf.x), __fsub_rn(x1, hf.y));
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}
// t such that max·2^t lies in [2^14, 2^15), clamped to [−60, 60]; 0 for 0 or non-finite.
__device__ __forceinline__ int scale_exp(float mx) {
  if (!(mx > 0.f) || !isfinite(mx)) return 0;
  const int t = 14 - ilogbf(mx);
  return t < -60 ? -60 : (t > 60 ? 60 : t);
}
__device__ __forceinline__ float pow2(int t) { return __int_as_float((127 + t) << 23); }

// Q of one head group (64 heads × 512 floats at qp) scaled so its largest |q| lies in
// [2^14, 2^15) and split into hi/lo fp16 (session 7's arithmetic; the max is order-free): thread
// tid of kThreads owns the pieces tid + kThreads·k of 8 floats (piece i = head i / 64, 16-byte
// fp16 chunk i % 64), all loaded before the first use; the warps' maxima meet in red_q after
// sync() (a barrier of the kThreads threads); store(head, chunk, hi, lo) writes a piece. Returns
// the exponent tq. Shared by attention_fd.cu and attention_x4.cu (session 10).
// Session 11 (head-split blocks): only the kOwn heads own0 … own0 + kOwn − 1 of the group are
// split (store gets the head relative to own0), but the max — so tq — is still over all 64 heads
// of the group (the other pieces are loaded for the max only): the same bits as a whole group.
template <int kThreads, int kOwn = kH, class Sync, class Store>
__device__ __forceinline__ int split_q(const float* qp, bool aligned, float* red_q, Sync sync,
                                       Store store, int own0 = 0) {
  constexpr int kQPieces = kOwn * (kD / 8) / kThreads;
  constexpr int kOther = (kH - kOwn) * (kD / 8) / kThreads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  auto load = [&](int piece, float (&v)[8]) {
    if (aligned) {
      const float4 a = reinterpret_cast<const float4*>(qp)[2 * piece];
      const float4 b = reinterpret_cast<const float4*>(qp)[2 * piece + 1];
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
      v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = qp[piece * 8 + e];
    }
  };
  float x[kQPieces][8];
#pragma unroll
  for (int k = 0; k < kQPieces; ++k) load(own0 * (kD / 8) + tid + kThreads * k, x[k]);
  float qmax = 0.f;
  if constexpr (kOther > 0) {  // the group's other heads, in at most 2 rounds: for the max only
    constexpr int kRound = kOther > kQPieces ? kOther / 2 : kOther;
    static_assert(kOther % kRound == 0, "split_q: head split");
#pragma unroll 1
    for (int k0 = 0; k0 < kOther; k0 += kRound) {
      float y[kRound][8];
#pragma unroll
      for (int k = 0; k < kRound; ++k) {
        const int piece = tid + kThreads * (k0 + k);
        load(piece < own0 * (kD / 8) ? piece : piece + kOwn * (kD / 8), y[k]);
      }
#pragma unroll
      for (int k = 0; k < kRound; ++k)
#pragma unroll
        for (int e = 0; e < 8; ++e) qmax = fmaxf(qmax, fabsf(y[k][e]));
    }
  }
#pragma unroll
  for (int k = 0; k < kQPieces; ++k)
#pragma unroll
    for (int e = 0; e < 8; ++e) qmax = fmaxf(qmax, fabsf(x[k][e]));
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) qmax = fmaxf(qmax, __shfl_xor_sync(kFull, qmax, o));
  if (lane == 0) red_q[warp] = qmax;
  sync();
  float m = red_q[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, red_q[w]);
  const int tq = scale_exp(m);
  const float qf = pow2(tq);
#pragma unroll
  for (int k = 0; k < kQPieces; ++k) {
    const int piece = tid + kThreads * k;  // relative to own0's first piece
    uint4 hi, lo;
    split2(__fmul_rn(x[k][0], qf), __fmul_rn(x[k][1], qf), hi.x, lo.x);
    split2(__fmul_rn(x[k][2], qf), __fmul_rn(x[k][3], qf), hi.y, lo.y);
    split2(__fmul_rn(x[k][4], qf), __fmul_rn(x[k][5], qf), hi.z, lo.z);
    split2(__fmul_rn(x[k][6], qf), __fmul_rn(x[k][7], qf), hi.w, lo.w);
    store(piece >> 6, piece & 63, hi, lo);
  }
  return tq;
}

// The cut of a token of `chunks` chunks (attention_fd.h AttentionFdPlan).
__host__ __device__ __forceinline__ void unit_layout(int64_t chunks, int chunks_per_unit,
                                                     int grid_units, int& n_units,
                                                     int64_t& per_unit) {
  if (chunks <= 0) {
    n_units = 1;
    per_unit = 0;
    return;
  }
  int64_t n = (chunks + chunks_per_unit - 1) / chunks_per_unit;
  n = n > grid_units ? grid_units : n;
  n = n < 1 ? 1 : n;
  per_unit = (chunks + n - 1) / n;
  n_units = static_cast<int>((chunks + per_unit - 1) / per_unit);  // no empty unit
}

// The sink joins the denominator (attention.cu's finish_scale): false when the output is zeros.
__device__ __forceinline__ bool finish_scale(float m, float l, const float* sink, bool any_key,
                                             float& cs, float& total) {
  float mf = m;
  cs = 1.f;
  total = l;
  if (sink) {
    mf = fmaxf(m, *sink);
    cs = m == -INFINITY ? 0.f : expf(m - mf);
    total = fmaf(l, cs, expf(*sink - mf));
  }
  return any_key && m != -INFINITY && total > 0.f;
}

struct Args {
  const float* q;       // [S, nH, 512] (this slice)
  const float* kv;      // [T, 1, 512]
  const int32_t* offs;  // [S + 1] (this slice; absolute positions in ids)
  const int32_t* ids;   // [nnz]
  int64_t nnz, nH, T;
  const float* sinks;   // [nH] or null
  float scale;
  float* out;           // [S, nH, 512] (this slice)
  float* parts;         // [S, grid_units, nH, kPartRow] (this slice) or null when grid_units == 1
  int chunks_per_unit, grid_units;
  bool aligned;         // kv 16-byte aligned: 16-byte copies
  bool q_aligned;
  int32_t* error_flag;
};

// Issues (and commits as one group) the copies of rows [kb, kb + n) (n ≤ 16) of the list into the


// One block per (token, head) of tokens with more than one unit; thread i owns channels
// 4i … 4i + 3. With M = max_u m_u and w_u = exp(m_u − M) (0 for a unit without a valid key),
// l = Σ_u l_u·w_u and a = Σ_u a_u·w_u, units in order; then the sink as attention.cu does.
// pdl::wait() first: it is launched with PDL after the main kernel.
__global__ void __launch_bounds__(128) attention_fd_combine(Args p) {
  __shared__ float m_s[kMaxGridUnits], l_s[kMaxGridUnits], w_s[kMaxGridUnits];
  pdl::wait();
  const int tid = threadIdx.x;
  const int64_t s = blockIdx.x / p.nH, h = blockIdx.x % p.nH;
  int64_t begin = p.offs[s], end = p.offs[s + 1];
  if (begin < 0 || end < begin || end > p.nnz) begin = end = 0;  // flagged by the main kernel
  const int64_t chunks = (end - begin + kNc - 1) / kNc;
  int n_units;
  int64_t per_unit;
  unit_layout(chunks, p.chunks_per_unit, p.grid_units, n_units, per_unit);
  if (n_units == 1) return;  // finished by its block
  const int64_t stride = p.nH * kPartRow;  // between units of a token
  const float* part0 = p.parts + (s * p.grid_units * p.nH + h) * kPartRow;
  if (tid < n_units) {
    m_s[tid] = part0[tid * stride];
    l_s[tid] = part0[tid * stride + 1];
  }
  __syncthreads();
  float M = -INFINITY;
  for (int u = 0; u < n_units; ++u) M = fmaxf(M, m_s[u]);
  if (tid < n_units) w_s[tid] = m_s[tid] == -INFINITY ? 0.f : expf(m_s[tid] - M);
  __syncthreads();
  float L = 0.f;
  float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
  int u = 0;
  // Session 7: 16 loads in flight (was 4; a batch-1 CSA token has 40 units), summed in unit
  // order exactly as before.
  constexpr int kInFlight = 16;
  for (; u + kInFlight <= n_units; u += kInFlight) {
    float4 v[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k)
      v[k] = reinterpret_cast<const float4*>(part0 + (u + k) * stride + 4)[tid];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      const float w = w_s[u + k];
      L = fmaf(l_s[u + k], w, L);
      a.x = fmaf(v[k].x, w, a.x);
      a.y = fmaf(v[k].y, w, a.y);
      a.z = fmaf(v[k].z, w, a.z);
      a.w = fmaf(v[k].w, w, a.w);
    }
  }
  if (u < n_units) {  // the rest (< 16 units): all loads issued first, then summed in order
    float4 v[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k)
      if (u + k < n_units) v[k] = reinterpret_cast<const float4*>(part0 + (u + k) * stride + 4)[tid];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      if (u + k >= n_units) break;
      const float w = w_s[u + k];
      L = fmaf(l_s[u + k], w, L);
      a.x = fmaf(v[k].x, w, a.x);
      a.y = fmaf(v[k].y, w, a.y);
      a.z = fmaf(v[k].z, w, a.z);
      a.w = fmaf(v[k].w, w, a.w);
    }
  }
  float cs, total;
  const bool ok = finish_scale(M, L, p.sinks ? p.sinks + h : nullptr, end > begin, cs, total);
  float4 o;
  o.x = ok ? __fdiv_rn(__fmul_rn(a.x, cs), total) : 0.f;
  o.y = ok ? __fdiv_rn(__fmul_rn(a.y, cs), total) : 0.f;
  o.z = ok ? __fdiv_rn(__fmul_rn(a.z, cs), total) : 0.f;
  o.w = ok ? __fdiv_rn(__fmul_rn(a.w, cs), total) : 0.f;
  reinterpret_cast<float4*>(p.out + (s * p.nH + h) * kD)[tid] = o;
}

int64_t slice_tokens_of(const AttentionFdPlan& plan, int64_t S, int64_t nH) {
  if (plan.grid_units <= 1 || plan.parts_floats == 0) return S;
  return plan.parts_floats / (static_cast<int64_t>(plan.grid_units) * nH * kPartRow);
}

// Token s's list [begin, end) (a bad offsets pair is flagged by the first thread of the token's
// first unit and read as empty) and its cut: chunks of 16 keys, n_units units of per_unit chunks.
struct TokenCut {
  int begin, end, chunks, n_units, per_unit;
  // Keys in chunk c of the list (kNc except in the last chunk).
  __device__ __forceinline__ int rows(int c) const {
    const int kb = begin + c * kNc;
    return end - kb < kNc ? end - kb : kNc;
  }
};
__device__ __forceinline__ TokenCut token_cut(const Args& p, int64_t s) {
  TokenCut t;
  t.begin = p.offs[s];
  t.end = p.offs[s + 1];
  if (t.begin < 0 || t.end < t.begin || static_cast<int64_t>(t.end) > p.nnz) {
    if (threadIdx.x == 0 && blockIdx.y == 0) set_error(p.error_flag, kErrKeyOffsets);
    t.begin = t.end = 0;
  }
  t.chunks = static_cast<int>((int64_t{t.end} - t.begin + kNc - 1) / kNc);
  int64_t per_unit64;
  unit_layout(t.chunks, p.chunks_per_unit, p.grid_units, t.n_units, per_unit64);
  t.per_unit = static_cast<int>(per_unit64);
  return t;
}

// The host side of every split-key kernel (attention_fd.cu, attention_x4.cu): the batch walked in
// slices of at most the plan's scratch, Args per slice, launch(args, grid) for the kernel, then
// the combine when tokens are split; a block serves heads_per_block heads (64, or 32 / 16 for
// attention_fd.cu's head-split variants). Both launches use programmatic dependent launch (their
// launch latency overlaps the previous kernel's tail; each waits for its predecessor first).
template <class Launch>
void launch_split_key(const float* q, const float* kv, const int32_t* key_offsets,
                      const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S,
                      int64_t nH, int64_t T, float scale, float* out, float* parts,
                      const AttentionFdPlan& plan, int32_t* error_flag, cudaStream_t st,
                      Launch launch, int heads_per_block = kH) {
  const bool split = plan.grid_units > 1 && parts != nullptr;
  const int64_t slice = split ? slice_tokens_of(plan, S, nH) : S;
  for (int64_t s0 = 0; s0 < S; s0 += slice) {
    const int64_t n = S - s0 < slice ? S - s0 : slice;
    Args a{q + s0 * nH * kD,
           kv,
           key_offsets + s0,
           key_ids,
           nnz,
           nH,
           T,
           sinks,
           scale,
           out + s0 * nH * kD,
           split ? parts : nullptr,
           plan.chunks_per_unit < 1 ? 1 : plan.chunks_per_unit,
           split ? plan.grid_units : 1,
           reinterpret_cast<uintptr_t>(kv) % 16 == 0,
           reinterpret_cast<uintptr_t>(q) % 16 == 0,
           error_flag};
    const dim3 grid(static_cast<unsigned>(n * (nH / heads_per_block)),
                    static_cast<unsigned>(a.grid_units));
    launch(a, grid);
    if (a.grid_units > 1)
      pdl::launch(attention_fd_combine, dim3(static_cast<unsigned>(n * nH)), dim3(128), 0, st, true,
                  a);
  }
}

}  // namespace
}  // namespace deepinfer::cuda::kernels
