// Streaming GEMV for weights in their stored formats (bf16, e4m3 + block scales, e2m1 + group
// scales, f32) against a few fp32 rows of x: out[m, n] = Σ_k x[m, k] · deq(w[n, k]), M ≤ 8.
//
// Layout of the work (memory-bound: the weight is read once, at as many bytes in flight as the
// SM can hold):
//  - A CTA (kThreads = 256, 8 warps) owns a contiguous range of row groups (kR = 2 weight rows,
//    4 when rows are at most 64 chunks long)
//    of one problem: a group g of a grouped linear, or one distinct routed expert with the tokens
//    routed to it. It stages up to kMT rows of x (fp32, the problem's K columns) in shared memory
//    once (16-byte slots XOR-swizzled so that the quarter-warp reads below hit 8 different bank
//    groups), then its warps stride over the row groups. More than kMT rows: the CTA repeats for
//    the next tile of x rows (the weights are read again).
//  - A warp reads its two rows in 16-byte chunks: lane l owns chunks l, l + 32, l + 64, ...;
//    kLoads = 8 independent 16-byte loads per lane are issued before any is used (plus the scale
//    of each chunk), and with ~24 warps per SM that keeps ~100 KB in flight per SM.
//  - Decode without tables, exact: e4m3 and e2m1 codes are moved bitwise into the bf16 layout
//    (e4m3: value · 2^-120; e2m1: value · 2^-126, subnormal codes landing on fp32 subnormals) and
//    multiplied back by 2^120 / 2^126 in fp32 (exact: the kernels are built without
//    flush-to-zero). e4m3 NaN codes (S.1111.111) are detected per word and make the row's result
//    NaN, as in the CPU backend. bf16 is a shift; ue8m0 scales as common/dtypes (0xFF NaN,
//    0 → 2^-127).
//
// Arithmetic of one output element (fixed; independent of M, of the x-row tile, of kR and of the
// CTA / warp that computes it): each lane walks its chunks in ascending order; a chunk's E
// elements (bf16 8, e4m3 16, e2m1 32, f32 4; a chunk never straddles a scale block) are
// fma-chained in k order from 0 into a partial p, which is promoted into the lane's accumulator
// with one fma: acc = fma(p, scale, acc) (acc += p unscaled). The 32 lane accumulators are summed
// by a fixed xor tree. So a row's bits depend only on its own x row and weight row: the kernel is
// row-independent (batch-invariant by construction), and the scalar path (rows not 16-byte
// aligned) computes the same chunks in the same order as the vector path.
//
// Session 7, programmatic dependent launch (pdl.cuh; the linear launch only, never the experts'):
// launched with PDL, a CTA may start while the previous kernel of the stream still runs. Before
// pdl::wait() it touches only the immutable weights — the TMA prefetches the first Args::pf_bytes
// of its contiguous slab of rows (and their scales) into L2 — and it stages x and writes out only
// after the wait; every CTA waits, also one without rows. A warp signals launch_dependents when
// it starts its last row group (its last weight loads), so a following PDL kernel can start.
// Plain launches run the same kernel (the wait and the signal return at once; pf_bytes = 0), and
// nothing of the arithmetic changes: the bits are the same with and without PDL.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::cuda::kernels::gemv {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kLoads = 8;   // 16-byte weight loads in flight per lane: kR rows × kLoads / kR chunks
// Weight rows per warp row group (each x read serves all of them): 2, or 4 for short rows (at
// most two chunks per lane), so that a lane still has 8 loads in flight.

// Elements per 16-byte chunk.
template <int kFmt> struct Fmt;
template <> struct Fmt<0> { static constexpr int kElems = 8; };   // bf16
template <> struct Fmt<1> { static constexpr int kElems = 16; };  // e4m3
template <> struct Fmt<2> { static constexpr int kElems = 32; };  // e2m1
template <> struct Fmt<3> { static constexpr int kElems = 4; };   // f32

