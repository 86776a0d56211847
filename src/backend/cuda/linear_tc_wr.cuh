// Session 17 (issue 7, the --batch-invariant target): "wr" — linear_tc's bits for e4m3 weights
// at M = 1..16 with the weight rows loaded straight into registers (docs/cuda.md "Weight rows in
// registers with linear_tc's bits (linear_tc_wr, session 17)").
//
// The arithmetic is wa_kernel's (linear_tc_wa.cuh), operand for operand, so each output element
// gets linear_tc's bits: A = 16 decoded weight rows (tc::e4m3x2_to_bf16x2), B = 8 token columns
// of one of x's three bf16 terms (tcr::split_terms8 = linear_tc's convert()), the k32 stage
// permutation (lane q holds k 8q..8q+7 of a stage; k-step s: k 8q+4s+{0,1} at positions 2q..+1,
// 8q+4s+{2,3} at 2q+8..+9), per stage k-step 0 then 1 and terms x_2, x_1, x_0 into the block
// partial (tcw::tile_mmas), acc = fmaf(partial, scale, acc) at each 128-k scale block's end, the
// caller's k_split and the partials [split][M][G·N] summed in split order (tcr::split_reduce_pdl,
// or tcw::last_cta_split_sums in the kernel).
//
// What differs is the memory side. wa streams 64 bytes of each of its CTA's 128 rows per ring
// slot through shared memory (cp.async, mbarriers, a CTA-wide barrier per slot for the shared x
// split). Under --batch-invariant the splits are short (linear_tc_k_split fills one wave of
// 16-row tiles: 128..512 k of the V4-Flash products), so a warp's whole share of the weight —
// 16 rows × one split, ≤ 8 KB — fits in its registers: every lane issues all its loads
// (8-byte ld.global.nc: rows g and g + 8, k 8q..8q+7 of each stage, exactly the A fragment it
// multiplies) before griddepcontrol.wait, while the previous kernel still runs. Then the CTA
// splits its M × k_split slice of x into the bf16 terms once (shared memory, one barrier), and
// each warp runs its MMAs with no further synchronisation. Splits longer than the register ring
// (R units of 128 k) stream: a unit's slot is refilled as soon as it has been multiplied.
//
// Limits (linear_tc_wr_supported): e4m3 with 128-column scale blocks (ue8m0 or f32), K and
// k_split multiples of 128 (so scale blocks, units and splits align), min(k_split, K) ≤ 1024 (the
// x terms in shared memory), N % 16 == 0 (whole m16 tiles), M ≤ 16.
#pragma once

#include "backend/cuda/linear_tc_wa.cuh"

