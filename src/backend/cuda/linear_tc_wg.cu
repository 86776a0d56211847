// Session 18 (issue 7): linear_tc_wg — linear_tc's bits on warpgroup MMA (linear_tc_wg.h for the
// contract; docs/cuda.md "Session 18" for the numbers).
//
// Why the bits are linear_tc's. linear_tc's arithmetic per output element (m, n) (docs/cuda.md
// "Batch-invariant small-M products", items 1–7): x split into three bf16 terms (x_0 = rn(x),
// x_1 = rn(x − x_0), x_2 = rn(x − x_0 − x_1), a NaN remainder → 0: tcr::split_terms8); weights
// decoded exactly to bf16 (tc::e4m3x2_to_bf16x2; bf16 as stored); K walked in k32 stages from the
// split start, in a stage lane q's k 8q..8q+7 with k-step s taking 8q + 4s + {0, 1} at MMA k
// positions 2q, 2q + 1 and 8q + 4s + {2, 3} at 2q + 8, 2q + 9; per accumulator, stage by stage,
// k-step 0 then 1, terms x_2, x_1, x_0 into the scale block's partial (from zero), then
// acc = fmaf(partial, scale, acc) per 128-k block; the caller's k_split; partials summed in split
// order. linear_tc_wa showed that the m16n8k16 MMA gives the same bits with the weights as A and
// x as B (the transposed roles); session 18 showed on the H200 that wgmma.m64nNk16 with A in
// registers gives the same bits as m16n8k16 for the same operands in the same k positions
// (every element of 4 × 2,048 chains, with wide exponent ranges and three-term chains).
// Here each warp of a warpgroup holds exactly wa's / wr's A fragment (its 16 weight rows, the
// k permutation above), the B image puts x's terms at the same k positions, and the per-element
// chain is the same sequence of k16 steps and terms — so every element gets linear_tc's bits.
//
// Launches (each a programmatic dependent of the one before when pdl):
//  1. image_kernel: x [M, G·K] → the term image [G][K / 64][3][NB][128 B] (NB = M rounded up to
//     16: the B columns of one term, token m at column m, columns ≥ M zero), each 64-k chunk of
//     a term laid out as wgmma's K-major B with the 128-byte swizzle: column c is 128 bytes
//     (MMA k positions of k-steps 0..3 of the chunk at bytes 32s + 2κ), 16-byte unit v of column
//     c stored at (v ^ (c & 7)) · 16. With the permutation, x's k = 32·st + 8q + 4s' + j of the
//     chunk (st, s' ∈ {0, 1}, j ∈ 0..3) lands in unit 4·st + 2·s' + (j ≥ 2) at byte 4q + 2(j % 2):
//     a thread's 8 consecutive k (st, q) fill word q of units 4st .. 4st + 3.
//  2. product: a CTA = 2 warpgroups, 128 weight rows of one group × one k split. Lane (g, q) of
//     warp w loads rows 16w + g and 16w + g + 8 of its warpgroup's 64, k 8q..8q+7 of each stage
//     (8 bytes e4m3 / 16 bytes bf16) — the A fragment it multiplies — R chunks in flight in
//     registers. The CTA's thread 0 bulk-copies each chunk's image (3 · NB · 128 bytes) into a
//     ring of kSlots shared-memory slots (mbarrier per slot; the second warpgroup to release a
//     slot refills it). Per chunk: 4 k-steps × terms 2, 1, 0 = 12 wgmmas into the block partial;
//     after the block's second chunk the warpgroup waits for its wgmmas and promotes.
//  3. tcr::split_reduce_pdl when k_split < K.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/linear_tc_wg.h"
#include "backend/cuda/linear_tc_wr.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/skinny_mma.cuh"
#include "backend/cuda/tc_ring.cuh"
#include "backend/cuda/wgmma_common.cuh"