// One launch: a grouped linear (kGrouped false; problem = group blockIdx.y) or the routed
// experts (kGrouped true; problem = the blockIdx.y-th distinct expert, from moe_group).
struct Args {
  const float* x = nullptr;
  int64_t lda = 0;    // linear: floats between x rows (G·K)
  int64_t x_div = 1;  // experts: x row of slot i is i / x_div (row stride K)
  const uint8_t* w = nullptr;      // linear: [G·N, K] stored
  const void* scale = nullptr;     // linear: [ceil(G·N / br), scale_cols], or null
  const void* const* w_table = nullptr;  // experts: [E] -> [N, K] stored
  const void* const* s_table = nullptr;  // experts: [E] -> scales, or null
  const int32_t* perm = nullptr;     // experts: sorted position -> slot
  const int32_t* row_off = nullptr;  // experts: [E+1] first sorted position of each expert
  const int32_t* act_off = nullptr;  // experts: [E+1] number of active experts before e
  int32_t num_experts = 0;
  int32_t scale_f32 = 0;
  int32_t x_vec = 0;     // x rows 16-byte aligned (float4 staging)
  int32_t cpb_log2 = 0;  // log2(chunks per scale block) (scaled weights)
  int64_t M = 0, N = 0, K = 0, br = 1, scale_cols = 0;
  int64_t x_stride = 0;  // floats per staged x row in shared memory (multiple of 32)
  float* out = nullptr;
  int64_t ldo = 0;  // linear: floats between out rows (G·N); experts: N
  int64_t pf_bytes = 0;  // linear, PDL launch: weight bytes per CTA prefetched into L2 before the wait
};

__device__ __forceinline__ float ue8m0_to_float(uint32_t e) {  // as common/dtypes ue8m0_to_f32
  return e == 0xFF ? __int_as_float(0x7FC00000)
                   : (e == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(e << 23)));
}

// Swizzled 16-byte slot of float4 index i of a staged x row: a permutation inside every aligned
// group of 8 slots, so that chunk c's j-th float4 for the 8 chunks of a quarter-warp lands on 8
// distinct bank groups for every format (E/4 = 2, 4 or 8 float4 per chunk).
__device__ __forceinline__ int64_t swz(int64_t i) { return i ^ ((i >> 3) & 7); }

// Decoded weights of `kOut` consecutive elements (one "unit") from a 16-byte chunk's words,
// unscaled, exact. fp8 / bf16 / f32 units are 4 elements (one x float4); e2m1 units are one
// word = 8 elements (two x float4). *nan accumulates the e4m3 NaN-code detector.
template <int kFmt> struct Unit;
template <> struct Unit<0> {
  static constexpr int kOut = 4, kCount = 2;
  __device__ __forceinline__ static void decode(const uint4& q, int i, float* w, uint32_t*) {
    const uint32_t a = i == 0 ? q.x : q.z, b = i == 0 ? q.y : q.w;
    w[0] = __uint_as_float(a << 16);
    w[1] = __uint_as_float(a & 0xFFFF0000u);
    w[2] = __uint_as_float(b << 16);
    w[3] = __uint_as_float(b & 0xFFFF0000u);
  }
};
template <> struct Unit<1> {
  static constexpr int kOut = 4, kCount = 4;
  __device__ __forceinline__ static void decode(const uint4& q, int i, float* w, uint32_t* nan) {
    const uint32_t u = i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w;
    *nan |= (u & 0x7F7F7F7Fu) + 0x01010101u;  // bit 7 of a byte set iff its code is S.1111.111
    // Bytes 1, 3 (sign at 15 / 31, exponent·mantissa moved down 4 bits) and bytes 0, 2 (moved up)
    // as bf16 pairs of value · 2^-120.
    const uint32_t o13 = (u & 0x80008000u) | ((u & 0x7F007F00u) >> 4);
    const uint32_t o02 = ((u << 8) & 0x80008000u) | ((u & 0x007F007Fu) << 4);
    constexpr float k2p120 = 1.329227995784915872903807060280344576e36f;  // 2^120
    w[0] = __uint_as_float(o02 << 16) * k2p120;
    w[1] = __uint_as_float(o13 << 16) * k2p120;
    w[2] = __uint_as_float(o02 & 0xFFFF0000u) * k2p120;
    w[3] = __uint_as_float(o13 & 0xFFFF0000u) * k2p120;
  }
};
template <> struct Unit<2> {
  static constexpr int kOut = 8, kCount = 4;
  __device__ __forceinline__ static void decode(const uint4& q, int i, float* w, uint32_t*) {
    const uint32_t u = i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w;
    constexpr float k2p126 = 8.507059173023461586584365185794205286e37f;  // 2^126
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // Nibbles j and j + 4 (elements j, j + 4): magnitude bits to bf16 bits 6..8, sign to 15.
      const uint32_t t = u >> (4 * j);
      const uint32_t o = ((t & 0x00070007u) << 6) | ((t & 0x00080008u) << 12);
      w[j] = __uint_as_float(o << 16) * k2p126;
      w[j + 4] = __uint_as_float(o & 0xFFFF0000u) * k2p126;
    }
  }
};
template <> struct Unit<3> {
  static constexpr int kOut = 4, kCount = 1;
  __device__ __forceinline__ static void decode(const uint4& q, int, float* w, uint32_t*) {
    w[0] = __uint_as_float(q.x);
    w[1] = __uint_as_float(q.y);
    w[2] = __uint_as_float(q.z);
    w[3] = __uint_as_float(q.w);
  }
};

