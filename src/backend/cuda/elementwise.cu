// RMSNorm, RoPE, SwiGLU, add and weight conversion kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/pdl_config.h"

namespace deepinfer::cuda::kernels {
namespace {

// One block per row; the thread count and the vector width depend only on N (never on M), so a
// row's reduction order — and its bits — do not depend on the batch. Long rows (hyper-connection
// streams, hidden 4096) get more threads and 16-byte loads, so one row is not a long serial chain.
template <int kThreads, int kVec>
__device__ __forceinline__ void rms_norm_row(const float* xr, const float* w, int64_t N, float eps,
                                             float* yr, float* red /* [kThreads/32] */) {
  float ss = 0.f;
  if constexpr (kVec == 4) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (int64_t i = threadIdx.x; i < N / 4; i += kThreads) {
      const float4 v = x4[i];
      ss += v.x * v.x;
      ss += v.y * v.y;
      ss += v.z * v.z;
      ss += v.w * v.w;
    }
  } else {
    for (int64_t i = threadIdx.x; i < N; i += kThreads) ss += xr[i] * xr[i];
  }
  ss = block_sum<kThreads>(ss, red);
  const float inv = rsqrtf(ss / static_cast<float>(N) + eps);
  if constexpr (kVec == 4) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    float4* y4 = reinterpret_cast<float4*>(yr);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    for (int64_t i = threadIdx.x; i < N / 4; i += kThreads) {
      float4 v = x4[i];
      v.x *= inv;
      v.y *= inv;
      v.z *= inv;
      v.w *= inv;
      if (w) {
        const float4 g = w4[i];
        v.x *= g.x;
        v.y *= g.y;
        v.z *= g.z;
        v.w *= g.w;
      }
      y4[i] = v;
    }
  } else {
    for (int64_t i = threadIdx.x; i < N; i += kThreads) {
      const float v = xr[i] * inv;
      yr[i] = w ? v * w[i] : v;
    }
  }
}

template <int kThreads, int kVec>
__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const float* x, const float* w, int64_t N, float eps, float* y) {
  pdl::enter();
  __shared__ float red[kThreads / 32];
  rms_norm_row<kThreads, kVec>(x + blockIdx.x * N, w, N, eps, y + blockIdx.x * N, red);
}

// One block per (token, group of kRopeHeads heads). The rotation of frequency i depends only on
// the token, so its cos/sin are computed once per block (shared memory) and applied to every head
// of the group — the same per-element arithmetic as computing them per head.
constexpr int kRopeHeads = 8;

// The rotated pair (a, b) -> (a·cs − b·sn, b·cs + a·sn), the rounding pinned with intrinsics (the
// compiler could contract either product of a difference of products), so rope_kernel and
// rms_norm_rope_kernel give the same bits.
__device__ __forceinline__ float rope_a(float a, float b, float cs, float sn) {
  return __fmaf_rn(a, cs, -__fmul_rn(b, sn));
}
__device__ __forceinline__ float rope_b(float a, float b, float cs, float sn) {
  return __fmaf_rn(b, cs, __fmul_rn(a, sn));
}

__global__ void rope_kernel(float* x, const int32_t* positions, const float* inv_freq, int64_t nh,
                            int64_t D, int64_t half, bool interleaved, float mscale, bool inverse) {
  pdl::enter();
  __shared__ float cos_s[kRopeMaxHalf], sin_s[kRopeMaxHalf];
  const int64_t s = blockIdx.x;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * kRopeHeads;
  const float p = static_cast<float>(positions[s]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float ang = __fmul_rn(p, inv_freq[i]);  // fp32 product, as the reference does
    float sn, cs;
    sincosf(ang, &sn, &cs);
    cos_s[i] = cs * mscale;
    sin_s[i] = (inverse ? -sn : sn) * mscale;
  }
  __syncthreads();
  const int64_t heads = nh - h0 < kRopeHeads ? nh - h0 : kRopeHeads;
  for (int64_t t = threadIdx.x; t < heads * half; t += blockDim.x) {
    const int64_t h = h0 + t / half, i = t % half;
    const float cs = cos_s[i], sn = sin_s[i];
    float* v = x + (s * nh + h) * D;
    float* pa = interleaved ? v + (D - 2 * half) + 2 * i : v + i;
    float* pb = interleaved ? pa + 1 : v + i + half;
    const float a = *pa, b = *pb;
    *pa = rope_a(a, b, cs, sn);
    *pb = rope_b(a, b, cs, sn);
  }
}

