// Routed experts of decode batches on the tensor cores (issue 7, session 6): FP4 e2m1 experts
// with 1×32 ue8m0 scales against fp32 token rows, mma.sync m16n8k16 (f16 in, f32 accumulate).
// See docs/cuda.md "Decode experts on tensor cores" for the design and its numbers.
//
// Operands of one MMA (a warp): A = 16 weight rows × 16 k of one expert, B = 16 k × 8 columns,
// column j = (token j / 3 of the n-tile, x plane j % 3) for j < 6, columns 6 and 7 zero.
// Fragment layouts (PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type"; the
// same as linear_tc.cuh and attention_fd.cu rely on), g = lane / 4, t = lane % 4, a .b32
// register holds two f16, the lower index in the low half:
//   A (16×16 row-major): a0 = (row g, cols 2t, 2t+1)    a1 = (row g+8, cols 2t, 2t+1)
//                        a2 = (row g, cols 2t+8, 2t+9)  a3 = (row g+8, cols 2t+8, 2t+9)
//   B (16×8, k × n):     b0 = (rows 2t, 2t+1; col g)    b1 = (rows 2t+8, 2t+9; col g)
//   C/D (16×8 f32):      c0, c1 = (row g; cols 2t, 2t+1)  c2, c3 = (row g+8; cols 2t, 2t+1)
// ldmatrix.x4 (.b16): lanes 8i … 8i+7 give the row addresses of 8×8 matrix i; register i of
// lane L holds row L / 4, 32-bit word L % 4 of matrix i.
//
// The k permutation (only the pairing of A's and B's k matters): a 32-k scale block of a weight
// row is 16 bytes = 4 words; lane t takes word t (k 8t … 8t+7, nibble j of the word = k 8t+j)
// and decodes it into D0 = (n0, n4), D1 = (n1, n5), D2 = (n2, n6), D3 = (n3, n7) (f16x2, low
// half first). k-step 0 uses a0/a1 = D0 (rows g / g+8) and a2/a3 = D1; k-step 1 uses D2 and D3.
// B must pair the same k: b0 of k-step 0 = (x[8t], x[8t+4]), b1 = (x[8t+1], x[8t+5]), k-step 1
// b0 = (x[8t+2], x[8t+6]), b1 = (x[8t+3], x[8t+7]) — so the x planes are stored with each group
// of 8 k permuted to the order 0,4,1,5,2,6,3,7 and a lane reads its B registers of one block as
// one 16-byte load.
//
// Exactness: the f16 bit pattern ((n & 7) << 9) | ((n & 8) << 12) is exactly e2m1(n) · 2^-14
// for all 16 codes (e = 0 codes become f16 subnormals), so A is exact; products of f16 are
// exact in the tensor core; x = 2^-c (h0 + h1 + h2 + r) with three f16 planes of x · 2^c
// (c per token row: max |x| · 2^c ∈ [2^14, 2^15)), |r| ≤ 2^-33 · 2^15 — fp32-accurate terms.
// Per 32-k block the two k-steps sum in the tensor core's f32 accumulator from zero, the block
// partial is promoted with acc = fma(partial, scale, acc) (blocks in k order), the three plane
// columns are summed (h2 + h1) + h0 at the end, and the sum is multiplied by 2^(14 − c).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda/x_planes.cuh"