// One element k of a row (the scalar path), unscaled, same values as the unit decoders.
template <int kFmt>
__device__ __forceinline__ float element(const uint8_t* row, int64_t k, uint32_t* nan) {
  if constexpr (kFmt == 0) {
    return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[k]) << 16);
  } else if constexpr (kFmt == 1) {
    const uint32_t b = row[k];
    *nan |= (b & 0x7Fu) + 1u;
    return __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7Fu) << 20)) * 1.329227995784915872903807060280344576e36f;
  } else if constexpr (kFmt == 2) {
    const uint32_t c = (row[k >> 1] >> (4 * (k & 1))) & 0xFu;
    return __uint_as_float(((c & 8u) << 28) | ((c & 7u) << 22)) * 8.507059173023461586584365185794205286e37f;
  } else {
    return reinterpret_cast<const float*>(row)[k];
  }
}

template <int kFmt>
__device__ __forceinline__ int64_t row_bytes(int64_t K) {
  return kFmt == 0 ? 2 * K : kFmt == 1 ? K : kFmt == 2 ? K / 2 : 4 * K;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The weight rows n0, n0 + 1 (valid when < N) against mt staged x rows: acc[m][r] per lane.
// kVec: rows are 16-byte aligned and K a multiple of E (chunk loads); else element loads.
template <int kFmt, int kMT, bool kVec, bool kScaled, int kR>
__device__ __forceinline__ void row_group(const Args& p, const uint8_t* wb, const void* sc,
                                          int64_t wrow0, int64_t n0, const float* xs, int mt,
                                          int lane, float (&acc)[kMT][kR]) {
  constexpr int E = Fmt<kFmt>::kElems;
  constexpr int kU = kLoads / kR;  // chunks per row per batch
  using U = Unit<kFmt>;
  const int64_t K = p.K, rb = row_bytes<kFmt>(K);
  const uint8_t* wrow[kR];
  int64_t sbase[kR];
  bool valid[kR];
  uint32_t nan[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    valid[r] = n0 + r < p.N;
    wrow[r] = wb + (valid[r] ? n0 + r : n0) * rb;
    sbase[r] = kScaled ? ((wrow0 + (valid[r] ? n0 + r : n0)) / p.br) * p.scale_cols : 0;
    nan[r] = 0;
  }
#pragma unroll
  for (int m = 0; m < kMT; ++m)
#pragma unroll
    for (int r = 0; r < kR; ++r) acc[m][r] = 0.f;
  const int64_t chunks = (K + E - 1) / E;
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kU) {
    uint4 q[kU][kR];
    float s[kU][kR];
    if constexpr (kVec) {
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const int64_t c = c0 + 32 * u;
          if (c < chunks && valid[r]) q[u][r] = __ldg(reinterpret_cast<const uint4*>(wrow[r]) + c);
          else q[u][r] = make_uint4(0, 0, 0, 0);
        }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        s[u][r] = 1.f;
        if constexpr (kScaled) {
          const int64_t c = c0 + 32 * u;
          if (c < chunks && valid[r]) {
            const int64_t idx = sbase[r] + (c >> p.cpb_log2);
            s[u][r] = p.scale_f32 ? __ldg(static_cast<const float*>(sc) + idx)
                                  : ue8m0_to_float(__ldg(static_cast<const uint8_t*>(sc) + idx));
          }
        }
      }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c >= chunks) break;
      float part[kMT][kR];
