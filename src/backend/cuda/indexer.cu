// Lightning Indexer scores and the top-k selection (deepseek-v4.md §5.5). Top-k sorts each row
// with CUB's stable segmented radix sort (descending): among equal scores the input order, i.e.
// the lower entry index, wins — the engine's tie rule on every backend.
#include <cstdint>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/pdl_config.h"

namespace deepinfer::cuda::kernels {
namespace {

// Row s's keys (keys + b_s·cI) or null after flagging a row that reads outside them.
__device__ __forceinline__ const float* row_keys(const float* keys, const int32_t* visible,
                                                 const int32_t* key_start, int64_t s, int64_t T,
                                                 int64_t Tk, int64_t cI, int32_t* error_flag) {
  const int64_t b = key_start ? key_start[s] : 0, vis = visible[s];
  if (b < 0 || vis > T || b + (vis > 0 ? vis : 0) > Tk) {
    set_error(error_flag, kErrIndexerKeys);
    return nullptr;
  }
  return keys + b * cI;
}

__global__ void indexer_scores_kernel(const float* q, const float* w, const float* keys_all,
                                      const int32_t* visible, const int32_t* key_start,
                                      int64_t S, int64_t nI, int64_t cI, int64_t T, int64_t Tk,
                                      float wscale, float dscale, float* out,
                                      int32_t* error_flag) {
  pdl::enter();
  const int64_t t_ = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t_ >= S * T) return;
  const int64_t s = t_ / T, t = t_ % T;
  const float* keys = row_keys(keys_all, visible, key_start, s, T, Tk, cI, error_flag);
  if (keys == nullptr || t >= visible[s]) {
    out[t_] = -INFINITY;
    return;
  }
  const float* kt = keys + t * cI;
  float score = 0.f;
  for (int64_t h = 0; h < nI; ++h) {
    const float* qh = q + (s * nI + h) * cI;
    float dot = 0.f;
    for (int64_t c = 0; c < cI; ++c) dot += qh[c] * kt[c];
    score += (w[s * nI + h] * wscale) * fmaxf(dot, 0.f) * dscale;
  }
  out[t_] = score;
}

// The same arithmetic (per head a dot over c ascending, then the heads in order), faster: a block
// takes one query row s and kKeysPerBlock keys (one per thread); q[s] sits in shared memory and
// every thread keeps one accumulator per head (nI <= kMaxIdxHeads), so the 64 head dots of a key
// run side by side instead of one after another.
constexpr int kMaxIdxHeads = 64;
constexpr int kKeysPerBlock = 64;
constexpr int kCChunk = 16;

__global__ void __launch_bounds__(kKeysPerBlock)
indexer_scores_fast_kernel(const float* __restrict__ q, const float* __restrict__ w,
                           const float* __restrict__ keys_all, const int32_t* visible,
                           const int32_t* key_start, int64_t nI, int64_t cI, int64_t T,
                           int64_t Tk, float wscale, float dscale, float* out,
                           int32_t* error_flag) {
  pdl::enter();
  extern __shared__ float qs[];  // [nI][cI]
  const int64_t tiles = (T + kKeysPerBlock - 1) / kKeysPerBlock;
  const int64_t s = blockIdx.x / tiles;
  const int64_t t = (blockIdx.x % tiles) * kKeysPerBlock + threadIdx.x;
  for (int64_t i = threadIdx.x; i < nI * cI; i += kKeysPerBlock) qs[i] = q[s * nI * cI + i];
  __syncthreads();
  if (t >= T) return;
  const float* keys = row_keys(keys_all, visible, key_start, s, T, Tk, cI, error_flag);
  if (keys == nullptr || t >= visible[s]) {
    out[s * T + t] = -INFINITY;
    return;
  }
  const float* kt = keys + t * cI;
  float dot[kMaxIdxHeads];
#pragma unroll
  for (int h = 0; h < kMaxIdxHeads; ++h) dot[h] = 0.f;
  for (int64_t c0 = 0; c0 < cI; c0 += kCChunk) {
    float kr[kCChunk];
#pragma unroll
    for (int cc = 0; cc < kCChunk; ++cc) kr[cc] = c0 + cc < cI ? kt[c0 + cc] : 0.f;
#pragma unroll
    for (int h = 0; h < kMaxIdxHeads; ++h) {
      if (h < nI) {
        const float* qh = qs + h * cI + c0;
#pragma unroll
        for (int cc = 0; cc < kCChunk; ++cc)
          if (c0 + cc < cI) dot[h] += qh[cc] * kr[cc];
      }
    }
  }
  float score = 0.f;
#pragma unroll
  for (int h = 0; h < kMaxIdxHeads; ++h)
    if (h < nI) score += (w[s * nI + h] * wscale) * fmaxf(dot[h], 0.f) * dscale;
  out[s * T + t] = score;
}

// The decode/prefill workhorse: a block of 4 warps takes one query row and 32 keys (lane = key);
// warp w owns heads [w·hpw, (w+1)·hpw). A lane reads its key 16 bytes at a time and applies each
// to its hpw head dots (q from shared memory, broadcast), so a key is read once per warp and each
// q load feeds 4 FMAs. Per head the dot runs over c ascending as above; the score sums the heads
// of each warp in order, then the four warp partials in warp order.
constexpr int kIdxWarps = 4;
constexpr int kIdxHeadsPerWarp = kMaxIdxHeads / kIdxWarps;  // 16

__global__ void __launch_bounds__(kIdxWarps * 32)
indexer_scores_v2_kernel(const float* __restrict__ q, const float* __restrict__ w,
                         const float* __restrict__ keys_all, const int32_t* visible,
                         const int32_t* key_start, int64_t nI, int64_t cI, int64_t T, int64_t Tk,
                         float wscale, float dscale, float* out, int32_t* error_flag) {
  pdl::enter();
  extern __shared__ float qs[];  // [nI][cI]
  __shared__ float part[kIdxWarps][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tiles = (T + 31) / 32;
  const int64_t s = blockIdx.x / tiles;
  const int64_t t = (blockIdx.x % tiles) * 32 + lane;
  for (int64_t i = threadIdx.x; i < nI * cI / 4; i += kIdxWarps * 32)
    reinterpret_cast<float4*>(qs)[i] = reinterpret_cast<const float4*>(q + s * nI * cI)[i];
  __syncthreads();
  const float* keys = row_keys(keys_all, visible, key_start, s, T, Tk, cI, error_flag);
  const bool live = t < T && keys != nullptr && t < visible[s];
  const int hpw = static_cast<int>((nI + kIdxWarps - 1) / kIdxWarps);
  const int h0 = warp * hpw;
  float dot[kIdxHeadsPerWarp];
#pragma unroll
  for (int i = 0; i < kIdxHeadsPerWarp; ++i) dot[i] = 0.f;
  if (live) {
    const float4* kt = reinterpret_cast<const float4*>(keys + t * cI);
    for (int64_t c4 = 0; c4 < cI / 4; ++c4) {
      const float4 kv = kt[c4];
#pragma unroll
      for (int i = 0; i < kIdxHeadsPerWarp; ++i) {
        if (i < hpw && h0 + i < nI) {
          const float4 qv = reinterpret_cast<const float4*>(qs + (h0 + i) * cI)[c4];
          dot[i] += qv.x * kv.x;
          dot[i] += qv.y * kv.y;
          dot[i] += qv.z * kv.z;
          dot[i] += qv.w * kv.w;
        }
      }
    }
  }
  float score = 0.f;
#pragma unroll
  for (int i = 0; i < kIdxHeadsPerWarp; ++i)
    if (i < hpw && h0 + i < nI) score += (w[s * nI + h0 + i] * wscale) * fmaxf(dot[i], 0.f) * dscale;
  part[warp][lane] = score;
  __syncthreads();
  if (warp == 0 && t < T) {
    float total = part[0][lane];
    for (int ww = 1; ww < kIdxWarps; ++ww) total += part[ww][lane];
    out[s * T + t] = live ? total : -INFINITY;
  }
}

// Prepares the sort: keys with -0 folded into +0 (the radix order would put -0 below +0, while
// the tie rule treats them as equal), values = entry index within the row, segment offsets.
__global__ void prepare_rows_kernel(const float* scores, float* keys, int32_t* vals,
                                    int32_t* offsets, int64_t S, int64_t T) {
  pdl::enter();
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t < S * T) {
    keys[t] = scores[t] + 0.0f;
    vals[t] = static_cast<int32_t>(t % T);
  }
  if (t <= S) offsets[t] = static_cast<int32_t>(t * T);
}

__global__ void topk_pick_kernel(const float* sorted_keys, const int32_t* sorted_vals, int64_t S,
                                 int64_t T, int64_t k, int32_t* ids) {
  pdl::enter();
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= S * k) return;
  const int64_t s = t / k, j = t % k;
  if (j >= T || sorted_keys[s * T + j] == -INFINITY) {
    ids[t] = -1;
    return;
  }
  ids[t] = sorted_vals[s * T + j];
}

