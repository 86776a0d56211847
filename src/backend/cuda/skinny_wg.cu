// Session 16 (issue 7): skinny_wg — the default mode's e4m3 dense products at 17..64 token rows
// (DEEPINFER_DENSE_WG; the kernel serves 1..64) on warpgroup MMA. The contract and the arithmetic:
// skinny_wg.h; design and numbers: docs/cuda.md "Session 16: skinny_wg".
//
// Three launches per call, each a programmatic dependent of the one before:
//  1. split_kernel: x [M, G·K] → the B image [G][K/64][NB][128 B] in the workspace: for group j
//     and 64-k chunk c, NB = 8·ceil(3M/8) "columns" (column 3m + p = plane p of token m; the
//     columns past 3M zero) of 64 bf16 each, in the exact order and 128-byte swizzle the
//     product's wgmma reads (below), so the product fills a ring slot with ONE bulk copy;
//  2. product_kernel: a CTA = 2 warpgroups (64 weight rows each), one (group, 128-row tile,
//     k slice) item;
//  3. tcr::split_reduce_pdl when the k split S > 1 (partials [S][M][G·N] summed in slice order).
//
// Product. Weight rows are the A operand (m64, in registers), the B columns the N of
// wgmma.m64nNk16.f32.bf16.bf16 (B K-major in shared memory, 128-byte swizzle).
//  - A: warp w of a warpgroup owns rows 16w..16w+15 of its 64; lane (g = lane / 4, t = lane % 4)
//    loads 16 bytes of rows g and g + 8 per 64-k chunk — its "local" k 16t..16t+15 — and feeds
//    local k (4s, 4s+1) as MMA k (2t, 2t+1) and (4s+2, 4s+3) as (2t+8, 2t+9) in k-step s = 0..3
//    (the m16n8k16 A fragment: a0 = row g, a1 = row g + 8, a2 / a3 the same rows 8 k on; skinny_
//    mma.cuh's permutation). Each code pair → f16x2 (cvt, exact) → f32 × 2^(E − 127) → bf16x2.
//  - B: in k-step s, MMA k κ of a column must hold the x of the same actual k. Chunk-local pair
//    q = k / 2 (32 pairs of a column's 64 k) is stored as 32-bit word u = q / 8 of 16-byte unit
//    v = q % 8 (k-step s = v / 2 reads units 2s, 2s + 1: MMA k 16s..16s+15 of the row), unit v of
//    column c at byte ((v ^ (c & 7)) << 4) — the 128-byte swizzle, columns 128 bytes apart, 8
//    columns = 1024 bytes (the descriptor's SBO), k-step s at +32 bytes.
//  - Pipeline: chunk i is bulk-copied into slot i % kSlots, completion signalled on the slot's
//    "full" mbarrier by transaction bytes. A thread keeps R chunks of weights in flight in
//    registers, converts chunk i into one of two A buffers while chunk i − 1's wgmmas run,
//    issues chunk i's 4 wgmmas, commits and waits for chunk i − 1 (wgmma.wait_group 1). Then the
//    first thread of each warpgroup counts the release of chunk i − 1's slot (a shared-memory
//    atomic); the second warpgroup to release it issues the copy of chunk i − 1 + kSlots there.
//    (No producer warp: a 9th warp would cap every thread at 168 registers.)
//  - Epilogue: the accumulators through shared memory (the ring's bytes), then per (token, row)
//    ((S2 + S1) + S0), rows fastest (coalesced stores).
// PDL: every thread issues its first R weight chunks (immutable) before griddepcontrol.wait;
// the first copies of the B image (the split kernel's output) follow the wait.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda/skinny_mma.cuh"
#include "backend/cuda/skinny_wg.h"
#include "backend/cuda/tc_ring.cuh"
#include "backend/cuda/wgmma_common.cuh"
#include "backend/cuda/x_planes.cuh"

