// Grouped routed-expert GEMM for FP4 (e2m1, ue8m0 / f32 group scales) experts, "v2": the same
// per-element arithmetic as tc_kernel<2, 3, ...> in linear_tc.cuh (bit-identical output: same
// 3-term bf16 split of x, same k32 sub-stage fragment permutation, same MMA order per
// accumulator: k-step 0 terms x_2, x_1, x_0 then k-step 1, same per-scale-block partial promoted
// with acc = fma(partial, scale, acc)), restructured for throughput:
//  - x is split into its bf16 terms ONCE per row by a pre-pass (moe_tc.cu split_terms) instead
//    of once per CTA and stage; the kernel streams the three bf16 planes with cp.async straight
//    into the layout the fragments are read from (no fp32 staging, no convert step, no second
//    smem buffer);
//  - a pipeline stage holds k = 64 (two k32 sub-stages: half the barriers), kS stages in flight
//    (the copy of stage i+kS-1 is issued while stage i is computed);
//  - the scales: one thread per (weight row, sub-stage) loads the scale word of the stage it
//    issues with a plain global load, decodes it one iteration later into a shared ring (the
//    load's latency hides behind a whole stage of MMAs, no warp waits on it at a block start);
//    the warps read the decoded float at promotion time;
//  - the first MMA of a scale block takes C = 0 directly (no zeroing moves: same values in).
// Shared-memory layouts (16-byte units XOR-swizzled so fragment loads and cp.async stores are
// bank-conflict-free):
//   A: [kS][3 terms][BM rows][64 k] bf16 in the permuted order of the term planes (moe_tc.h:
//      per 32 k, k-step 0's 4-k pieces of q = 0..3, then k-step 1's), 16-byte unit c of row r at
//      unit c ^ 2·(r & 3): a lane's 8-byte piece (rows g, g+8; q) is one conflict-free load.
//   B: [kS][BN rows][32 bytes] e2m1; unit h (sub-stage h) of row n at unit h ^ ((n >> 2) & 1).
//   scales: [kS][2 sub-stages][BN] f32 (0 past N).
// Requirements (checked on the host): K % 64 == 0, block_cols % 32 == 0, scaled weights.
#pragma once

#include <type_traits>

#include "backend/cuda/linear_tc.cuh"  // cp_async*, mma_bf16, e2m1x4_to_bf16x4, ue8m0_f32

namespace deepinfer::cuda::kernels::moe_tc {

constexpr int kTerms = 3;
constexpr int kBK = 64;   // k per pipeline stage
constexpr int kNF = 4;    // n8 fragments per warp

struct Args {
  const uint16_t* terms = nullptr;  // [3][x_rows][K] bf16 terms of x (x_0 = hi, x_1, x_2)
  int64_t plane = 0;                // x_rows · K: elements between term planes
  int64_t x_div = 1;                // x row of slot i is i / x_div
  const void* const* w_table = nullptr;  // per expert [N, K] e2m1 (K/2 bytes per row)
  const void* const* s_table = nullptr;  // per expert scales [ceil(N/br), scale_cols]
  const int32_t* perm = nullptr;     // sorted position -> slot
  const int32_t* row_off = nullptr;  // [E+1]
  const int32_t* tile_off = nullptr; // [E+1] (tiles of BM rows)
  int32_t num_experts = 0;
  int32_t scale_f32 = 0;
  int64_t N = 0, K = 0, br = 1, bc = 32, scale_cols = 0;
  float* out = nullptr;  // [slots, ldo]
  int64_t ldo = 0;
};

__device__ __forceinline__ void mma_bf16_zero_c(float (&c)[4], uint32_t a0, uint32_t a1,
                                                uint32_t a2, uint32_t a3, uint32_t b0,
                                                uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.f));
}

