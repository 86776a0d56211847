// Warpgroup-MMA (wgmma, sm_90a) helpers of the split-key attention variants x3 / x4
// (attention_x4.cu, whose header documents the layouts): the wgmma shapes they use; the
// descriptors, fences and waits come from wgmma_common.cuh (an atom is rows of 64 fp16 = 128
// bytes). C++17, device code only.
#pragma once

#include <cstdint>

#include "backend/cuda/attention_fd_common.cuh"
#include "backend/cuda/wgmma_common.cuh"

namespace deepinfer::cuda::kernels {
namespace {

constexpr int kQPlane = kH * kD * 2;          // 65536: one fp16 plane of Q
constexpr int kQAtom = kH * 128;              // 8192: 64 heads × 64 channels
constexpr int kKPlane = kNc * kD * 2;         // 16384: one fp16 plane of a K = V tile
constexpr int kKAtom = kNc * 128;             // 2048: 16 keys × 64 channels

using wgmma::fence_proxy_async;
using wgmma::reg_fence;
using wgmma::wg_commit;
using wgmma::wg_desc;
using wgmma::wg_fence;
using wgmma::wg_wait;

// d += A·B, m64n16k16, A and B K-major in shared memory.
__device__ __forceinline__ void wgmma_s(float (&d)[8], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "l"(a), "l"(b), "r"(1));
}
// d = A·B (scale-d = 0: d's old value is not read, so it is not live before the chain).
__device__ __forceinline__ void wgmma_s_first(float (&d)[8], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]),
        "=f"(d[7])
      : "l"(a), "l"(b), "r"(0));
}
#define X1_S32_ASM                                                                              \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                 \
  "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, "           \
  "p, 1, 1, 0, 0;\n}\n"
#define X1_D16(m)                                                                              \
  m(d[0]), m(d[1]), m(d[2]), m(d[3]), m(d[4]), m(d[5]), m(d[6]), m(d[7]), m(d[8]), m(d[9]),     \
      m(d[10]), m(d[11]), m(d[12]), m(d[13]), m(d[14]), m(d[15])
#define X1_RW16(x) "+f"(x)
#define X1_W16(x) "=f"(x)
// d += A·B, m64n32k16, A and B K-major in shared memory.
__device__ __forceinline__ void wgmma_s32(float (&d)[16], uint64_t a, uint64_t b) {
  asm volatile(X1_S32_ASM : X1_D16(X1_RW16) : "l"(a), "l"(b), "r"(1));
}
// d = A·B (scale-d = 0).
__device__ __forceinline__ void wgmma_s32_first(float (&d)[16], uint64_t a, uint64_t b) {
  asm volatile(X1_S32_ASM : X1_D16(X1_W16) : "l"(a), "l"(b), "r"(0));
}
#undef X1_W16
#undef X1_RW16
#undef X1_D16
#undef X1_S32_ASM
#define X1_D32(m)                                                                              \
  m(d[0]), m(d[1]), m(d[2]), m(d[3]), m(d[4]), m(d[5]), m(d[6]), m(d[7]), m(d[8]), m(d[9]),     \
      m(d[10]), m(d[11]), m(d[12]), m(d[13]), m(d[14]), m(d[15]), m(d[16]), m(d[17]),           \
      m(d[18]), m(d[19]), m(d[20]), m(d[21]), m(d[22]), m(d[23]), m(d[24]), m(d[25]),           \
      m(d[26]), m(d[27]), m(d[28]), m(d[29]), m(d[30]), m(d[31])
#define X1_RW(x) "+f"(x)
#define X1_W(x) "=f"(x)
#define X1_PV_ASM                                                                               \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                 \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                      \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "            \
  "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
// d += A·B, m64n64k16, A in registers, B N-major in shared memory (imm-trans-b = 1).
__device__ __forceinline__ void wgmma_pv(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(X1_PV_ASM
               : X1_D32(X1_RW)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
// d = A·B (scale-d = 0).
__device__ __forceinline__ void wgmma_pv_first(float (&d)[32], const uint32_t (&a)[4],
                                               uint64_t b) {
  asm volatile(X1_PV_ASM
               : X1_D32(X1_W)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(0));
}
#undef X1_PV_ASM
#undef X1_W
#undef X1_RW
#undef X1_D32

// Byte offset of 16-byte chunk `c` (0..7) of row `r` inside a 128-byte-swizzle atom.
__device__ __forceinline__ uint32_t sw128(int r, int c) {
  return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4));
}

}  // namespace
}  // namespace deepinfer::cuda::kernels