#pragma unroll
      for (int m = 0; m < kMT; ++m)
#pragma unroll
        for (int r = 0; r < kR; ++r) part[m][r] = 0.f;
      if constexpr (kVec) {
#pragma unroll
        for (int i = 0; i < U::kCount; ++i) {
          float w[kR][U::kOut];
#pragma unroll
          for (int r = 0; r < kR; ++r) U::decode(q[u][r], i, w[r], &nan[r]);
#pragma unroll
          for (int m = 0; m < kMT; ++m) {
            if (m >= mt) break;
            const float* xr = xs + m * p.x_stride;
#pragma unroll
            for (int h = 0; h < U::kOut / 4; ++h) {
              const float4 xv = reinterpret_cast<const float4*>(xr)[swz(c * (E / 4) + i * (U::kOut / 4) + h)];
#pragma unroll
              for (int r = 0; r < kR; ++r) {
                float a = part[m][r];
                a = fmaf(xv.x, w[r][4 * h + 0], a);
                a = fmaf(xv.y, w[r][4 * h + 1], a);
                a = fmaf(xv.z, w[r][4 * h + 2], a);
                a = fmaf(xv.w, w[r][4 * h + 3], a);
                part[m][r] = a;
              }
            }
          }
        }
      } else {
        const int64_t kend = (c + 1) * E < K ? (c + 1) * E : K;
        for (int64_t k = c * E; k < kend; ++k) {
          const int64_t xi = swz(k >> 2) * 4 + (k & 3);
#pragma unroll
          for (int r = 0; r < kR; ++r) {
            if (!valid[r]) continue;
            const float wv = element<kFmt>(wrow[r], k, &nan[r]);
#pragma unroll
            for (int m = 0; m < kMT; ++m) {
              if (m >= mt) break;
              part[m][r] = fmaf(xs[m * p.x_stride + xi], wv, part[m][r]);
            }
          }
        }
      }
#pragma unroll
      for (int m = 0; m < kMT; ++m)
#pragma unroll
        for (int r = 0; r < kR; ++r)
          acc[m][r] = kScaled ? fmaf(part[m][r], s[u][r], acc[m][r]) : acc[m][r] + part[m][r];
    }
  }
  if constexpr (kFmt == 1) {
#pragma unroll
    for (int r = 0; r < kR; ++r)
      if (nan[r] & 0x80808080u)
#pragma unroll
        for (int m = 0; m < kMT; ++m) acc[m][r] = __int_as_float(0x7FC00000);
  }
}

// Session 5: each warp pulls its next row group into L2 (prefetch.global.L2, no registers held)
// while it works on the current one, and its first group before the CTA stages x — twice the
// DRAM traffic in flight per warp, no change to any result. false restores session 4's kernel.
constexpr bool kPrefetchL2 = false;  // on: the bf16 head GEMV took 413 µs on the H200 (session 5; 303 µs by the weight-only kernel)