namespace deepinfer::cuda::kernels {
namespace tcg {

using namespace wgmma;

constexpr int kThreads = 256;     // two warpgroups
constexpr int kRowsPerCta = 128;  // 64 weight rows per warpgroup
constexpr int kChunkK = 64;
constexpr int kSlots = 4;  // image ring slots (two scale blocks)

struct Args {
  const uint8_t* w = nullptr;    // [G·N, K] bf16 / e4m3
  const void* scale = nullptr;   // [ceil(G·N / br), K / 128] ue8m0 / f32; null for bf16
  const uint8_t* img = nullptr;  // [G][K / 64][3][NB][128]
  float* out = nullptr;          // splits == 1: out [M, ldo]; else the partials [S][M][ldo]
  int64_t ldo = 0;               // G·N
  int64_t split_stride = 0;      // M·ldo
  int32_t M = 0, N = 0, K = 0, G = 1, br = 1, scols = 0, scale_f32 = 0;
  int32_t tiles = 0;    // ceil(N / 128)
  int32_t S = 1;        // k splits
  int32_t k_split = 0;  // multiple of 128
};

constexpr int nb_for(int64_t M) { return M <= 16 ? 16 : M <= 32 ? 32 : M <= 48 ? 48 : 64; }

// x → the term image (see the top of this file). Grid: G · K / 64 CTAs, one chunk each; thread
// item (m, st, q): token m (< NB), stage st of the chunk, k 8q..8q+7 of the stage.
template <int NB>
__global__ void __launch_bounds__(256)
    image_kernel(const float* __restrict__ x, int M, int K, int G, uint8_t* __restrict__ img) {
  pdl::launch_dependents();  // the product may start streaming its weights now
  pdl::wait();               // x may be written by the previous kernel
  const int nchk = K / kChunkK;
  const int j = static_cast<int>(blockIdx.x) / nchk, c = static_cast<int>(blockIdx.x) % nchk;
  uint8_t* dst = img + (static_cast<int64_t>(j) * nchk + c) * (3 * NB * 128);
  const int64_t ldx = static_cast<int64_t>(G) * K;
  const float* xc = x + static_cast<int64_t>(j) * K + static_cast<int64_t>(c) * kChunkK;
  for (int it = threadIdx.x; it < NB * 8; it += 256) {
    const int m = it >> 3, st = (it >> 2) & 1, q = it & 3;
    uint4 t[tcr::kTerms];
    if (m < M) {
      const float* xp = xc + m * ldx + 32 * st + 8 * q;
      tcr::split_terms8(__ldcg(reinterpret_cast<const float4*>(xp)),
                        __ldcg(reinterpret_cast<const float4*>(xp + 4)), t);
    } else {
#pragma unroll
      for (int v = 0; v < tcr::kTerms; ++v) t[v] = make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int v = 0; v < tcr::kTerms; ++v) {
      uint8_t* col = dst + (v * NB + m) * 128 + 4 * q;
      const uint32_t wd[4] = {t[v].x, t[v].y, t[v].z, t[v].w};
#pragma unroll
      for (int p = 0; p < 4; ++p)
        *reinterpret_cast<uint32_t*>(col + (((4 * st + p) ^ (m & 7)) << 4)) = wd[p];
    }
  }
}

// Weight words of one chunk for one lane: [row g / g + 8][stage] — 8 e4m3 (uint2) or 8 bf16
// (uint4) at k 8q..8q+7 of the stage.
template <int kFmt>
struct ChunkW;
template <>
struct ChunkW<0> {
  uint4 v[2][2];
};
template <>
struct ChunkW<1> {
  uint2 v[2][2];
};

// The A fragments of a chunk's 4 k-steps (s = 2·stage + k-step of the stage): A[4s + 0..3] =
// a0 (row g, positions 2q, 2q + 1), a1 (row g + 8), a2 (row g, 2q + 8, 2q + 9), a3 (row g + 8).
template <int kFmt>
__device__ __forceinline__ void to_a(const ChunkW<kFmt>& c, uint32_t (&A)[16]) {
#pragma unroll
  for (int st = 0; st < 2; ++st)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t lo0, hi0, lo1, hi1;  // k-step 0 / 1 of the stage: positions 2q.. and 2q + 8..
      if constexpr (kFmt == 0) {
        const uint4 v = c.v[h][st];
        lo0 = v.x, hi0 = v.y, lo1 = v.z, hi1 = v.w;
      } else {
        const uint2 v = c.v[h][st];
        lo0 = tc::e4m3x2_to_bf16x2(v.x);
        hi0 = tc::e4m3x2_to_bf16x2(v.x >> 16);
        lo1 = tc::e4m3x2_to_bf16x2(v.y);
        hi1 = tc::e4m3x2_to_bf16x2(v.y >> 16);
      }
      A[4 * (2 * st) + h] = lo0;
      A[4 * (2 * st) + 2 + h] = hi0;
      A[4 * (2 * st + 1) + h] = lo1;
      A[4 * (2 * st + 1) + 2 + h] = hi1;
    }
}

template <int NB>
constexpr size_t smem_bytes() {
  return 1024 + static_cast<size_t>(kSlots) * 3 * NB * 128 + 1024;  // barriers, ring, alignment
}

// R: chunks in flight per thread (even: a scale block never straddles the register ring's walk).
template <int NB, int kFmt, int R>
__global__ void __launch_bounds__(kThreads, 1) product_kernel(const Args a) {
  static_assert(R % 2 == 0, "R must be even");
  constexpr int kTermBytes = NB * 128;
  constexpr int kSlotBytes = 3 * kTermBytes;
  constexpr int kEb = kFmt == 0 ? 2 : 1;  // bytes per weight element
  extern __shared__ uint8_t tcg_smem[];
  const int tid = threadIdx.x;
  const int z = static_cast<int>(blockIdx.x) % a.S;
  const int item = static_cast<int>(blockIdx.x) / a.S;
  const int j = item / a.tiles, tile = item % a.tiles;
  const int k_begin = z * a.k_split;
  const int nch = (min(a.K, k_begin + a.k_split) - k_begin) / kChunkK;  // even
  tcr::SlotRing<kSlots, kSlotBytes> ring(tcg_smem);
  ring.src = a.img + (static_cast<int64_t>(j) * (a.K / kChunkK) + k_begin / kChunkK) *
                         static_cast<int64_t>(kSlotBytes);

  const int wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, q = lane & 3;
  const int rl = tile * kRowsPerCta + wg * 64 + warp * 16 + g;  // row g within the group
  const int64_t r0 = static_cast<int64_t>(j) * a.N + min(rl, a.N - 1);
  const int64_t r8 = static_cast<int64_t>(j) * a.N + min(rl + 8, a.N - 1);
  const uint8_t* p0 = a.w + (r0 * a.K + k_begin + 8 * q) * kEb;
  const int64_t d8 = (r8 - r0) * a.K * kEb;  // row g + 8, bytes from row g
  int32_t sidx[2] = {0, 0};                  // scale index of the split's first block
  if constexpr (kFmt == 1) {
    sidx[0] = static_cast<int32_t>((r0 / a.br) * a.scols + k_begin / 128);
    sidx[1] = static_cast<int32_t>((r8 / a.br) * a.scols + k_begin / 128);
  }

  ChunkW<kFmt> wq[R];
  uint32_t sw[R / 2][2];           // raw scale words (ue8m0 byte or f32 bits) of the ring's blocks
  auto load = [&](int r, int i) {  // register slot r ← chunk i
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int st = 0; st < 2; ++st) {
        const uint8_t* p = p0 + h * d8 + (i * kChunkK + 32 * st) * kEb;
        if constexpr (kFmt == 0)
          wq[r].v[h][st] = skinny::ldg_nc(p);
        else
          wq[r].v[h][st] = tcw::ldg_nc8(p);
      }
    if constexpr (kFmt == 1) {
      if ((i & 1) == 0)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          sw[r / 2][h] =
              a.scale_f32
                  ? __float_as_uint(__ldg(static_cast<const float*>(a.scale) + sidx[h] + i / 2))
                  : static_cast<uint32_t>(
                        __ldg(static_cast<const uint8_t*>(a.scale) + sidx[h] + i / 2));
    }
  };
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (r < nch) load(r, r);
  pdl::wait();  // the image (the previous launch) and out (earlier readers) from here on
  if (tid == 0) ring.prime(nch);