namespace deepinfer::cuda::kernels::emma {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 32;               // weight rows of a warp item (two m16 tiles)
constexpr int kChunkK = 256;            // k per pipeline stage (8 scale blocks of 32)
constexpr int kRowBytes = kChunkK / 2;  // e2m1 bytes of a row per stage
constexpr int kStages = 5;              // per-warp cp.async ring (4 stages = 16 KB in flight)
constexpr int kWStage = kRows * kRowBytes;  // 4096 B of weights per stage
constexpr int kSStage = kRows * 8;          // 256 B: 8 ue8m0 scales per row per stage
constexpr int kWarpSmem = kStages * (kWStage + kSStage);
constexpr int kSmem = kWarps * kWarpSmem;   // 87,040 B: two CTAs per SM
constexpr int kPlanes = xplanes::kPlanes;
constexpr int kMaxNT = 4;                    // n-tiles (2 tokens each) per pass over the weights
constexpr int kPassTokens = 2 * kMaxNT;      // 8 tokens per pass

struct Args {
  const uint16_t* planes = nullptr;  // [3][x_rows][K] f16 bits of x · 2^c, k permuted per 8
  const int32_t* row_exp = nullptr;  // [x_rows] c
  int64_t plane = 0;                 // x_rows · K (elements between planes)
  int32_t x_div = 1;                 // slot i reads x row i / x_div
  const int32_t* perm = nullptr;     // sorted position -> slot (moe_group)
  const int32_t* row_off = nullptr;  // [E+1]
  const int32_t* act_off = nullptr;  // [E+1] active experts (variant 2: tiles) before e
  int32_t tile_rows = 0;             // moe_group's tile rows (variant 2; variant 1: ≥ slots)
  int32_t num_experts = 0;
  const void* const* w_table = nullptr;  // [E] -> e2m1 [N, K/2 bytes]
  const void* const* s_table = nullptr;  // [E] -> ue8m0 [N, K/32]
  int32_t N = 0, K = 0;
  int32_t scale_cols = 0;  // K / 32
  int32_t groups = 0;      // N / 32 items per expert
  int32_t chunks = 0;      // K / 256 stages per item pass
  float* out = nullptr;    // [slots, N]
};

// ---- x split: one block per x row ----------------------------------------------------------

// Storage position of element j of a group of 8 k (order 0,4,1,5,2,6,3,7).
__device__ __forceinline__ int perm8_pos(int j) { return ((j & 3) << 1) | (j >> 2); }

// Session 12: the output rows of slots with a bad expert id written as +0 by the split kernel
// (zero_ids [slots] non-null: block r checks its slots r·x_div … r·x_div + x_div − 1), so the
// caller needs no zero-filled output buffer (a memset node per projection in a decode graph);
// grouped slots' rows are left to the product.
struct ZeroBad {
  const int32_t* ids = nullptr;  // [slots] expert ids; nullptr: nothing written here
  int32_t num_experts = 0;
  int32_t x_div = 1;
  int64_t slots = 0;
  float* out = nullptr;  // [slots, N]
  int32_t N = 0;
};

// kMmaOrder (session 20, experts_wg.cu): the same plane values stored in the MMA's k order instead
// — per 32-k block, k-step s' (0, 1) at positions 16s' .. 16s' + 15 and, within it, MMA k position
// κ at 16s' + κ: κ = 2t + e holds k = 8t + 2s' + 4e, κ = 2t + 8 + e holds k = 8t + 2s' + 1 + 4e
// (t = 0..3, e = 0, 1: the pairing described at the top of this file). So 16 consecutive
// elements are one k-step of a B column, as warpgroup MMA reads it from shared memory.
template <bool kMmaOrder = false>
__global__ void __launch_bounds__(256)
    split_kernel(const float* __restrict__ x, int K, uint16_t* __restrict__ planes, int64_t plane,
                 int32_t* __restrict__ row_exp, const ZeroBad zb) {
  __shared__ float red[8];
  // Session 7: the product kernel may be launched as a programmatic dependent (experts_mma_v2):
  // let it start now; it waits (griddepcontrol.wait) for this grid before reading the planes.
  // A no-op when the next launch is an ordinary one. Session 13: this kernel may itself be a PDL
  // launch (experts_mma's kChain / kQuick variants): wait first (a no-op for an ordinary launch),
  // so that when the product starts, every earlier kernel (moe_group's routing, which the
  // product reads before its own wait) has completed.
  pdl::wait();
  pdl::launch_dependents();
  const int64_t r = blockIdx.x;
  const float* xr = x + r * K;
  // max|x| ∈ [2^(ex−1), 2^ex) → max|x| · 2^c ∈ [2^14, 2^15) (f16 normal range, no overflow);
  // x_planes.cuh (session 10: shared with skinny_split.cuh).
  const int c = xplanes::row_exponent256(xr, K, red);
  if (threadIdx.x == 0) row_exp[r] = c;
  if constexpr (kMmaOrder) {
    // Thread item: one 32-k block; 16-byte unit u (= 2s' + hi) of a plane holds, in word t, the
    // elements k = 8t + 2s' + hi (low half) and k + 4 (high half).
    for (int blk = threadIdx.x; blk < K / 32; blk += 256) {
      const float* xb = xr + 32 * blk;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        uint32_t wd[kPlanes][4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const int k0 = 8 * t + 2 * (u >> 1) + (u & 1);
          uint16_t lo[kPlanes], hi[kPlanes];
          xplanes::split3<false>(xb[k0], c, lo[0], lo[1], lo[2]);
          xplanes::split3<false>(xb[k0 + 4], c, hi[0], hi[1], hi[2]);
#pragma unroll
          for (int p = 0; p < kPlanes; ++p) wd[p][t] = lo[p] | (static_cast<uint32_t>(hi[p]) << 16);
        }
#pragma unroll
        for (int p = 0; p < kPlanes; ++p)
          *reinterpret_cast<uint4*>(planes + p * plane + r * K + 32 * blk + 8 * u) =
              make_uint4(wd[p][0], wd[p][1], wd[p][2], wd[p][3]);
      }
    }
  } else {
    // experts_mma's order: each group of 8 k as 0,4,1,5,2,6,3,7 (perm8_pos).
    for (int g8 = threadIdx.x; g8 < K / 8; g8 += 256) {
      uint16_t h[kPlanes][8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int q = perm8_pos(j);
        xplanes::split3<false>(xr[8 * g8 + j], c, h[0][q], h[1][q], h[2][q]);
      }
#pragma unroll
      for (int p = 0; p < kPlanes; ++p) {
        uint4 v;
        v.x = h[p][0] | (static_cast<uint32_t>(h[p][1]) << 16);
        v.y = h[p][2] | (static_cast<uint32_t>(h[p][3]) << 16);
        v.z = h[p][4] | (static_cast<uint32_t>(h[p][5]) << 16);
        v.w = h[p][6] | (static_cast<uint32_t>(h[p][7]) << 16);
        *reinterpret_cast<uint4*>(planes + p * plane + r * K + 8 * g8) = v;
      }
    }
  }
  if (zb.ids != nullptr) {
    for (int j = 0; j < zb.x_div; ++j) {
      const int64_t slot = r * zb.x_div + j;
      if (slot >= zb.slots) break;
      const int32_t e = __ldg(zb.ids + slot);
      if (e >= 0 && e < zb.num_experts) continue;
      for (int n = threadIdx.x; n < zb.N; n += 256) zb.out[slot * zb.N + n] = 0.f;
    }
  }
}

