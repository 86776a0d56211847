// Device helpers of the split-key attention kernels (attention_fd.cu, since session 10
// attention_x4.cu, since session 13 attention_x5.cu): the fixed geometry, the fragment loaders and
// mma (fragment layouts: attention_fd.cu's header), the fp16 hi/lo split and its power-of-two
// scales, the split of Q (split_q), the mma.sync chunk loop's pieces that attention_fd.cu and
// attention_x5.cu share (store_split4, Layout, init_state, s_tile, exchange_s, s_logits,
// softmax_row, split_p, pv_accumulate), the unit cut of a token (unit_layout, token_cut), the
// sink, the merge of units (unit_weight, merge_unit), the kernel arguments (slice_args), the
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

// x (channels 4·c4 … 4·c4 + 3 of row r) · f split into hi / lo fp16 at (r, c4) of the swizzled
// tiles hi_tile and lo_tile (a K = V row of a chunk, or attention_x5.cu's Q row).
__device__ __forceinline__ void store_split4(unsigned char* hi_tile, unsigned char* lo_tile, int r,
                                             int c4, const float4& x, float f) {
  uint2 hi, lo;
  split2(__fmul_rn(x.x, f), __fmul_rn(x.y, f), hi.x, lo.x);
  split2(__fmul_rn(x.z, f), __fmul_rn(x.w, f), hi.y, lo.y);
  const uint32_t at = swz(r, c4 >> 1) + (c4 & 1) * 8;
  *reinterpret_cast<uint2*>(hi_tile + at) = hi;
  *reinterpret_cast<uint2*>(lo_tile + at) = lo;
}

// ---- The mma.sync chunk loop of attention_fd.cu and attention_x5.cu (one copy since session 14:
// the same instructions on the same operands in both kernels; every floating-point operation in
// the order it had in each) ----
constexpr int kWarps = 8;  // a block of either kernel
constexpr int kThreads = kWarps * 32;

// The block's warp layout. kGr = 64-channel groups per warp, kMt = m-tiles (16 heads) per warp:
//   fd <2, 2>: 2 head sets (m-pairs) × 4 channel quarters, 64 heads per block (attention_fd.cu's
//   header); session 11's head-split blocks: <1, 2> 32 heads, <1, 1> 16 heads — one head set × 8
//   channel eighths. Every logit, softmax and P·V element is computed by the same instructions on
//   the same operands as in fd (a warp's S chain over its 64 channels is one of fd's group chains;
//   the eighths are summed into quarters as fd sums its two groups, (0 + group 0) + group 1, then
//   ((q0 + q1) + q2) + q3), so a head-split block gives fd's bits for its heads.
// Shared memory: Q hi/lo [kHeads][512] fp16 each, K = V hi/lo [16][512] fp16 each (swizzled,
// swz), the raw fp32 tile [16][512], the S exchange.
template <int kGr, int kMt>
struct Layout {
  static constexpr int kHs = kGr;                // head sets (warps w % kHs)
  static constexpr int kParts = kWarps / kHs;    // channel parts (warps w / kHs)
  static constexpr int kHeads = kHs * kMt * 16;  // heads per block
  static constexpr int kNt = 8 * kGr;            // P·V n-tiles (8 channels) per warp
  static constexpr int kXsFloats = kMt * 8;      // exchange floats per lane: kMt × 2 n-tiles × 4
  static constexpr int kQhOff = 0;
  static constexpr int kQlOff = kQhOff + kHeads * kRowB;
  static constexpr int kKhOff = kQlOff + kHeads * kRowB;
  static constexpr int kKlOff = kKhOff + kNc * kRowB;
  static constexpr int kRawOff = kKlOff + kNc * kRowB;
  static constexpr int kXsOff = kRawOff + kNc * kD * 4;
  static constexpr int kSmemBytes = kXsOff + kWarps * kXsFloats * 32 * 4;  // fd: 212992
  // 16-head blocks fit twice on an SM (104 KiB of shared memory, ≤ 128 registers).
  static constexpr int kMinBlocks = kHeads == 16 ? 2 : 1;
  static_assert(kSmemBytes * kMinBlocks + 1024 * kMinBlocks <= 227 * 1024, "shared memory");
};

