// Decode attention on tensor cores for DeepSeek-V4's layout (deepseek-v4.md §4.3): every query
// head of a token reads the same key rows of one shared K = V head of width 512, so the heads are
// the M dimension of the two products (FlashMLA's layout) and a key row is read from memory once
// per block for all of them.
//
// Block = (token, group of 64 heads, unit of the token's key list); 8 warps. Warp w owns the 16
// heads of m-tile w % 4 and the half w / 4 of the 512 channels:
//   * S = Q·Kᵀ over a chunk of 16 keys: each warp computes its m-tile × 16 keys over its 256
//     channels (mma.sync m16n8k16), the two halves are exchanged through shared memory and added
//     in the fixed order half 0 + half 1, so both warps of a pair hold the same logits;
//   * online softmax in fp32 on those registers (max and sum over the chunk by a fixed quad
//     shuffle tree), P becomes the A operand of the second product without leaving registers;
//   * O += P·V for the warp's 256 output channels: 32 n-tiles × 4 fp32 accumulators per lane.
// fp32 accuracy from fp16 tensor cores: every fp32 operand is scaled by a power of two (per
// token for Q, per chunk for the K = V tile, 2^14 for P) so its largest element lies in
// [2^14, 2^15), then split x = hi + lo (hi = fp16(x), lo = fp16(x − hi)); a product is
// hi·lo' + lo·hi' + hi·hi' (three mma, the dropped lo·lo' and the residuals are ~2^-22
// relative), accumulated per 64 channels (S) or per chunk (P·V) from zero and added into the
// fp32 state with round-to-nearest adds (the tensor cores' own accumulation is kept short). The
// scales are exact and undone exactly (ldexpf). Inputs whose magnitudes lie within 2^±60 are
// handled exactly this way (V4's activations are O(1)).
//
// Batch invariance: the work of a token is cut by its own key list only — chunks of 16 keys in
// list order, the list split into n_units = clamp(⌈chunks / 20⌉, 1, 8) units of
// ⌈chunks / n_units⌉ chunks — and every (token, unit) block runs the same instructions whatever
// else is in the grid. A token of one unit is finished by its block; otherwise each unit's state
// (m, l, a per head) goes to scratch and combine_kernel merges the units in order (the same
// merge arithmetic as attention.cu), then the sink. Nothing depends on the batch, the grid, the
// slicing of the batch, or the alignment of the inputs (misaligned rows are staged by 4-byte
// copies; the staged values are the same).
#include <atomic>
#include <cstdint>
#include <cuda_fp16.h>

#include "backend/cuda/attention_tc.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "common/env.h"

