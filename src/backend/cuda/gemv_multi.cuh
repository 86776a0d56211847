// Session 6: the dense decode GEMV, version 2 — several projections of the SAME x (same K, same
// stored format) in one launch, with each warp's next weight loads in flight while it computes
// the current ones. out_j[m, n] = Σ_k x[m, k] · deq(W_j[n, k]) for projections j < nproj.
//
// Why (H200 session-5 profile, batch-1 decode): the FP8 GEMV ran at ~35 % of the copy ceiling;
// the small projections (2–4 MB: wq_a, wkv, compressor / indexer ones) are dominated by launch +
// ramp, and inside a warp the old kernel waits for its 8 loads, computes, reduces, and only then
// issues the next loads (no overlap of memory and math inside a warp).
//
// Layout of the work:
//  - The row groups (kR weight rows) of all projections are numbered one after the other
//    (projection j owns groups [rg0_j, rg0_j + ceil(N_j / kR))); a persistent 1-D grid of CTAs of
//    8 warps splits them evenly: global warp w owns the contiguous range [w·T/W, (w+1)·T/W).
//  - A CTA stages up to kMT rows of x once (shared by every projection: same x), exactly as
//    gemv.cuh (16-byte slots XOR-swizzled); the warp's first weight loads are issued before the
//    staging, so DRAM is busy while x comes in.
//  - A warp walks its range as a sequence of steps (row group, batch of kU chunks per row);
//    step i+1's kU·kR 16-byte loads (+ scales) are issued before step i is computed (register
//    double buffer), so a warp always has a batch in flight.
//
// Arithmetic of one output element: IDENTICAL to gemv.cuh (the same decoders, lane l walks
// chunks l, l+32, ... ascending, each chunk fma-chained from 0 in k order and promoted with one
// fma by its scale, the fixed xor tree over lanes). So the outputs are bitwise equal to
// gemv_linear's for the same rows, whatever the number of projections, their order, the grid or
// kR / kU — the GPU test checks it at the V4 shapes.
//
// Session 7, programmatic dependent launch (pdl.cuh): launched with PDL, the kernel may start while
// the previous kernel of the stream still runs. Before pdl::wait() a warp touches only immutable
// memory: the TMA prefetches the first Args::pf_bytes of its range's rows (and their scales) into
// L2, and it issues its first step's weight loads into registers (as before, the loads that were
// in flight during the staging of x); x is staged and outputs written only after the wait, which
// every thread of every CTA executes. A warp signals launch_dependents once it has issued its last
// loads. Plain launches run the same kernel (wait / signal return at once, pf_bytes = 0): the
// arithmetic and so the bits do not change.
//
// Restrictions (the host checks them; else the caller falls back to gemv_linear): groups = 1,
// every weight row 16-byte aligned (vector path only), the same format / scale dtype / block
// shape for every projection, at most kMaxProj projections, K small enough for gemv's staging.
#pragma once

#include "backend/cuda/gemv.cuh"

