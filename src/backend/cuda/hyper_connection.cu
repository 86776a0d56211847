// mHC kernels (deepseek-v4.md §3): coefficients with Sinkhorn-Knopp (a warp per token when
// hc·hc <= 32, else a thread), stream collapse and expand (one thread per output element, fixed
// summation order over j), and the session-6 fused site (hc_pre_s6: S <= 64; kept for the bench
// and DEEPINFER_CUDA_HC=fused_s6 — the session-7 site for every S is hc_site.cu).
#include "backend/cuda/common.cuh"
#include "backend/cuda/hyper_connection.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/pdl_config.h"

namespace deepinfer::cuda::kernels {
namespace {

using hc_detail::hc_expand_elem;
using hc_detail::sigmoidf_;

constexpr int kMaxHc = 16;

// One thread per token (the fallback for hc·hc > 32; hc <= kMaxHc).
__global__ void hc_coeffs_kernel(const float* mix, const float* base, const float* scale,
                                 int64_t S, int64_t hc, int64_t iters, float eps, bool head,
                                 float* pre, float* post, float* comb) {
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (s >= S) return;
  const int64_t width = head ? hc : (2 + hc) * hc;
  const float* a = mix + s * width;
  for (int64_t j = 0; j < hc; ++j) pre[s * hc + j] = sigmoidf_(a[j] * scale[0] + base[j]) + eps;
  if (head) return;
  for (int64_t j = 0; j < hc; ++j)
    post[s * hc + j] = 2.f * sigmoidf_(a[hc + j] * scale[1] + base[hc + j]);
  float C[kMaxHc * kMaxHc];
  for (int64_t j = 0; j < hc; ++j) {
    float mx = -INFINITY;
    for (int64_t k = 0; k < hc; ++k) {
      C[j * hc + k] = a[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
      mx = fmaxf(mx, C[j * hc + k]);
    }
    float den = 0.f;
    for (int64_t k = 0; k < hc; ++k) den += (C[j * hc + k] = expf(C[j * hc + k] - mx));
    for (int64_t k = 0; k < hc; ++k) C[j * hc + k] = C[j * hc + k] / den + eps;
  }
  for (int64_t it = 0; it < iters; ++it) {
    if (it > 0) {
      for (int64_t j = 0; j < hc; ++j) {
        float sum = 0.f;
        for (int64_t k = 0; k < hc; ++k) sum += C[j * hc + k];
        for (int64_t k = 0; k < hc; ++k) C[j * hc + k] /= (sum + eps);
      }
    }
    for (int64_t k = 0; k < hc; ++k) {
      float sum = 0.f;
      for (int64_t j = 0; j < hc; ++j) sum += C[j * hc + k];
      for (int64_t j = 0; j < hc; ++j) C[j * hc + k] /= (sum + eps);
    }
  }
  for (int64_t i = 0; i < hc * hc; ++i) comb[s * hc * hc + i] = C[i];
}

// The Sinkhorn coefficients of one token on one warp (hc·hc <= 32), from its mix row a
// [(2+hc)·hc] (or [hc] for the head): lane l holds C[l / hc][l % hc]; a row or column sum is hc
// shuffles added in index order (the CPU's order), so the Sinkhorn chain is short and parallel.
// Writes pre [hc]; unless head, post [hc] and comb [hc·hc] when those pointers are non-null.
// All 32 lanes must call it (warp-uniform arguments). Shared by hc_coeffs and the fused hc_pre,
// so both give the same bits for the same mix row.
__device__ __forceinline__ void hc_coeffs_warp(const float* a, const float* base,
                                               const float* scale, int hc, int64_t iters,
                                               float eps, bool head, int lane, float* pre,
                                               float* post, float* comb) {
  if (lane < hc) pre[lane] = sigmoidf_(a[lane] * scale[0] + base[lane]) + eps;
  if (head) return;
  if (lane < hc && post) post[lane] = 2.f * sigmoidf_(a[hc + lane] * scale[1] + base[hc + lane]);
  const bool mine = lane < hc * hc;
  const int j = mine ? lane / hc : 0, k = mine ? lane % hc : 0;
  auto row_sum = [&](float v) {
    float t = 0.f;
    for (int kk = 0; kk < hc; ++kk) t += __shfl_sync(0xffffffffu, v, j * hc + kk);
    return t;
  };
  auto col_sum = [&](float v) {
    float t = 0.f;
    for (int jj = 0; jj < hc; ++jj) t += __shfl_sync(0xffffffffu, v, jj * hc + k);
    return t;
  };
  float c = mine ? a[2 * hc + lane] * scale[2] + base[2 * hc + lane] : 0.f;
  float mx = -INFINITY;
  for (int kk = 0; kk < hc; ++kk) mx = fmaxf(mx, __shfl_sync(0xffffffffu, c, j * hc + kk));
  c = expf(c - mx);
  const float den = row_sum(c);
  c = c / den + eps;
  for (int64_t it = 0; it < iters; ++it) {
    if (it > 0) c /= (row_sum(c) + eps);
    c /= (col_sum(c) + eps);
  }
  if (mine && comb) comb[lane] = c;
}

// One warp per token for hc·hc <= 32.
__global__ void hc_coeffs_warp_kernel(const float* mix, const float* base, const float* scale,
                                      int64_t S, int hc, int64_t iters, float eps, bool head,
                                      float* pre, float* post, float* comb) {
  const int lane = threadIdx.x % 32;
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (s >= S) return;
  const int64_t width = head ? hc : (2 + hc) * hc;
  hc_coeffs_warp(mix + s * width, base, scale, hc, iters, eps, head, lane, pre + s * hc,
                 head ? nullptr : post + s * hc, head ? nullptr : comb + s * hc * hc);
}

__global__ void hc_collapse_kernel(const float* x, const float* pre, int64_t S, int64_t hc,
                                   int64_t H, float* out) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= S * H) return;
  const int64_t s = t / H, c = t % H;
  const float* X = x + s * hc * H;
  float o = pre[s * hc] * X[c];
  for (int64_t j = 1; j < hc; ++j) o += pre[s * hc + j] * X[j * H + c];
  out[t] = o;
}

// y2 non-null: the expand of y + y2 (add_kernel's one fp32 add, then the same element).
__global__ void hc_expand_kernel(const float* x, const float* y, const float* post,
                                 const float* comb, int64_t S, int64_t hc, int64_t H, float* out,
                                 const float* y2) {
  pdl::enter();
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= S * hc * H) return;
  const int64_t s = t / (hc * H), k = (t / H) % hc, c = t % H;
  const float yc = y2 != nullptr ? __fadd_rn(y[s * H + c], y2[s * H + c]) : y[s * H + c];
  out[t] = hc_expand_elem(post[s * hc + k], yc, comb + s * hc * hc, x + s * hc * H, k, c, hc, H);
}