// Token ids that stay on the device (backend.h scatter_ids / gather_ids).
__global__ void scatter_ids_kernel(const int32_t* src, int64_t m, const int32_t* map, int64_t n,
                                   int32_t* dst, int64_t d, int32_t* error_flag) {
  pdl::enter();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t from = map[2 * i], to = map[2 * i + 1];
  if (from < 0 || from >= m || to < 0 || to >= d) {
    set_error(error_flag, kErrTokenIds);
    return;
  }
  dst[to] = src[from];
}

__global__ void gather_ids_kernel(const int32_t* table, int64_t V, int64_t C, const int32_t* ids,
                                  int64_t S, int32_t* out, int32_t* error_flag) {
  pdl::enter();
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= S * C) return;
  const int64_t s = t / C, c = t % C;
  const int64_t id = ids[s];
  if (id < 0 || id >= V) {
    set_error(error_flag, kErrTokenIds);
    out[t] = -1;
    return;
  }
  out[t] = table[id * C + c];
}

__global__ void place_ids_kernel(const int32_t* src, int64_t S, int64_t k, const int32_t* layout,
                                 int32_t* dst, int64_t n, int32_t* error_flag) {
  pdl::enter();
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= S * k) return;
  const int64_t s = t / k, j = t % k;
  const int64_t start = layout[3 * s], count = layout[3 * s + 1], add = layout[3 * s + 2];
  if (j >= count) return;
  const int32_t v = src[t];
  if (count > k || start < 0 || start + count > n || v < 0) {
    set_error(error_flag, kErrPlaceIds);
    if (start >= 0 && start + j < n) dst[start + j] = -1;
    return;
  }
  dst[start + j] = static_cast<int32_t>(v + add);
}