  float acc[NB / 2], part[NB / 2];
#pragma unroll
  for (int e = 0; e < NB / 2; ++e) acc[e] = 0.f, part[e] = 0.f;
  uint32_t A[2][16];
  uint32_t scw[2] = {0u, 0u};  // raw scale words of the current block (e4m3)
#pragma unroll 1
  for (int ib = 0; ib < nch; ib += R) {
#pragma unroll
    for (int rb = 0; rb < R; rb += 2) {  // one scale block: chunks ib + rb, ib + rb + 1
      if (ib + rb >= nch) break;         // nch is even: both chunks exist
      if constexpr (kFmt == 1) {  // the block's scales, before load() refills their ring entry
        scw[0] = sw[rb / 2][0];
        scw[1] = sw[rb / 2][1];
      }
#pragma unroll
      for (int r = rb; r < rb + 2; ++r) {
        const int i = ib + r;
        uint32_t(&Ab)[16] = A[r & 1];
        to_a<kFmt>(wq[r], Ab);
        if (i + R < nch) load(r, i + R);
        const uint32_t slot = ring.wait(i);
        wg_fence();
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
          for (int t = tcr::kTerms - 1; t >= 0; --t)
            mma_rs<NB>(part, Ab + 4 * s, wg_desc(slot + t * kTermBytes + 32 * s, 16, 1024));
        wg_commit();
      }
      // The block's partial is complete once its wgmmas retire.
      wg_wait<0>();
      reg_fence(part);
      reg_fence(A[0]);
      reg_fence(A[1]);
      const int i1 = ib + rb + 1;
      if ((tid & 127) == 0) {  // this warpgroup is done with chunks i1 − 1 and i1
#pragma unroll
        for (int c = i1 - 1; c <= i1; ++c) ring.release(c, nch);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sc = 1.f;
        if constexpr (kFmt == 1)
          sc = a.scale_f32 ? __uint_as_float(scw[h]) : tc::ue8m0_f32(static_cast<uint8_t>(scw[h]));
#pragma unroll
        for (int jn = 0; jn < NB / 8; ++jn)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int x = 4 * jn + 2 * h + e;
            acc[x] = fmaf(part[x], sc, acc[x]);
            part[x] = 0.f;
          }
      }
    }
  }
  pdl::launch_dependents();
  // acc → out (or split plane z): token 8jn + 2q + e, weight row rl (h = 0) / rl + 8 (h = 1).
  float* o = a.out + static_cast<int64_t>(z) * a.split_stride + static_cast<int64_t>(j) * a.N;
