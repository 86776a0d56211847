// Pieces shared by the ring-streaming kernels with linear_tc's bits (linear_tc_small.cuh,
// linear_tc_wa.cuh): mbarrier / bulk-copy wrappers, linear_tc's x split into bf16 terms for 8
// consecutive k, and linear_tc's in-order split reduction with griddepcontrol.wait (moved here
// verbatim from linear_tc_small.cuh in session 9).
#pragma once

#include "backend/cuda/linear_tc.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::cuda::kernels::tcr {

constexpr int kTerms = 3;  // bf16 terms of x (linear_tc's kTerms)

// ---- mbarrier / bulk copy (PTX ISA 8.0, sm_90) --------------------------------------------------

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(tc::smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(tc::smem_u32(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(tc::smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "LAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra LAB_WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(tc::smem_u32(bar)),
      "r"(parity)
      : "memory");
}
// [src, src + bytes) → shared dst; bytes a multiple of 16, both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          tc::smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(tc::smem_u32(bar))
      : "memory");
}

// The bulk-copy slot ring of the two-warpgroup wgmma kernels (skinny_wg.cu, linear_tc_wg.cu):
// kSlots shared-memory slots of kSlotBytes, 1024-byte aligned (wgmma's 128-byte swizzle), each
// with an mbarrier and a release count in the 1024 bytes before the first slot. Chunk i of the
// CTA's slice (src + i · kSlotBytes in global memory) goes to slot i % kSlots; when both
// warpgroups have released chunk c, the second to release it copies chunk c + kSlots there.
// Dynamic shared memory: 2048 + kSlots · kSlotBytes bytes (barriers and alignment).
template <int kSlots, int kSlotBytes>
struct SlotRing {
  uint8_t* base;
  uint64_t* full;
  int* released;                 // per slot: warpgroup releases so far
  const uint8_t* src = nullptr;  // chunk 0 of the CTA's slice (set before the first copy)

  // Every thread of the CTA (thread 0 initialises the barriers; one __syncthreads).
  __device__ __forceinline__ explicit SlotRing(uint8_t* smem) {
    const uint32_t raw = tc::smem_u32(smem);
    base = smem + (((raw + 1023u) & ~1023u) - raw) + 1024;
    full = reinterpret_cast<uint64_t*>(base - 1024);
    released = reinterpret_cast<int*>(full + kSlots);
    if (threadIdx.x == 0) {
      for (int s = 0; s < kSlots; ++s) {
        mbar_init(&full[s], 1);
        released[s] = 0;
      }
      mbar_fence_init();
    }
    __syncthreads();
  }
  // One thread: chunk i into slot i % kSlots.
  __device__ __forceinline__ void copy(int i) const {
    const int s = i % kSlots;
    mbar_arrive_expect(&full[s], kSlotBytes);
    bulk_g2s(base + s * kSlotBytes, src + static_cast<int64_t>(i) * kSlotBytes, kSlotBytes,
             &full[s]);
  }
  // One thread, after griddepcontrol.wait: the first min(kSlots, nch) chunks.
  __device__ __forceinline__ void prime(int nch) const {
    for (int i = 0; i < kSlots && i < nch; ++i) copy(i);
  }
  // Waits for chunk i; returns its slot's shared-memory address.
  __device__ __forceinline__ uint32_t wait(int i) const {
    const int s = i % kSlots;
    mbar_wait(&full[s], static_cast<uint32_t>((i / kSlots) & 1));
    return tc::smem_u32(base) + s * kSlotBytes;
  }
  // One thread per warpgroup, once the warpgroup's wgmmas on chunk c have retired.
  __device__ __forceinline__ void release(int c, int nch) const {
    if ((atomicAdd(&released[c % kSlots], 1) & 1) != 0 && c + kSlots < nch)
      copy(c + kSlots);  // the other warpgroup released it before
  }
};

// Arrive on `bar` once every cp.async this thread issued so far has landed (the arrival is not
// counted in advance: the barrier's count includes it).
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(tc::smem_u32(bar)) : "memory");
}

// 8 consecutive fp32 x (k 8q..8q+7 of a stage) → kTerms bf16 terms, each as the uint4 linear_tc
// reads from its term buffer: exactly linear_tc's convert() per element (x_t = bf16_rn(r),
// r −= x_t, a NaN remainder replaced by 0), pairs (k, k+1) packed low / high.
__device__ __forceinline__ void split_terms8(const float4 lo, const float4 hi, uint4 (&t)[kTerms]) {
  float r[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  uint32_t w[kTerms][4];
#pragma unroll
  for (int u = 0; u < kTerms; ++u) {
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(r[2 * p], r[2 * p + 1]);
      w[u][p] = tc::bf16x2_bits(h);
      if (u + 1 < kTerms) {
        const float2 f = __bfloat1622float2(h);
        r[2 * p] -= f.x;
        r[2 * p + 1] -= f.y;
        if (r[2 * p] != r[2 * p]) r[2 * p] = 0.f;  // ±inf x: the remainder inf − inf is not a term
        if (r[2 * p + 1] != r[2 * p + 1]) r[2 * p + 1] = 0.f;
      }
    }
    t[u] = make_uint4(w[u][0], w[u][1], w[u][2], w[u][3]);
  }
}

// The split reduction of linear_tc, linear_tc_small and linear_tc_wa: out[i] = ((ws[0·n + i] +
// ws[1·n + i]) + …), z ascending (the fixed split order; the loads of 8 splits are issued before
// their adds, which stay in order). griddepcontrol.wait first, so it can be launched with PDL
// behind linear_tc_small's / linear_tc_wa's kernels (a no-op in linear_tc's plain launch). A template (one
// instantiation, <0>) so that every .cu may include this header.
template <int kUnused = 0>
__global__ void __launch_bounds__(256) split_reduce_pdl(const float* __restrict__ ws, int64_t splits,
                                                           int64_t n, float* __restrict__ out) {
  pdl::wait();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = 0.f;
  for (int64_t z0 = 0; z0 < splits; z0 += 8) {
    float t[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) t[u] = z0 + u < splits ? __ldg(ws + (z0 + u) * n + i) : 0.f;
#pragma unroll
    for (int u = 0; u < 8; ++u)
      if (z0 + u < splits) v = z0 + u == 0 ? t[u] : v + t[u];
  }
  out[i] = v;
}

// split_reduce_pdl over n outputs (ws [splits][n] → out), a programmatic dependent of the launch
// before it when pdl: the split-sums launch of the ring-streaming kernels.
inline void launch_split_sums(const float* ws, int64_t splits, int64_t n, float* out,
                              cudaStream_t s, bool pdl) {
  pdl::launch(split_reduce_pdl<0>, dim3(grid_for(n, 256)), dim3(256), 0, s, pdl, ws, splits, n,
              out);
}

}  // namespace deepinfer::cuda::kernels::tcr