// Top-k of rows with T <= kSortMax scores: one block per row sorts (score desc, index asc) pairs
// in shared memory with a bitonic network, -0 folded into +0 and the padding (score −inf, index
// INT_MAX) sorting last — the same order as the stable radix sort below, without its passes
// over global memory.
constexpr int kSortMax = 4096;
constexpr int kSortThreads = 1024;

__device__ __forceinline__ bool before(float a, int32_t ia, float b, int32_t ib) {
  return a > b || (a == b && ia < ib);
}

__global__ void __launch_bounds__(kSortThreads)
topk_bitonic_kernel(const float* scores, int64_t T, int64_t k, int P, int32_t* ids) {
  pdl::enter();
  __shared__ float key[kSortMax];
  __shared__ int32_t idx[kSortMax];
  const int64_t s = blockIdx.x;
  for (int i = threadIdx.x; i < P; i += kSortThreads) {
    key[i] = i < T ? scores[s * T + i] + 0.0f : -INFINITY;
    idx[i] = i < T ? i : 0x7FFFFFFF;
  }
  __syncthreads();
  for (int size = 2; size <= P; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < P / 2; t += kSortThreads) {
        const int lo = 2 * t - (t & (stride - 1));  // pair (lo, lo + stride)
        const int hi = lo + stride;
        const bool up = (lo & size) == 0;  // this run sorts in "before" order
        const float a = key[lo], b = key[hi];
        const int32_t ia = idx[lo], ib = idx[hi];
        if (before(b, ib, a, ia) == up) {
          key[lo] = b;
          key[hi] = a;
          idx[lo] = ib;
          idx[hi] = ia;
        }
      }
      __syncthreads();
    }
  }
  for (int64_t j = threadIdx.x; j < k; j += kSortThreads)
    ids[s * k + j] = (j < T && key[j] != -INFINITY) ? idx[j] : -1;
}

struct TopkLayout {
  size_t keys_in, keys_out, vals_in, vals_out, offsets, temp, total;
};

TopkLayout topk_layout(int64_t S, int64_t T) {
  auto up = [](size_t b) { return (b + 255) / 256 * 256; };
  TopkLayout l{};
  const size_t n = static_cast<size_t>(S * T);
  size_t temp = 0;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, temp, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(n),
      static_cast<int>(S), static_cast<const int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr));
  l.keys_in = 0;
  l.keys_out = l.keys_in + up(n * sizeof(float));
  l.vals_in = l.keys_out + up(n * sizeof(float));
  l.vals_out = l.vals_in + up(n * sizeof(int32_t));
  l.offsets = l.vals_out + up(n * sizeof(int32_t));
  l.temp = l.offsets + up((S + 1) * sizeof(int32_t));
  l.total = l.temp + up(temp);
  return l;
}

}  // namespace