// The x split of one projection (host side, shared by experts_mma and experts_wg): the planes and
// row exponents in the workspace (experts_mma_workspace_bytes), the bad-id rows of `out` zeroed
// when zero_bad_ids is given, launched on s (a programmatic dependent when pdl).
struct SplitOut {
  uint16_t* planes = nullptr;  // [3][x_rows][K]
  int32_t* row_exp = nullptr;  // [x_rows]
};
template <bool kMmaOrder>
inline SplitOut launch_split(const float* x, int64_t x_rows, int64_t x_div, int64_t K, int64_t slots,
                             int64_t num_experts, int64_t N, const int32_t* zero_bad_ids, float* out,
                             void* workspace, cudaStream_t s, bool pdl) {
  SplitOut so;
  so.planes = static_cast<uint16_t*>(workspace);
  so.row_exp = reinterpret_cast<int32_t*>(so.planes + static_cast<size_t>(kPlanes) * x_rows * K);
  ZeroBad zb;
  if (zero_bad_ids != nullptr) {
    zb.ids = zero_bad_ids;
    zb.num_experts = static_cast<int32_t>(num_experts);
    zb.x_div = static_cast<int32_t>(x_div);
    zb.slots = slots;
    zb.out = out;
    zb.N = static_cast<int32_t>(N);
  }
  pdl::launch(split_kernel<kMmaOrder>, dim3(static_cast<unsigned>(x_rows)), dim3(256), 0, s, pdl, x,
              static_cast<int>(K), so.planes, x_rows * K, so.row_exp, zb);
  return so;
}

