// Attention over explicit per-query key lists with per-head sinks (deepseek-v4.md §4.3).
// One block per (query, head); keys are visited in list order with an online softmax, so the
// result for a query never depends on the rest of the batch. Correctness-first: the fast decode
// kernel (heads as the M dimension, FlashMLA-style) is issue 7's.
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxChannelsPerThread = 8;  // Dv <= 1024

__global__ void attention_kernel(const float* q, const float* k, const float* v,
                                 const int32_t* key_offsets, const int32_t* key_ids, int64_t nnz,
                                 const float* sinks, int64_t nH, int64_t T, int64_t nKV, int64_t D,
                                 int64_t Dv, float scale, float* out, int32_t* error_flag) {
  __shared__ float red[kThreads / 32];
  const int64_t s = blockIdx.x / nH, h = blockIdx.x % nH;
  const int64_t kvh = h / (nH / nKV);
  const float* qh = q + (s * nH + h) * D;
  float* o = out + (s * nH + h) * Dv;
  int64_t begin = key_offsets[s], end = key_offsets[s + 1];
  if (begin < 0 || end < begin || end > nnz) {
    if (threadIdx.x == 0) set_error(error_flag, kErrKeyOffsets);
    begin = end = 0;
  }
  float m = sinks ? sinks[h] : -INFINITY;
  float denom = sinks ? 1.f : 0.f;
  float acc[kMaxChannelsPerThread];
  for (int i = 0; i < kMaxChannelsPerThread; ++i) acc[i] = 0.f;
  for (int64_t idx = begin; idx < end; ++idx) {
    const int32_t j = key_ids[idx];
    if (j < 0 || j >= T) {
      if (threadIdx.x == 0) set_error(error_flag, kErrKeyId);
      continue;
    }
    const float* kj = k + (j * nKV + kvh) * D;
    float part = 0.f;
    for (int64_t c = threadIdx.x; c < D; c += kThreads) part += qh[c] * kj[c];
    const float logit = block_sum<kThreads>(part, red) * scale;
    const float m_new = fmaxf(m, logit);
    const float corr = expf(m - m_new);  // m = -inf on the first key without a sink: exp(-inf)=0
    const float p = expf(logit - m_new);
    denom = denom * corr + p;
    const float* vj = v + (j * nKV + kvh) * Dv;
    for (int i = 0; i < kMaxChannelsPerThread; ++i) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(i) * kThreads;
      if (c < Dv) acc[i] = acc[i] * corr + p * vj[c];
    }
    m = m_new;
  }
  const bool any_key = end > begin;
  for (int i = 0; i < kMaxChannelsPerThread; ++i) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(i) * kThreads;
    if (c < Dv) o[c] = any_key && denom > 0.f ? acc[i] / denom : 0.f;
  }
}

}  // namespace

void attention(const float* q, const float* k, const float* v, const int32_t* key_offsets,
               const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
               int64_t T, int64_t nKV, int64_t D, int64_t Dv, float scale, float* out,
               int32_t* error_flag, cudaStream_t s) {
  if (S * nH > 0)
    attention_kernel<<<static_cast<unsigned>(S * nH), kThreads, 0, s>>>(
        q, k, v, key_offsets, key_ids, nnz, sinks, nH, T, nKV, D, Dv, scale, out, error_flag);
}

}  // namespace deepinfer::cuda::kernels
