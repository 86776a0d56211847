// Session 8 (helper gemv): the dense decode GEMV, version 3 — the weights streamed through a TMA
// ring in shared memory. out_j[m, n] = Σ_k x_j[m, k] · deq(W_j[n, k]) for M ≤ 8 fp32 rows of x,
// weights as stored (bf16, or e4m3 with block scales, ue8m0 or f32), one or several projections
// (a table of ≤ 8: projections of one x, or the groups of a grouped linear, each its own x slice).
//
// Why (session-7 profile; docs/cuda.md "Dense decode GEMV v3"): the session-5/6 kernels hold the
// weight bytes in flight in registers (≤ 8 × 16 B per lane, then compute, then the next loads), so
// an SM has ~30–60 KB in flight at best and none while it decodes and reduces; the small
// projections are dominated by the launch and the DRAM latency of the first loads.
//
// Layout of the work:
//  - The weight rows of every projection are cut into tiles of TR consecutive rows (TR·row_bytes
//    ≈ 16 KB, one contiguous block of memory); the tiles of all projections are numbered one after
//    the other, each projection starting a new tile, and a persistent grid (one CTA per SM by
//    default) takes a contiguous range of them per CTA.
//  - One thread per CTA streams its tiles into a ring of S stages (cp.async.bulk global→shared,
//    completion on an mbarrier per stage): S·16 KB in flight per SM with no registers held. The
//    first S tiles are issued before griddepcontrol.wait (weights are immutable), so under PDL the
//    weight stream starts while the previous kernel finishes; x is staged only after the wait.
//  - The 8 warps of the CTA share a tile: the tile's TR rows form RG = TR / kR groups of kR rows,
//    and each group's row_bytes are split into KS = 8 / RG segments of chunks (a chunk = 16 bytes:
//    16 e4m3 / 8 bf16 elements); warp w takes group w / KS, segment w % KS; lane l takes the chunks
//    l, l + 32, ... of its segment, for all kR rows (each x float4 read from shared memory serves
//    kR rows). A warp's per-row partials are summed over the lanes by a reduce-scatter butterfly
//    (one shuffle per value and level, not one per value and lane), the KS segment partials of a row
//    by a fixed tree in shared memory, and one thread per (x row, weight row) writes the output.
//  - Then the stage is refilled with the tile S ahead (after a CTA barrier: every warp has read it).
//  - x (fp32) is staged in shared memory (16-byte slots swizzled as gemv.cuh, conflict-free
//    reads) for up to kMT rows at once; when M > kMT the tiles stream again for the next rows
//    (the host picks kMT from the shared-memory budget); a grouped linear restages x when its
//    tile range enters the next group.
//
// Arithmetic of one output element (fixed by the format and K alone — never by M, kMT, the grid,
// the table or the CTA): the tile geometry (TR, KS) is a function of (format, K); lane l of segment
// s walks chunks c = s·C/KS + l + 32j ascending (C = row chunks); a chunk's elements are decoded
// exactly (e4m3 → f16 → f32 by the hardware conversions; bf16 by a shift) and fma-chained in k
// order into two partials (elements 0..E/2-1 and E/2..E-1), p = p_a + p_b is promoted into the
// lane's accumulator with one fma by the chunk's scale (acc += p unscaled); the 32 lanes are summed
// by the butterfly (pairs differing in lane bit 4, then 3, 2, 1, 0 — the same pairing for every
// value, so the same bits whatever the number of values a warp reduces), the KS segment sums by
// ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)). So a row's bits depend only on its x row and
// weight row: row-independent (batch-invariant in M by construction). They are NOT gemv.cuh's
// bits (the s7 kernels): the tests compare both against a double reference within a bound.
// e4m3 NaN codes (S.1111.111) decode to NaN and so make the row's result NaN, as the CPU backend.
//
// PDL contract (pdl.cuh): before pdl::wait() a CTA only initialises its barriers, issues TMA loads
// of weights and prefetches scales into L2 (immutable); it stages x and writes out only after the
// wait, which every thread executes. All threads execute launch_dependents once the CTA's last
// tile load has been issued.
//
// Restrictions (host-checked; else the caller runs the s7 kernels): fmt bf16 (unscaled) or e4m3
// (scaled, block_cols a multiple of 16 with a power-of-two quotient); row bytes a multiple of 16
// and ≤ 16 KB; weights 16-byte aligned; ≤ 8 projections of the same K, format and scale shape.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::cuda::kernels::gemv3 {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxProj = 8;
constexpr int kMaxStages = 8;
constexpr int64_t kTileTarget = 16384;  // bytes per tile (TR rows)
constexpr int64_t kMaxRowBytes = 16384;