// rms_norm then rope on one head row per block (rms_norm_rope): the arithmetic of
// rms_norm_kernel<256, 1> (the path rms_norm takes for rows narrower than 2048) and of
// rope_kernel, so the result is bitwise that of the two kernels for such rows. The normalised row
// is staged in shared memory (dynamic, D floats) so that a rotated pair may span threads.
constexpr int kNormRopeThreads = 256;

// One head row xr [D] of token position p (rms_norm_rope_kernel's body; row: D floats of shared
// memory, red: [kNormRopeThreads/32]).
__device__ __forceinline__ void rms_norm_rope_row(const float* xr, const float* w, float p,
                                                  const float* inv_freq, int64_t D, int64_t half,
                                                  float eps, bool interleaved, float mscale,
                                                  float* yr, float* row, float* red) {
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += kNormRopeThreads) ss += xr[i] * xr[i];
  ss = block_sum<kNormRopeThreads>(ss, red);
  const float inv = rsqrtf(ss / static_cast<float>(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += kNormRopeThreads) {
    const float v = xr[i] * inv;
    row[i] = w ? v * w[i] : v;
  }
  __syncthreads();
  const int64_t lo = interleaved ? D - 2 * half : 0;  // rotated channels [lo, lo + 2·half)
  for (int64_t i = threadIdx.x; i < D; i += kNormRopeThreads) {
    if (i < lo || i >= lo + 2 * half) yr[i] = row[i];  // not rotated
  }
  for (int64_t i = threadIdx.x; i < half; i += kNormRopeThreads) {
    const float ang = __fmul_rn(p, inv_freq[i]);  // as rope_kernel
    float sn, cs;
    sincosf(ang, &sn, &cs);
    cs = cs * mscale;
    sn = sn * mscale;
    const int64_t ia = interleaved ? lo + 2 * i : i;
    const int64_t ib = interleaved ? ia + 1 : i + half;
    const float a = row[ia], b = row[ib];
    yr[ia] = rope_a(a, b, cs, sn);
    yr[ib] = rope_b(a, b, cs, sn);
  }
}

__global__ void __launch_bounds__(kNormRopeThreads)
    rms_norm_rope_kernel(const float* x, const float* w, const int32_t* positions,
                         const float* inv_freq, int64_t nh, int64_t D, int64_t half, float eps,
                         bool interleaved, float mscale, float* y) {
  pdl::enter();
  extern __shared__ float row[];  // [D]
  __shared__ float red[kNormRopeThreads / 32];
  const int64_t r = blockIdx.x, s = r / nh;
  rms_norm_rope_row(x + r * D, w, static_cast<float>(positions[s]), inv_freq, D, half, eps,
                    interleaved, mscale, y + r * D, row, red);
}

// rms_norm of the rows of a [Ma, Na] with rms_norm_kernel<256, 1>'s arithmetic (blocks 0 … Ma−1)
// and rms_norm_rope of the head rows of b [S, nh, D] (blocks Ma …): two independent norms of the
// attention projections in one launch, each row bitwise its own kernel's.
static_assert(kNormRopeThreads == 256, "the scalar rms_norm kernel's block");
__global__ void __launch_bounds__(kNormRopeThreads)
    rms_norm_and_rope_kernel(const float* a, const float* wa, int64_t Ma, int64_t Na, float* ya,
                             const float* b, const float* wb, const int32_t* positions,
                             const float* inv_freq, int64_t nh, int64_t D, int64_t half, float eps,
                             bool interleaved, float mscale, float* yb) {
  pdl::enter();
  extern __shared__ float row[];  // [D]
  __shared__ float red[kNormRopeThreads / 32];
  const int64_t blk = blockIdx.x;
  if (blk < Ma) {
    rms_norm_row<kNormRopeThreads, 1>(a + blk * Na, wa, Na, eps, ya + blk * Na, red);
    return;
  }
  const int64_t r = blk - Ma, s = r / nh;
  rms_norm_rope_row(b + r * D, wb, static_cast<float>(positions[s]), inv_freq, D, half, eps,
                    interleaved, mscale, yb + r * D, row, red);
}