// The kParts warps of head set hs (w = hs, hs + kHs, …); ids 1-2 (0 is __syncthreads).
template <int kParts>
__device__ __forceinline__ void head_set_barrier(int hs) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + hs), "r"(32 * kParts) : "memory");
}

// Softmax state of rows g and g + 8 of each m-tile (the same in the warps of a head set) and
// the warp's P·V accumulators, before a unit's first chunk.
template <int kMt, int kNt>
__device__ __forceinline__ void init_state(float (&m_run)[kMt][2], float (&l_run)[kMt][2],
                                           float (&acc)[kMt][kNt][4]) {
#pragma unroll
  for (int mi = 0; mi < kMt; ++mi) {
    m_run[mi][0] = m_run[mi][1] = -INFINITY;
    l_run[mi][0] = l_run[mi][1] = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mi][nt][i] = 0.f;
  }
}

// S = Q·Kᵀ: the warp's m-tiles × 16 keys over its kGr groups of 64 channels, from the Q and
// K = V hi/lo tiles at base (q_off, k_off: the warp's ldmatrix offsets, set up in each kernel:
// as a shared struct they changed attention_fd.cu's code, session 14). Per accumulator hi·lo',
// lo·hi', hi·hi' (session 7's order), chains of 4 k-steps; a group's chain is added to the
// running sum, an eighth's one group (kGr = 1) goes out as is (summed in s_logits).
template <int kGr, int kMt>
__device__ __forceinline__ void s_tile(float (&sv)[kMt][2][4], uint32_t base,
                                       const uint32_t (&q_off)[kMt], uint32_t k_off) {
  using L = Layout<kGr, kMt>;
#pragma unroll
  for (int mi = 0; mi < kMt; ++mi)
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) sv[mi][n][i] = 0.f;
#pragma unroll
  for (int grp = 0; grp < kGr; ++grp) {
    float tx[kMt][2][4] = {};
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint32_t step = static_cast<uint32_t>(grp * 4 + ks) << 5;
      uint32_t qh[kMt][4], ql[kMt][4], kh[4], kl[4];
#pragma unroll
      for (int mi = 0; mi < kMt; ++mi) {
        ldsm_x4(qh[mi], base + L::kQhOff + (q_off[mi] ^ step));
        ldsm_x4(ql[mi], base + L::kQlOff + (q_off[mi] ^ step));
      }
      ldsm_x4(kh, base + L::kKhOff + (k_off ^ step));
      ldsm_x4(kl, base + L::kKlOff + (k_off ^ step));
#pragma unroll
      for (int mi = 0; mi < kMt; ++mi) {
        mma(tx[mi][0], qh[mi], kl[0], kl[1]);
        mma(tx[mi][1], qh[mi], kl[2], kl[3]);
        mma(tx[mi][0], ql[mi], kh[0], kh[1]);
        mma(tx[mi][1], ql[mi], kh[2], kh[3]);
        mma(tx[mi][0], qh[mi], kh[0], kh[1]);
        mma(tx[mi][1], qh[mi], kh[2], kh[3]);
      }
    }
#pragma unroll
    for (int mi = 0; mi < kMt; ++mi)
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          sv[mi][n][i] = kGr == 1 ? tx[mi][n][i] : __fadd_rn(sv[mi][n][i], tx[mi][n][i]);
  }
}

// The warp's S parts into the exchange xs (lane-major, kXsFloats per lane), then the barrier of
// its head set: afterwards s_logits reads every part of the head set.
template <int kGr, int kMt>
__device__ __forceinline__ void exchange_s(float* xs, const float (&sv)[kMt][2][4], int warp,
                                           int lane, int hs) {
  using L = Layout<kGr, kMt>;
#pragma unroll
  for (int i = 0; i < L::kXsFloats; ++i)
    xs[(warp * L::kXsFloats + i) * 32 + lane] = sv[i >> 3][(i >> 2) & 1][i & 3];
  head_set_barrier<L::kParts>(hs);
}