template <int BM, int WN, int kS>
struct Shape {
  static constexpr int WM = 2;
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int BN = WN * kNF * 8;
  static constexpr int MF = BM / WM / 16;
  static constexpr int kAStage = kTerms * BM * kBK * 2;  // bytes
  static constexpr int kBStage = BN * 32;
  static constexpr int kSStage = 2 * BN * 4;
  static constexpr int kAChunks = kTerms * BM * (kBK / 8);  // 16-byte copies per stage
  static constexpr int kAPer = kAChunks / kThreads;
  static constexpr int kSmem = kS * (kAStage + kBStage + kSStage) + BM * 8 + BM * 4;
  static_assert(BM % (WM * 16) == 0, "BM must be a multiple of 32");
  static_assert(kAChunks % kThreads == 0, "A copies must divide evenly");
  static_assert(2 * BN == kThreads, "one B copy and one scale per thread");
  static_assert(kS >= 3, "the scale ring needs a stage of slack");
};

template <int BM, int WN, int kS, int kMinBlocks>
__global__ void __launch_bounds__(2 * WN * 32, kMinBlocks) moe_tc_kernel(const Args p) {
  using Sh = Shape<BM, WN, kS>;
  constexpr int T = Sh::kThreads, BN = Sh::BN, MF = Sh::MF, WM = Sh::WM;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* sA = smem;                                   // [kS][3][BM][64] bf16
  uint8_t* sB = sA + kS * Sh::kAStage;                  // [kS][BN][32] e2m1
  float* sS = reinterpret_cast<float*>(sB + kS * Sh::kBStage);  // [kS][2][BN]
  int64_t* o_off = reinterpret_cast<int64_t*>(sS + kS * 2 * BN);  // [BM]
  int32_t* x_row = reinterpret_cast<int32_t*>(o_off + BM);      // [BM]

  const int tid = threadIdx.x;
  const int t_idx = blockIdx.y;
  if (t_idx >= p.tile_off[p.num_experts]) return;  // the grid is an upper bound
  int lo = 0, hi = p.num_experts - 1;               // the expert owning tile t_idx
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.tile_off[mid] <= t_idx) lo = mid;
    else hi = mid - 1;
  }
  const int e = lo;
  const int64_t N = p.N, K = p.K;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const uint8_t* wb = static_cast<const uint8_t*>(p.w_table[e]);
  const void* sc = p.s_table[e];
  {
    const int64_t pos0 = p.row_off[e] + static_cast<int64_t>(t_idx - p.tile_off[e]) * BM;
    const int64_t pos_end = p.row_off[e + 1];
    for (int r = tid; r < BM; r += T) {
      const int64_t pos = pos0 + r;
      if (pos < pos_end) {
        const int64_t slot = p.perm[pos];
        x_row[r] = static_cast<int32_t>(slot / p.x_div);
        o_off[r] = slot * p.ldo;
      } else {
        x_row[r] = -1;
        o_off[r] = -1;
      }
    }
  }
  __syncthreads();

  const int nst = static_cast<int>(K / kBK);
  const int nsub = 2 * nst;
  const int64_t row_bytes = K / 2;

  // This thread's A copies, fixed for every stage: chunk u = tid + j·T is term t = j / kRows,
  // row r = tid / 8 + (j % kRows)·T/8, unit c = tid % 8 (kRows = BM·8 / T rows per thread). The
  // source row offsets (elements; −1: no row, zero-filled) and the swizzled destination base.
  constexpr int kRows = BM * 8 / T;
  static_assert(kRows * T == BM * 8 && (T / 8) % 4 == 0, "A copy mapping");
  int64_t a_row[kRows];
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) {
    const int32_t xr = x_row[tid / 8 + rr * (T / 8)];
    a_row[rr] = xr >= 0 ? static_cast<int64_t>(xr) * K + (tid % 8) * 8 : -1;
  }
  // Every chunk of this thread has r & 3 == (tid / 8) & 3 (T/8 is a multiple of 4).
  const uint32_t a_dst0 =
      static_cast<uint32_t>(((tid / 8) * kBK + (((tid % 8) ^ (((tid / 8) & 3) << 1)) * 8)) * 2);
  // B copy: row bn = tid / 2, unit bc_ = tid % 2 (= sub-stage).
  const int bn = tid >> 1, bu = tid & 1;
  const bool b_ok = n0 + bn < N;
  const uint8_t* b_src = wb + (b_ok ? (n0 + bn) * row_bytes : 0) + bu * 16;
  const uint32_t b_dst = static_cast<uint32_t>(bn * 32 + ((bu ^ ((bn >> 2) & 1)) * 16));
  // Scale owned by this thread: sub-stage sh of weight row sn (decoded into sS[slot][sh][sn]).
  const int sh = tid / BN, sn = tid % BN;
  const int64_t s_row = n0 + sn < N ? ((n0 + sn) / p.br) * p.scale_cols : -1;
  const int spb = static_cast<int>(p.bc / 32);  // k32 sub-stages per scale block

  auto issue = [&](int s) {
    if (s < nst) {
      const int slot = s % kS;
      const int64_t k0 = static_cast<int64_t>(s) * kBK;
      uint8_t* adst = sA + slot * Sh::kAStage;
#pragma unroll
      for (int j = 0; j < Sh::kAPer; ++j) {
        const int t = j / kRows, rr = j % kRows;
        const bool ok = a_row[rr] >= 0;
        const uint32_t dst = a_dst0 + static_cast<uint32_t>((t * BM + rr * (T / 8)) * kBK * 2);
        tc::cp_async16(adst + dst, ok ? p.terms + t * p.plane + a_row[rr] + k0 : p.terms, ok ? 16 : 0);
      }
      tc::cp_async16(sB + slot * Sh::kBStage + b_dst, b_ok ? b_src + k0 / 2 : wb, b_ok ? 16 : 0);
    }
    tc::cp_async_commit();  // always: keeps the group count uniform
  };
  auto load_scale = [&](int s) -> uint32_t {
    if (s >= nst || s_row < 0) return 0u;
    const int64_t idx = s_row + (2 * s + sh) / spb;
    return p.scale_f32 ? __float_as_uint(__ldg(static_cast<const float*>(sc) + idx))
                       : static_cast<uint32_t>(__ldg(static_cast<const uint8_t*>(sc) + idx));
  };
  auto store_scale = [&](int s, uint32_t raw) {
    const float v = s_row < 0 ? 0.f : p.scale_f32 ? __uint_as_float(raw)
                                                  : tc::ue8m0_f32(static_cast<uint8_t>(raw));
    sS[(s % kS) * 2 * BN + tid] = v;  // tid == sh·BN + sn
  };

  const int warp = tid / 32, lane = tid % 32, g = lane >> 2, q = lane & 3;
  const int row_w = (warp / WN) * (BM / WM), col_w = (warp % WN) * kNF * 8;
  float acc[MF][kNF][4], part[MF][kNF][4];