__global__ void swiglu_kernel(const float* gu, int64_t M, int64_t I, float limit, float* out) {
  pdl::enter();
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
  pdl::enter();
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

bool rms_norm_scalar_rows(const float* x, const float* w, const float* y, int64_t N) {
  const auto a = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool aligned = a(x) && a(y) && (w == nullptr || a(w));
  return !(N % 4 == 0 && aligned && N >= 2048);
}

void rms_norm(const float* x, const float* w, int64_t M, int64_t N, float eps, float* y, cudaStream_t s) {
  if (M <= 0) return;
  const auto grid = static_cast<unsigned>(M);
  // The vector path needs N % 4 == 0 and 16-byte alignment of every row; its order differs
  // from the scalar path's, so the choice is a function of N and the pointers only.
  if (rms_norm_scalar_rows(x, w, y, N))
    pdl::launch(rms_norm_kernel<256, 1>, grid, 256, 0, s, pdl::small_kernels(), x, w, N, eps, y);
  else if (N >= 8192)
    pdl::launch(rms_norm_kernel<1024, 4>, grid, 1024, 0, s, pdl::small_kernels(), x, w, N, eps, y);
  else
    pdl::launch(rms_norm_kernel<512, 4>, grid, 512, 0, s, pdl::small_kernels(), x, w, N, eps, y);
}

void rope(float* x, const int32_t* positions, const float* inv_freq, int64_t S, int64_t nh,
          int64_t D, int64_t half, bool interleaved_trailing, float mscale, bool inverse,
          cudaStream_t s) {
  if (S <= 0 || half <= 0 || nh <= 0) return;
  const dim3 grid(static_cast<unsigned>(S), static_cast<unsigned>((nh + kRopeHeads - 1) / kRopeHeads));
  pdl::launch(rope_kernel, grid, 128, 0, s, pdl::small_kernels(), x, positions, inv_freq, nh, D,
              half, interleaved_trailing, mscale, inverse);
}

bool rms_norm_rope_supported(int64_t D) { return D > 0 && D < 2048; }

void rms_norm_rope(const float* x, const float* w, const int32_t* positions, const float* inv_freq,
                   int64_t S, int64_t nh, int64_t D, int64_t half, float eps,
                   bool interleaved_trailing, float mscale, float* y, cudaStream_t s) {
  if (S * nh <= 0 || D <= 0) return;
  pdl::launch(rms_norm_rope_kernel, static_cast<unsigned>(S * nh), kNormRopeThreads,
              static_cast<size_t>(D) * sizeof(float), s, pdl::small_kernels(), x, w, positions,
              inv_freq, nh, D, half, eps, interleaved_trailing, mscale, y);
}

void rms_norm_and_rope(const float* a, const float* wa, int64_t Ma, int64_t Na, float* ya,
                       const float* b, const float* wb, const int32_t* positions,
                       const float* inv_freq, int64_t S, int64_t nh, int64_t D, int64_t half,
                       float eps, bool interleaved_trailing, float mscale, float* yb,
                       cudaStream_t s) {
  const int64_t blocks = Ma + S * nh;
  if (blocks <= 0) return;
  pdl::launch(rms_norm_and_rope_kernel, static_cast<unsigned>(blocks), kNormRopeThreads,
              static_cast<size_t>(D) * sizeof(float), s, pdl::small_kernels(), a, wa, Ma, Na, ya, b,
              wb, positions, inv_freq, nh, D, half, eps, interleaved_trailing, mscale, yb);
}

void swiglu(const float* gate_up, int64_t M, int64_t I, float limit, float* out, cudaStream_t s) {
  if (M * I > 0)
    pdl::launch(swiglu_kernel, grid_for(M * I, 256), 256, 0, s, pdl::small_kernels(), gate_up, M, I,
                limit, out);
}

void add(const float* a, const float* b, int64_t n, float* out, cudaStream_t s) {
  if (n > 0)
    pdl::launch(add_kernel, grid_for(n, 256), 256, 0, s, pdl::small_kernels(), a, b, n, out);
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
    case kErrTokenIds:
      return "scatter_ids / gather_ids: an index outside its source or destination";
  }
  return "unknown device error";
}

}  // namespace deepinfer::cuda::kernels