#pragma unroll
  for (int jn = 0; jn < NB / 8; ++jn)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int m = 8 * jn + 2 * q + e, row = rl + 8 * h;
        if (m < a.M && row < a.N)
          o[static_cast<int64_t>(m) * a.ldo + row] = acc[4 * jn + 2 * h + e];
      }
}

template <int NB, int kFmt>
void launch(const float* x, const Args& a, float* out, cudaStream_t s, bool pdl) {
  constexpr int R = kFmt == 0 ? 4 : 8;
  auto kernel = product_kernel<NB, kFmt, R>;
  static std::atomic<uint64_t> attr_done{0};
  opt_in_smem_per_device(attr_done, kernel, static_cast<int>(smem_bytes<NB>()));
  pdl::launch(image_kernel<NB>, dim3(static_cast<unsigned>(a.G * (a.K / kChunkK))), dim3(256), 0, s,
              pdl, x, a.M, a.K, a.G, const_cast<uint8_t*>(a.img));
  pdl::launch(kernel, dim3(static_cast<unsigned>(a.G * a.tiles * a.S)), dim3(kThreads),
              smem_bytes<NB>(), s, pdl, a);
  if (a.S > 1) tcr::launch_split_sums(a.out, a.S, a.split_stride, out, s, pdl);
}

