// The session-7 fused mHC site (kernels.h hc_site) for every S, in two kernels.
//
// The arithmetic, which alone fixes a token's bits (it never depends on S, on the row's position,
// on the mode or on PDL):
//  - K = hc·H columns of the token's flattened streams x are cut into C = ⌈K/128⌉ chunks (the
//    last one zero-padded in x and fn). Per chunk c and output n (n < N: fn row n; n = N: Σx²),
//    p[c][n] = one fma chain over the chunk's 128 columns in column order, starting from 0.
//  - Groups of 4 chunks: q[g][n] = p[4g][n], then + p[4g+1][n], + … in chunk order.
//  - tot[n]: lane l of a warp sums the groups l, l+32, … in order (0 when it has none), then an
//    xor butterfly over the 32 lanes (every lane ends with the same sum: each step adds the same
//    two numbers on both lanes).
//  - mix[n] = tot[n]·rsqrt(tot[N]/K + norm_eps) (the norm after the product, deepseek-v4.md
//    §3.1 [OFF]); pre/post from sigmoids; comb by Sinkhorn on one thread (registers, pairwise row
//    and column sums, approximate reciprocals); collapsed[c] = pre·X[:, c] as an fma chain.
// Kernel 1 (partial products) writes p per chunk (modes kRows, kTile1) or q per group (kTile4, in
// its registers, the same additions); kernel 2 (finish) reads either, forms q the same way and
// does the rest. Kernel 1 modes:
//  - kRows (decode S): grid (C, ⌈S/8⌉), 8 warps; warp w takes row w of the CTA's 8, lane n < N
//    the chain of fn row n, lane N the Σx² chain (fn and x of the chunk staged in shared memory).
//  - kTile1 / kTile4: grid (C or ⌈C/4⌉, ⌈S/64⌉), 128 threads; thread t holds a 4-row × 3-output
//    register tile (rows t/8 + 16i, outputs 3(t%8) + j), threads 0–63 the Σx² chain of one row;
//    kTile4 runs 4 chunks through a double-buffered cp.async pipeline and adds the chunk sums.
// Kernel 2: grid (S, ⌈H/512⌉ + 1), 128 threads; CTA (s, b < last) collapses 512 columns of row
// s (its X loaded to registers right after the wait, while the partials are reduced), CTA
// (s, last) computes post and comb (not for the head). Every CTA reduces its row's partials
// itself (4 warps, one output per warp at a time, all loads issued together).
// PDL (pdl = true): kernel 1 reads fn before its grid-dependency wait, kernel 2 reads base/scale
// and prefetches X into L2 (a hint) before its own; everything else comes after the waits, and
// every CTA of both kernels executes its wait.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/hyper_connection.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::cuda::kernels {
namespace {

using hc_detail::hc_expand_elem;
using hc_detail::sigmoidf_;

constexpr int kChunk = 128;          // columns of one fma chain
constexpr int kQuads = kChunk / 4;   // float4s per chunk row
constexpr int kGroup = 4;            // chunks per group
constexpr int kPitch = kChunk + 4;   // shared row pitch (floats): conflict-free float4 row reads
constexpr int kMaxHc = 4;
constexpr int kMaxN = (2 + kMaxHc) * kMaxHc;  // 24 mix outputs
constexpr int kRowsPerCta = 8;               // kRows: a warp per row
constexpr int kRowsThreads = kRowsPerCta * 32;
constexpr int kTileRows = 64;
constexpr int kTileThreads = 128;
constexpr int kTileStage = (kMaxN + kTileRows) * kPitch;  // floats of one pipeline stage
constexpr int kFinishThreads = 128;
constexpr int kFinishPerThread = 4;  // collapse columns per thread
constexpr int kFinishCols = kFinishThreads * kFinishPerThread;
constexpr int kFinishOutsPerWarp = (kMaxN + 1 + 3) / 4;  // outputs n = warp + 4m, m < 7
// kAuto: kRows up to 32 rows, kTile1 up to 512, then kTile4 (same bits in every mode).
constexpr int64_t kRowsMaxS = 32, kTile1MaxS = 512;
static_assert(kMaxN + 1 <= 32, "kRows: one lane per output");
static_assert(kTileRows == 16 * 4 && kMaxN == 8 * 3 && kTileThreads == 16 * 8, "tile mapping");

// Sizes of one site, by value to the kernels.
struct Site {
  int64_t S, H, K;  // K = hc·H
  int hc, N, chunks;
  bool vec;  // float4 / cp.async path: K % 4 == 0 and x, fn 16-byte aligned
};

struct ExpandArgs {  // kernels.h HcExpandIn
  const float* x_prev;
  const float* y;
  const float* post;
  const float* comb;
  float* x_new;
  const float* y2;  // null, or the expand is of y + y2
};

// 16 bytes global → shared, asynchronously; valid = false writes zeros (reads nothing).
__device__ __forceinline__ void cp_async16(float* smem, const float* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ float4 lds4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}

// acc through four more columns, in column order.
__device__ __forceinline__ float chain4(const float4 a, const float4 b, float acc) {
  acc = __fmaf_rn(a.x, b.x, acc);
  acc = __fmaf_rn(a.y, b.y, acc);
  acc = __fmaf_rn(a.z, b.z, acc);
  return __fmaf_rn(a.w, b.w, acc);
}

// fn rows n < rows of the chunk at column c0 into ws [rows][kPitch]; zeros past K and for n >= N.
__device__ __forceinline__ void stage_w(float* ws, const float* fn, const Site& d, int64_t c0,
                                        int rows, int t, int nt) {
  for (int i = t; i < rows * kQuads; i += nt) {
    const int n = i / kQuads, q = i % kQuads;
    const int64_t col = c0 + 4 * q;
    float* dst = ws + n * kPitch + 4 * q;
    if (n >= d.N) {
      *reinterpret_cast<float4*>(dst) = make_float4(0.f, 0.f, 0.f, 0.f);
    } else if (d.vec) {
      const bool ok = col < d.K;
      cp_async16(dst, ok ? fn + n * d.K + col : fn, ok);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) dst[e] = col + e < d.K ? __ldg(fn + n * d.K + col + e) : 0.f;
    }
  }
}