namespace deepinfer::cuda::kernels {
namespace skwg {

using namespace wgmma;

constexpr int kWGs = 2;
constexpr int kThreads = 128 * kWGs;    // 256
constexpr int kRowsPerCta = 64 * kWGs;  // 128
constexpr int kChunkK = 64;
constexpr int kSplitTarget = 264;  // CTAs the k split aims at (2 waves of 132)

struct Args {
  const uint8_t* w = nullptr;      // [G·N, K] e4m3
  const uint8_t* scale = nullptr;  // [ceil(G·N / br), K / 128] ue8m0
  const uint8_t* bimg = nullptr;   // [G][K / 64][NB][128]
  float* out = nullptr;            // S == 1: out [M, ldo]; else the partials [S][M][ldo]
  int64_t ldo = 0;                 // G·N
  int64_t split_stride = 0;        // M·ldo
  int32_t M = 0, N = 0, K = 0, G = 1, br = 128, scols = 0;
  int32_t tiles = 0;  // ceil(N / 128): row tiles per group
  int32_t S = 1;      // k slices
  int32_t nch = 0;    // 64-k chunks per slice (even)
};

using skinny::ldg_nc;  // 16-byte ld.global.nc
using skinny::word;    // word i of a uint4

// ue8m0 E → 2^(E − 127) (0 → 2^-127, 255 → NaN): tc::ue8m0_f32's values, on the 32-bit load
// (kept: this is the code the H200 runs verified; the uint8_t form compiles differently).
__device__ __forceinline__ float ue8m0(uint32_t e) {
  return e == 0xFFu
             ? __int_as_float(0x7FC00000)
             : (e == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(e << 23)));
}
// Two e4m3 codes (low byte → low half) → bf16x2 of code · f (f a power of two).
__device__ __forceinline__ uint32_t cvt2(uint32_t two, float f) {
  uint32_t h;
  asm("{\n\t.reg .b16 a;\n\tcvt.u16.u32 a, %1;\n\tcvt.rn.f16x2.e4m3x2 %0, a;\n\t}"
      : "=r"(h)
      : "r"(two));
  const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(v.x * f, v.y * f);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// x [M, G·K] → the B image (see the header of this file). Grid: G · K / 64 CTAs (one chunk
// each), 256 threads; thread item (m, q): token m's pair q of the chunk, its three planes.
template <int NB>
__global__ void __launch_bounds__(256)
    split_kernel(const float* __restrict__ x, int M, int K, int G, uint8_t* __restrict__ bimg) {
  pdl::launch_dependents();  // the product may start streaming its weights now
  pdl::wait();               // x may be written by the previous kernel
  const int nchk = K / kChunkK;
  const int j = static_cast<int>(blockIdx.x) / nchk, c = static_cast<int>(blockIdx.x) % nchk;
  uint8_t* dst = bimg + (static_cast<int64_t>(j) * nchk + c) * (NB * 128);
  const int64_t ldx = static_cast<int64_t>(G) * K;
  const float* xc = x + static_cast<int64_t>(j) * K + static_cast<int64_t>(c) * kChunkK;
  for (int it = threadIdx.x; it < M * 32; it += 256) {
    const int m = it >> 5, q = it & 31;
    const float* xp = xc + m * ldx + 2 * q;
    const float v0 = xp[0], v1 = xp[1];
    uint16_t a[3], b[3];
    xplanes::split3<true>(v0, 0, a[0], a[1], a[2]);
    xplanes::split3<true>(v1, 0, b[0], b[1], b[2]);
    const int v = q & 7, u = q >> 3;
#pragma unroll
    for (int p = 0; p < 3; ++p) {
      const int col = 3 * m + p;
      *reinterpret_cast<uint32_t*>(dst + col * 128 + ((v ^ (col & 7)) << 4) + 4 * u) =
          static_cast<uint32_t>(a[p]) | (static_cast<uint32_t>(b[p]) << 16);
    }
  }
  for (int it = threadIdx.x; it < (NB - 3 * M) * 32; it += 256)  // the padding columns: zeros
    *reinterpret_cast<uint32_t*>(dst + (3 * M + it / 32) * 128 + 4 * (it % 32)) = 0u;
}

template <int NB>
constexpr int ring_depth() {
  return NB <= 96 ? 6 : 4;
}
constexpr int kSlots = 4;  // B ring slots
template <int NB>
constexpr size_t smem_bytes() {
  const size_t ring = static_cast<size_t>(kSlots) * NB * 128;
  const size_t stage = static_cast<size_t>(kRowsPerCta) * (NB + 1) * 4;
  return 1024 + (ring > stage ? ring : stage) + 1024;  // barriers, the ring / staging, alignment
}

template <int NB>
__global__ void __launch_bounds__(kThreads, 1) product_kernel(const Args a) {
  constexpr int R = ring_depth<NB>();
  constexpr int kSlotBytes = NB * 128;
  extern __shared__ uint8_t skwg_smem[];
  const int tid = threadIdx.x;
  const int z = static_cast<int>(blockIdx.x) % a.S;
  const int item = static_cast<int>(blockIdx.x) / a.S;
  const int j = item / a.tiles, tile = item % a.tiles;
  const int c0 = z * a.nch;  // first chunk of the slice (of the group's K / 64)
  const int nch = a.nch;
  tcr::SlotRing<kSlots, kSlotBytes> ring(skwg_smem);
  ring.src =
      a.bimg + (static_cast<int64_t>(j) * (a.K / kChunkK) + c0) * static_cast<int64_t>(kSlotBytes);

  const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int rl = tile * kRowsPerCta + wg * 64 + warp * 16 + g;  // row g within the group
  const int64_t r0 = static_cast<int64_t>(j) * a.N + min(rl, a.N - 1);
  const int64_t r8 = static_cast<int64_t>(j) * a.N + min(rl + 8, a.N - 1);
  const int64_t kb = static_cast<int64_t>(c0) * kChunkK;
  const uint8_t* p0 = a.w + r0 * a.K + kb + 16 * t;
  const uint8_t* p8 = a.w + r8 * a.K + kb + 16 * t;
  const uint8_t* s0 = a.scale + (r0 / a.br) * a.scols + kb / 128;
  const uint8_t* s8 = a.scale + (r8 / a.br) * a.scols + kb / 128;

  uint4 q0[R], q8[R];
  uint32_t e0[R], e8[R];
  auto load = [&](int r, int i) {  // ring slot r ← chunk i
    q0[r] = ldg_nc(p0 + static_cast<int64_t>(i) * kChunkK);
    q8[r] = ldg_nc(p8 + static_cast<int64_t>(i) * kChunkK);
    e0[r] = __ldg(s0 + (i >> 1));
    e8[r] = __ldg(s8 + (i >> 1));
  };
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r < nch) load(r, r);
  pdl::wait();  // the B image (the split kernel) and out (earlier readers) from here on
  if (tid == 0) ring.prime(nch);

  float acc[NB / 2];
#pragma unroll
  for (int i = 0; i < NB / 2; ++i) acc[i] = 0.f;
  uint32_t A[2][16];
#pragma unroll 1
  for (int ib = 0; ib < nch; ib += R) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = ib + r;
      if (i < nch) {
        uint32_t* Ab = A[r & 1];
        const float f0 = ue8m0(e0[r]), f8 = ue8m0(e8[r]);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const uint32_t w0 = word(q0[r], k), w8 = word(q8[r], k);
          Ab[4 * k + 0] = cvt2(w0, f0);        // row g, local k 4k, 4k+1
          Ab[4 * k + 1] = cvt2(w8, f8);        // row g + 8
          Ab[4 * k + 2] = cvt2(w0 >> 16, f0);  // row g, local k 4k+2, 4k+3
          Ab[4 * k + 3] = cvt2(w8 >> 16, f8);
        }
        if (i + R < nch) load(r, i + R);
        const uint32_t slot = ring.wait(i);
        wg_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) mma_rs<NB>(acc, Ab + 4 * k, wg_desc(slot + 32 * k, 16, 1024));
        wg_commit();
        wg_wait<1>();  // chunk i − 1's wgmmas are done: its slot and its A buffer are free
        reg_fence(A[(r & 1) ^ 1]);
        if (i >= 1 && (tid & 127) == 0) ring.release(i - 1, nch);  // done with chunk i − 1
      }
    }
  }
  wg_wait<0>();
  reg_fence(acc);
  reg_fence(A[0]);
  reg_fence(A[1]);
  pdl::launch_dependents();

  // Epilogue: accumulators → staging [128 rows][NB + 1] (the ring's bytes: every copy landed and
  // every wgmma retired once all threads pass the barrier).
  __syncthreads();
  float* stg = reinterpret_cast<float*>(ring.base);
  const int lr = wg * 64 + warp * 16 + g;