void indexer_scores(const float* q, const float* weights, const float* keys,
                    const int32_t* visible, const int32_t* key_start, int64_t S, int64_t nI,
                    int64_t cI, int64_t T, int64_t Tk, float weight_scale, float dot_scale,
                    float* out, int32_t* error_flag, cudaStream_t s) {
  if (S * T <= 0) return;
  const size_t smem = sizeof(float) * nI * cI;
  const bool aligned = cI % 4 == 0 && reinterpret_cast<uintptr_t>(q) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(keys) % 16 == 0;
  if (nI <= kMaxIdxHeads && smem <= 48 * 1024 && aligned) {
    const int64_t tiles = (T + 31) / 32;
    pdl::launch(indexer_scores_v2_kernel, static_cast<unsigned>(S * tiles), kIdxWarps * 32, smem, s,
                pdl::small_kernels(), q, weights, keys, visible, key_start, nI, cI, T, Tk,
                weight_scale, dot_scale, out, error_flag);
    return;
  }
  if (nI <= kMaxIdxHeads && smem <= 48 * 1024) {
    const int64_t tiles = (T + kKeysPerBlock - 1) / kKeysPerBlock;
    pdl::launch(indexer_scores_fast_kernel, static_cast<unsigned>(S * tiles), kKeysPerBlock, smem,
                s, pdl::small_kernels(), q, weights, keys, visible, key_start, nI, cI, T, Tk,
                weight_scale, dot_scale, out, error_flag);
    return;
  }
  pdl::launch(indexer_scores_kernel, grid_for(S * T, 128), 128, 0, s, pdl::small_kernels(), q,
              weights, keys, visible, key_start, S, nI, cI, T, Tk, weight_scale, dot_scale, out,
              error_flag);
}

void place_ids(const int32_t* src, int64_t S, int64_t k, const int32_t* layout, int32_t* dst,
               int64_t n, int32_t* error_flag, cudaStream_t s) {
  if (S * k > 0)
    pdl::launch(place_ids_kernel, grid_for(S * k, 256), 256, 0, s, pdl::small_kernels(), src, S, k,
                layout, dst, n, error_flag);
}

void scatter_ids(const int32_t* src, int64_t m, const int32_t* map, int64_t n, int32_t* dst,
                 int64_t d, int32_t* error_flag, cudaStream_t s) {
  if (n > 0)
    pdl::launch(scatter_ids_kernel, grid_for(n, 256), 256, 0, s, pdl::small_kernels(), src, m, map,
                n, dst, d, error_flag);
}

void gather_ids(const int32_t* table, int64_t V, int64_t C, const int32_t* ids, int64_t S,
                int32_t* out, int32_t* error_flag, cudaStream_t s) {
  if (S * C > 0)
    pdl::launch(gather_ids_kernel, grid_for(S * C, 256), 256, 0, s, pdl::small_kernels(), table, V,
                C, ids, S, out, error_flag);
}

uint64_t topk_workspace_bytes(int64_t S, int64_t T) { return topk_layout(S, T).total; }

void topk(const float* scores, int64_t S, int64_t T, int64_t k, int32_t* ids, void* workspace,
          cudaStream_t s) {
  if (S * k == 0) return;
  if (T > 0 && T <= kSortMax) {
    int P = 2;
    while (P < T) P <<= 1;
    pdl::launch(topk_bitonic_kernel, static_cast<unsigned>(S), kSortThreads, 0, s,
                pdl::small_kernels(), scores, T, k, P, ids);
    return;
  }
  char* ws = static_cast<char*>(workspace);
  const TopkLayout l = topk_layout(S, T);
  float* keys_in = reinterpret_cast<float*>(ws + l.keys_in);
  float* keys_out = reinterpret_cast<float*>(ws + l.keys_out);
  int32_t* vals_in = reinterpret_cast<int32_t*>(ws + l.vals_in);
  int32_t* vals_out = reinterpret_cast<int32_t*>(ws + l.vals_out);
  int32_t* offsets = reinterpret_cast<int32_t*>(ws + l.offsets);
  if (T > 0) {
    pdl::launch(prepare_rows_kernel, grid_for(S * T + 1, 256), 256, 0, s, pdl::small_kernels(),
                scores, keys_in, vals_in, offsets, S, T);
    size_t temp = l.total - l.temp;
    cub::DeviceSegmentedRadixSort::SortPairsDescending(
        ws + l.temp, temp, keys_in, keys_out, vals_in, vals_out, static_cast<int>(S * T),
        static_cast<int>(S), offsets, offsets + 1, 0, 32, s);
  }
  pdl::launch(topk_pick_kernel, grid_for(S * k, 256), 256, 0, s, pdl::small_kernels(), keys_out,
              vals_out, S, T, k, ids);
}

}  // namespace deepinfer::cuda::kernels