// ---- device helpers --------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// d = A·B (C = 0) and d += A·B.
__device__ __forceinline__ void mma_f16_zero(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.f));
}
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The 8 e2m1 codes of word u (code j = nibble j) as f16x2 D0 = (n0, n4), D1 = (n1, n5),
// D2 = (n2, n6), D3 = (n3, n7), each f16 = e2m1 · 2^-14 exactly. The f16 of code n has low byte
// 0 and high byte H(n) = (n & 7) << 1 | (n & 8) << 4; pe / po hold H of the even / odd nibbles
// (byte j: nibble 2j / 2j + 1), and a byte permute puts two of them into the high bytes.
// 11 integer instructions per 8 codes.
__device__ __forceinline__ void decode_e2m1x8(uint32_t u, uint32_t (&d)[4]) {
  const uint32_t e = u & 0x0F0F0F0Fu;
  const uint32_t o = u & 0xF0F0F0F0u;
  const uint32_t pe = ((e << 1) | (e << 4)) & 0x8E8E8E8Eu;
  const uint32_t po = ((o >> 3) | o) & 0x8E8E8E8Eu;
  d[0] = __byte_perm(pe, 0u, 0x2404);
  d[1] = __byte_perm(po, 0u, 0x2404);
  d[2] = __byte_perm(pe, 0u, 0x3414);
  d[3] = __byte_perm(po, 0u, 0x3414);
}

// ue8m0 byte b (0..7) of a row's 8 stage scales as f32. kExact: every code (255: NaN, 0:
// 2^-127); else only codes 1..254 (two instructions: the byte shifted into the exponent field),
// used for a stage when no scale of the warp's 32 rows is 0 or 255 (checked per stage).
template <bool kExact>
__device__ __forceinline__ float stage_scale(const uint2& v, int b) {
  const uint32_t w = b < 4 ? v.x : v.y;
  const int j = b & 3;
  if (!kExact) {
    const uint32_t f = j == 3 ? (w >> 1) : (w << (23 - 8 * j));
    return __uint_as_float(f & 0x7F800000u);
  }
  const uint32_t e = (w >> (8 * j)) & 0xFFu;
  return e == 0xFFu ? __int_as_float(0x7FC00000)
                    : (e == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(e << 23)));
}

// True when some byte of v is 0x00 or 0xFF.
__device__ __forceinline__ bool has_00_or_ff(uint32_t v) {
  const uint32_t z = (v - 0x01010101u) & ~v & 0x80808080u;
  const uint32_t nv = ~v;
  const uint32_t f = (nv - 0x01010101u) & ~nv & 0x80808080u;
  return (z | f) != 0;
}

// A warp's position in its list of work: item (active expert d = item / groups, rows
// 32·(item % groups) …), pass over the expert's tokens (8 per pass), stage kc of K.
struct Cursor {
  int64_t item = 0;
  int e = 0, n0 = 0, pos0 = 0, m = 0, passes = 0, pass = 0, kc = 0;
};

__device__ __forceinline__ void set_item(const Args& p, int64_t item, Cursor& c) {
  c.item = item;
  const int d = static_cast<int>(item / p.groups);
  int lo = 0, hi = p.num_experts - 1;  // the last e with act_off[e] <= d is the d-th active one
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (__ldg(p.act_off + mid) <= d) lo = mid;
    else hi = mid - 1;
  }
  c.e = lo;
  c.n0 = static_cast<int>(item - static_cast<int64_t>(d) * p.groups) * kRows;
  c.pos0 = __ldg(p.row_off + lo);
  c.m = __ldg(p.row_off + lo + 1) - c.pos0;
  c.passes = (c.m + kPassTokens - 1) / kPassTokens;
  c.pass = 0;
  c.kc = 0;
}