// Rows r0 … r0+rows-1 of the chunk at column c0 into xs [rows][kPitch]; zeros past K and S. With
// kExpand the values are the previous site's expand, also written to x_new (each element by
// exactly one CTA).
template <bool kExpand>
__device__ __forceinline__ void stage_x(float* xs, const float* x, const ExpandArgs& ex,
                                        const Site& d, int64_t r0, int rows, int64_t c0, int t,
                                        int nt) {
  for (int i = t; i < rows * kQuads; i += nt) {
    const int r = i / kQuads, q = i % kQuads;
    const int64_t s = r0 + r, col = c0 + 4 * q;
    float* dst = xs + r * kPitch + 4 * q;
    const bool row_ok = s < d.S;
    if constexpr (kExpand) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t c = col + e;
        float v = 0.f;
        if (row_ok && c < d.K) {
          const int64_t k = c / d.H, cc = c % d.H;
          const float yc = ex.y2 != nullptr ? __fadd_rn(ex.y[s * d.H + cc], ex.y2[s * d.H + cc])
                                            : ex.y[s * d.H + cc];  // add's arithmetic
          v = hc_expand_elem(ex.post[s * d.hc + k], yc, ex.comb + s * d.hc * d.hc,
                             ex.x_prev + s * d.K, k, cc, d.hc, d.H);
          ex.x_new[s * d.K + c] = v;
        }
        dst[e] = v;
      }
    } else if (d.vec) {
      const bool ok = row_ok && col < d.K;
      cp_async16(dst, ok ? x + s * d.K + col : x, ok);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) dst[e] = row_ok && col + e < d.K ? x[s * d.K + col + e] : 0.f;
    }
  }
}

// ---- kernel 1, mode kRows ----
template <bool kExpand>
__global__ void __launch_bounds__(kRowsThreads)
    hc_site_rows_kernel(const float* __restrict__ x, const float* __restrict__ fn, Site d,
                        float* __restrict__ part, ExpandArgs ex) {
  __shared__ __align__(16) float ws[kMaxN * kPitch];
  __shared__ __align__(16) float xs[kRowsPerCta * kPitch];
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int64_t chunk = blockIdx.x, c0 = chunk * kChunk;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRowsPerCta;
  stage_w(ws, fn, d, c0, d.N, t, kRowsThreads);  // a weight: before the wait
  pdl::wait();
  const int rows = static_cast<int>(min(static_cast<int64_t>(kRowsPerCta), d.S - r0));
  stage_x<kExpand>(xs, x, ex, d, r0, rows, c0, t, kRowsThreads);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  pdl::launch_dependents();
  const int64_t s = r0 + warp;
  if (s < d.S && lane <= d.N) {
    const float* xr = xs + warp * kPitch;
    const float* wr = lane < d.N ? ws + lane * kPitch : xr;  // lane N: Σx²
    float acc = 0.f;
#pragma unroll 8
    for (int q = 0; q < kQuads; ++q) acc = chain4(lds4(xr + 4 * q), lds4(wr + 4 * q), acc);
    part[(chunk * d.S + s) * (d.N + 1) + lane] = acc;
  }
}