struct Proj {
  const uint8_t* w = nullptr;   // [N, K] stored, row n at w + n·rb
  const void* scale = nullptr;  // scale row of weight row n: (srow0 + n) / br; null: unscaled
  const float* x = nullptr;     // x row m at x + m·lda
  float* out = nullptr;         // out row m at out + m·ldo
  int64_t N = 0, ldo = 0, srow0 = 0;
  int64_t tile0 = 0;            // first tile (global numbering)
};

struct Args {
  int64_t M = 0, K = 0, lda = 0, rb = 0;  // x rows, columns, x row stride (floats), row bytes
  int64_t br = 1, scale_cols = 0;
  int64_t x_stride = 0;  // floats per staged x row (gemv::x_stride_floats(K))
  int64_t tiles = 0;     // tiles of all projections (one pass)
  int32_t cpb_log2 = 0, scale_f32 = 0, x_vec = 0, nproj = 0;
  int32_t tr = 2, ks = 8;  // tile rows, K segments (tr / kR row groups · ks = 8 warps)
  int32_t stages = 2;      // ring depth
  int32_t br_shift = -1;   // log2(br) when br is a power of two
  int32_t scale_shared = 0;  // every kR-row group of every projection in one scale row
  uint32_t stage_bytes = 0, ring_off = 0, x_off = 0, red_off = 0;  // shared-memory layout
  Proj proj[kMaxProj];
};

// Tile geometry of a (format, K): the same function on the host and in the tests.
struct Geometry {
  int64_t rb = 0;  // row bytes
  int tr = 0, kr = 0, ks = 0;
};
inline Geometry geometry(int fmt, int64_t K) {
  Geometry g;
  g.rb = fmt == 0 ? 2 * K : K;
  int tr = 32;
  while (tr > 2 && tr * g.rb > kTileTarget) tr /= 2;
  g.tr = tr;
  g.kr = tr >= 4 ? 4 : 2;
  g.ks = kWarps / (tr / g.kr);
  return g;
}

// ---- PTX helpers (sm_90) -----------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Orders this thread's generic-proxy shared-memory accesses with its later async-proxy (TMA) ones.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Arms the barrier's current phase for `bytes` of TMA traffic (this thread's arrival included).
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}
// Bulk copy global → shared (16-byte aligned addresses, bytes a multiple of 16), completing on bar.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}
// Waits until the barrier's phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred P1;\n"
      "GEMV3_WAIT:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
      "@P1 bra GEMV3_DONE;\n\t"
      "bra GEMV3_WAIT;\n"
      "GEMV3_DONE:\n\t}" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// ---- decoders ----------------------------------------------------------------------------------

// Four e4m3 codes of a word (byte 0 first) as floats, exact: hardware e4m3x2 → f16x2 (every e4m3
// value, subnormals included, is an f16; NaN codes give NaN), then f16 → f32.
__device__ __forceinline__ void e4m3x4(uint32_t u, float (&f)[4]) {
  uint32_t lo, hi;
  asm("{\n\t.reg .b16 a, b;\n\t"
      "mov.b32 {a, b}, %2;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, a;\n\t"
      "cvt.rn.f16x2.e4m3x2 %1, b;\n\t}"
      : "=r"(lo), "=r"(hi)
      : "r"(u));
  asm("{\n\t.reg .b16 a, b;\n\t"
      "mov.b32 {a, b}, %2;\n\t"
      "cvt.f32.f16 %0, a;\n\t"
      "cvt.f32.f16 %1, b;\n\t}"
      : "=f"(f[0]), "=f"(f[1])
      : "r"(lo));
  asm("{\n\t.reg .b16 a, b;\n\t"
      "mov.b32 {a, b}, %2;\n\t"
      "cvt.f32.f16 %0, a;\n\t"
      "cvt.f32.f16 %1, b;\n\t}"
      : "=f"(f[2]), "=f"(f[3])
      : "r"(hi));
}

