// RMSNorm, RoPE, SwiGLU, add and weight conversion kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda::kernels {
namespace {

constexpr int kNormThreads = 256;

// One block per row: the reduction order depends only on N (batch invariant).
__global__ void rms_norm_kernel(const float* x, const float* w, int64_t N, float eps, float* y) {
  __shared__ float red[kNormThreads / 32];
  const float* xr = x + blockIdx.x * N;
  float* yr = y + blockIdx.x * N;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < N; i += kNormThreads) ss += xr[i] * xr[i];
  ss = block_sum<kNormThreads>(ss, red);
  const float inv = rsqrtf(ss / static_cast<float>(N) + eps);
  for (int64_t i = threadIdx.x; i < N; i += kNormThreads) {
    const float v = xr[i] * inv;
    yr[i] = w ? v * w[i] : v;
  }
}

__global__ void rope_kernel(float* x, const int32_t* positions, const float* inv_freq, int64_t nh,
                            int64_t D, int64_t half, bool interleaved, float mscale, bool inverse) {
  const int64_t s = blockIdx.x;
  const float p = static_cast<float>(positions[s]);
  for (int64_t t = threadIdx.x; t < nh * half; t += blockDim.x) {
    const int64_t h = t / half, i = t % half;
    const float ang = __fmul_rn(p, inv_freq[i]);  // fp32 product, as the reference does
    float sn, cs;
    sincosf(ang, &sn, &cs);
    cs *= mscale;
    sn = (inverse ? -sn : sn) * mscale;
    float* v = x + (s * nh + h) * D;
    float* pa = interleaved ? v + (D - 2 * half) + 2 * i : v + i;
    float* pb = interleaved ? pa + 1 : v + i + half;
    const float a = *pa, b = *pb;
    *pa = a * cs - b * sn;
    *pb = b * cs + a * sn;
  }
}

__global__ void swiglu_kernel(const float* gu, int64_t M, int64_t I, float limit, float* out) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= M * I) return;
  const int64_t m = t / I, i = t % I;
  float g = gu[m * 2 * I + i], u = gu[m * 2 * I + I + i];
  if (limit > 0.f) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
  }
  out[t] = (g / (1.f + expf(-g))) * u;
}

__global__ void add_kernel(const float* a, const float* b, int64_t n, float* out) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t < n) out[t] = a[t] + b[t];
}

__global__ void to_f32_kernel(const void* in, int dtype, int64_t n, float* out) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= n) return;
  if (dtype == 0) out[t] = static_cast<const float*>(in)[t];
  else if (dtype == 1) out[t] = __bfloat162float(static_cast<const __nv_bfloat16*>(in)[t]);
  else out[t] = __half2float(static_cast<const __half*>(in)[t]);
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t M, int64_t N, float eps, float* y,
              cudaStream_t s) {
  if (M > 0) rms_norm_kernel<<<static_cast<unsigned>(M), kNormThreads, 0, s>>>(x, w, N, eps, y);
}

void rope(float* x, const int32_t* positions, const float* inv_freq, int64_t S, int64_t nh,
          int64_t D, int64_t half, bool interleaved_trailing, float mscale, bool inverse,
          cudaStream_t s) {
  if (S > 0 && half > 0)
    rope_kernel<<<static_cast<unsigned>(S), 128, 0, s>>>(x, positions, inv_freq, nh, D, half,
                                                         interleaved_trailing, mscale, inverse);
}

void swiglu(const float* gate_up, int64_t M, int64_t I, float limit, float* out, cudaStream_t s) {
  if (M * I > 0) swiglu_kernel<<<grid_for(M * I, 256), 256, 0, s>>>(gate_up, M, I, limit, out);
}

void add(const float* a, const float* b, int64_t n, float* out, cudaStream_t s) {
  if (n > 0) add_kernel<<<grid_for(n, 256), 256, 0, s>>>(a, b, n, out);
}

void to_f32(const void* in, int dtype, int64_t n, float* out, cudaStream_t s) {
  if (n > 0) to_f32_kernel<<<grid_for(n, 256), 256, 0, s>>>(in, dtype, n, out);
}

const char* error_code_name(int32_t code) {
  switch (code) {
    case kErrNone: return "none";
    case kErrEmbeddingId: return "embedding: token id outside the table";
    case kErrGatherId: return "gather_rows: row id outside the source";
    case kErrScatterId: return "scatter_add_rows: row id outside the output";
    case kErrHashExpertId: return "moe_route: hash expert id outside [0, E)";
    case kErrKeyId: return "attention: key id outside [0, T)";
    case kErrKeyOffsets: return "attention: key_offsets not non-decreasing within [0, nnz]";
    case kErrIndexerKeys: return "indexer_scores: a row's key_start + visible outside the keys";
    case kErrPlaceIds: return "place_ids: a pick is -1 or a row overruns dst";
  }
  return "unknown device error";
}

}  // namespace deepinfer::cuda::kernels