// ---- kernel 1, modes kTile1 (kCpc = 1) and kTile4 (kCpc = kGroup) ----
template <int kCpc, bool kExpand>
__global__ void __launch_bounds__(kTileThreads)
    hc_site_tile_kernel(const float* __restrict__ x, const float* __restrict__ fn, Site d,
                        float* __restrict__ part, ExpandArgs ex) {
  static_assert(kCpc == 1 || kCpc == kGroup, "a CTA stores chunk or group partials");
  extern __shared__ __align__(16) float smem[];  // kCpc == 1 ? 1 : 2 stages of [ws | xs]
  const int t = threadIdx.x, og = t % 8, rg = t / 8;
  const int64_t chunk0 = static_cast<int64_t>(blockIdx.x) * kCpc;
  const int nch = static_cast<int>(min(static_cast<int64_t>(kCpc), d.chunks - chunk0));
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kTileRows;
  stage_w(smem, fn, d, chunk0 * kChunk, kMaxN, t, kTileThreads);  // a weight: before the wait
  pdl::wait();
  stage_x<kExpand>(smem + kMaxN * kPitch, x, ex, d, r0, kTileRows, chunk0 * kChunk, t,
                   kTileThreads);
  cp_async_commit();
  float q[4][3], qs = 0.f;  // chunk (kCpc == 1) or group sums
  for (int i = 0; i < nch; ++i) {
    float* stage = smem + (i % 2) * kTileStage;
    if constexpr (kCpc > 1) {
      if (i + 1 < nch) {  // the next chunk into the other stage while this one is multiplied
        float* next = smem + ((i + 1) % 2) * kTileStage;
        const int64_t c1 = (chunk0 + i + 1) * kChunk;
        stage_w(next, fn, d, c1, kMaxN, t, kTileThreads);
        stage_x<kExpand>(next + kMaxN * kPitch, x, ex, d, r0, kTileRows, c1, t, kTileThreads);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (i == 0) pdl::launch_dependents();
    const float* ws = stage;
    const float* xs = stage + kMaxN * kPitch;
    float acc[4][3], ss = 0.f;
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int j = 0; j < 3; ++j) acc[r][j] = 0.f;
#pragma unroll 2
    for (int qd = 0; qd < kQuads; ++qd) {
      float4 a[4], w[3];
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = lds4(xs + (rg + 16 * r) * kPitch + 4 * qd);
#pragma unroll
      for (int j = 0; j < 3; ++j) w[j] = lds4(ws + (3 * og + j) * kPitch + 4 * qd);
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int j = 0; j < 3; ++j) acc[r][j] = chain4(a[r], w[j], acc[r][j]);
      if (t < kTileRows) {  // warps 0 and 1: the Σx² chain of row t
        const float4 v = lds4(xs + t * kPitch + 4 * qd);
        ss = chain4(v, v, ss);
      }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int j = 0; j < 3; ++j) q[r][j] = i == 0 ? acc[r][j] : __fadd_rn(q[r][j], acc[r][j]);
    qs = i == 0 ? ss : __fadd_rn(qs, ss);
    if constexpr (kCpc > 1) __syncthreads();  // this stage is refilled two chunks later
  }
  const int64_t stride = d.N + 1;
  float* out = part + static_cast<int64_t>(blockIdx.x) * d.S * stride;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t s = r0 + rg + 16 * r;
    if (s >= d.S) continue;
#pragma unroll
    for (int j = 0; j < 3; ++j)
      if (3 * og + j < d.N) out[s * stride + 3 * og + j] = q[r][j];
  }
  if (t < kTileRows && r0 + t < d.S) out[(r0 + t) * stride + d.N] = qs;
}

// ---- kernel 2 ----
__device__ __forceinline__ float rcp_approx(float v) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

template <int kN>
__device__ __forceinline__ float sum_of(const float (&v)[kN]) {
  if constexpr (kN == 4) return __fadd_rn(__fadd_rn(v[0], v[1]), __fadd_rn(v[2], v[3]));
  float t = v[0];
#pragma unroll
  for (int i = 1; i < kN; ++i) t = __fadd_rn(t, v[i]);
  return t;
}

// Sinkhorn-Knopp on one thread: c holds the logits on entry, comb on exit (the arithmetic of
// hc_coeffs up to the reciprocals: softmax per row + eps, then iters × (row normalisation when
// it > 0, column normalisation), each a division by (sum + eps)).
template <int kHc>
__device__ __forceinline__ void sinkhorn(float (&c)[kHc][kHc], int64_t iters, float eps) {
#pragma unroll
  for (int j = 0; j < kHc; ++j) {
    float mx = c[j][0];
#pragma unroll
    for (int k = 1; k < kHc; ++k) mx = fmaxf(mx, c[j][k]);
#pragma unroll
    for (int k = 0; k < kHc; ++k) c[j][k] = expf(c[j][k] - mx);
    const float r = rcp_approx(sum_of(c[j]));
#pragma unroll
    for (int k = 0; k < kHc; ++k) c[j][k] = __fmaf_rn(c[j][k], r, eps);
  }
  for (int64_t it = 0; it < iters; ++it) {
    if (it > 0) {
#pragma unroll
      for (int j = 0; j < kHc; ++j) {
        const float r = rcp_approx(__fadd_rn(sum_of(c[j]), eps));
#pragma unroll
        for (int k = 0; k < kHc; ++k) c[j][k] = __fmul_rn(c[j][k], r);
      }
    }
#pragma unroll
    for (int k = 0; k < kHc; ++k) {
      float col[kHc];
#pragma unroll
      for (int j = 0; j < kHc; ++j) col[j] = c[j][k];
      const float r = rcp_approx(__fadd_rn(sum_of(col), eps));
#pragma unroll
      for (int j = 0; j < kHc; ++j) c[j][k] = __fmul_rn(c[j][k], r);
    }
  }
}