// Bytes of the image, rounded up to 256 (the split partials follow it).
size_t image_bytes(int64_t M, int64_t G, int64_t K) {
  const size_t b = static_cast<size_t>(G) * static_cast<size_t>(K / kChunkK) * 3 *
                   static_cast<size_t>(nb_for(M)) * 128;
  return (b + 255) & ~size_t{255};
}

}  // namespace tcg

bool linear_tc_wg_supported(int fmt, const void* w, const float* x, int64_t M, int64_t N, int64_t K,
                            int64_t G, int64_t block_cols, int64_t k_split) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (fmt != 0 && fmt != 1) return false;
  if (fmt == 1 && block_cols != 128) return false;
  return M >= 1 && M <= kLinearTcWgMaxRows && G >= 1 && G <= 64 && N >= 1 &&
         G * N < (int64_t{1} << 31) && K >= 128 && K % 128 == 0 && K <= (int64_t{1} << 20) &&
         k_split >= 128 && k_split % 128 == 0 && w != nullptr && x != nullptr && aligned(w) &&
         aligned(x);
}

size_t linear_tc_wg_workspace_bytes(int64_t M, int64_t N, int64_t K, int64_t G, int64_t k_split) {
  const int64_t S = k_split > 0 ? (K + k_split - 1) / k_split : 1;
  return tcg::image_bytes(M, G, K) +
         (S > 1 ? static_cast<size_t>(S) * static_cast<size_t>(M * G * N) * 4 : 0);
}

bool linear_tc_wg(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                  int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows, int64_t k_split,
                  float* out, void* workspace, cudaStream_t s, bool pdl) {
  if (!linear_tc_wg_supported(fmt, w, x, M, N, K, G, 128, k_split) || out == nullptr ||
      workspace == nullptr || (reinterpret_cast<uintptr_t>(workspace) % 16) != 0 ||
      (fmt == 1 && (scale == nullptr || block_rows < 1)))
    return false;
  tcg::Args a;
  a.w = static_cast<const uint8_t*>(w);
  a.scale = fmt == 1 ? scale : nullptr;
  a.img = static_cast<const uint8_t*>(workspace);
  a.M = static_cast<int32_t>(M);
  a.N = static_cast<int32_t>(N);
  a.K = static_cast<int32_t>(K);
  a.G = static_cast<int32_t>(G);
  a.br = fmt == 1 ? static_cast<int32_t>(block_rows) : 1;
  a.scols = static_cast<int32_t>(K / 128);
  a.scale_f32 = scale_f32 ? 1 : 0;
  a.tiles = static_cast<int32_t>((N + tcg::kRowsPerCta - 1) / tcg::kRowsPerCta);
  const int64_t ks = std::min(k_split, K);
  a.k_split = static_cast<int32_t>(ks);
  a.S = static_cast<int32_t>((K + ks - 1) / ks);
  a.ldo = G * N;
  a.split_stride = M * G * N;
  a.out =
      a.S > 1
          ? reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + tcg::image_bytes(M, G, K))
          : out;
  const int nb = tcg::nb_for(M);
  const bool bf = fmt == 0;
  if (nb == 16)
    bf ? tcg::launch<16, 0>(x, a, out, s, pdl) : tcg::launch<16, 1>(x, a, out, s, pdl);
  else if (nb == 32)
    bf ? tcg::launch<32, 0>(x, a, out, s, pdl) : tcg::launch<32, 1>(x, a, out, s, pdl);
  else if (nb == 48)
    bf ? tcg::launch<48, 0>(x, a, out, s, pdl) : tcg::launch<48, 1>(x, a, out, s, pdl);
  else
    bf ? tcg::launch<64, 0>(x, a, out, s, pdl) : tcg::launch<64, 1>(x, a, out, s, pdl);
  return true;
}

}  // namespace deepinfer::cuda::kernels