#pragma unroll
  for (int i = 0; i < MF; ++i)
#pragma unroll
    for (int j = 0; j < kNF; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = part[i][j][c] = 0.f;

  // One k32 sub-stage h of a landed stage; kFresh: the first of a scale block (C = 0). Per
  // accumulator the MMAs run k-step 0 (terms x_2, x_1, x_0) then k-step 1, as in v1; between two
  // MMAs of one accumulator the warp issues the other MF·kNF − 1 accumulators' MMAs, so the
  // tensor pipe never waits on an accumulator dependency.
  auto compute = [&](const uint8_t* a_st, const uint8_t* b_st, int h, auto fresh_tag) {
    constexpr bool kFresh = decltype(fresh_tag)::value;
    uint32_t bv[kNF];
#pragma unroll
    for (int nf = 0; nf < kNF; ++nf) {
      const int n = col_w + nf * 8 + g;
      bv[nf] = *reinterpret_cast<const uint32_t*>(b_st + n * 32 + ((h ^ ((n >> 2) & 1)) * 16) + q * 4);
    }
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      // B: k 8q+4ks .. +3 of column n (two bf16x2): the low / high 16 bits of the 4 code bytes.
      uint32_t b[kNF][2];
#pragma unroll
      for (int nf = 0; nf < kNF; ++nf) tc::e2m1x4_to_bf16x4(bv[nf] >> (16 * ks), b[nf][0], b[nf][1]);
      // A: rows g and g+8, k 8q+4ks .. +3 (8 bytes: x = positions 2q..2q+1, y = 2q+8..+9).
      const int ua = h * 4 + ks * 2 + (q >> 1);  // unit of the permuted term row
      uint2 a[MF][kTerms][2];
#pragma unroll
      for (int mf = 0; mf < MF; ++mf) {
        const int r = row_w + mf * 16 + g;  // r & 3 == g & 3 == (r + 8) & 3
        const int off = ((ua ^ ((g & 3) << 1)) * 16) + (q & 1) * 8;
#pragma unroll
        for (int t = 0; t < kTerms; ++t) {
          a[mf][t][0] = *reinterpret_cast<const uint2*>(a_st + (t * BM + r) * (kBK * 2) + off);
          a[mf][t][1] = *reinterpret_cast<const uint2*>(a_st + (t * BM + r + 8) * (kBK * 2) + off);
        }
      }
#pragma unroll
      for (int t = kTerms - 1; t >= 0; --t)
#pragma unroll
        for (int mf = 0; mf < MF; ++mf)
#pragma unroll
          for (int nf = 0; nf < kNF; ++nf) {
            const uint2& r0 = a[mf][t][0];
            const uint2& r8 = a[mf][t][1];
            if (kFresh && ks == 0 && t == kTerms - 1)
              mma_bf16_zero_c(part[mf][nf], r0.x, r8.x, r0.y, r8.y, b[nf][0], b[nf][1]);
            else
              tc::mma_bf16(part[mf][nf], r0.x, r8.x, r0.y, r8.y, b[nf][0], b[nf][1]);
          }
    }
  };
  auto promote = [&](const float* s_st, int h) {
    const float* srow = s_st + h * BN + col_w + 2 * q;
#pragma unroll
    for (int nf = 0; nf < kNF; ++nf) {
      const float2 s2 = *reinterpret_cast<const float2*>(srow + nf * 8);
#pragma unroll
      for (int mf = 0; mf < MF; ++mf)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          acc[mf][nf][c] = fmaf(part[mf][nf][c], (c & 1) ? s2.y : s2.x, acc[mf][nf][c]);
    }
  };

  // Prologue: stages 0 .. kS-2 in flight; scales of stages 0 .. kS-3 decoded now, stage kS-2's
  // word in flight in `sraw` (decoded in iteration 0).