// post [hc] and comb [hc, hc] of row s from its reduced outputs tot [N + 1] (inv = the norm of
// the row's streams; cb = base, csc1 / csc2 = scale[1] / scale[2]). One thread.
template <int kHc>
__device__ __forceinline__ void site_post_comb(const float* tot, float inv,
                                               const float (&cb)[kMaxN], float csc1, float csc2,
                                               int64_t iters, float hc_eps, int64_t s, float* post,
                                               float* comb) {
#pragma unroll
  for (int j = 0; j < kHc; ++j) {
    const float z = __fmaf_rn(__fmul_rn(tot[kHc + j], inv), csc1, cb[kHc + j]);
    post[s * kHc + j] = 2.f * sigmoidf_(z);
  }
  float cm[kHc][kHc];
#pragma unroll
  for (int j = 0; j < kHc; ++j)
#pragma unroll
    for (int k = 0; k < kHc; ++k) {
      const int n = 2 * kHc + j * kHc + k;
      cm[j][k] = __fmaf_rn(__fmul_rn(tot[n], inv), csc2, cb[n]);
    }
  sinkhorn<kHc>(cm, iters, hc_eps);
#pragma unroll
  for (int j = 0; j < kHc; ++j)
#pragma unroll
    for (int k = 0; k < kHc; ++k) comb[s * kHc * kHc + j * kHc + k] = cm[j][k];
}

// The post / comb CTA's constants (thread 0, before the PDL wait: weights only): base[0..N) and
// the two scales of post and comb.
__device__ __forceinline__ void load_coeff_consts(const float* __restrict__ base,
                                                  const float* __restrict__ scale, int N,
                                                  float (&cb)[kMaxN], float& csc1, float& csc2) {
#pragma unroll
  for (int n = 0; n < kMaxN; ++n) cb[n] = n < N ? __ldg(base + n) : 0.f;
  csc1 = __ldg(scale + 1);
  csc2 = __ldg(scale + 2);
}

template <int kHc, int kCps>
__global__ void __launch_bounds__(kFinishThreads)
    hc_site_finish_kernel(const float* __restrict__ x, const float* __restrict__ part,
                          const float* __restrict__ base, const float* __restrict__ scale, Site d,
                          int64_t iters, float hc_eps, float norm_eps, bool head, bool prefetch_x,
                          int colblocks, float* __restrict__ post, float* __restrict__ comb,
                          float* __restrict__ out) {
  static_assert(kCps == 1 || kCps == kGroup, "partials per chunk or per group");
  __shared__ float tot[32];
  __shared__ float pre_s[kHc];
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int64_t s = blockIdx.x, H = d.H;
  const int N = d.N;
  const bool coeffs = static_cast<int>(blockIdx.y) == colblocks;  // the post/comb CTA
  const float* X = x + s * d.K;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kFinishCols + t;

  // Before the wait: weights only, and an L2 prefetch hint for this CTA's columns of X.
  float w_scale = 0.f, w_base = 0.f;
  float cb[kMaxN];  // coefficient CTA, thread 0: base
  float csc1 = 0.f, csc2 = 0.f;
  if (!coeffs) {
    w_scale = __ldg(scale);
    if (t < kHc) w_base = __ldg(base + t);
    if (prefetch_x && t % 8 == 0) {
#pragma unroll
      for (int e = 0; e < kFinishPerThread; ++e) {
        const int64_t c = c0 + e * kFinishThreads;
#pragma unroll
        for (int j = 0; j < kHc; ++j)
          if (c < H) asm volatile("prefetch.global.L2 [%0];" ::"l"(X + j * H + c));
      }
    }
  } else if (t == 0) {
    load_coeff_consts(base, scale, N, cb, csc1, csc2);
  }
  pdl::wait();
  pdl::launch_dependents();

  // This CTA's X columns to registers first: their loads overlap the reduction below.
  float xv[kFinishPerThread][kHc];
  if (!coeffs) {
#pragma unroll
    for (int e = 0; e < kFinishPerThread; ++e) {
      const int64_t c = c0 + e * kFinishThreads;
#pragma unroll
      for (int j = 0; j < kHc; ++j) xv[e][j] = c < H ? X[j * H + c] : 0.f;
    }
  }

  // tot[n] for n <= N: warp w reduces the outputs w, w+4, …; lane l the groups l, l+32, ….
  const int64_t stride = N + 1;
  const int C = d.chunks, G = (C + kGroup - 1) / kGroup;
  float v[kFinishOutsPerWarp];
#pragma unroll
  for (int m = 0; m < kFinishOutsPerWarp; ++m) v[m] = 0.f;
  for (int g0 = 0; g0 < G; g0 += 32) {
    const int g = g0 + lane;
    constexpr int kLoads = kCps == 1 ? kGroup : 1;
    float p[kFinishOutsPerWarp][kLoads];
#pragma unroll
    for (int m = 0; m < kFinishOutsPerWarp; ++m) {
      const int n = warp + 4 * m;
#pragma unroll
      for (int e = 0; e < kLoads; ++e) {
        const int64_t idx = static_cast<int64_t>(g) * kLoads + e;  // chunk or group
        const bool ok = n <= N && (kCps == 1 ? idx < C : idx < G);
        p[m][e] = ok ? __ldcg(part + (idx * d.S + s) * stride + n) : 0.f;
      }
    }
#pragma unroll
    for (int m = 0; m < kFinishOutsPerWarp; ++m) {
      float q = p[m][0];
#pragma unroll
      for (int e = 1; e < kLoads; ++e)
        if (g * kLoads + e < C) q = __fadd_rn(q, p[m][e]);
      if (g < G) v[m] = g0 == 0 ? q : __fadd_rn(v[m], q);
    }
  }
#pragma unroll
  for (int m = 0; m < kFinishOutsPerWarp; ++m) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v[m] = __fadd_rn(v[m], __shfl_xor_sync(0xffffffffu, v[m], o));
    const int n = warp + 4 * m;
    if (lane == 0 && n <= N) tot[n] = v[m];
  }
  __syncthreads();
  const float inv = rsqrtf(tot[N] / static_cast<float>(d.K) + norm_eps);

  if (!coeffs) {
    if (t < kHc)
      pre_s[t] = sigmoidf_(__fmaf_rn(__fmul_rn(tot[t], inv), w_scale, w_base)) + hc_eps;
    __syncthreads();
    float pre[kHc];
#pragma unroll
    for (int j = 0; j < kHc; ++j) pre[j] = pre_s[j];
#pragma unroll
    for (int e = 0; e < kFinishPerThread; ++e) {
      const int64_t c = c0 + e * kFinishThreads;
      if (c >= H) continue;
      float o = __fmul_rn(pre[0], xv[e][0]);
#pragma unroll
      for (int j = 1; j < kHc; ++j) o = __fmaf_rn(pre[j], xv[e][j], o);
      out[s * H + c] = o;
    }
    return;
  }
  if (t != 0 || head) return;
  site_post_comb<kHc>(tot, inv, cb, csc1, csc2, iters, hc_eps, s, post, comb);
}