// ---- session-6 fused site for decode-sized S (hc_pre_s6) ----
// Kernel 1, hc_pre_partial_kernel: grid (ceil(K / kHcChunk), ceil(S / kHcRows)), 8 warps. CTA
// (c, r) stages rows r·kHcRows… of X's K = hc·H columns [c·kHcChunk, +kHcChunk) in shared memory;
// warp w keeps fn rows n = w, w+8, … (n < N) of the chunk in registers (lane l: columns l, l+32,
// l+64, l+96) and, for every staged row, writes part[c][s][n] = Σ x·fn over the chunk and, for
// rows s ≡ w (mod 8), part[c][s][N] = Σ x² (each an fma chain in column order per lane, then a
// fixed xor tree). The 1.5 MB of fn is read once by ~128 CTAs. Kernel 2, hc_pre_finish_kernel:
// grid (S, ceil(H / kHcCols)); each CTA sums its row's partials over the chunks in a fixed order
// (8 strided groups, then the groups in order), forms mix = (x·fnᵀ)·rsqrt(Σx²/K + ε) (the
// [OFF] order: norm after the product), runs the Sinkhorn on warp 0 (hc_coeffs_warp: the same
// arithmetic as hc_coeffs) and collapses its kHcCols columns as hc_collapse does; CTA y == 0
// writes post/comb. Every number depends on its own row and the sizes (K, N, H) only — never
// on S or on the tile a row lands in.
constexpr int kHcChunk = 128;  // columns per CTA of kernel 1 (32 lanes × 4)
constexpr int kHcRows = 64;    // rows staged per CTA of kernel 1 (32 KB)
constexpr int kHcWarps = 8;
constexpr int kHcMaxPerWarp = 4;  // outputs n per warp: N <= 32
constexpr int kHcCols = 1024;     // collapse columns per CTA of kernel 2