namespace deepinfer::cuda::kernels {
namespace {

constexpr int kH = 64;            // heads per block (M)
constexpr int kD = 512;           // K = V width
constexpr int kNc = 16;           // keys per chunk
constexpr int kUnitChunks = 20;   // chunks per unit before the cap
constexpr int kMaxUnits = 8;      // units per token at most
constexpr int kThreads = 256;     // 8 warps
constexpr int kRowB = kD * 2;     // bytes of one fp16 row
constexpr int kPartRow = 2 + kD;  // m, l, a[512]
constexpr unsigned kFull = 0xffffffffu;

// Dynamic shared memory (bytes): Q hi/lo [64][512] fp16, K = V tile hi/lo [16][512] fp16 (both
// 16-byte chunks XOR-swizzled by row so ldmatrix is conflict-free), the raw fp32 tile [16][512]
// (cp.async target), the S exchange [8 warps][8][32] fp32.
constexpr int kQhOff = 0;
constexpr int kQlOff = kQhOff + kH * kRowB;
constexpr int kKhOff = kQlOff + kH * kRowB;
constexpr int kKlOff = kKhOff + kNc * kRowB;
constexpr int kRawOff = kKlOff + kNc * kRowB;
constexpr int kXsOff = kRawOff + kNc * kD * 4;
constexpr int kSmemBytes = kXsOff + 8 * 8 * 32 * 4;  // 204800
static_assert(kSmemBytes <= 227 * 1024, "attention_tc: shared memory");

std::atomic<int> g_override{-1};

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
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
__device__ __forceinline__ void pair_barrier(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(64) : "memory");
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

// Block-wide max of v (8 warps) through red[8]; every thread gets it. Ends with a barrier only
// before the reads, so red must not be rewritten until the caller's next __syncthreads.
__device__ __forceinline__ float block_max8(float v, float* red) {
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float m = red[0];
#pragma unroll
  for (int w = 1; w < 8; ++w) m = fmaxf(m, red[w]);
  return m;
}

// The unit layout of a list of `chunks` chunks under a grid of `max_units` units per token.
__device__ __forceinline__ void unit_layout(int64_t chunks, int max_units, int& n_units,
                                            int64_t& per_unit) {
  int64_t n = (chunks + kUnitChunks - 1) / kUnitChunks;
  const int cap = max_units < kMaxUnits ? max_units : kMaxUnits;
  n = n < 1 ? 1 : (n > cap ? cap : n);
  n_units = static_cast<int>(n);
  per_unit = (chunks + n - 1) / n;
}

// Merge and finish: the same arithmetic as attention.cu's merge / finish_scale.
__device__ __forceinline__ void merge_state(float& sm, float& sl, float* sa, int n, float m,
                                            float l, const float* a) {
  if (m == -INFINITY) return;
  if (sm == -INFINITY) {
    sm = m;
    sl = l;
    for (int i = 0; i < n; ++i) sa[i] = a[i];
    return;
  }
  const float mn = fmaxf(sm, m);
  const float cs = expf(sm - mn), cp = expf(m - mn);
  sl = fmaf(sl, cs, __fmul_rn(l, cp));
  for (int i = 0; i < n; ++i) sa[i] = fmaf(sa[i], cs, __fmul_rn(a[i], cp));
  sm = mn;
}
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
  const float* q;        // [S, nH, 512] (this slice)
  const float* kv;       // [T, 1, 512]
  const int32_t* offs;   // [S + 1] (this slice; absolute positions in ids)
  const int32_t* ids;    // [nnz]
  int64_t nnz, nH, T;
  const float* sinks;    // [nH] or null
  float scale;
  float* out;            // [S, nH, 512] (this slice)
  float* parts;          // [S, max_units, nH, 514] (this slice) or null when max_units == 1
  int max_units;
  bool aligned;          // kv 16-byte aligned: 16-byte copies
  bool q_aligned;
  int32_t* error_flag;
};

// Issues the copies of chunk rows [kb, kb + n) (n ≤ 16) into the raw tile; rows past n and bad
// ids are zero-filled, their validity goes to valid[r].
__device__ __forceinline__ void issue_chunk(const Args& p, int64_t kb, int n, uint32_t raw_s,
                                            float* raw, int* valid) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    const int piece = tid + kThreads * u;  // 2048 pieces of 16 bytes
    const int r = piece >> 7, c4 = piece & 127;
    bool ok = false;
    int64_t j = 0;
    if (r < n) {
      j = p.ids[kb + r];
      ok = j >= 0 && j < p.T;
      if (!ok && c4 == 0) set_error(p.error_flag, kErrKeyId);
    }
    if (c4 == 0) valid[r] = ok ? 1 : 0;
    const uint32_t dst = raw_s + static_cast<uint32_t>((r * kD + c4 * 4) * 4);
    if (ok) {
      const float* src = p.kv + j * kD + c4 * 4;
      if (p.aligned) {
        cp_async16(dst, src);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) cp_async4(dst + 4 * e, src + e);
      }
    } else {
      reinterpret_cast<float4*>(raw)[r * (kD / 4) + c4] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  cp_async_commit();
}

