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
          v = hc_expand_elem(ex.post[s * d.hc + k], ex.y[s * d.H + cc],
                             ex.comb + s * d.hc * d.hc, ex.x_prev + s * d.K, k, cc, d.hc, d.H);
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
#pragma unroll
    for (int n = 0; n < kMaxN; ++n) cb[n] = n < N ? __ldg(base + n) : 0.f;
    csc1 = __ldg(scale + 1);
    csc2 = __ldg(scale + 2);
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
  // post [hc] and comb [hc, hc] of row s.
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
             const HcExpandIn* expand, bool pdl, HcSiteMode mode) {
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
    ex = ExpandArgs{expand->x_prev, expand->y, expand->post, expand->comb, expand->x_new};
    launch_partial<true>(mode, nullptr, fn, d, part, ex, s, pdl);
    x = expand->x_new;  // kernel 2 collapses the new streams (written by kernel 1)
  } else {
    launch_partial<false>(mode, x, fn, d, part, ex, s, pdl);
  }
  const int cps = mode == HcSiteMode::kTile4 ? kGroup : 1;
  const bool prefetch_x = expand == nullptr;  // x_new is being written by kernel 1
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
}

}  // namespace deepinfer::cuda::kernels