// The lane's logits lg[mi][n-tile][accumulator] from the exchanged parts: element i (n-tile
// i >> 2, accumulator i & 3) of m-tile mi is S = (((q0 + q1) + q2) + q3) of the channel
// quarters, part q of head set hs being warp hs + kHs·q (with eighths quarter q is
// (0 + e_2q) + e_2q+1, fd's (0 + group 0) + group 1), then logit(mi, i, S) — the kernel's
// scaling and masking; begin_mtile(mi) runs before an m-tile's elements (x5 loads the rows'
// Q scales there). (The loops live here with the sum: an S-only helper called from the
// kernels' loops changed their integer code, session 14.)
template <int kGr, int kMt, class BeginMtile, class Logit>
__device__ __forceinline__ void s_logits(const float* xs, int hs, int lane, float (&lg)[kMt][2][4],
                                         BeginMtile begin_mtile, Logit logit) {
  using L = Layout<kGr, kMt>;
#pragma unroll
  for (int mi = 0; mi < kMt; ++mi) {
    begin_mtile(mi);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int slot = mi * 8 + i;
      auto part = [&](int q) { return xs[((hs + L::kHs * q) * L::kXsFloats + slot) * 32 + lane]; };
      auto quarter = [&](int q) {
        return kGr == 2 ? part(q) : __fadd_rn(__fadd_rn(0.f, part(2 * q)), part(2 * q + 1));
      };
      float sum = quarter(0);
#pragma unroll
      for (int q = 1; q < 4; ++q) sum = __fadd_rn(sum, quarter(q));
      lg[mi][i >> 2][i & 3] = logit(mi, i, sum);
    }
  }
}

// Online softmax of row r of an m-tile (r = 0: row g, accumulators 0, 1; r = 1: row g + 8,
// accumulators 2, 3) over the chunk's logits lg[n-tile][accumulator] (−inf: no key): the row's
// max over the lane quad, mn = max(m_run, max), p = exp(x − mn) into pv (0 for −inf), the row
// sum in a fixed tree, l_run = l_run·cs + sum, m_run = mn. Returns cs = exp(m_run_old − mn) (0
// from −inf, 1 while the row has no key), the factor of the row's accumulator.
__device__ __forceinline__ float softmax_row(const float (&lg)[2][4], int r, float& m_run,
                                             float& l_run, float (&pv)[2][4]) {
  float mx = fmaxf(fmaxf(lg[0][2 * r], lg[0][2 * r + 1]), fmaxf(lg[1][2 * r], lg[1][2 * r + 1]));
  mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
  const float mn = fmaxf(m_run, mx);
  float cs = 1.f;
  if (mn == -INFINITY) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) pv[nt][2 * r] = pv[nt][2 * r + 1] = 0.f;
  } else {
    cs = m_run == -INFINITY ? 0.f : expf(m_run - mn);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float xv = lg[nt][2 * r + j];
        pv[nt][2 * r + j] = xv == -INFINITY ? 0.f : expf(xv - mn);
      }
  }
  float rs = __fadd_rn(__fadd_rn(pv[0][2 * r], pv[0][2 * r + 1]),
                       __fadd_rn(pv[1][2 * r], pv[1][2 * r + 1]));
  rs = __fadd_rn(rs, __shfl_xor_sync(kFull, rs, 1));
  rs = __fadd_rn(rs, __shfl_xor_sync(kFull, rs, 2));
  l_run = fmaf(l_run, cs, rs);
  m_run = mn;
  return cs;
}

// P of an m-tile as the A operand of P·V, p · pf[n-tile][j] (key j = 0, 1 of the lane's pair)
// split hi / lo: a0 (row g, keys 2t..), a1 (g + 8), a2 (g, 8 + 2t..), a3 (g + 8, 8 + 2t..).
__device__ __forceinline__ void split_p(const float (&pv)[2][4], const float (&pf)[2][2],
                                        uint32_t (&ph)[4], uint32_t (&pl)[4]) {
  split2(__fmul_rn(pv[0][0], pf[0][0]), __fmul_rn(pv[0][1], pf[0][1]), ph[0], pl[0]);
  split2(__fmul_rn(pv[0][2], pf[0][0]), __fmul_rn(pv[0][3], pf[0][1]), ph[1], pl[1]);
  split2(__fmul_rn(pv[1][0], pf[1][0]), __fmul_rn(pv[1][1], pf[1][1]), ph[2], pl[2]);
  split2(__fmul_rn(pv[1][2], pf[1][0]), __fmul_rn(pv[1][3], pf[1][1]), ph[3], pl[3]);
}