__global__ void __launch_bounds__(kThreads, 1) attention_tc_kernel(Args p) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float red[8];
  __shared__ int valid_s[2][kNc];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  float* raw = reinterpret_cast<float*>(smem + kRawOff);
  float* xs = reinterpret_cast<float*>(smem + kXsOff);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int mt = warp & 3, half = warp >> 2;
  const int64_t groups = p.nH / kH;
  const int64_t s = blockIdx.x / groups, g = blockIdx.x % groups;
  const int u = blockIdx.y;

  int64_t begin = p.offs[s], end = p.offs[s + 1];
  if (begin < 0 || end < begin || end > p.nnz) {
    if (tid == 0) set_error(p.error_flag, kErrKeyOffsets);
    begin = end = 0;
  }
  const int64_t chunks = (end - begin + kNc - 1) / kNc;
  int n_units;
  int64_t per_unit;
  unit_layout(chunks, p.max_units, n_units, per_unit);
  if (u >= n_units) return;  // uniform over the block
  const int64_t c0 = u * per_unit;
  const int64_t c1 = c0 + per_unit < chunks ? c0 + per_unit : chunks;

  // Softmax state of rows r0 = lane/4 and r1 = r0 + 8 of the m-tile (identical in the pair).
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  float acc[32][4];
#pragma unroll
  for (int nt = 0; nt < 32; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.f;
  int e_acc = 0;  // acc = a · 2^(14 + e_acc)

  if (c0 < c1) {
    auto chunk_rows = [&](int64_t c) {
      const int64_t kb = begin + c * kNc;
      return static_cast<int>(end - kb < kNc ? end - kb : kNc);
    };
    issue_chunk(p, begin + c0 * kNc, chunk_rows(c0), base + kRawOff, raw, valid_s[0]);

    // Q: scale so the tile's largest |q| lies in [2^14, 2^15), split into hi/lo fp16.
    const float* qp = p.q + (s * p.nH + g * kH) * kD;
    float qmax = 0.f;
    for (int i = tid; i < kH * kD; i += kThreads) qmax = fmaxf(qmax, fabsf(qp[i]));
    const int tq = scale_exp(block_max8(qmax, red));
    const float qf = pow2(tq);
    for (int piece = tid; piece < kH * (kD / 8); piece += kThreads) {
      const int r = piece >> 6, c = piece & 63;
      float x[8];
      if (p.q_aligned) {
        const float4 a = reinterpret_cast<const float4*>(qp + r * kD + c * 8)[0];
        const float4 b = reinterpret_cast<const float4*>(qp + r * kD + c * 8)[1];
        x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z,
        x[7] = b.w;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] = qp[r * kD + c * 8 + e];
      }
      uint4 hi, lo;
      split2(__fmul_rn(x[0], qf), __fmul_rn(x[1], qf), hi.x, lo.x);
      split2(__fmul_rn(x[2], qf), __fmul_rn(x[3], qf), hi.y, lo.y);
      split2(__fmul_rn(x[4], qf), __fmul_rn(x[5], qf), hi.z, lo.z);
      split2(__fmul_rn(x[6], qf), __fmul_rn(x[7], qf), hi.w, lo.w);
      *reinterpret_cast<uint4*>(smem + kQhOff + swz(r, c)) = hi;
      *reinterpret_cast<uint4*>(smem + kQlOff + swz(r, c)) = lo;
    }

    for (int64_t c = c0; c < c1; ++c) {
      const int buf = static_cast<int>((c - c0) & 1);
      cp_async_wait_all();
      __syncthreads();  // raw tile + valid flags in; the previous chunk's readers are done
      // The tile's scale: 4 pieces of 8 floats per thread.
      float kmax = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int piece = tid + kThreads * i;  // 1024 pieces: row piece >> 6, chunk piece & 63
        const float4* src = reinterpret_cast<const float4*>(raw) + 2 * piece;
        const float4 a = src[0], b = src[1];
        kmax = fmaxf(kmax, fmaxf(fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(a.z), fabsf(a.w))),
                                 fmaxf(fmaxf(fabsf(b.x), fabsf(b.y)), fmaxf(fabsf(b.z), fabsf(b.w)))));
      }
      const int tk = scale_exp(block_max8(kmax, red));
      const float kf = pow2(tk);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int piece = tid + kThreads * i;
        const int r = piece >> 6, cc = piece & 63;
        const float4* src = reinterpret_cast<const float4*>(raw) + 2 * piece;
        const float4 a = src[0], b = src[1];
        uint4 hi, lo;
        split2(__fmul_rn(a.x, kf), __fmul_rn(a.y, kf), hi.x, lo.x);
        split2(__fmul_rn(a.z, kf), __fmul_rn(a.w, kf), hi.y, lo.y);
        split2(__fmul_rn(b.x, kf), __fmul_rn(b.y, kf), hi.z, lo.z);
        split2(__fmul_rn(b.z, kf), __fmul_rn(b.w, kf), hi.w, lo.w);
        *reinterpret_cast<uint4*>(smem + kKhOff + swz(r, cc)) = hi;
        *reinterpret_cast<uint4*>(smem + kKlOff + swz(r, cc)) = lo;
      }
      __syncthreads();  // the converted tile is complete; the raw tile is free
      if (c + 1 < c1)
        issue_chunk(p, begin + (c + 1) * kNc, chunk_rows(c + 1), base + kRawOff, raw,
                    valid_s[buf ^ 1]);

      // ---- S = Q·Kᵀ: m-tile mt × 16 keys over channels [256·half, 256·half + 256) ----
      float sv[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      const int qrow = mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      const int krow = (lane & 7) + ((lane >> 4) << 3);
#pragma unroll
      for (int grp = 0; grp < 4; ++grp) {
        float t0[4] = {0.f, 0.f, 0.f, 0.f}, t1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const int kc = (half * 256 + (grp * 4 + ks) * 16) / 8;  // 16-byte chunk of k0
          uint32_t qh[4], ql[4], kh[4], kl[4];
          const uint32_t qa = swz(qrow, kc + (lane >> 4));
          ldsm_x4(qh, base + kQhOff + qa);
          ldsm_x4(ql, base + kQlOff + qa);
          const uint32_t ka = swz(krow, kc + ((lane >> 3) & 1));
          ldsm_x4(kh, base + kKhOff + ka);
          ldsm_x4(kl, base + kKlOff + ka);
          mma(t0, qh, kl[0], kl[1]);
          mma(t0, ql, kh[0], kh[1]);
          mma(t0, qh, kh[0], kh[1]);
          mma(t1, qh, kl[2], kl[3]);
          mma(t1, ql, kh[2], kh[3]);
          mma(t1, qh, kh[2], kh[3]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          sv[0][i] = __fadd_rn(sv[0][i], t0[i]);
          sv[1][i] = __fadd_rn(sv[1][i], t1[i]);
        }
      }
      // Exchange the halves: logit = (half 0 + half 1) · scale · 2^−(tq + tk).
#pragma unroll
      for (int i = 0; i < 8; ++i) xs[(warp * 8 + i) * 32 + lane] = sv[i >> 2][i & 3];
      pair_barrier(1 + mt);
      const float lf = ldexpf(p.scale, -(tq + tk));
      float lg[2][4];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float other = xs[((warp ^ 4) * 8 + i) * 32 + lane];
        const float mine = sv[i >> 2][i & 3];
        const float sum = half == 0 ? __fadd_rn(mine, other) : __fadd_rn(other, mine);
        const int key = (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
        lg[i >> 2][i & 3] = valid_s[buf][key] ? __fmul_rn(sum, lf) : -INFINITY;
      }
      // ---- online softmax, rows r0 (i = 0, 1) and r1 (i = 2, 3) ----
      float f[2];
      uint32_t ph[4], pl[4];
      float pv[2][4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = fmaxf(fmaxf(lg[0][2 * r], lg[0][2 * r + 1]), fmaxf(lg[1][2 * r], lg[1][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
        const float mn = fmaxf(m_run[r], mx);
        float cs = 1.f;
        if (mn == -INFINITY) {
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) pv[nt][2 * r] = pv[nt][2 * r + 1] = 0.f;
        } else {
          cs = m_run[r] == -INFINITY ? 0.f : expf(m_run[r] - mn);
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const float x = lg[nt][2 * r + j];
              pv[nt][2 * r + j] = x == -INFINITY ? 0.f : expf(x - mn);
            }
        }
        float rs = __fadd_rn(__fadd_rn(pv[0][2 * r], pv[0][2 * r + 1]),
                             __fadd_rn(pv[1][2 * r], pv[1][2 * r + 1]));
        rs = __fadd_rn(rs, __shfl_xor_sync(kFull, rs, 1));
        rs = __fadd_rn(rs, __shfl_xor_sync(kFull, rs, 2));
        l_run[r] = fmaf(l_run[r], cs, rs);
        m_run[r] = mn;
        f[r] = ldexpf(cs, tk - e_acc);  // rescale and move acc into this tile's scale
      }
      e_acc = tk;
      // P · 2^14 as the A operand: a0 (r0, keys 0-7), a1 (r1, 0-7), a2 (r0, 8-15), a3 (r1, 8-15).
      constexpr float kP = 16384.f;
      split2(__fmul_rn(pv[0][0], kP), __fmul_rn(pv[0][1], kP), ph[0], pl[0]);
      split2(__fmul_rn(pv[0][2], kP), __fmul_rn(pv[0][3], kP), ph[1], pl[1]);
      split2(__fmul_rn(pv[1][0], kP), __fmul_rn(pv[1][1], kP), ph[2], pl[2]);
      split2(__fmul_rn(pv[1][2], kP), __fmul_rn(pv[1][3], kP), ph[3], pl[3]);

      // ---- O = O·f + P·V over the warp's 256 channels ----
      const int vrow = (lane & 7) + ((lane >> 3) & 1) * 8;
      const uint32_t vbuf = base + ((lane >> 4) ? kKlOff : kKhOff);
#pragma unroll
      for (int nt = 0; nt < 32; ++nt) {
        uint32_t v[4];  // hi b0, hi b1, lo b0, lo b1
        ldsm_x4_t(v, vbuf + swz(vrow, half * 32 + nt));
        float t[4] = {0.f, 0.f, 0.f, 0.f};
        mma(t, ph, v[2], v[3]);
        mma(t, pl, v[0], v[1]);
        mma(t, ph, v[0], v[1]);
        acc[nt][0] = fmaf(acc[nt][0], f[0], t[0]);
        acc[nt][1] = fmaf(acc[nt][1], f[0], t[1]);
        acc[nt][2] = fmaf(acc[nt][2], f[1], t[2]);
        acc[nt][3] = fmaf(acc[nt][3], f[1], t[3]);
      }
    }
  }

  // ---- epilogue: a = acc · 2^−(14 + e_acc) ----
  const int e_out = -(14 + e_acc);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t h = g * kH + mt * 16 + lane / 4 + 8 * r;
    const int col0 = half * 256 + 2 * (lane & 3);
    if (n_units == 1) {
      float cs, total;
      const bool ok = finish_scale(m_run[r], l_run[r], p.sinks ? p.sinks + h : nullptr,
                                   end > begin, cs, total);
      float* o = p.out + (s * p.nH + h) * kD;
#pragma unroll
      for (int nt = 0; nt < 32; ++nt) {
        const float a0 = ldexpf(acc[nt][2 * r], e_out), a1 = ldexpf(acc[nt][2 * r + 1], e_out);
        float2 v;
        v.x = ok ? __fdiv_rn(__fmul_rn(a0, cs), total) : 0.f;
        v.y = ok ? __fdiv_rn(__fmul_rn(a1, cs), total) : 0.f;
        *reinterpret_cast<float2*>(o + col0 + nt * 8) = v;
      }
    } else {
      float* part = p.parts + ((s * p.max_units + u) * p.nH + h) * kPartRow;
      if (half == 0 && (lane & 3) == 0) {
        part[0] = m_run[r];
        part[1] = l_run[r];
      }
#pragma unroll
      for (int nt = 0; nt < 32; ++nt) {
        float2 v;
        v.x = ldexpf(acc[nt][2 * r], e_out);
        v.y = ldexpf(acc[nt][2 * r + 1], e_out);
        *reinterpret_cast<float2*>(part + 2 + col0 + nt * 8) = v;
      }
    }
  }
}