#pragma unroll
  for (int s = 0; s < kS - 1; ++s) issue(s);
#pragma unroll
  for (int s = 0; s < kS - 2; ++s) store_scale(s, load_scale(s));
  uint32_t sraw = load_scale(kS - 2);

  for (int i = 0; i < nst; ++i) {
    tc::cp_async_wait<kS - 2>();  // stage i landed (this thread's copies)
    __syncthreads();  // everyone's copies of stage i and its decoded scales visible; stage i-1 consumed
    issue(i + kS - 1);
    // Scale word of stage i+kS-2 (loaded one iteration ago) -> its ring slot (read at iteration
    // i+kS-2 ≥ i+1, after a barrier; the slot's old stage i-2 was consumed before this barrier).
    store_scale(i + kS - 2, sraw);
    sraw = load_scale(i + kS - 1);
    const uint8_t* a_st = sA + (i % kS) * Sh::kAStage;
    const uint8_t* b_st = sB + (i % kS) * Sh::kBStage;
    const float* s_st = sS + (i % kS) * 2 * BN;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * i + h;  // k32 sub-stage index
      if (j % spb == 0) compute(a_st, b_st, h, std::true_type{});
      else compute(a_st, b_st, h, std::false_type{});
      if ((j + 1) % spb == 0 || j == nsub - 1) promote(s_st, h);
    }
  }
  tc::cp_async_wait<0>();

#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = row_w + mf * 16 + g + 8 * hh;
      const int64_t off = o_off[r];
      if (off < 0) continue;
#pragma unroll
      for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int64_t col = n0 + col_w + nf * 8 + 2 * q + j;
          if (col < N) p.out[off + col] = acc[mf][nf][2 * hh + j];
        }
    }
}

}  // namespace deepinfer::cuda::kernels::moe_tc