namespace deepinfer::cuda::kernels::gemv2 {

using gemv::Fmt;
using gemv::kThreads;
using gemv::kWarps;

constexpr int kMaxProj = 8;

struct Proj {
  const uint8_t* w = nullptr;   // [N, K] stored, rows 16-byte aligned
  const void* scale = nullptr;  // [ceil(N / br), scale_cols] ue8m0 / f32, or null
  float* out = nullptr;         // out row m at out + m·ldo
  int64_t N = 0, ldo = 0;
  int64_t rg0 = 0;              // first global row group
};

struct Args {
  const float* x = nullptr;  // [M, lda] fp32, K columns used
  int64_t lda = 0, M = 0, K = 0;
  int64_t br = 1, scale_cols = 0;
  int64_t x_stride = 0;      // floats per staged x row (gemv::x_stride_floats(K))
  int64_t groups = 0;        // T: row groups of all projections
  int32_t scale_f32 = 0, x_vec = 0, cpb_log2 = 0, nproj = 0;
  int64_t pf_bytes = 0;      // PDL launch: weight bytes per warp prefetched into L2 before the wait
  Proj proj[kMaxProj];
};

// Addressing of one row group (kR rows of one projection); 32-bit offsets keep it small.
struct Group {
  const uint8_t* row0;  // weight row n0
  const void* sc;       // the projection's scales (null: unscaled)
  float* out;           // out + n0
  int32_t sidx;         // first scale of the group's block row (br % kR == 0: one block row)
  int32_t nvalid;       // rows n0 .. n0 + nvalid - 1 exist
  int32_t ldo;
};

template <int kFmt, int kR>
__device__ __forceinline__ Group locate(const Args& p, int64_t rg) {
  // The projection holding rg: selects over the (uniform) table, no dynamic param indexing.
  const uint8_t* w = p.proj[0].w;
  const void* sc = p.proj[0].scale;
  float* out = p.proj[0].out;
  int64_t N = p.proj[0].N, ldo = p.proj[0].ldo, rg0 = 0;
#pragma unroll
  for (int t = 1; t < kMaxProj; ++t)
    if (t < p.nproj && p.proj[t].rg0 <= rg) {
      w = p.proj[t].w;
      sc = p.proj[t].scale;
      out = p.proj[t].out;
      N = p.proj[t].N;
      ldo = p.proj[t].ldo;
      rg0 = p.proj[t].rg0;
    }
  const int64_t n0 = (rg - rg0) * kR;
  Group g;
  g.row0 = w + n0 * gemv::row_bytes<kFmt>(p.K);
  g.sc = sc;
  g.out = out + n0;
  g.sidx = static_cast<int32_t>((n0 / p.br) * p.scale_cols);
  g.nvalid = static_cast<int32_t>(N - n0 < kR ? N - n0 : kR);
  g.ldo = static_cast<int32_t>(ldo);
  return g;
}

// PDL: the first min(range, p.pf_bytes) bytes of the warp's rows from row group rg_begin up to
// rg_end or the end of that group's projection (contiguous in memory), and their scales, into L2
// (TMA, 16 KB pieces over the lanes). Weights only.
template <int kFmt, int kR>
__device__ __forceinline__ void prefetch_range(const Args& p, int64_t rg_begin, int64_t rg_end, int lane) {
  const uint8_t* w = p.proj[0].w;
  const void* sc = p.proj[0].scale;
  int64_t N = p.proj[0].N, rg0 = 0;
#pragma unroll
  for (int t = 1; t < kMaxProj; ++t)
    if (t < p.nproj && p.proj[t].rg0 <= rg_begin) {
      w = p.proj[t].w;
      sc = p.proj[t].scale;
      N = p.proj[t].N;
      rg0 = p.proj[t].rg0;
    }
  const int64_t rb = gemv::row_bytes<kFmt>(p.K);
  const int64_t n0 = (rg_begin - rg0) * kR;
  const int64_t n1 = (rg_end - rg0) * kR < N ? (rg_end - rg0) * kR : N;
  int64_t bytes = (n1 - n0) * rb;
  bytes = bytes < p.pf_bytes ? bytes : p.pf_bytes;
  if (bytes <= 0) return;
  const uint8_t* base = w + n0 * rb;  // rows 16-byte aligned (vector path only)
  constexpr int64_t kPiece = 16384;
  for (int64_t off = lane * kPiece; off < bytes; off += 32 * kPiece)
    pdl::prefetch_l2_bulk(base + off, static_cast<uint32_t>(bytes - off < kPiece ? bytes - off : kPiece));
  if (sc != nullptr) {
    const int64_t rows = (bytes + rb - 1) / rb;
    const int64_t s0 = (n0 / p.br) * p.scale_cols, s1 = ((n0 + rows - 1) / p.br + 1) * p.scale_cols;
    const int64_t es = p.scale_f32 ? 4 : 1;
    pdl::prefetch_l2_range(static_cast<const uint8_t*>(sc) + s0 * es, (s1 - s0) * es, lane, 32);
  }
}

// Issues step (g, b)'s loads: chunk c = b·32·kU + 32·u + lane of each row, and its scale.
template <int kFmt, int kR, int kU, bool kScaled>
__device__ __forceinline__ void load_step(const Args& p, const Group& g, int b, int chunks,
                                          int lane, uint4 (&q)[kU][kR], float (&s)[kU][kR]) {
  const int rb16 = static_cast<int>(gemv::row_bytes<kFmt>(p.K) / 16);  // chunks per row
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int c = b * 32 * kU + 32 * u + lane;
    float sv = 1.f;
    if constexpr (kScaled) {
      if (c < chunks) {
        const int idx = g.sidx + (c >> p.cpb_log2);
        sv = p.scale_f32 ? __ldg(static_cast<const float*>(g.sc) + idx)
                         : gemv::ue8m0_to_float(__ldg(static_cast<const uint8_t*>(g.sc) + idx));
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const bool ok = c < chunks && r < g.nvalid;
      q[u][r] = ok ? __ldg(reinterpret_cast<const uint4*>(g.row0) + (r * rb16 + c)) : make_uint4(0, 0, 0, 0);
      s[u][r] = sv;
    }
  }
}

// Step b's chunks into acc, as gemv::row_group's vector path (same order, same fmas).
template <int kFmt, int kMT, int kR, int kU, bool kScaled>
__device__ __forceinline__ void compute_step(const Args& p, const uint4 (&q)[kU][kR],
                                             const float (&s)[kU][kR], int b, int chunks,
                                             const float* xs, int mt, int lane,
                                             float (&acc)[kMT][kR], uint32_t (&nan)[kR]) {
  constexpr int E = Fmt<kFmt>::kElems;
  using U = gemv::Unit<kFmt>;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int c = b * 32 * kU + 32 * u + lane;
    if (c >= chunks) break;
    float part[kMT][kR];
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
      for (int r = 0; r < kR; ++r) part[m][r] = 0.f;
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
          const float4 xv = reinterpret_cast<const float4*>(xr)[gemv::swz(c * (E / 4) + i * (U::kOut / 4) + h)];
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
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
      for (int r = 0; r < kR; ++r)
        acc[m][r] = kScaled ? fmaf(part[m][r], s[u][r], acc[m][r]) : acc[m][r] + part[m][r];
  }
}