// One warp per (token, head) of tokens with more than one unit: merges the unit states in order,
// then the sink. Lane l owns channels 2l + 64i + j (i < 8, j < 2).
__global__ void __launch_bounds__(128) attention_tc_combine(Args p, int64_t S) {
  const int lane = threadIdx.x % 32;
  const int64_t w = blockIdx.x * 4 + threadIdx.x / 32;
  if (w >= S * p.nH) return;
  const int64_t s = w / p.nH, h = w % p.nH;
  int64_t begin = p.offs[s], end = p.offs[s + 1];
  if (begin < 0 || end < begin || end > p.nnz) begin = end = 0;  // flagged by the main kernel
  const int64_t chunks = (end - begin + kNc - 1) / kNc;
  int n_units;
  int64_t per_unit;
  unit_layout(chunks, p.max_units, n_units, per_unit);
  if (n_units == 1) return;  // finished by its block
  float m = -INFINITY, l = 0.f, a[16], b[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) a[i] = 0.f;
  for (int uu = 0; uu < n_units; ++uu) {
    const float* part = p.parts + ((s * p.max_units + uu) * p.nH + h) * kPartRow;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float2 v = *reinterpret_cast<const float2*>(part + 2 + 2 * lane + 64 * i);
      b[2 * i] = v.x;
      b[2 * i + 1] = v.y;
    }
    merge_state(m, l, a, 16, part[0], part[1], b);
  }
  float cs, total;
  const bool ok =
      finish_scale(m, l, p.sinks ? p.sinks + h : nullptr, end > begin, cs, total);
  float* o = p.out + (s * p.nH + h) * kD;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    float2 v;
    v.x = ok ? __fdiv_rn(__fmul_rn(a[2 * i], cs), total) : 0.f;
    v.y = ok ? __fdiv_rn(__fmul_rn(a[2 * i + 1], cs), total) : 0.f;
    *reinterpret_cast<float2*>(o + 2 * lane + 64 * i) = v;
  }
}