__device__ __forceinline__ void advance(const Args& p, Cursor& c, int64_t end) {
  if (++c.kc < p.chunks) return;
  c.kc = 0;
  if (++c.pass < c.passes) return;
  if (c.item + 1 < end) set_item(p, c.item + 1, c);
  else c.item = end;
}

// Issues the cp.async copies of the cursor's stage: 32 rows × 128 bytes of weights (16-byte
// unit u of row r stored at unit u ^ (r & 7): ldmatrix's 8 row addresses hit 8 distinct bank
// groups) and 32 rows × 8 scale bytes.
__device__ __forceinline__ void issue_stage(const Args& p, const Cursor& c, uint8_t* sw, uint8_t* ss,
                                            int lane) {
  const uint32_t rb = static_cast<uint32_t>(p.K) / 2;
  const uint8_t* wb = static_cast<const uint8_t*>(p.w_table[c.e]) +
                      static_cast<size_t>(c.n0) * rb + c.kc * kRowBytes;
  const int unit = lane & 7;
  const uint32_t sw0 = smem_u32(sw);
#pragma unroll
  for (int i = 0; i < kRows / 4; ++i) {
    const int row = (lane >> 3) + 4 * i;
    cp_async16(sw0 + row * kRowBytes + ((unit ^ (row & 7)) << 4), wb + row * rb + unit * 16);
  }
  const uint8_t* sb = static_cast<const uint8_t*>(p.s_table[c.e]) +
                      static_cast<size_t>(c.n0 + lane) * static_cast<uint32_t>(p.scale_cols) + c.kc * 8;
  if ((reinterpret_cast<uintptr_t>(sb) & 7) == 0) {
    cp_async8(smem_u32(ss + lane * 8), sb);
  } else {  // scale rows not 8-byte aligned: plain loads (slow, correct)
    uint2 v{0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t b = __ldg(sb + j);
      if (j < 4) v.x |= b << (8 * j);
      else v.y |= b << (8 * (j - 4));
    }
    *reinterpret_cast<uint2*>(ss + lane * 8) = v;
  }
}

// Per-lane token data of one pass: the B column this lane feeds (col g: token 2·nt + g / 3,
// plane g % 3) and the output this lane writes (t = 0: token 2·nt, t = 1: token 2·nt + 1).
struct Pass {
  const uint16_t* bcol[kMaxNT];  // x plane row of the lane's column (nullptr: zero column)
  int64_t out_off[kMaxNT];       // slot · N of the lane's output token (-1: none)
  int out_exp[kMaxNT];           // 14 − c of that token
  int nt = 1;                    // n-tiles in use (1, 2 or 4)
};

__device__ __forceinline__ void setup_pass(const Args& p, const Cursor& c, int lane, Pass& ps) {
  const int g = lane >> 2, t = lane & 3;
  const int base = c.pass * kPassTokens;
  const int cnt = min(kPassTokens, c.m - base);
  const int tiles = (cnt + 1) / 2;
  ps.nt = tiles <= 1 ? 1 : tiles <= 2 ? 2 : 4;
#pragma unroll
  for (int nt = 0; nt < kMaxNT; ++nt) {
    ps.bcol[nt] = nullptr;
    ps.out_off[nt] = -1;
    ps.out_exp[nt] = 0;
    const int tb = 2 * nt + g / 3;  // token of the column (pass-relative)
    if (g < 6 && tb < cnt) {
      const int slot = __ldg(p.perm + c.pos0 + base + tb);
      const int64_t xrow = slot / p.x_div;
      ps.bcol[nt] = p.planes + (g % 3) * p.plane + xrow * p.K;
    }
    const int to = 2 * nt + t;  // output token
    if (t < 2 && to < cnt) {
      const int slot = __ldg(p.perm + c.pos0 + base + to);
      ps.out_off[nt] = static_cast<int64_t>(slot) * p.N;
      ps.out_exp[nt] = 14 - __ldg(p.row_exp + slot / p.x_div);
    }
  }
}