#pragma unroll
  for (int jj = 0; jj < NB / 8; ++jj) {
    stg[lr * (NB + 1) + 8 * jj + 2 * t] = acc[4 * jj];
    stg[lr * (NB + 1) + 8 * jj + 2 * t + 1] = acc[4 * jj + 1];
    stg[(lr + 8) * (NB + 1) + 8 * jj + 2 * t] = acc[4 * jj + 2];
    stg[(lr + 8) * (NB + 1) + 8 * jj + 2 * t + 1] = acc[4 * jj + 3];
  }
  __syncthreads();
  float* o = a.out + static_cast<int64_t>(z) * a.split_stride + static_cast<int64_t>(j) * a.N +
             static_cast<int64_t>(tile) * kRowsPerCta;
  const int rows = min(kRowsPerCta, a.N - tile * kRowsPerCta);
  for (int it = tid; it < a.M * kRowsPerCta; it += kThreads) {
    const int m = it / kRowsPerCta, rr = it % kRowsPerCta;
    if (rr >= rows) continue;
    const float* sr = stg + rr * (NB + 1) + 3 * m;
    o[static_cast<int64_t>(m) * a.ldo + rr] = (sr[2] + sr[1]) + sr[0];
  }
}

template <int NB>
bool launch(const float* x, const Args& a, float* out, cudaStream_t s, bool pdl) {
  auto kernel = product_kernel<NB>;
  static std::atomic<uint64_t> devices_done{
      0};  // > 48 KB of dynamic shared memory: once per device
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  const uint64_t bit = dev >= 0 && dev < 64 ? uint64_t{1} << dev : 0;
  if (bit == 0 || (devices_done.load(std::memory_order_acquire) & bit) == 0) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem_bytes<NB>())) != cudaSuccess)
      return false;
    if (bit != 0) devices_done.fetch_or(bit, std::memory_order_release);
  }
  pdl::launch(split_kernel<NB>, dim3(static_cast<unsigned>(a.G * (a.K / kChunkK))), dim3(256), 0, s,
              pdl, x, a.M, a.K, a.G, const_cast<uint8_t*>(a.bimg));
  pdl::launch(kernel, dim3(static_cast<unsigned>(a.G * a.tiles * a.S)), dim3(kThreads),
              smem_bytes<NB>(), s, pdl, a);
  if (a.S > 1) tcr::launch_split_sums(a.out, a.S, a.split_stride, out, s, pdl);
  return true;
}