int max_units_for(int64_t max_keys) {
  const int64_t chunks = (max_keys + kNc - 1) / kNc;
  int64_t n = (chunks + kUnitChunks - 1) / kUnitChunks;
  return static_cast<int>(n < 1 ? 1 : (n > kMaxUnits ? kMaxUnits : n));
}

constexpr int64_t kPartsBudgetFloats = int64_t{16} << 20;  // 64 MiB of scratch per slice

}  // namespace

bool attention_tc_enabled() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return o == 1;
  return env().cuda_attention == "tc";
}

void set_attention_tc_override(int mode) { g_override.store(mode < 0 ? -1 : (mode ? 1 : 0)); }

int attention_tc_override_value() { return g_override.load(std::memory_order_relaxed); }

bool attention_tc_supports(int64_t nH, int64_t nKV, int64_t D, int64_t Dv, bool kv_same) {
  return nH > 0 && nH % kH == 0 && nKV == 1 && D == kD && Dv == kD && kv_same;
}

int64_t attention_tc_slice_tokens(int64_t S, int64_t nH, int64_t max_keys) {
  const int units = max_units_for(max_keys);
  if (units == 1 || S == 0) return 0;
  const int64_t per_token = static_cast<int64_t>(units) * nH * kPartRow;
  const int64_t n = kPartsBudgetFloats / per_token;
  return n < 1 ? 1 : (n > S ? S : n);
}

