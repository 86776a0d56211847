// Compressor slot assembly on the device (semantics: backend.h compressor_slots).
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/pdl_config.h"

namespace deepinfer::cuda::kernels {

namespace {

__global__ void slots_kernel(const float* kv, const float* gate, const float* ape,
                             const float* overlap_kv, const float* overlap_gate, int64_t n,
                             int64_t m, int64_t coff, int64_t dw, float* values, float* scores) {
  pdl::enter();
  const int64_t slots = coff * m, cd = coff * dw;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * slots * dw) return;
  const int64_t c = idx % dw, l = (idx / dw) % slots, i = idx / (dw * slots);
  float v, z;
  if (coff == 1) {
    v = kv[(i * m + l) * cd + c];
    z = gate[(i * m + l) * cd + c] + ape[l * cd + c];
  } else if (l >= m) {  // b-half of window i
    const int64_t j = l - m;
    v = kv[(i * m + j) * cd + dw + c];
    z = gate[(i * m + j) * cd + dw + c] + ape[j * cd + dw + c];
  } else if (i > 0) {   // a-half of window i-1
    v = kv[((i - 1) * m + l) * cd + c];
    z = gate[((i - 1) * m + l) * cd + c] + ape[l * cd + c];
  } else if (overlap_kv != nullptr) {
    v = overlap_kv[l * dw + c];
    z = overlap_gate[l * dw + c];
  } else {
    v = 0.f;
    z = -INFINITY;
  }
  values[idx] = v;
  scores[idx] = z;
}

__global__ void next_overlap_kernel(const float* kv, const float* gate, const float* ape,
                                    int64_t n, int64_t m, int64_t dw, float* next_kv,
                                    float* next_gate) {
  pdl::enter();
  const int64_t cd = 2 * dw;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= m * dw) return;
  const int64_t c = idx % dw, j = idx / dw;
  next_kv[idx] = kv[((n - 1) * m + j) * cd + c];
  next_gate[idx] = gate[((n - 1) * m + j) * cd + c] + ape[j * cd + c];
}

}  // namespace

void compressor_slots(const float* kv, const float* gate, const float* ape,
                      const float* overlap_kv, const float* overlap_gate, int64_t n, int64_t m,
                      int64_t coff, int64_t d, float* values, float* scores, float* next_kv,
                      float* next_gate, cudaStream_t s) {
  const int64_t total = n * coff * m * d;
  if (total > 0)
    pdl::launch(slots_kernel, grid_for(total, 256), 256, 0, s, pdl::small_kernels(), kv, gate, ape,
                overlap_kv, overlap_gate, n, m, coff, d, values, scores);
  if (next_kv != nullptr && n > 0)  // after the slots: may alias the overlap inputs
    pdl::launch(next_overlap_kernel, grid_for(m * d, 256), 256, 0, s, pdl::small_kernels(), kv,
                gate, ape, n, m, d, next_kv, next_gate);
}

}  // namespace deepinfer::cuda::kernels
