// mHC kernels (deepseek-v4.md §3): coefficients with Sinkhorn-Knopp (a warp per token when
// hc·hc <= 32, else a thread), stream collapse and expand (one thread per output element, fixed summation order over j).
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda::kernels {
namespace {

constexpr int kMaxHc = 16;

__device__ __forceinline__ float sigmoidf_(float v) { return 1.f / (1.f + expf(-v)); }

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

// One warp per token for hc·hc <= 32: lane l holds C[l / hc][l % hc]; a row or column sum is hc
// shuffles added in index order (the CPU's order), so the Sinkhorn chain is short and parallel.
__global__ void hc_coeffs_warp_kernel(const float* mix, const float* base, const float* scale,
                                      int64_t S, int hc, int64_t iters, float eps, bool head,
                                      float* pre, float* post, float* comb) {
  const int lane = threadIdx.x % 32;
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (s >= S) return;
  const int64_t width = head ? hc : (2 + hc) * hc;
  const float* a = mix + s * width;
  if (lane < hc) pre[s * hc + lane] = sigmoidf_(a[lane] * scale[0] + base[lane]) + eps;
  if (head) return;
  if (lane < hc) post[s * hc + lane] = 2.f * sigmoidf_(a[hc + lane] * scale[1] + base[hc + lane]);
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
  if (mine) comb[s * hc * hc + lane] = c;
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

__global__ void hc_expand_kernel(const float* x, const float* y, const float* post,
                                 const float* comb, int64_t S, int64_t hc, int64_t H, float* out) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= S * hc * H) return;
  const int64_t s = t / (hc * H), k = (t / H) % hc, c = t % H;
  const float* X = x + s * hc * H;
  const float* C = comb + s * hc * hc;
  float o = post[s * hc + k] * y[s * H + c];
  for (int64_t j = 0; j < hc; ++j) o += C[j * hc + k] * X[j * H + c];
  out[t] = o;
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
               int64_t hc, int64_t H, float* out, cudaStream_t s) {
  if (S * hc * H > 0)
    hc_expand_kernel<<<grid_for(S * hc * H, 256), 256, 0, s>>>(x, y, post, comb, S, hc, H, out);
}

}  // namespace deepinfer::cuda::kernels