// The weight rows n0 .. n0 + kR - 1 (valid when < N) and their scales into L2 (vector path).
template <int kFmt, int kR>
__device__ __forceinline__ void prefetch_rows(const Args& p, const uint8_t* wb, const void* sc,
                                              int64_t wrow0, int64_t n0, int lane) {
  constexpr int E = Fmt<kFmt>::kElems;
  const int64_t rb = row_bytes<kFmt>(p.K), chunks = (p.K + E - 1) / E;
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    if (n0 + r >= p.N) break;
    const uint8_t* row = wb + (n0 + r) * rb;
    for (int64_t c = lane; c < chunks; c += 32)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(row + 16 * c));
    if (sc != nullptr && p.br == 1) {  // row-wise scales (FP4 1×32); 128-row blocks stay in L2
      const int64_t idx = (wrow0 + n0 + r) * p.scale_cols + (lane >> p.cpb_log2);
      if (lane < chunks)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const uint8_t*>(sc) + (p.scale_f32 ? 4 * idx : idx)));
    }
  }
}

// PDL (vector path): the first min(slab, p.pf_bytes) bytes of the CTA's rows n0 .. n1 - 1 (one
// contiguous slab of the problem's weight) and the scales of those rows into L2, by the TMA in
// 16 KB pieces spread over the CTA's threads. Weights only: they are never written by a kernel.
template <int kFmt>
__device__ __forceinline__ void prefetch_slab(const Args& p, const uint8_t* wb, const void* sc,
                                              int64_t wrow0, int64_t n0, int64_t n1, int tid) {
  const int64_t rb = row_bytes<kFmt>(p.K);
  int64_t bytes = (n1 - n0) * rb;
  bytes = bytes < p.pf_bytes ? bytes : p.pf_bytes;
  if (bytes <= 0) return;
  const uint8_t* base = wb + n0 * rb;  // 16-byte aligned on the vector path
  constexpr int64_t kPiece = 16384;
  for (int64_t off = tid * kPiece; off < bytes; off += kThreads * kPiece)
    pdl::prefetch_l2_bulk(base + off, static_cast<uint32_t>(bytes - off < kPiece ? bytes - off : kPiece));
  if (sc != nullptr) {
    const int64_t rows = (bytes + rb - 1) / rb;
    const int64_t s0 = ((wrow0 + n0) / p.br) * p.scale_cols;
    const int64_t s1 = ((wrow0 + n0 + rows - 1) / p.br + 1) * p.scale_cols;
    const int64_t es = p.scale_f32 ? 4 : 1;
    pdl::prefetch_l2_range(static_cast<const uint8_t*>(sc) + s0 * es, (s1 - s0) * es, tid, kThreads);
  }
}