// B registers of block b of stage kc for every n-tile (zeros for empty columns).
template <int NT>
__device__ __forceinline__ void load_b(const Pass& ps, int kc, int b, int t, uint4 (&bq)[NT]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (ps.bcol[nt] != nullptr) {
      bq[nt] = __ldg(reinterpret_cast<const uint4*>(ps.bcol[nt] + kc * kChunkK + b * 32) + t);
    } else {
      bq[nt] = make_uint4(0, 0, 0, 0);
    }
  }
}

// One stage (32 rows × 256 k) against NT n-tiles: acc[mt][nt][i] += block partial · scale.
template <int NT, bool kExact>
__device__ __forceinline__ void compute_stage(const uint8_t* sw, const uint8_t* ss, const Pass& ps,
                                              int kc, int lane, float (&acc)[2][kMaxNT][4]) {
  const int g = lane >> 2, t = lane & 3;
  uint2 sc[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) sc[mt][h] = *reinterpret_cast<const uint2*>(ss + (16 * mt + g + 8 * h) * 8);
  const uint32_t sw0 = smem_u32(sw);
  // ldmatrix row of this lane: matrix q = lane / 8 → rows +8 for q odd, unit +1 for q ≥ 2.
  const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8;
  const int lunit = lane >> 4;
  uint4 bq[2][NT];  // B of blocks b (in use) and b + 1 (in flight)
  load_b<NT>(ps, kc, 0, t, bq[0]);
  uint32_t q[2][4];
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    if (b % 2 == 0) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int row = 16 * mt + lrow;
        ldmatrix_x4(q[mt], sw0 + row * kRowBytes + (((b + lunit) ^ (row & 7)) << 4));
      }
    }
    if (b < 7) load_b<NT>(ps, kc, b + 1, t, bq[(b + 1) & 1]);
    const int bb = b & 1;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      uint32_t dg[4], d8[4];  // rows g and g + 8 of the m-tile
      decode_e2m1x8(q[mt][2 * bb], dg);
      decode_e2m1x8(q[mt][2 * bb + 1], d8);
      const float s_g = stage_scale<kExact>(sc[mt][0], b), s_g8 = stage_scale<kExact>(sc[mt][1], b);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint4& bv = bq[b & 1][nt];
        float d[4];
        mma_f16_zero(d, dg[0], d8[0], dg[1], d8[1], bv.x, bv.y);
        mma_f16(d, dg[2], d8[2], dg[3], d8[3], bv.z, bv.w);
        acc[mt][nt][0] = fmaf(d[0], s_g, acc[mt][nt][0]);
        acc[mt][nt][1] = fmaf(d[1], s_g, acc[mt][nt][1]);
        acc[mt][nt][2] = fmaf(d[2], s_g8, acc[mt][nt][2]);
        acc[mt][nt][3] = fmaf(d[3], s_g8, acc[mt][nt][3]);
      }
    }
  }
}

template <int NT>
__device__ __forceinline__ void compute_stage_any(const uint8_t* sw, const uint8_t* ss, const Pass& ps,
                                                  int kc, int chunks, int lane, float (&acc)[2][kMaxNT][4]) {
  // Next stage's x plane rows into L1 (lane t: the t-th 128-byte line of its column's 512 B).
  if (kc + 1 < chunks) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      if (ps.bcol[nt] != nullptr)
        asm volatile("prefetch.global.L1 [%0];" ::"l"(ps.bcol[nt] + (kc + 1) * kChunkK + (lane & 3) * 64));
  }
  const uint2 mine = *reinterpret_cast<const uint2*>(ss + lane * 8);  // row `lane`'s 8 scales
  if (__any_sync(0xffffffffu, has_00_or_ff(mine.x) || has_00_or_ff(mine.y)))
    compute_stage<NT, true>(sw, ss, ps, kc, lane, acc);
  else
    compute_stage<NT, false>(sw, ss, ps, kc, lane, acc);
}