__device__ __forceinline__ float warp_sum_xor(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The previous site's expand, done by kernel 1 of hc_expand_pre while it stages X (each CTA
// writes the new streams of its own chunk; kernel 2 reads them): hc_expand's arithmetic.
struct HcExpandArgs {
  const float* x_prev;  // [S, hc, H]
  const float* y;       // [S, H]
  const float* post;    // [S, hc]
  const float* comb;    // [S, hc, hc]
  float* x_new;         // [S, hc, H]
  int hc;
  int64_t H;
};

template <bool kExpand>
__global__ void __launch_bounds__(kHcWarps * 32)
    hc_pre_partial_kernel(const float* __restrict__ x, const float* __restrict__ fn, int64_t S,
                          int64_t K, int N, float* __restrict__ part, HcExpandArgs ex) {
  __shared__ float xs[kHcRows][kHcChunk];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kHcChunk;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kHcRows;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kHcRows), S - r0));
  for (int i = threadIdx.x; i < rows * kHcChunk; i += kHcWarps * 32) {
    const int r = i / kHcChunk, cc = i % kHcChunk;
    const int64_t col = c0 + cc;
    float v = 0.f;
    if (col < K) {
      if constexpr (kExpand) {  // as hc_expand_kernel: out[s,k,c] = post·y + Σ_j C[j][k]·X[j]
        const int64_t s = r0 + r, k = col / ex.H, c = col % ex.H, hc = ex.hc;
        const float o = hc_expand_elem(ex.post[s * hc + k], ex.y[s * ex.H + c],
                                       ex.comb + s * hc * hc, ex.x_prev + s * hc * ex.H, k, c, hc,
                                       ex.H);
        ex.x_new[s * K + col] = o;
        v = o;
      } else {
        v = x[(r0 + r) * K + col];
      }
    }
    xs[r][cc] = v;
  }
  float w[kHcMaxPerWarp][4];
#pragma unroll
  for (int q = 0; q < kHcMaxPerWarp; ++q) {
    const int n = warp + kHcWarps * q;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t col = c0 + lane + 32 * i;
      w[q][i] = (n < N && col < K) ? __ldg(fn + n * K + col) : 0.f;
    }
  }
  __syncthreads();
  const int64_t stride = N + 1;
  for (int r = 0; r < rows; ++r) {
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = xs[r][lane + 32 * i];
    float* out = part + (static_cast<int64_t>(blockIdx.x) * S + r0 + r) * stride;
#pragma unroll
    for (int q = 0; q < kHcMaxPerWarp; ++q) {
      const int n = warp + kHcWarps * q;
      if (n >= N) break;  // warp-uniform
      float acc = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) acc = fmaf(v[i], w[q][i], acc);
      acc = warp_sum_xor(acc);
      if (lane == 0) out[n] = acc;
    }
    if (static_cast<int>((r0 + r) % kHcWarps) == warp) {  // warp-uniform
      float ss = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) ss = fmaf(v[i], v[i], ss);
      ss = warp_sum_xor(ss);
      if (lane == 0) out[N] = ss;
    }
  }
}

__global__ void __launch_bounds__(kHcWarps * 32)
    hc_pre_finish_kernel(const float* __restrict__ x, const float* __restrict__ part,
                         const float* __restrict__ base, const float* __restrict__ scale,
                         int64_t S, int hc, int64_t H, int N, int64_t chunks, int64_t iters,
                         float hc_eps, float norm_eps, bool head, float* __restrict__ post,
                         float* __restrict__ comb, float* __restrict__ out) {
  __shared__ float red[kHcWarps][32];
  __shared__ float mix[32];
  __shared__ float pre[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t s = blockIdx.x;
  const int64_t stride = N + 1;
  // Partials: group `warp` sums chunks warp, warp+8, … in order; then the groups in order.
  float acc = 0.f;
  if (lane <= N)
    for (int64_t c = warp; c < chunks; c += kHcWarps) acc += part[(c * S + s) * stride + lane];
  red[warp][lane] = acc;
  __syncthreads();
  if (warp == 0) {
    float tot = red[0][lane];
#pragma unroll
    for (int g = 1; g < kHcWarps; ++g) tot += red[g][lane];
    const float ss = __shfl_sync(0xffffffffu, tot, N);
    const float inv = rsqrtf(ss / static_cast<float>(static_cast<int64_t>(hc) * H) + norm_eps);
    mix[lane] = tot * inv;
    __syncwarp();
    const bool writer = blockIdx.y == 0;
    hc_coeffs_warp(mix, base, scale, hc, iters, hc_eps, head, lane, pre,
                   (!head && writer) ? post + s * hc : nullptr,
                   (!head && writer) ? comb + s * hc * hc : nullptr);
  }
  __syncthreads();
  const float* X = x + s * hc * H;
  const int64_t end = min(H, static_cast<int64_t>(blockIdx.y + 1) * kHcCols);
  for (int64_t c = static_cast<int64_t>(blockIdx.y) * kHcCols + threadIdx.x; c < end;
       c += kHcWarps * 32) {
    float o = pre[0] * X[c];
    for (int j = 1; j < hc; ++j) o += pre[j] * X[j * H + c];
    out[s * H + c] = o;
  }
}

}  // namespace