template <int kFmt, int kMT, bool kVec, bool kGrouped, int kR>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const Args p) {
  extern __shared__ __align__(16) float xs[];  // [kMT][x_stride], 16-byte slots swizzled
  __shared__ int64_t xoff[kMT], ooff[kMT];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const uint8_t* wb;
  const void* sc;
  int64_t wrow0, rows;
  int64_t pos0 = 0;
  if constexpr (kGrouped) {
    const int d = blockIdx.y;
    if (d >= p.act_off[p.num_experts]) return;  // fewer distinct experts than the grid allows
    int lo = 0, hi = p.num_experts - 1;         // the expert e with act_off[e] == d, count > 0
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.act_off[mid] <= d) lo = mid;
      else hi = mid - 1;
    }
    wb = static_cast<const uint8_t*>(p.w_table[lo]);
    sc = p.s_table != nullptr ? p.s_table[lo] : nullptr;
    wrow0 = 0;
    pos0 = p.row_off[lo];
    rows = p.row_off[lo + 1] - pos0;
  } else {
    const int64_t g = blockIdx.y;
    wb = p.w + row_bytes<kFmt>(p.K) * g * p.N;
    sc = p.scale;
    wrow0 = g * p.N;
    rows = p.M;
  }
  const int64_t groups = (p.N + kR - 1) / kR;
  const int64_t per = (groups + gridDim.x - 1) / gridDim.x;
  const int64_t rg_begin = static_cast<int64_t>(blockIdx.x) * per;
  const int64_t rg_end = rg_begin + per < groups ? rg_begin + per : groups;
  if constexpr (!kGrouped) {
    // Before the wait: the immutable weights only (x may still be written, out still read, by
    // the previous kernel). Every CTA waits, also one without rows (pdl.cuh).
    if (kVec && p.pf_bytes > 0 && rg_begin < rg_end)
      prefetch_slab<kFmt>(p, wb, sc, wrow0, rg_begin * kR, rg_end * kR < p.N ? rg_end * kR : p.N, tid);
    pdl::wait();
  }
  if (rg_begin >= rg_end) return;
  const int64_t K = p.K;
  if (kPrefetchL2 && kVec && rg_begin + warp < rg_end)
    prefetch_rows<kFmt, kR>(p, wb, sc, wrow0, (rg_begin + warp) * kR, lane);
  for (int64_t m0 = 0; m0 < rows; m0 += kMT) {
    const int mt = rows - m0 < kMT ? static_cast<int>(rows - m0) : kMT;
    if (m0 > 0) __syncthreads();  // the previous tile's readers are done
    if (tid < kMT) {
      if (tid < mt) {
        if constexpr (kGrouped) {
          const int64_t slot = p.perm[pos0 + m0 + tid];
          xoff[tid] = (slot / p.x_div) * K;
          ooff[tid] = slot * p.ldo;
        } else {
          xoff[tid] = (m0 + tid) * p.lda + blockIdx.y * K;
          ooff[tid] = (m0 + tid) * p.ldo + blockIdx.y * p.N;
        }
      } else {
        xoff[tid] = ooff[tid] = -1;
      }
    }
    __syncthreads();
    // Stage the x rows (swizzled 16-byte slots).
    if (p.x_vec) {
      const int64_t k4 = K / 4;
      for (int m = 0; m < mt; ++m) {
        const float4* src = reinterpret_cast<const float4*>(p.x + xoff[m]);
        float4* dst = reinterpret_cast<float4*>(xs + m * p.x_stride);
        for (int64_t i = tid; i < k4; i += kThreads) dst[swz(i)] = __ldg(src + i);
      }
    } else {
      for (int m = 0; m < mt; ++m) {
        const float* src = p.x + xoff[m];
        float* dst = xs + m * p.x_stride;
        for (int64_t k = tid; k < K; k += kThreads) dst[swz(k >> 2) * 4 + (k & 3)] = __ldg(src + k);
      }
    }
    __syncthreads();
    for (int64_t rg = rg_begin + warp; rg < rg_end; rg += kWarps) {
      const int64_t n0 = rg * kR;
      if constexpr (!kGrouped)  // the warp's last row group: its last weight loads follow
        if (m0 + kMT >= rows && rg + kWarps >= rg_end) pdl::launch_dependents();
      if (kPrefetchL2 && kVec && rg + kWarps < rg_end)
        prefetch_rows<kFmt, kR>(p, wb, sc, wrow0, n0 + kWarps * kR, lane);
      float acc[kMT][kR];
      if constexpr (kFmt == 1 || kFmt == 2) {  // e4m3 / e2m1: scaled (unscaled ones exist too)
        if (sc != nullptr) row_group<kFmt, kMT, kVec, true, kR>(p, wb, sc, wrow0, n0, xs, mt, lane, acc);
        else row_group<kFmt, kMT, kVec, false, kR>(p, wb, sc, wrow0, n0, xs, mt, lane, acc);
      } else {
        row_group<kFmt, kMT, kVec, false, kR>(p, wb, sc, wrow0, n0, xs, mt, lane, acc);
      }
#pragma unroll
      for (int m = 0; m < kMT; ++m) {
        if (m >= mt) break;
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const float v = warp_sum(acc[m][r]);
          if (lane == m * kR + r && n0 + r < p.N) p.out[ooff[m] + n0 + r] = v;
        }
      }
    }
  }
}