// Sums the plane columns of each token ((h2 + h1) + h0), scales by 2^(14 − c), writes.
template <int NT>
__device__ __forceinline__ void finish_pass(const Args& p, const Cursor& c, const Pass& ps, int lane,
                                            const float (&acc)[2][kMaxNT][4]) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float v0 = acc[mt][nt][2 * h], v1 = acc[mt][nt][2 * h + 1];  // cols 2t, 2t+1
        const float a = __shfl_down_sync(0xffffffffu, v0, 1);             // col 2t+2
        const float b = __shfl_down_sync(0xffffffffu, v1, 1);             // col 2t+3
        // t = 0: token 0 = cols 0, 1, 2; t = 1: token 1 = cols 3, 4, 5.
        const float sum = t == 0 ? (a + v1) + v0 : (b + a) + v1;
        if (t < 2 && ps.out_off[nt] >= 0) {
          const int row = c.n0 + 16 * mt + g + 8 * h;
          p.out[ps.out_off[nt] + row] = scalbnf(sum, ps.out_exp[nt]);
        }
      }
}

template <int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[2][kMaxNT][4]) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < kMaxNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
}

#ifndef DEEPINFER_EMMA_HELPERS_ONLY  // experts_wg.cu takes the helpers above, not this kernel
// Persistent grid; every warp owns the contiguous item range [T·w / W, T·(w+1) / W) of the flat
// list (active expert-major, 32-row groups) and streams it through its own cp.async ring: no
// block-level synchronisation, weights of the next item in flight while the current one ends.
__global__ void __launch_bounds__(kThreads, 2) experts_mma_kernel(const Args p) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint8_t* sw = smem + warp * kWarpSmem;  // [kStages][kWStage]
  uint8_t* ss = sw + kStages * kWStage;   // [kStages][kSStage]
  const int n_active = __ldg(p.act_off + p.num_experts);
  const int64_t T = static_cast<int64_t>(n_active) * p.groups;
  const int64_t W = static_cast<int64_t>(gridDim.x) * kWarps;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t i0 = T * w / W, i1 = T * (w + 1) / W;
  if (i0 >= i1) return;  // warp-uniform; nothing below synchronises more than the warp
  Cursor pc, cc;
  set_item(p, i0, pc);
  cc = pc;
  int pj = 0;
#pragma unroll 1
  for (int s = 0; s < kStages - 1; ++s, ++pj) {
    if (pc.item < i1) {
      issue_stage(p, pc, sw + (pj % kStages) * kWStage, ss + (pj % kStages) * kSStage, lane);
      advance(p, pc, i1);
    }
    cp_async_commit();
  }
  float acc[2][kMaxNT][4];
  Pass ps;
  int cj = 0;
#pragma unroll 1
  while (cc.item < i1) {
    cp_async_wait<kStages - 2>();
    __syncwarp();  // stage cj visible to every lane; every lane is done with stage cj − 1's slot
    if (pc.item < i1) {
      issue_stage(p, pc, sw + (pj % kStages) * kWStage, ss + (pj % kStages) * kSStage, lane);
      advance(p, pc, i1);
    }
    cp_async_commit();
    ++pj;
    if (cc.kc == 0) {
      setup_pass(p, cc, lane, ps);
      zero_acc<kMaxNT>(acc);
    }
    const uint8_t* w_slot = sw + (cj % kStages) * kWStage;
    const uint8_t* s_slot = ss + (cj % kStages) * kSStage;
    const bool last = cc.kc == p.chunks - 1;
    if (ps.nt == 1) {
      compute_stage_any<1>(w_slot, s_slot, ps, cc.kc, p.chunks, lane, acc);
      if (last) finish_pass<1>(p, cc, ps, lane, acc);
    } else if (ps.nt == 2) {
      compute_stage_any<2>(w_slot, s_slot, ps, cc.kc, p.chunks, lane, acc);
      if (last) finish_pass<2>(p, cc, ps, lane, acc);
    } else {
      compute_stage_any<4>(w_slot, s_slot, ps, cc.kc, p.chunks, lane, acc);
      if (last) finish_pass<4>(p, cc, ps, lane, acc);
    }
    advance(p, cc, i1);
    ++cj;
  }
  cp_async_wait<0>();
}
#endif  // DEEPINFER_EMMA_HELPERS_ONLY

}  // namespace deepinfer::cuda::kernels::emma