// ---- kernel 2 with the RMSNorm of the collapsed row (hc_site with an HcSiteNorm) ----
// One output's tot over the row's partials, as the finish kernel reduces it: lane l sums the
// groups l, l+32, … (each group's chunks in order), then the xor butterfly. A value's bits do not
// depend on which warp reduces it.
template <int kCps>
__device__ __forceinline__ float site_tot(const float* __restrict__ part, const Site& d, int64_t s,
                                          int n, int lane) {
  const int64_t stride = d.N + 1;
  const int C = d.chunks, G = (C + kGroup - 1) / kGroup;
  constexpr int kLoads = kCps == 1 ? kGroup : 1;
  float v = 0.f;
  for (int g0 = 0; g0 < G; g0 += 32) {
    const int g = g0 + lane;
    float p[kLoads];
#pragma unroll
    for (int e = 0; e < kLoads; ++e) {
      const int64_t idx = static_cast<int64_t>(g) * kLoads + e;  // chunk or group
      const bool ok = kCps == 1 ? idx < C : idx < G;
      p[e] = ok ? __ldcg(part + (idx * d.S + s) * stride + n) : 0.f;
    }
    float q = p[0];
#pragma unroll
    for (int e = 1; e < kLoads; ++e)
      if (g * kLoads + e < C) q = __fadd_rn(q, p[e]);
    if (g < G) v = g0 == 0 ? q : __fadd_rn(v, q);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// kVec consecutive floats (one 16-byte load when kVec == 4).
template <int kVec>
__device__ __forceinline__ void load_unit(const float* p, float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) v[e] = p[e];
  }
}
template <int kVec>
__device__ __forceinline__ void store_unit(float* p, const float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int e = 0; e < kVec; ++e) p[e] = v[e];
  }
}

// The collapse of kVec columns (the finish kernel's fma chain) and their squares added to ss in
// column order, written as rms_norm_kernel writes them (elementwise.cu), so the compiler forms
// the same instructions.
template <int kHc, int kVec>
__device__ __forceinline__ float collapse_unit(const float (&pre)[kHc],
                                               const float (&xv)[kHc][kVec], float (&o)[kVec],
                                               float ss) {
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    float c = __fmul_rn(pre[0], xv[0][e]);
#pragma unroll
    for (int j = 1; j < kHc; ++j) c = __fmaf_rn(pre[j], xv[j][e], c);
    o[e] = c;
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) ss += o[e] * o[e];
  return ss;
}