// ---- host side -------------------------------------------------------------------------------

constexpr int64_t kSmemBudget = 100 * 1024;  // staged x rows per CTA (two CTAs per SM fit)

// Floats per staged x row: whole groups of 8 swizzled 16-byte slots.
inline int64_t x_stride_floats(int64_t K) { return ((K + 3) / 4 + 7) / 8 * 8 * 4; }

inline int device_sms() {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return 132;
  }
  return v;
}

// Launches one instantiation over `problems` problems (grid.y) with `units` row groups each:
// about as many CTAs as fit on the GPU at once (persistent), at least one row group per warp.
// pdl (linear only; the experts' launch stays plain): programmatic dependent launch, each CTA
// prefetching its share of pf_total weight bytes into L2 before its wait (vector path).
template <int kFmt, int kMT, bool kVec, bool kGrouped, int kR>
void launch(const Args& a, int64_t problems, cudaStream_t s, bool pdl = false, int64_t pf_total = 0) {
  auto* kernel = gemv_kernel<kFmt, kMT, kVec, kGrouped, kR>;
  const size_t smem = static_cast<size_t>(kMT) * a.x_stride * sizeof(float);
  // The shared-memory opt-in is per device (a function has one instance per device context).
  static std::atomic<uint64_t> attr_set{0};
  opt_in_smem_per_device(attr_set, kernel, static_cast<int>(kSmemBudget));
  static const int sms = device_sms();
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem) != cudaSuccess) {
    cudaGetLastError();
    per_sm = 1;
  }
  per_sm = per_sm < 1 ? 1 : per_sm;
  const int64_t groups = (a.N + kR - 1) / kR;
  const int64_t most = (groups + kWarps - 1) / kWarps;  // one row group per warp at least
  int64_t ctas = (static_cast<int64_t>(sms) * per_sm + problems - 1) / problems;
  ctas = ctas < most ? ctas : most;
  ctas = ctas < 1 ? 1 : ctas;
  pdl = pdl && !kGrouped;
  Args b = a;
  b.pf_bytes = pdl && kVec && pf_total > 0 ? pf_total / (ctas * problems) / 16 * 16 : 0;
  pdl::launch(kernel, dim3(static_cast<unsigned>(ctas), static_cast<unsigned>(problems)), dim3(kThreads),
              smem, s, pdl, b);
}

template <int kFmt, bool kGrouped>
void launch_mt(const Args& a, int mt, int64_t problems, bool vec, cudaStream_t s, bool pdl = false,
               int64_t pf_total = 0) {
  // Short rows (≤ 64 chunks): four rows per warp, up to 4 staged x rows (registers).
  const bool short_rows = (a.K + Fmt<kFmt>::kElems - 1) / Fmt<kFmt>::kElems <= 64;
#define DI_GEMV_MT(MT)                                                                  \
  if (vec && short_rows && MT <= 4)                                                     \
    launch<kFmt, MT, true, kGrouped, (MT <= 4 ? 4 : 2)>(a, problems, s, pdl, pf_total);  \
  else if (vec) launch<kFmt, MT, true, kGrouped, 2>(a, problems, s, pdl, pf_total);    \
  else launch<kFmt, MT, false, kGrouped, 2>(a, problems, s, pdl, pf_total);
  if (mt == 1) { DI_GEMV_MT(1) }
  else if (mt == 2) { DI_GEMV_MT(2) }
  else if (mt == 4 || kGrouped) { DI_GEMV_MT(4) }  // the expert launch stages at most 4 rows
  else if constexpr (!kGrouped) { DI_GEMV_MT(8) }
#undef DI_GEMV_MT
}

}  // namespace deepinfer::cuda::kernels::gemv
