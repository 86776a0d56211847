// Attention over explicit per-query key lists with per-head sinks (deepseek-v4.md §4.3).
// One block per (query, head), a warp per strided share of the key list (see the kernel). The
// result for a query never depends on the rest of the batch. Not yet the fast decode kernel
// (heads as the M dimension, FlashMLA-style, issue 7).
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxPerLane = 32;  // D, Dv <= 1024

// One block per (query, head), four warps. Warp w visits the keys at list positions
// w, w + 4, w + 8, ... with its own online softmax (q·k reduced by a fixed xor tree, no block
// barrier per key); the four partial states are merged in warp order at the end, with the sink
// logit added once. The result for a query depends only on its own key list.
__global__ void __launch_bounds__(kWarps * 32)
attention_kernel(const float* __restrict__ q, const float* __restrict__ k,
                 const float* __restrict__ v, const int32_t* __restrict__ key_offsets,
                 const int32_t* __restrict__ key_ids, int64_t nnz, const float* sinks,
                 int64_t nH, int64_t T, int64_t nKV, int64_t D, int64_t Dv, float scale,
                 float* __restrict__ out, int32_t* error_flag) {
  extern __shared__ float smem[];  // [kWarps][2 + Dv]: m, denom, acc
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t s = blockIdx.x / nH, h = blockIdx.x % nH;
  const int64_t kvh = h / (nH / nKV);
  const float* qh = q + (s * nH + h) * D;
  float* o = out + (s * nH + h) * Dv;
  int64_t begin = key_offsets[s], end = key_offsets[s + 1];
  if (begin < 0 || end < begin || end > nnz) {
    if (threadIdx.x == 0) set_error(error_flag, kErrKeyOffsets);
    begin = end = 0;
  }
  float qv[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int64_t c = lane + 32 * i;
    qv[i] = c < D ? qh[c] : 0.f;
    acc[i] = 0.f;
  }
  float m = -INFINITY, denom = 0.f;
  for (int64_t idx = begin + warp; idx < end; idx += kWarps) {
    const int32_t j = key_ids[idx];
    if (j < 0 || j >= T) {
      if (lane == 0) set_error(error_flag, kErrKeyId);
      continue;
    }
    const float* kj = k + (j * nKV + kvh) * D;
    float part = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < D) part = fmaf(qv[i], kj[c], part);
    }
    for (int o2 = 16; o2 > 0; o2 >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o2);
    const float logit = part * scale;
    const float m_new = fmaxf(m, logit);
    const float corr = expf(m - m_new);  // m = -inf on a warp's first key: exp(-inf) = 0
    const float p = expf(logit - m_new);
    denom = denom * corr + p;
    const float* vj = v + (j * nKV + kvh) * Dv;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < Dv) acc[i] = acc[i] * corr + p * vj[c];
    }
    m = m_new;
  }
  float* mine = smem + warp * (2 + Dv);
  if (lane == 0) {
    mine[0] = m;
    mine[1] = denom;
  }
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int64_t c = lane + 32 * i;
    if (c < Dv) mine[2 + c] = acc[i];
  }
  __syncthreads();
  // Merge in warp order (every thread computes the same scalars).
  float M = sinks ? sinks[h] : -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, smem[w * (2 + Dv)]);
  float total = sinks ? expf(sinks[h] - M) : 0.f;
  float f[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    const float mw = smem[w * (2 + Dv)];
    f[w] = mw == -INFINITY ? 0.f : expf(mw - M);
    total += smem[w * (2 + Dv) + 1] * f[w];
  }
  const bool any_key = end > begin && total > 0.f;
  for (int64_t c = threadIdx.x; c < Dv; c += kWarps * 32) {
    float a = 0.f;
    for (int w = 0; w < kWarps; ++w) a += smem[w * (2 + Dv) + 2 + c] * f[w];
    o[c] = any_key ? a / total : 0.f;
  }
}

}  // namespace

void attention(const float* q, const float* k, const float* v, const int32_t* key_offsets,
               const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
               int64_t T, int64_t nKV, int64_t D, int64_t Dv, float scale, float* out,
               int32_t* error_flag, cudaStream_t s) {
  if (S * nH > 0) {
    const size_t smem = static_cast<size_t>(kWarps) * (2 + Dv) * sizeof(float);
    attention_kernel<<<static_cast<unsigned>(S * nH), kWarps * 32, smem, s>>>(
        q, k, v, key_offsets, key_ids, nnz, sinks, nH, T, nKV, D, Dv, scale, out, error_flag);
  }
}

}  // namespace deepinfer::cuda::kernels