// The same values by session 5's integer decode (gemv::Unit<1>: bits moved into bf16 pairs of
// value · 2^-120, times 2^120); NaN codes are flagged in *nan (bit 7 of a byte) instead.
__device__ __forceinline__ void e4m3x4_int(uint32_t u, float (&f)[4], uint32_t* nan) {
  *nan |= (u & 0x7F7F7F7Fu) + 0x01010101u;
  const uint32_t o13 = (u & 0x80008000u) | ((u & 0x7F007F00u) >> 4);
  const uint32_t o02 = ((u << 8) & 0x80008000u) | ((u & 0x007F007Fu) << 4);
  constexpr float k2p120 = 1.329227995784915872903807060280344576e36f;  // 2^120
  f[0] = __uint_as_float(o02 << 16) * k2p120;
  f[1] = __uint_as_float(o13 << 16) * k2p120;
  f[2] = __uint_as_float(o02 & 0xFFFF0000u) * k2p120;
  f[3] = __uint_as_float(o13 & 0xFFFF0000u) * k2p120;
}

// The same values · 2^-8 by moving the code bits into f16 layout (byte b → sign << 8 | magnitude
// << 7; e4m3 subnormals land on f16 subnormals) and f16 → f32; the caller folds 2^8 into the scale
// (exact: a power of two), NaN codes flagged in *nan as e4m3x4_int.
__device__ __forceinline__ void e4m3x4_f16(uint32_t u, float (&f)[4], uint32_t* nan) {
  *nan |= (u & 0x7F7F7F7Fu) + 0x01010101u;
  const uint32_t h02 = ((u << 8) & 0x80008000u) | ((u << 7) & 0x3F803F80u);  // bytes 0, 2
  const uint32_t h13 = (u & 0x80008000u) | ((u >> 1) & 0x3F803F80u);         // bytes 1, 3
  asm("{\n\t.reg .b16 a, b;\n\t"
      "mov.b32 {a, b}, %2;\n\t"
      "cvt.f32.f16 %0, a;\n\t"
      "cvt.f32.f16 %1, b;\n\t}"
      : "=f"(f[0]), "=f"(f[2])
      : "r"(h02));
  asm("{\n\t.reg .b16 a, b;\n\t"
      "mov.b32 {a, b}, %2;\n\t"
      "cvt.f32.f16 %0, a;\n\t"
      "cvt.f32.f16 %1, b;\n\t}"
      : "=f"(f[1]), "=f"(f[3])
      : "r"(h13));
}

__device__ __forceinline__ void bf16x2(uint32_t a, uint32_t b, float (&f)[4]) {
  f[0] = __uint_as_float(a << 16);
  f[1] = __uint_as_float(a & 0xFFFF0000u);
  f[2] = __uint_as_float(b << 16);
  f[3] = __uint_as_float(b & 0xFFFF0000u);
}

// The projection holding global tile t (selects over the uniform table).
__device__ __forceinline__ int find_proj(const Args& p, int64_t t) {
  int j = 0;
#pragma unroll
  for (int q = 1; q < kMaxProj; ++q)
    if (q < p.nproj && p.proj[q].tile0 <= t) j = q;
  return j;
}

// Issues the TMA load of global tile t into stage buffer dst, completing on bar.
__device__ __forceinline__ void issue_tile(const Args& p, int64_t t, uint8_t* dst, uint64_t* bar) {
  const Proj& pr = p.proj[find_proj(p, t)];
  const int64_t row0 = (t - pr.tile0) * p.tr;
  const int64_t rows = pr.N - row0 < p.tr ? pr.N - row0 : p.tr;
  const uint32_t bytes = static_cast<uint32_t>(rows * p.rb);
  mbar_expect_tx(bar, bytes);
  bulk_load(dst, pr.w + row0 * p.rb, bytes, bar);
}

// Sum over the 32 lanes of V = 2^v values per lane (reduce-scatter butterfly): afterwards lane l
// holds in v[0] the total of value index l >> (5 - log2 V). Pairing by lane bit 4, 3, 2, 1, 0 for
// every value (fp add is commutative), so each total has the bits of a plain xor-tree warp sum.
template <int V>
__device__ __forceinline__ void butterfly(float (&v)[V], int lane) {
  int half = V / 2;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    if (half >= 1) {
      const bool upper = (lane & o) != 0;
#pragma unroll
      for (int j = 0; j < V / 2; ++j) {
        if (j < half) {
          const float send = upper ? v[j] : v[j + half];
          const float keep = upper ? v[j + half] : v[j];
          v[j] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
      }
      half /= 2;
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
    }
  }
}