void hc_coeffs(const float* mix, const float* base, const float* scale, int64_t S, int64_t hc,
               int64_t iters, float eps, bool head, float* pre, float* post, float* comb,
               cudaStream_t s) {
  if (S <= 0) return;
  if (hc * hc <= 32) {
    hc_coeffs_warp_kernel<<<grid_for(S, 4), 128, 0, s>>>(mix, base, scale, S, static_cast<int>(hc),
                                                        iters, eps, head, pre, post, comb);
    return;
  }
  hc_coeffs_kernel<<<grid_for(S, 64), 64, 0, s>>>(mix, base, scale, S, hc, iters, eps, head, pre,
                                                  post, comb);
}

void hc_collapse(const float* x, const float* pre, int64_t S, int64_t hc, int64_t H, float* out,
                 cudaStream_t s) {
  if (S * H > 0) hc_collapse_kernel<<<grid_for(S * H, 256), 256, 0, s>>>(x, pre, S, hc, H, out);
}

void hc_expand(const float* x, const float* y, const float* post, const float* comb, int64_t S,
               int64_t hc, int64_t H, float* out, cudaStream_t s, const float* y2) {
  if (S * hc * H > 0)
    pdl::launch(hc_expand_kernel, grid_for(S * hc * H, 256), 256, 0, s, pdl::small_kernels(), x, y,
                post, comb, S, hc, H, out, y2);
}

bool hc_pre_s6_supported(int64_t hc, bool head) {
  const int64_t N = head ? hc : (2 + hc) * hc;
  return hc >= 1 && hc * hc <= 32 && N + 1 <= 32 && N <= kHcWarps * kHcMaxPerWarp;
}

int64_t hc_pre_s6_chunks(int64_t K) { return (K + kHcChunk - 1) / kHcChunk; }

void hc_pre_s6(const float* x, const float* fn, const float* base, const float* scale, int64_t S,
               int64_t hc, int64_t H, int64_t iters, float hc_eps, float norm_eps, bool head,
               float* part, float* post, float* comb, float* out, cudaStream_t s,
               const HcExpandIn* expand) {
  if (S <= 0 || H <= 0) return;
  const int64_t K = hc * H, chunks = hc_pre_s6_chunks(K);
  const int N = static_cast<int>(head ? hc : (2 + hc) * hc);
  const dim3 g1(static_cast<unsigned>(chunks), static_cast<unsigned>((S + kHcRows - 1) / kHcRows));
  if (expand) {
    const HcExpandArgs ex{expand->x_prev, expand->y, expand->post, expand->comb, expand->x_new,
                          static_cast<int>(hc), H};
    hc_pre_partial_kernel<true><<<g1, kHcWarps * 32, 0, s>>>(nullptr, fn, S, K, N, part, ex);
    x = expand->x_new;  // kernel 2 collapses the new streams
  } else {
    hc_pre_partial_kernel<false><<<g1, kHcWarps * 32, 0, s>>>(x, fn, S, K, N, part, HcExpandArgs{});
  }
  const dim3 g2(static_cast<unsigned>(S), static_cast<unsigned>((H + kHcCols - 1) / kHcCols));
  hc_pre_finish_kernel<<<g2, kHcWarps * 32, 0, s>>>(x, part, base, scale, S,
                                                    static_cast<int>(hc), H, N, chunks, iters,
                                                    hc_eps, norm_eps, head, post, comb, out);
}

}  // namespace deepinfer::cuda::kernels
