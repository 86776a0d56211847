// Many device-to-device copies in one launch (Backend::copy_many): the per-sequence KV rows a
// decode step gathers and writes back, which were one cudaMemcpyAsync each (~4 per sequence and
// layer: 256 calls per step at batch 16 on a 4-layer model).
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/pdl_config.h"

namespace deepinfer::cuda::kernels {
namespace {

// Block (x, y) copies chunk x of pair y; 16-byte words when the pair allows, else 4-byte words.
// A launch's table travels as a kernel parameter (no upload): kCopyManyMax × 24 bytes ≤ 4 KB.
__global__ void copy_many_kernel(CopyManyTable t, int64_t chunk_bytes) {
  pdl::enter();
  const int p = blockIdx.y;
  if (p >= t.n) return;
  const int64_t bytes = t.bytes[p];
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * chunk_bytes;
  if (b0 >= bytes) return;
  const int64_t b1 = b0 + chunk_bytes < bytes ? b0 + chunk_bytes : bytes;
  const char* src = static_cast<const char*>(t.src[p]);
  char* dst = static_cast<char*>(t.dst[p]);
  const bool wide = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) |
                      static_cast<uintptr_t>(bytes)) & 15) == 0;
  if (wide) {
    const int4* s4 = reinterpret_cast<const int4*>(src + b0);
    int4* d4 = reinterpret_cast<int4*>(dst + b0);
    for (int64_t i = threadIdx.x; i < (b1 - b0) / 16; i += blockDim.x) d4[i] = s4[i];
  } else {  // byte counts of F32/I32 tensors: multiples of 4 (checked by the caller)
    const int32_t* s1 = reinterpret_cast<const int32_t*>(src + b0);
    int32_t* d1 = reinterpret_cast<int32_t*>(dst + b0);
    for (int64_t i = threadIdx.x; i < (b1 - b0) / 4; i += blockDim.x) d1[i] = s1[i];
  }
}

}  // namespace

void copy_many(const CopyManyTable& t, cudaStream_t s) {
  if (t.n <= 0) return;
  int64_t longest = 0;
  for (int i = 0; i < t.n; ++i) longest = t.bytes[i] > longest ? t.bytes[i] : longest;
  if (longest == 0) return;
  constexpr int64_t kChunk = 16 * 1024;  // 256 threads × 4 int4 per block
  const int64_t chunks = (longest + kChunk - 1) / kChunk;
  pdl::launch(copy_many_kernel, dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(t.n)),
              256, 0, s, pdl::small_kernels(), t, kChunk);
}

}  // namespace deepinfer::cuda::kernels
