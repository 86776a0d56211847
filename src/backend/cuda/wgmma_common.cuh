// Warpgroup-MMA (wgmma, sm_90a) pieces shared by the kernels that use it (attention_x4.cu through
// attention_wgmma.cuh; skinny_wg.cu): the operand descriptor of a 128-byte-swizzled shared-memory
// tile (start >> 4, LBO >> 4 at bit 16, SBO >> 4 at bit 32, 128-byte swizzle = 1 at bit 62; an
// atom is rows of 128 bytes, 16-byte chunk c of row r stored at c ^ (r & 7), 8 rows = 1024
// bytes), fences, commit / wait, and the register pins around asynchronous operands.
// C++17, device code only.
#pragma once

#include <cstdint>

namespace deepinfer::cuda::kernels::wgmma {

__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t{1} << 62) | (static_cast<uint64_t>((sbo >> 4) & 0x3fff) << 32) |
         (static_cast<uint64_t>((lbo >> 4) & 0x3fff) << 16) |
         static_cast<uint64_t>((addr >> 4) & 0x3fff);
}
__device__ __forceinline__ void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Pins registers after a wgmma wait (their reads may not move above it) or before a wgmma; for
// A operands in registers, keeps them allocated until the wait that retires their wgmma.
template <int N>
__device__ __forceinline__ void reg_fence(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void reg_fence(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

}  // namespace deepinfer::cuda::kernels::wgmma