int nb_for(int64_t M) { return M <= 16 ? 48 : M <= 32 ? 96 : M <= 48 ? 144 : 192; }

// Bytes of the B image, rounded up to 256 (the split partials follow it in the workspace).
size_t image_bytes(int64_t M, int64_t G, int64_t K) {
  const size_t b = static_cast<size_t>(G) * static_cast<size_t>(K / kChunkK) *
                   static_cast<size_t>(nb_for(M)) * 128;
  return (b + 255) & ~size_t{255};
}
}  // namespace skwg

bool skinny_wg_supported(const void* w, int64_t G, int64_t N, int64_t K, bool scale_f32,
                         int64_t block_rows, int64_t block_cols) {
  if (w == nullptr || (reinterpret_cast<uintptr_t>(w) & 15) != 0 || scale_f32) return false;
  if (block_cols != 128 || block_rows < 1) return false;
  if (K < 128 || K % 128 != 0 || K > (int64_t{1} << 20)) return false;
  if (G < 1 || G > 64 || N < 1 || G * N >= (int64_t{1} << 31)) return false;
  return true;
}

int skinny_wg_split(int64_t G, int64_t N, int64_t K) {
  const int64_t items = G * ((N + skwg::kRowsPerCta - 1) / skwg::kRowsPerCta);
  int S = 1;
  while (2 * S <= 16 && (K / 128) % (2 * S) == 0 && K / (2 * S) >= 512 &&
         items * 2 * S <= skwg::kSplitTarget)
    S *= 2;
  return S;
}

size_t skinny_wg_workspace_bytes(int64_t M, int64_t G, int64_t N, int64_t K) {
  const int S = skinny_wg_split(G, N, K);
  return skwg::image_bytes(M, G, K) +
         (S > 1 ? static_cast<size_t>(S) * static_cast<size_t>(M * G * N) * 4 : 0);
}

bool skinny_wg_linear(const float* x, const void* w, const void* scale, int64_t M, int64_t G,
                      int64_t N, int64_t K, int64_t block_rows, float* out, void* workspace,
                      cudaStream_t s, bool pdl) {
  if (M < 1 || M > kSkinnyWgMaxRows || x == nullptr || out == nullptr || scale == nullptr ||
      workspace == nullptr || (reinterpret_cast<uintptr_t>(workspace) & 15) != 0 ||
      !skinny_wg_supported(w, G, N, K, false, block_rows, 128))
    return false;
  skwg::Args a;
  a.w = static_cast<const uint8_t*>(w);
  a.scale = static_cast<const uint8_t*>(scale);
  a.bimg = static_cast<const uint8_t*>(workspace);
  a.M = static_cast<int32_t>(M);
  a.N = static_cast<int32_t>(N);
  a.K = static_cast<int32_t>(K);
  a.G = static_cast<int32_t>(G);
  a.br = static_cast<int32_t>(block_rows);
  a.scols = static_cast<int32_t>(K / 128);
  a.tiles = static_cast<int32_t>((N + skwg::kRowsPerCta - 1) / skwg::kRowsPerCta);
  a.S = skinny_wg_split(G, N, K);
  a.nch = static_cast<int32_t>(K / skwg::kChunkK / a.S);
  a.ldo = G * N;
  a.split_stride = M * G * N;
  a.out =
      a.S > 1
          ? reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + skwg::image_bytes(M, G, K))
          : out;
  switch (skwg::nb_for(M)) {
    case 48:
      return skwg::launch<48>(x, a, out, s, pdl);
    case 96:
      return skwg::launch<96>(x, a, out, s, pdl);
    case 144:
      return skwg::launch<144>(x, a, out, s, pdl);
    default:
      return skwg::launch<192>(x, a, out, s, pdl);
  }
}

}  // namespace deepinfer::cuda::kernels
