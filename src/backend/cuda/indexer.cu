// Lightning Indexer scores and the top-k selection (deepseek-v4.md §5.5). Top-k sorts each row
// with CUB's stable segmented radix sort (descending): among equal scores the input order, i.e.
// the lower entry index, wins — the engine's tie rule on every backend.
#include <cub/device/device_segmented_radix_sort.cuh>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda::kernels {
namespace {

__global__ void indexer_scores_kernel(const float* q, const float* w, const float* keys,
                                      const int32_t* visible, int64_t S, int64_t nI, int64_t cI,
                                      int64_t T, float wscale, float dscale, float* out) {
  const int64_t t_ = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t_ >= S * T) return;
  const int64_t s = t_ / T, t = t_ % T;
  if (t >= visible[s]) {
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

// Prepares the sort: keys with -0 folded into +0 (the radix order would put -0 below +0, while
// the tie rule treats them as equal), values = entry index within the row, segment offsets.
__global__ void prepare_rows_kernel(const float* scores, float* keys, int32_t* vals,
                                    int32_t* offsets, int64_t S, int64_t T) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t < S * T) {
    keys[t] = scores[t] + 0.0f;
    vals[t] = static_cast<int32_t>(t % T);
  }
  if (t <= S) offsets[t] = static_cast<int32_t>(t * T);
}

__global__ void topk_pick_kernel(const float* sorted_keys, const int32_t* sorted_vals, int64_t S,
                                 int64_t T, int64_t k, int32_t* ids) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= S * k) return;
  const int64_t s = t / k, j = t % k;
  if (j >= T || sorted_keys[s * T + j] == -INFINITY) {
    ids[t] = -1;
    return;
  }
  ids[t] = sorted_vals[s * T + j];
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
                    const int32_t* visible, int64_t S, int64_t nI, int64_t cI, int64_t T,
                    float weight_scale, float dot_scale, float* out, cudaStream_t s) {
  if (S * T > 0)
    indexer_scores_kernel<<<grid_for(S * T, 128), 128, 0, s>>>(q, weights, keys, visible, S, nI,
                                                               cI, T, weight_scale, dot_scale, out);
}

uint64_t topk_workspace_bytes(int64_t S, int64_t T) { return topk_layout(S, T).total; }

void topk(const float* scores, int64_t S, int64_t T, int64_t k, int32_t* ids, void* workspace,
          cudaStream_t s) {
  if (S * k == 0) return;
  char* ws = static_cast<char*>(workspace);
  const TopkLayout l = topk_layout(S, T);
  float* keys_in = reinterpret_cast<float*>(ws + l.keys_in);
  float* keys_out = reinterpret_cast<float*>(ws + l.keys_out);
  int32_t* vals_in = reinterpret_cast<int32_t*>(ws + l.vals_in);
  int32_t* vals_out = reinterpret_cast<int32_t*>(ws + l.vals_out);
  int32_t* offsets = reinterpret_cast<int32_t*>(ws + l.offsets);
  if (T > 0) {
    prepare_rows_kernel<<<grid_for(S * T + 1, 256), 256, 0, s>>>(scores, keys_in, vals_in, offsets,
                                                                 S, T);
    size_t temp = l.total - l.temp;
    cub::DeviceSegmentedRadixSort::SortPairsDescending(
        ws + l.temp, temp, keys_in, keys_out, vals_in, vals_out, static_cast<int>(S * T),
        static_cast<int>(S), offsets, offsets + 1, 0, 32, s);
  }
  topk_pick_kernel<<<grid_for(S * k, 256), 256, 0, s>>>(keys_out, vals_out, S, T, k, ids);
}

}  // namespace deepinfer::cuda::kernels