// O = O·f + P·V over the warp's kNt n-tiles (8 channels each), one V fragment (ldmatrix.trans:
// hi b0, hi b1, lo b0, lo b1) for its m-tiles: t = hi·lo' + lo·hi' + hi·hi' from 0, then
// acc = acc·f + t per element (f of the element's row).
template <int kMt, int kNt>
__device__ __forceinline__ void pv_accumulate(float (&acc)[kMt][kNt][4],
                                              const uint32_t (&ph)[kMt][4],
                                              const uint32_t (&pl)[kMt][4],
                                              const float (&f)[kMt][2], uint32_t vbuf,
                                              uint32_t v_off) {
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) {
    uint32_t v[4];
    ldsm_x4_t(v, vbuf + (v_off ^ (static_cast<uint32_t>(nt) << 4)));
#pragma unroll
    for (int mi = 0; mi < kMt; ++mi) {
      float t[4] = {0.f, 0.f, 0.f, 0.f};
      mma(t, ph[mi], v[2], v[3]);
      mma(t, pl[mi], v[0], v[1]);
      mma(t, ph[mi], v[0], v[1]);
      acc[mi][nt][0] = fmaf(acc[mi][nt][0], f[mi][0], t[0]);
      acc[mi][nt][1] = fmaf(acc[mi][nt][1], f[mi][0], t[1]);
      acc[mi][nt][2] = fmaf(acc[mi][nt][2], f[mi][1], t[2]);
      acc[mi][nt][3] = fmaf(acc[mi][nt][3], f[mi][1], t[3]);
    }
  }
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

// The merge of a split token's units (attention_fd_combine, attention_x5.cu's cluster merge):
// with M = max_u m_u, unit u weighs exp(m_u − M), 0 for a unit without a valid key; then
// L = Σ_u l_u·w_u and a = Σ_u a_u·w_u, one fmaf per unit in unit order (merge_unit).
__device__ __forceinline__ float unit_weight(float m, float M) {
  return m == -INFINITY ? 0.f : expf(m - M);
}
__device__ __forceinline__ void merge_unit(float w, float l, const float4& v, float& L, float4& a) {
  L = fmaf(l, w, L);
  a.x = fmaf(v.x, w, a.x);
  a.y = fmaf(v.y, w, a.y);
  a.z = fmaf(v.z, w, a.z);
  a.w = fmaf(v.w, w, a.w);
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

// The Args of a call's tokens from s0 on (q, out and the offsets advanced to token s0; parts and
// the cut as given; alignment of the call's q and kv).
Args slice_args(const float* q, const float* kv, const int32_t* key_offsets, const int32_t* key_ids,
                int64_t nnz, const float* sinks, int64_t nH, int64_t T, float scale, float* out,
                int64_t s0, float* parts, int chunks_per_unit, int grid_units,
                int32_t* error_flag) {
  return Args{q + s0 * nH * kD,
              kv,
              key_offsets + s0,
              key_ids,
              nnz,
              nH,
              T,
              sinks,
              scale,
              out + s0 * nH * kD,
              parts,
              chunks_per_unit,
              grid_units,
              reinterpret_cast<uintptr_t>(kv) % 16 == 0,
              reinterpret_cast<uintptr_t>(q) % 16 == 0,
              error_flag};
}

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
  if (tid < n_units) w_s[tid] = unit_weight(m_s[tid], M);
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
    for (int k = 0; k < kInFlight; ++k) merge_unit(w_s[u + k], l_s[u + k], v[k], L, a);
  }
  if (u < n_units) {  // the rest (< 16 units): all loads issued first, then summed in order
    float4 v[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k)
      if (u + k < n_units) v[k] = reinterpret_cast<const float4*>(part0 + (u + k) * stride + 4)[tid];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      if (u + k >= n_units) break;
      merge_unit(w_s[u + k], l_s[u + k], v[k], L, a);
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
    const Args a =
        slice_args(q, kv, key_offsets, key_ids, nnz, sinks, nH, T, scale, out, s0,
                   split ? parts : nullptr, plan.chunks_per_unit < 1 ? 1 : plan.chunks_per_unit,
                   split ? plan.grid_units : 1, error_flag);
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