// kMinBlocks 2: 16 warps per SM, ≤ 128 registers (kU·kR = 4 loads per step); 1: 8 warps per SM
// with twice the loads per step ("deep", kU·kR = 8, up to 255 registers). Same bits either way.
template <int kFmt, int kMT, int kR, int kU, bool kScaled, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) gemv_multi_kernel(const Args p) {
  extern __shared__ __align__(16) float xs[];  // [kMT][x_stride], 16-byte slots swizzled
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  constexpr int E = Fmt<kFmt>::kElems;
  const int64_t K = p.K;
  const int chunks = static_cast<int>(K / E);  // vector path: K is a multiple of E
  const int B = (chunks + 32 * kU - 1) / (32 * kU);  // steps per row group
  const int64_t W = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t rg_begin = gw * p.groups / W, rg_end = (gw + 1) * p.groups / W;
  if (p.pf_bytes > 0 && rg_begin < rg_end) prefetch_range<kFmt, kR>(p, rg_begin, rg_end, lane);

  for (int64_t m0 = 0; m0 < p.M; m0 += kMT) {
    const int mt = p.M - m0 < kMT ? static_cast<int>(p.M - m0) : kMT;
    // The warp's first step, in flight while x is staged.
    Group g{};
    uint4 q[kU][kR];
    float s[kU][kR];
    int64_t rg = rg_begin;
    int b = 0;
    if (rg < rg_end) {
      g = locate<kFmt, kR>(p, rg);
      load_step<kFmt, kR, kU, kScaled>(p, g, 0, chunks, lane, q, s);
    }
    // PDL: everything above read weights and scales only; x and out come after the wait.
    if (m0 == 0) pdl::wait();
    if (m0 > 0) __syncthreads();  // the previous tile's readers are done
    if (p.x_vec) {
      const int64_t k4 = K / 4;
      for (int m = 0; m < mt; ++m) {
        const float4* src = reinterpret_cast<const float4*>(p.x + (m0 + m) * p.lda);
        float4* dst = reinterpret_cast<float4*>(xs + m * p.x_stride);
        for (int64_t i = tid; i < k4; i += kThreads) dst[gemv::swz(i)] = __ldg(src + i);
      }
    } else {
      for (int m = 0; m < mt; ++m) {
        const float* src = p.x + (m0 + m) * p.lda;
        float* dst = xs + m * p.x_stride;
        for (int64_t k = tid; k < K; k += kThreads) dst[gemv::swz(k >> 2) * 4 + (k & 3)] = __ldg(src + k);
      }
    }
    __syncthreads();
    float acc[kMT][kR];
    uint32_t nan[kR];
#pragma unroll
    for (int m = 0; m < kMT; ++m)
#pragma unroll
      for (int r = 0; r < kR; ++r) acc[m][r] = 0.f;
#pragma unroll
    for (int r = 0; r < kR; ++r) nan[r] = 0;
    while (rg < rg_end) {
      // Next step's loads first.
      Group gn = g;
      int64_t rgn = rg;
      int bn = b + 1;
      if (bn == B) {
        bn = 0;
        ++rgn;
        if (rgn < rg_end) gn = locate<kFmt, kR>(p, rgn);
      }
      uint4 qn[kU][kR];
      float sn[kU][kR];
      if (rgn < rg_end) load_step<kFmt, kR, kU, kScaled>(p, gn, bn, chunks, lane, qn, sn);
      else if (m0 + kMT >= p.M) pdl::launch_dependents();  // the warp's last loads are issued
      compute_step<kFmt, kMT, kR, kU, kScaled>(p, q, s, b, chunks, xs, mt, lane, acc, nan);
      if (b == B - 1) {  // the row group is complete: reduce, write, reset
        if constexpr (kFmt == 1) {
#pragma unroll
          for (int r = 0; r < kR; ++r)
            if (nan[r] & 0x80808080u)
#pragma unroll
              for (int m = 0; m < kMT; ++m) acc[m][r] = __int_as_float(0x7FC00000);
        }
#pragma unroll
        for (int m = 0; m < kMT; ++m) {
          if (m >= mt) break;
#pragma unroll
          for (int r = 0; r < kR; ++r) {
            const float v = gemv::warp_sum(acc[m][r]);
            if (lane == m * kR + r && r < g.nvalid) g.out[(m0 + m) * g.ldo + r] = v;
          }
        }
#pragma unroll
        for (int m = 0; m < kMT; ++m)
#pragma unroll
          for (int r = 0; r < kR; ++r) acc[m][r] = 0.f;
#pragma unroll
        for (int r = 0; r < kR; ++r) nan[r] = 0;
      }
      g = gn;
      rg = rgn;
      b = bn;
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          q[u][r] = qn[u][r];
          s[u][r] = sn[u][r];
        }
    }
  }
}

}  // namespace deepinfer::cuda::kernels::gemv2