namespace deepinfer::cuda::kernels::tcw {

constexpr int kWrWarps = 8;
constexpr int kWrThreads = kWrWarps * 32;
constexpr int kWrRows = kWrWarps * 16;  // weight rows per CTA (one m16 tile per warp)
constexpr int kWrUnitK = 128;           // k per register-ring unit: one scale block, 4 k32 stages
constexpr int kWrMaxSplitK = 1024;
constexpr int kWrTermPad = 32;  // bf16 of padding per term row (64 bytes: see below)

// x's terms in shared memory: [M][kTerms][tp] bf16, tp = split width + kWrTermPad. Lane (g, q)
// of a warp reads token g's 8 k (16 bytes) at 32·stage + 8q of each term: the 8 lanes of a
// quarter-warp cover tokens g, g + 1 × 64 bytes, which the 3·tp·2 ≡ 64 (mod 128) byte token
// stride puts in disjoint banks.
__host__ __device__ constexpr int wr_term_pitch(int64_t split_k) {
  return static_cast<int>(split_k) + kWrTermPad;
}

__device__ __forceinline__ uint2 ldg_nc8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// NT: n8 token tiles (1: M ≤ 8, 2: M ≤ 16). R: units of 128 k in the lane's register ring
// (16 + 2 registers each). p.out: out, or the split workspace (p.split_stride apart); p.x_pitch:
// the term pitch (wr_term_pitch). Grid (G·⌈N / 128⌉, splits), kWrThreads threads, dynamic shared
// memory M·kTerms·tp·2 bytes. (Session 17 measured a 1-D grid with a tile's splits on consecutive
// CTAs — whole weight rows read in one wave —: within 2 % at every shape, not kept.)
template <int NT, int R>
__global__ void __launch_bounds__(kWrThreads, 2) wr_kernel(const WaArgs p) {
  extern __shared__ __align__(16) uint8_t wr_smem[];
  uint16_t* terms = reinterpret_cast<uint16_t*>(wr_smem);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
  const int64_t N = p.N, K = p.K, M = p.M;
  const int64_t ntiles = (N + kWrRows - 1) / kWrRows;
  const unsigned split = blockIdx.y;
  const int64_t grp = blockIdx.x / ntiles;
  const int64_t n0 = (blockIdx.x % ntiles) * kWrRows;
  const int64_t wrow0 = n0 + 16 * warp;  // the warp's m16 tile (N % 16 == 0: whole or absent)
  const bool has_rows = wrow0 < N;       // warp-uniform
  const int64_t k_begin = static_cast<int64_t>(split) * p.k_split;
  const int64_t k_end = k_begin + p.k_split < K ? k_begin + p.k_split : K;
  const int nu = static_cast<int>((k_end - k_begin) / kWrUnitK);
  const int tp = p.x_pitch;

  // Rows g and g + 8 of the warp's tile: lane q's first byte of each stage, and the row's scale
  // words from the split's first block on.
  // (One 64-bit base per operand and 32-bit offsets: registers are the ring's.)
  const int64_t row0 = grp * N + (has_rows ? wrow0 : 0) + g;
  const uint8_t* wrow = p.w + row0 * K + k_begin + 8 * q;
  const int32_t row8 = static_cast<int32_t>(8 * K);  // row g + 8 (bytes)
  int32_t srow[2];  // scale index of the split's first block, rows g / g + 8 (< 2^31: the caller)
#pragma unroll
  for (int h = 0; h < 2; ++h)
    srow[h] = static_cast<int32_t>(((row0 + 8 * h) / p.br) * p.scale_cols + k_begin / kWrUnitK);
  uint2 wq[R][2][4];  // [unit slot][row g / g + 8][stage]: k 8q..8q+7 of the stage
  uint32_t sw[R][2];  // raw scale words (ue8m0 byte or f32 bits) of the unit's block
  auto load_unit = [&](int u, uint2(&dst)[2][4], uint32_t(&s)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int st = 0; st < 4; ++st) dst[h][st] = ldg_nc8(wrow + h * row8 + u * kWrUnitK + 32 * st);
      s[h] = p.scale_f32
                 ? __float_as_uint(__ldg(static_cast<const float*>(p.scale) + srow[h] + u))
                 : static_cast<uint32_t>(__ldg(static_cast<const uint8_t*>(p.scale) + srow[h] + u));
    }
  };
  if (has_rows) {
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r < nu) load_unit(r, wq[r], sw[r]);
  }

  pdl::wait();  // x (and the outputs) belong to earlier kernels from here on
  // The CTA's x slice → bf16 terms, one 8-k piece per thread and step (L2 loads: x was written by
  // the previous kernel).
  {
    const int pieces = static_cast<int>((k_end - k_begin) / 8);
    for (int i = tid; i < M * pieces; i += kWrThreads) {
      const int m = i / pieces, c = i % pieces;
      const float* xr = p.x + m * p.lda + grp * K + k_begin + 8 * c;
      uint4 t[kTerms];
      split_terms8(__ldcg(reinterpret_cast<const float4*>(xr)),
                   __ldcg(reinterpret_cast<const float4*>(xr + 4)), t);
#pragma unroll
      for (int v = 0; v < kTerms; ++v)
        *reinterpret_cast<uint4*>(terms + (m * kTerms + v) * tp + 8 * c) = t[v];
    }
  }
  __syncthreads();

  float acc[1][NT][4], part[1][NT][4];  // store_acc's layout (one weight tile)
  zero_acc<1, NT>(acc, part);
  if (has_rows) {
#pragma unroll 1
    for (int ub = 0; ub < nu; ub += R) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int u = ub + r;
        if (u >= nu) break;
#pragma unroll
        for (int st = 0; st < 4; ++st) {
          // B: token nt·8 + g of every term, k 8q..8q+7 of the stage (zero past M).
          uint4 xb[NT][kTerms];
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const int m = nt * 8 + g;
#pragma unroll
            for (int v = 0; v < kTerms; ++v)
              xb[nt][v] = m < M ? *reinterpret_cast<const uint4*>(terms + (m * kTerms + v) * tp +
                                                                  u * kWrUnitK + 32 * st + 8 * q)
                                : make_uint4(0u, 0u, 0u, 0u);
          }
          // A: rows g / g + 8, k-step 0 from the low word, 1 from the high word.
          uint32_t d[2][2][2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint2 v = wq[r][h][st];
            d[h][0][0] = tc::e4m3x2_to_bf16x2(v.x);
            d[h][0][1] = tc::e4m3x2_to_bf16x2(v.x >> 16);
            d[h][1][0] = tc::e4m3x2_to_bf16x2(v.y);
            d[h][1][1] = tc::e4m3x2_to_bf16x2(v.y >> 16);
          }
          tile_mmas<NT>(part[0], d, xb);  // linear_tc's order
        }
        // The unit is one scale block: promote (wa's promote, one tile, rows always present).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float sc = p.scale_f32 ? __uint_as_float(sw[r][h])
                                       : tc::ue8m0_f32(static_cast<uint8_t>(sw[r][h]));
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
              acc[0][nt][2 * h + jj] = fmaf(part[0][nt][2 * h + jj], sc, acc[0][nt][2 * h + jj]);
              part[0][nt][2 * h + jj] = 0.f;
            }
        }
        if (u + R < nu) load_unit(u + R, wq[r], sw[r]);
      }
    }
  }
  pdl::launch_dependents();
  if (has_rows)
    store_acc<1, NT>(p.out + split * p.split_stride + grp * N, p.ldo, M, wrow0, N, g, q, acc);
  if (p.counters != nullptr && gridDim.y > 1)
    last_cta_split_sums<kWrThreads>(p, grp, n0, kWrRows, blockIdx.x, gridDim.y);
}

}  // namespace deepinfer::cuda::kernels::tcw