// Grid (S, head ? 1 : 2), kThreads threads. CTA (s, 0): warps 0…hc−1 reduce the outputs n < hc,
// warp hc the Σx² output N (site_tot); pre as the finish kernel computes it; then the row's
// collapse over all H columns in units of kVec columns, thread t taking units t, t + kThreads, …
// — the mapping of rms_norm_kernel<kThreads, kVec> — written to `out`, its squares summed in that
// order, block_sum, and the normalised (· weight) row written to `normed`: both bitwise the
// finish kernel's and rms_norm's outputs. The first kKeep units of a thread stay in registers
// (the norm weight of them is loaded before the wait). CTA (s, 1): post and comb (warp w reduces
// the outputs w, w + kThreads/32, …). PDL as the finish kernel: weights before the wait.
template <int kHc, int kThreads, int kVec>
__global__ void __launch_bounds__(kThreads)
    hc_site_finish_norm_kernel(const float* __restrict__ x, const float* __restrict__ part,
                               const float* __restrict__ base, const float* __restrict__ scale,
                               Site d, int64_t iters, float hc_eps, float norm_eps, bool prefetch_x,
                               const float* __restrict__ nw, float out_eps,
                               float* __restrict__ post, float* __restrict__ comb, float* out,
                               float* normed) {  // normed may be out
  constexpr int kWarps = kThreads / 32;
  constexpr int kKeep = kVec == 4 ? (kThreads >= 1024 ? 1 : 2) : 8;
  static_assert(kWarps > kMaxHc, "a warp per output the collapse needs");
  __shared__ float tot[32];
  __shared__ float pre_s[kHc];
  __shared__ float red[kWarps];
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int64_t s = blockIdx.x, H = d.H;
  const int N = d.N;
  if (blockIdx.y == 1) {  // post and comb of row s
    float cb[kMaxN];
    float csc1 = 0.f, csc2 = 0.f;
    if (t == 0) load_coeff_consts(base, scale, N, cb, csc1, csc2);
    pdl::wait();
    pdl::launch_dependents();
    for (int n = warp; n <= N; n += kWarps) {
      const float v = site_tot<1>(part, d, s, n, lane);
      if (lane == 0) tot[n] = v;
    }
    __syncthreads();
    if (t != 0) return;
    const float inv = rsqrtf(tot[N] / static_cast<float>(d.K) + norm_eps);
    site_post_comb<kHc>(tot, inv, cb, csc1, csc2, iters, hc_eps, s, post, comb);
    return;
  }

  const float* X = x + s * d.K;
  const int64_t units = H / kVec;
  // Before the wait: weights, and an L2 prefetch hint for the row's streams.
  const float w_scale = __ldg(scale);
  const float w_base = t < kHc ? __ldg(base + t) : 0.f;
  float wv[kKeep][kVec];
#pragma unroll
  for (int k = 0; k < kKeep; ++k) {
    const int64_t u = t + static_cast<int64_t>(k) * kThreads;
    if (nw != nullptr && u < units) load_unit<kVec>(nw + u * kVec, wv[k]);
  }
  if (prefetch_x) pdl::prefetch_l2_range(X, d.K * static_cast<int64_t>(sizeof(float)), t, kThreads);
  pdl::wait();
  pdl::launch_dependents();

  float xv[kKeep][kHc][kVec];  // this thread's first units of X, loading while the partials reduce
#pragma unroll
  for (int k = 0; k < kKeep; ++k) {
    const int64_t u = t + static_cast<int64_t>(k) * kThreads;
    if (u < units) {
#pragma unroll
      for (int j = 0; j < kHc; ++j) load_unit<kVec>(X + j * H + u * kVec, xv[k][j]);
    }
  }
  if (warp <= kHc) {
    const int n = warp < kHc ? warp : N;
    const float v = site_tot<1>(part, d, s, n, lane);
    if (lane == 0) tot[n] = v;
  }
  __syncthreads();
  const float inv = rsqrtf(tot[N] / static_cast<float>(d.K) + norm_eps);
  if (t < kHc) pre_s[t] = sigmoidf_(__fmaf_rn(__fmul_rn(tot[t], inv), w_scale, w_base)) + hc_eps;
  __syncthreads();
  float pre[kHc];
#pragma unroll
  for (int j = 0; j < kHc; ++j) pre[j] = pre_s[j];

  float* O = out + s * H;
  float* Y = normed + s * H;
  float ss = 0.f;
  float keep[kKeep][kVec];
#pragma unroll
  for (int k = 0; k < kKeep; ++k) {
    const int64_t u = t + static_cast<int64_t>(k) * kThreads;
    if (u < units) {
      ss = collapse_unit<kHc, kVec>(pre, xv[k], keep[k], ss);
      store_unit<kVec>(O + u * kVec, keep[k]);
    }
  }
  for (int64_t u = t + static_cast<int64_t>(kKeep) * kThreads; u < units; u += kThreads) {
    float xl[kHc][kVec], o[kVec];
#pragma unroll
    for (int j = 0; j < kHc; ++j) load_unit<kVec>(X + j * H + u * kVec, xl[j]);
    ss = collapse_unit<kHc, kVec>(pre, xl, o, ss);
    store_unit<kVec>(O + u * kVec, o);
  }
  ss = block_sum<kThreads>(ss, red);
  const float rinv = rsqrtf(ss / static_cast<float>(H) + out_eps);  // as rms_norm_kernel
#pragma unroll
  for (int k = 0; k < kKeep; ++k) {
    const int64_t u = t + static_cast<int64_t>(k) * kThreads;
    if (u < units) {
      float o[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        o[e] = __fmul_rn(keep[k][e], rinv);
        if (nw != nullptr) o[e] = __fmul_rn(o[e], wv[k][e]);
      }
      store_unit<kVec>(Y + u * kVec, o);
    }
  }
  for (int64_t u = t + static_cast<int64_t>(kKeep) * kThreads; u < units; u += kThreads) {
    float o[kVec], g[kVec];
    load_unit<kVec>(O + u * kVec, o);  // this thread's own store above
    if (nw != nullptr) load_unit<kVec>(nw + u * kVec, g);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      o[e] = __fmul_rn(o[e], rinv);
      if (nw != nullptr) o[e] = __fmul_rn(o[e], g[e]);
    }
    store_unit<kVec>(Y + u * kVec, o);
  }
}