// kFmt 0 bf16 / 1 e4m3 (scaled); kMT x rows per pass; kR rows per row group (geometry); kRH rows
// a warp computes at once (kR or kR / 2: registers at large kMT; same bits); kDecode (e4m3): 0 the
// hardware conversion, 1 the integer decode, 2 the f16 bit move (same values, same bits except NaN
// payloads and products below 2^-118). __launch_bounds__(.., 2) caps
// registers at 128 so that two CTAs (this grid's and the next PDL kernel's) can share an SM.
template <int kFmt, int kMT, int kR, int kRH, int kDecode>
__global__ void __launch_bounds__(kThreads, 2) gemv3_kernel(const __grid_constant__ Args p) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
  uint8_t* ring = smem + p.ring_off;
  float* xs = reinterpret_cast<float*>(smem + p.x_off);
  float* red = reinterpret_cast<float*>(smem + p.red_off);  // [2][ks][kMT][tr]
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int S = p.stages, TR = p.tr, KS = p.ks;
  const int64_t T = p.tiles;
  const int64_t t_begin = static_cast<int64_t>(blockIdx.x) * T / gridDim.x;
  const int64_t t_end = static_cast<int64_t>(blockIdx.x + 1) * T / gridDim.x;
  const int64_t L = t_end - t_begin;
  const int64_t passes = (p.M + kMT - 1) / kMT;
  const int64_t n_items = L * passes;  // item i: tile t_begin + i % L for x rows of pass i / L

  // Before the wait: barriers, the first S weight tiles, the scales of this CTA's rows (L2).
  int64_t t_fill = t_begin;  // thread 0: tile of the next item to load
  if (tid == 0) {
    for (int s = 0; s < S; ++s) mbar_init(&bars[s], 1);
    fence_mbar_init();
    fence_proxy_async();
    for (int64_t i = 0; i < n_items && i < S; ++i) {
      issue_tile(p, t_fill, ring + i * p.stage_bytes, &bars[i]);
      if (++t_fill == t_end) t_fill = t_begin;
    }
  }
  if (kFmt == 1 && L > 0) {
    // The scale rows of this CTA's tiles, per projection it touches (contiguous ranges).
    const int es = p.scale_f32 ? 4 : 1;
    for (int j = 0; j < p.nproj; ++j) {
      const Proj& pr = p.proj[j];
      const int64_t next = j + 1 < p.nproj ? p.proj[j + 1].tile0 : T;
      const int64_t lo = pr.tile0 > t_begin ? pr.tile0 : t_begin, hi = next < t_end ? next : t_end;
      if (lo >= hi) continue;
      const int64_t n_lo = (lo - pr.tile0) * TR;
      const int64_t n_hi = (hi - pr.tile0) * TR < pr.N ? (hi - pr.tile0) * TR : pr.N;
      const int64_t s0 = ((pr.srow0 + n_lo) / p.br) * p.scale_cols;
      const int64_t s1 = ((pr.srow0 + n_hi - 1) / p.br + 1) * p.scale_cols;
      pdl::prefetch_l2_range(static_cast<const uint8_t*>(pr.scale) + s0 * es, (s1 - s0) * es, tid, kThreads);
    }
  }
  pdl::wait();
  if (n_items <= S) pdl::launch_dependents();

  constexpr int E = kFmt == 0 ? 8 : 16;  // elements per chunk
  constexpr int kUnits = E / 4;          // float4 of x per chunk
  const int rg = warp / KS, seg = warp % KS;
  const int rb = static_cast<int>(p.rb);
  const int C = rb / 16;
  const int cb = seg * C / KS, ce = (seg + 1) * C / KS;
  const int xstr = static_cast<int>(p.x_stride);
  const int cpb = p.cpb_log2;
  const int scols = static_cast<int>(p.scale_cols);
  // The current projection (cached: it changes only at tile0 boundaries).
  int64_t plo = 1, phi = 0;  // its tile range [plo, phi)
  const uint8_t* scale = nullptr;
  const float* px = nullptr;
  float* pout = nullptr;
  int64_t pN = 0, pldo = 0, psrow0 = 0, ptile0 = 0;
  const float* xcur = nullptr;
  int64_t m0cur = -1;
  int s = 0;
  uint32_t parity = 0;
  int64_t t = t_begin, m0 = 0;
  for (int64_t i = 0; i < n_items; ++i) {
    const int rows_m = p.M - m0 < kMT ? static_cast<int>(p.M - m0) : kMT;
    if (t < plo || t >= phi) {
      const int j = find_proj(p, t);
      const Proj& pr = p.proj[j];
      plo = pr.tile0;
      phi = j + 1 < p.nproj ? p.proj[j + 1].tile0 : T;
      scale = static_cast<const uint8_t*>(pr.scale);
      px = pr.x;
      pout = pr.out;
      pN = pr.N;
      pldo = pr.ldo;
      psrow0 = pr.srow0;
      ptile0 = pr.tile0;
    }
    const int64_t row0 = (t - ptile0) * TR;
    if (px != xcur || m0 != m0cur) {
      // Every warp is past the compute of the previous item (its closing barrier): restage x.
      if (p.x_vec) {
        const int k4 = static_cast<int>(p.K / 4);
        for (int m = 0; m < kMT; ++m) {
          float4* dst = reinterpret_cast<float4*>(xs + m * xstr);
          const float4* src = reinterpret_cast<const float4*>(px + (m0 + m) * p.lda);
          for (int q = tid; q < k4; q += kThreads)
            dst[gemv::swz(q)] = m < rows_m ? __ldg(src + q) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
      } else {
        const int K = static_cast<int>(p.K);
        for (int m = 0; m < kMT; ++m) {
          float* dst = xs + m * xstr;
          const float* src = px + (m0 + m) * p.lda;
          for (int k = tid; k < K; k += kThreads)
            dst[gemv::swz(k >> 2) * 4 + (k & 3)] = m < rows_m ? __ldg(src + k) : 0.f;
        }
      }
      __syncthreads();
      xcur = px;
      m0cur = m0;
    }
    mbar_wait(&bars[s], parity);
    const uint8_t* stage = ring + s * p.stage_bytes;
    float* redb = red + (i & 1) * (KS * kMT * TR);

#pragma unroll 1
    for (int h = 0; h < kR / kRH; ++h) {
      const int rbase = rg * kR + h * kRH;  // first row (in the tile) of this half
      float acc[kMT][kRH];
#pragma unroll
      for (int m = 0; m < kMT; ++m)
#pragma unroll
        for (int r = 0; r < kRH; ++r) acc[m][r] = 0.f;
      // Scale rows (e4m3): rows past N compute on stale bytes and are never written; their scale
      // row is clamped to the last row's.
      int sb[kRH];
      uint32_t nan[kRH];
#pragma unroll
      for (int r = 0; r < kRH; ++r) {
        nan[r] = 0;
        sb[r] = 0;
        if constexpr (kFmt == 1) {
          int64_t n = row0 + rbase + r;
          n = n < pN ? n : pN - 1;
          const int64_t gr = psrow0 + n;
          sb[r] = static_cast<int>((p.br_shift >= 0 ? gr >> p.br_shift : gr / p.br) * scols);
        }
      }
      const uint8_t* wt = stage + rbase * rb;
      for (int c = cb + lane; c < ce; c += 32) {
        uint4 q[kRH];
        float sc[kRH];
#pragma unroll
        for (int r = 0; r < kRH; ++r) q[r] = *reinterpret_cast<const uint4*>(wt + r * rb + 16 * c);
        if constexpr (kFmt == 1) {
          const int sc_col = c >> cpb;
#pragma unroll
          for (int r = 0; r < kRH; ++r) {
            if (r > 0 && p.scale_shared) {
              sc[r] = sc[0];
            } else {
              sc[r] = p.scale_f32 ? __ldg(reinterpret_cast<const float*>(scale) + sb[r] + sc_col)
                                  : gemv::ue8m0_to_float(__ldg(scale + sb[r] + sc_col));
              if constexpr (kDecode == 2) sc[r] *= 256.f;  // the decode's 2^-8
            }
          }
        }
        float pa[kMT][kRH], pb[kMT][kRH];
#pragma unroll
        for (int m = 0; m < kMT; ++m)
#pragma unroll
          for (int r = 0; r < kRH; ++r) pa[m][r] = pb[m][r] = 0.f;
        // Units of 4 elements: e4m3 one word each (4 per chunk), bf16 two words (2 per chunk).
        const int xq0 = c * kUnits;
#pragma unroll
        for (int u = 0; u < kUnits; ++u) {
          float wv[kRH][4];
#pragma unroll
          for (int r = 0; r < kRH; ++r) {
            if constexpr (kFmt == 1) {
              const uint32_t word = u == 0 ? q[r].x : u == 1 ? q[r].y : u == 2 ? q[r].z : q[r].w;
              if constexpr (kDecode == 1) e4m3x4_int(word, wv[r], &nan[r]);
              else if constexpr (kDecode == 2) e4m3x4_f16(word, wv[r], &nan[r]);
              else e4m3x4(word, wv[r]);
            } else {
              if (u == 0) bf16x2(q[r].x, q[r].y, wv[r]);
              else bf16x2(q[r].z, q[r].w, wv[r]);
            }
          }
          const int xq = xq0 + u;
          const int xsw = xq ^ ((xq >> 3) & 7);  // gemv::swz
#pragma unroll
          for (int m = 0; m < kMT; ++m) {
            if (m >= rows_m) break;
            const float4 xv = reinterpret_cast<const float4*>(xs + m * xstr)[xsw];
#pragma unroll
            for (int r = 0; r < kRH; ++r) {
              float a = u < kUnits / 2 ? pa[m][r] : pb[m][r];
              a = fmaf(xv.x, wv[r][0], a);
              a = fmaf(xv.y, wv[r][1], a);
              a = fmaf(xv.z, wv[r][2], a);
              a = fmaf(xv.w, wv[r][3], a);
              if (u < kUnits / 2) pa[m][r] = a;
              else pb[m][r] = a;
            }
          }
        }
#pragma unroll
        for (int m = 0; m < kMT; ++m)
#pragma unroll
          for (int r = 0; r < kRH; ++r) {
            if constexpr (kFmt == 1) acc[m][r] = fmaf(pa[m][r] + pb[m][r], sc[r], acc[m][r]);
            else acc[m][r] = acc[m][r] + (pa[m][r] + pb[m][r]);
          }
      }
      if constexpr (kFmt == 1 && kDecode != 0) {
#pragma unroll
        for (int r = 0; r < kRH; ++r)
          if (nan[r] & 0x80808080u)
#pragma unroll
            for (int m = 0; m < kMT; ++m) acc[m][r] = __int_as_float(0x7FC00000);
      }
      // Lanes → one total per (m, r); value index idx = m·kRH + r.
      constexpr int V = kMT * kRH;
      float v[V];
#pragma unroll
      for (int m = 0; m < kMT; ++m)
#pragma unroll
        for (int r = 0; r < kRH; ++r) v[m * kRH + r] = acc[m][r];
      butterfly<V>(v, lane);
      constexpr int kSpan = 32 / V;  // lanes holding the same total
      if ((lane & (kSpan - 1)) == 0) {
        const int idx = lane / kSpan, m = idx / kRH, r = idx % kRH;
        redb[(seg * kMT + m) * TR + rbase + r] = v[0];
      }
    }
    __syncthreads();  // every warp has read the stage and written its partials
    if (tid == 0 && i + S < n_items) {
      fence_proxy_async();
      issue_tile(p, t_fill, ring + s * p.stage_bytes, &bars[s]);
      if (++t_fill == t_end) t_fill = t_begin;
    }
    if (i + S == n_items - 1) pdl::launch_dependents();  // the CTA's last tile load is issued
    // Segment partials → outputs: thread (m, row).
    if (tid < kMT * TR) {
      const int m = tid / TR, row = tid % TR;
      const int64_t n = row0 + row;
      if (m < rows_m && n < pN) {
        const float* q = redb + m * TR + row;  // segment s at q[s·kMT·TR]
        const int st = kMT * TR;
        float v;
        if (KS == 1) v = q[0];
        else if (KS == 2) v = q[0] + q[st];
        else if (KS == 4) v = (q[0] + q[st]) + (q[2 * st] + q[3 * st]);
        else v = ((q[0] + q[st]) + (q[2 * st] + q[3 * st])) + ((q[4 * st] + q[5 * st]) + (q[6 * st] + q[7 * st]));
        pout[(m0 + m) * pldo + n] = v;
      }
    }
    if (++s == S) {
      s = 0;
      parity ^= 1u;
    }
    if (++t == t_end) {
      t = t_begin;
      m0 += kMT;
    }
  }
}

}  // namespace deepinfer::cuda::kernels::gemv3