int64_t attention_tc_parts_floats(int64_t slice_tokens, int64_t nH, int64_t max_keys) {
  return slice_tokens * max_units_for(max_keys) * nH * kPartRow;
}

void attention_tc(const float* q, const float* kv, const int32_t* key_offsets,
                  const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
                  int64_t T, float scale, float* out, float* parts, int64_t slice_tokens,
                  int64_t max_keys, int32_t* error_flag, cudaStream_t st) {
  if (S * nH == 0) return;
  const int units = max_units_for(max_keys);
  static std::atomic<uint64_t> opt_in{0};
  opt_in_smem_per_device(opt_in, attention_tc_kernel, kSmemBytes);
  const int64_t slice = units == 1 ? S : slice_tokens;
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
           units == 1 ? nullptr : parts,
           units,
           reinterpret_cast<uintptr_t>(kv) % 16 == 0,
           reinterpret_cast<uintptr_t>(q) % 16 == 0,
           error_flag};
    const dim3 grid(static_cast<unsigned>(n * (nH / kH)), static_cast<unsigned>(units));
    attention_tc_kernel<<<grid, kThreads, kSmemBytes, st>>>(a);
    if (units > 1) attention_tc_combine<<<grid_for(n * nH, 4), 128, 0, st>>>(a, n);
  }
}

}  // namespace deepinfer::cuda::kernels