template <bool kExpand>
void launch_partial(HcSiteMode mode, const float* x, const float* fn, const Site& d, float* part,
                    const ExpandArgs& ex, cudaStream_t s, bool pdl) {
  const auto y_blocks = [&](int64_t rows) {
    return static_cast<unsigned>((d.S + rows - 1) / rows);
  };
  const unsigned chunks = static_cast<unsigned>(d.chunks);
  if (mode == HcSiteMode::kRows) {
    pdl::launch(hc_site_rows_kernel<kExpand>, dim3(chunks, y_blocks(kRowsPerCta)), dim3(kRowsThreads),
           0, s, pdl, x, fn, d, part, ex);
  } else if (mode == HcSiteMode::kTile1) {
    constexpr int smem = kTileStage * 4;  // 46.5 KB: no opt-in needed
    static_assert(smem <= 48 * 1024, "kTile1 stage");
    pdl::launch(hc_site_tile_kernel<1, kExpand>, dim3(chunks, y_blocks(kTileRows)), dim3(kTileThreads),
           smem, s, pdl, x, fn, d, part, ex);
  } else {
    constexpr int smem = 2 * kTileStage * 4;
    static std::atomic<uint64_t> done{0};
    opt_in_smem_per_device(done, hc_site_tile_kernel<kGroup, kExpand>, smem);
    const unsigned groups = static_cast<unsigned>((d.chunks + kGroup - 1) / kGroup);
    pdl::launch(hc_site_tile_kernel<kGroup, kExpand>, dim3(groups, y_blocks(kTileRows)),
           dim3(kTileThreads), smem, s, pdl, x, fn, d, part, ex);
  }
}

template <int kHc>
void launch_finish(int cps, const float* x, const float* part, const float* base,
                   const float* scale, const Site& d, int64_t iters, float hc_eps, float norm_eps,
                   bool head, bool prefetch_x, float* post, float* comb, float* out,
                   cudaStream_t s, bool pdl) {
  const int colblocks = static_cast<int>((d.H + kFinishCols - 1) / kFinishCols);
  const dim3 grid(static_cast<unsigned>(d.S), static_cast<unsigned>(colblocks + (head ? 0 : 1)));
  auto* k = cps == 1 ? hc_site_finish_kernel<kHc, 1> : hc_site_finish_kernel<kHc, kGroup>;
  pdl::launch(k, grid, dim3(kFinishThreads), 0, s, pdl, x, part, base, scale, d, iters, hc_eps,
         norm_eps, head, prefetch_x, colblocks, post, comb, out);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Threads of the fused finish + norm kernel: those of rms_norm's kernel for rows of H
// (elementwise.cu rms_norm makes the same choice from H and the pointers); 0 when the norm is not
// fused (kTile4 partials, or float4 rows whose streams x are not 16-byte aligned).
int finish_norm_threads(const float* x, const float* collapsed, int64_t H, const HcSiteNorm& nm,
                        HcSiteMode mode) {
  if (mode == HcSiteMode::kTile4) return 0;
  if (rms_norm_scalar_rows(collapsed, nm.weight, nm.out, H)) return 256;
  if (!aligned16(x)) return 0;
  return H >= 8192 ? 1024 : 512;
}

template <int kHc>
void launch_finish_norm(int threads, const float* x, const float* part, const float* base,
                        const float* scale, const Site& d, int64_t iters, float hc_eps,
                        float norm_eps, bool head, bool prefetch_x, const HcSiteNorm& nm,
                        float* post, float* comb, float* out, cudaStream_t s, bool pdl) {
  const dim3 grid(static_cast<unsigned>(d.S), head ? 1u : 2u);
  auto* k = threads == 1024  ? hc_site_finish_norm_kernel<kHc, 1024, 4>
            : threads == 512 ? hc_site_finish_norm_kernel<kHc, 512, 4>
                             : hc_site_finish_norm_kernel<kHc, 256, 1>;
  pdl::launch(k, grid, dim3(static_cast<unsigned>(threads)), 0, s, pdl, x, part, base, scale, d,
              iters, hc_eps, norm_eps, prefetch_x, nm.weight, nm.eps, post, comb, out, nm.out);
}

}  // namespace

