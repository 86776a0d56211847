// Programmatic dependent launch (PDL, Hopper sm_90+): a kernel launched with the attribute
// cudaLaunchAttributeProgrammaticStreamSerialization may start while the previous kernel in its
// stream is still running (once every CTA of that kernel has executed launch_dependents() or
// exited). Until it executes wait() it may only touch memory that no earlier kernel still writes
// or reads: immutable data (weights), which it can load or prefetch there. After wait() every
// earlier kernel has completed and its writes are visible.
//
// The contract of a kernel launched through launch(..., pdl = true):
//  - before wait(): reads of immutable memory only (not the kernel's inputs written by earlier
//    kernels, not its outputs — the caching allocator may hand out memory an earlier kernel still
//    reads); no global writes;
//  - EVERY CTA executes wait() on every path, also one that has no work, before it exits (so the
//    grid's completion implies its predecessors' completion, which a later kernel's wait() relies
//    on transitively);
//  - launch_dependents() (optional, once per CTA is enough) lets the NEXT kernel, if it was
//    launched with PDL, start early; that kernel's own wait() still waits for this grid's full
//    completion, so it can go anywhere after this CTA's last use of scarce resources.
// Without the attribute (pdl = false: a plain launch) wait() and launch_dependents() return at
// once, so the same kernel serves both launches, with the same results.
//
// C++17, header-only: include it from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace deepinfer::cuda::pdl {

// ---- device side -------------------------------------------------------------------------------

// Waits until every prerequisite grid has completed and its memory operations are visible.
__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Signals that the dependent grid may be scheduled once every CTA of this grid has signalled or
// exited (the first call in a CTA counts; later ones have no effect). No memory clobber: it
// orders nothing (the dependent's wait() waits for this whole grid), and in a hot loop a clobber
// would cost registers.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Both at a kernel's entry, before anything else: the form of the small kernels that read
// their inputs at once (nothing before the wait), launched with pdl_config.h small_kernels().
__device__ __forceinline__ void enter() {
  wait();
  launch_dependents();
}

// Asynchronous prefetch of [p, p + bytes) into L2 by the TMA unit (no registers, no completion
// to wait for): p 16-byte aligned, bytes a multiple of 16 (both rounded down here). A hint only.
__device__ __forceinline__ void prefetch_l2_bulk(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  bytes &= ~15u;
  if (bytes == 0 || (reinterpret_cast<uintptr_t>(p) & 15) != 0) return;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Prefetch of every 32-byte sector of [p, p + bytes) into L2 by the `threads` threads of a group
// (t = this thread's index in it), touching only addresses inside the range (any alignment).
__device__ __forceinline__ void prefetch_l2_range(const void* p, int64_t bytes, int t, int threads) {
  const char* b = static_cast<const char*>(p);
  for (int64_t off = 32 * static_cast<int64_t>(t); off < bytes; off += 32 * static_cast<int64_t>(threads))
    asm volatile("prefetch.global.L2 [%0];" ::"l"(b + off));
  if (t == 0 && bytes > 0) asm volatile("prefetch.global.L2 [%0];" ::"l"(b + bytes - 1));
}

// ---- host side ---------------------------------------------------------------------------------

// Launches kernel<<<grid, block, smem, s>>>(args...); with pdl, through cudaLaunchKernelEx with
// programmatic stream serialization allowed. Errors are left for cudaGetLastError (as <<<>>>).
template <typename... KernelArgs, typename... Args>
void launch(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
            bool pdl, Args&&... args) {
  if (!pdl) {
    kernel<<<grid, block, smem, s>>>(std::forward<Args>(args)...);
    return;
  }
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);  // sets the last error too
}

}  // namespace deepinfer::cuda::pdl