bool hc_site_supported(int64_t hc, bool head) {
  (void)head;
  return hc >= 1 && hc <= kMaxHc;
}

HcSiteMode hc_site_mode(int64_t S, HcSiteMode mode) {
  if (mode != HcSiteMode::kAuto) return mode;
  return S <= kRowsMaxS ? HcSiteMode::kRows
                        : (S <= kTile1MaxS ? HcSiteMode::kTile1 : HcSiteMode::kTile4);
}

int64_t hc_site_scratch_floats(int64_t S, int64_t hc, int64_t H, bool head, HcSiteMode mode) {
  const int64_t N = head ? hc : (2 + hc) * hc;
  const int64_t chunks = (hc * H + kChunk - 1) / kChunk;
  const int64_t stored =
      hc_site_mode(S, mode) == HcSiteMode::kTile4 ? (chunks + kGroup - 1) / kGroup : chunks;
  return stored * S * (N + 1);
}

void hc_site(const float* x, const float* fn, const float* base, const float* scale, int64_t S,
             int64_t hc, int64_t H, int64_t iters, float hc_eps, float norm_eps, bool head,
             float* part, float* post, float* comb, float* out, cudaStream_t s,
             const HcExpandIn* expand, bool pdl, HcSiteMode mode, const HcSiteNorm* norm) {
  if (S <= 0 || H <= 0 || !hc_site_supported(hc, head)) return;
  mode = hc_site_mode(S, mode);
  const int64_t K = hc * H;
  Site d{};
  d.S = S;
  d.H = H;
  d.K = K;
  d.hc = static_cast<int>(hc);
  d.N = static_cast<int>(head ? hc : (2 + hc) * hc);
  d.chunks = static_cast<int>((K + kChunk - 1) / kChunk);
  d.vec = K % 4 == 0 && aligned16(fn) && (expand != nullptr || aligned16(x));
  ExpandArgs ex{};
  if (expand) {
    ex = ExpandArgs{expand->x_prev, expand->y,     expand->post,
                    expand->comb,   expand->x_new, expand->y2};
    launch_partial<true>(mode, nullptr, fn, d, part, ex, s, pdl);
    x = expand->x_new;  // kernel 2 collapses the new streams (written by kernel 1)
  } else {
    launch_partial<false>(mode, x, fn, d, part, ex, s, pdl);
  }
  const int cps = mode == HcSiteMode::kTile4 ? kGroup : 1;
  const bool prefetch_x = expand == nullptr;  // x_new is being written by kernel 1
  if (norm != nullptr) {
    const int threads = finish_norm_threads(x, out, H, *norm, mode);
    if (threads > 0) {
      switch (hc) {
        case 1:
          launch_finish_norm<1>(threads, x, part, base, scale, d, iters, hc_eps, norm_eps, head,
                                prefetch_x, *norm, post, comb, out, s, pdl);
          break;
        case 2:
          launch_finish_norm<2>(threads, x, part, base, scale, d, iters, hc_eps, norm_eps, head,
                                prefetch_x, *norm, post, comb, out, s, pdl);
          break;
        case 3:
          launch_finish_norm<3>(threads, x, part, base, scale, d, iters, hc_eps, norm_eps, head,
                                prefetch_x, *norm, post, comb, out, s, pdl);
          break;
        default:
          launch_finish_norm<4>(threads, x, part, base, scale, d, iters, hc_eps, norm_eps, head,
                                prefetch_x, *norm, post, comb, out, s, pdl);
          break;
      }
      return;
    }
  }
  switch (hc) {
    case 1:
      launch_finish<1>(cps, x, part, base, scale, d, iters, hc_eps, norm_eps, head, prefetch_x,
                       post, comb, out, s, pdl);
      break;
    case 2:
      launch_finish<2>(cps, x, part, base, scale, d, iters, hc_eps, norm_eps, head, prefetch_x,
                       post, comb, out, s, pdl);
      break;
    case 3:
      launch_finish<3>(cps, x, part, base, scale, d, iters, hc_eps, norm_eps, head, prefetch_x,
                       post, comb, out, s, pdl);
      break;
    default:
      launch_finish<4>(cps, x, part, base, scale, d, iters, hc_eps, norm_eps, head, prefetch_x,
                       post, comb, out, s, pdl);
      break;
  }
  if (norm != nullptr) rms_norm(out, norm->weight, S, H, norm->eps, norm->out, s);  // unfused
}

}  // namespace deepinfer::cuda::kernels
