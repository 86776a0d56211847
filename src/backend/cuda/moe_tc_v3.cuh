// Grouped routed-expert GEMM for FP4 experts, "v3" (env DEEPINFER_CUDA_MOE_TC=v3): the per-element
// arithmetic of v2 (moe_tc.cuh) — hence of v1 — unchanged, so every slot gets exactly v2's bits:
// the same bf16 term planes (moe_tc_split_terms, permuted k order), the same fragment contents,
// the same MMA order per accumulator (per k32 sub-stage: k-step 0 terms x_2, x_1, x_0, then
// k-step 1; the first MMA of a scale block takes C = 0) and the same promotion
// acc = fma(partial, scale, acc) after the last sub-stage of each scale block. What changes is
// the shape of the work, for the prefill batches of DeepSeek-V4 (2,048 tokens × top-6 over 256
// experts: ~48 rows per expert, so the m tile stays at 64 rows and the reuse is found along n):
//  - CTA tile 64 rows × 256 outputs (v2: × 128): the x terms (6 bytes per element, 12× the FP4
//    weight bytes) are streamed from L2 half as often per output;
//  - 8 warps as 2 (m) × 4 (n), warp tile 32 rows × 64 outputs (v2: 32 × 32): each A fragment
//    loaded from shared memory feeds 8 n-fragments (half v2's shared-memory reads per MMA), each
//    FP4 word decoded once per warp feeds both m-fragments and all 3 terms;
//  - m16 fragments past the tile's last grouped row are skipped (warp-uniform: a tile of 48 rows
//    runs 3 of its 4 m-fragments), where v2 multiplied the zero-filled rows;
//  - 4 stages of k64 (3 in flight, 136 KiB), one CTA per SM (the 128 accumulator registers of a
//    warp tile — partial + promoted — rule out a second one); the L1 keeps what the shared memory
//    does not take (the scale words are read through it).
// Shared-memory layouts are v2's (see moe_tc.cuh) at BM 64 / BN 256: 16-byte units XOR-swizzled,
// the A fragment loads (LDS.64), B word loads (LDS.32) and cp.async stores bank-conflict-free.
// Requirements (checked on the host, moe_tc_supported): K % 64 == 0, block_cols % 32 == 0,
// scaled weights, 64-row grouping.
#pragma once

#include <type_traits>

#include "backend/cuda/moe_tc.cuh"  // Args, kTerms, kBK, mma_bf16_zero_c; linear_tc.cuh helpers

namespace deepinfer::cuda::kernels::moe_tc_v3 {

using moe_tc::kBK;
using moe_tc::kTerms;

constexpr int BM = 64;          // grouped rows per tile (the 64-row grouping of moe_group)
constexpr int BN = 256;         // outputs per CTA
constexpr int WM = 2, WN = 4;   // warp grid
constexpr int MF = BM / WM / 16;  // m16 fragments per warp (2)
constexpr int NF = BN / WN / 8;   // n8 fragments per warp (8)
constexpr int kThreads = WM * WN * 32;
constexpr int kS = 4;           // pipeline stages of k64
constexpr int kAStage = kTerms * BM * kBK * 2;  // bytes: [3][BM][64] bf16
constexpr int kBStage = BN * 32;                // [BN][32 bytes] e2m1
constexpr int kSStage = 2 * BN * 4;             // [2 sub-stages][BN] f32
constexpr int kSmem = kS * (kAStage + kBStage + kSStage) + BM * 8 + BM * 4;
constexpr int kAPer = kTerms * BM * (kBK / 8) / kThreads;  // 16-byte A copies per thread (6)
constexpr int kRows = BM * 8 / kThreads;                  // A rows per thread per term (2)
constexpr int kBPer = BN * 2 / kThreads;                  // 16-byte B copies per thread (2)
constexpr int kSPer = 2 * BN / kThreads;                  // scale entries per thread (2)
static_assert(kRows * kThreads == BM * 8 && (kThreads / 8) % 4 == 0, "A copy mapping");
static_assert(kBPer * kThreads == 2 * BN && kSPer * kThreads == 2 * BN, "B / scale mapping");
static_assert(kThreads == BN, "scale entry j of thread tid is (sub-stage j, row tid)");
static_assert(kS >= 3, "the scale ring needs a stage of slack");

template <int M>
using Int = std::integral_constant<int, M>;

__global__ void __launch_bounds__(kThreads, 1) moe_tc_v3_kernel(const moe_tc::Args p) {
  constexpr int T = kThreads;
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* sA = smem;                                            // [kS][3][BM][64] bf16
  uint8_t* sB = sA + kS * kAStage;                               // [kS][BN][32] e2m1
  float* sS = reinterpret_cast<float*>(sB + kS * kBStage);       // [kS][2][BN]
  int64_t* o_off = reinterpret_cast<int64_t*>(sS + kS * 2 * BN);  // [BM]
  int32_t* x_row = reinterpret_cast<int32_t*>(o_off + BM);       // [BM]

  const int tid = threadIdx.x;
  const int t_idx = blockIdx.y;
  if (t_idx >= p.tile_off[p.num_experts]) return;  // the grid is an upper bound (whole CTA)
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
  const int64_t pos0 = p.row_off[e] + static_cast<int64_t>(t_idx - p.tile_off[e]) * BM;
  const int64_t pos_end = p.row_off[e + 1];
  // Grouped rows in this tile (1 .. BM): the same value in every thread.
  const int valid = static_cast<int>(pos_end - pos0 < BM ? pos_end - pos0 : BM);
  for (int r = tid; r < BM; r += T) {
    if (r < valid) {
      const int64_t slot = p.perm[pos0 + r];
      x_row[r] = static_cast<int32_t>(slot / p.x_div);
      o_off[r] = slot * p.ldo;
    } else {
      x_row[r] = -1;
      o_off[r] = -1;
    }
  }
  __syncthreads();

  const int nst = static_cast<int>(K / kBK);
  const int nsub = 2 * nst;
  const int64_t row_bytes = K / 2;

  // A copies (as v2): chunk j of this thread is term t = j / kRows, row tid/8 + (j % kRows)·T/8,
  // unit tid % 8; source row offsets (elements; −1: no row, zero-filled) and the swizzled base.
  int64_t a_row[kRows];
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) {
    const int32_t xr = x_row[tid / 8 + rr * (T / 8)];
    a_row[rr] = xr >= 0 ? static_cast<int64_t>(xr) * K + (tid % 8) * 8 : -1;
  }
  // Every chunk of this thread has r & 3 == (tid / 8) & 3 (T/8 is a multiple of 4).
  const uint32_t a_dst0 =
      static_cast<uint32_t>(((tid / 8) * kBK + (((tid % 8) ^ (((tid / 8) & 3) << 1)) * 8)) * 2);
  // B copies: chunk c = tid + j·T is row bn = c / 2 = tid/2 + j·T/2, unit bu = tid % 2
  // (= sub-stage), stored at unit bu ^ ((bn >> 2) & 1) of the row's 32 bytes.
  const int bu = tid & 1;
  const uint8_t* b_src[kBPer];
  uint32_t b_dst[kBPer];
  bool b_ok[kBPer];
#pragma unroll
  for (int j = 0; j < kBPer; ++j) {
    const int bn = tid / 2 + j * (T / 2);
    b_ok[j] = n0 + bn < N;
    b_src[j] = wb + (b_ok[j] ? (n0 + bn) * row_bytes : 0) + bu * 16;
    b_dst[j] = static_cast<uint32_t>(bn * 32 + ((bu ^ ((bn >> 2) & 1)) * 16));
  }
  // Scales owned by this thread: weight row sn = tid, sub-stages 0 and 1 of each stage (decoded
  // into sS[slot][j][tid]).
  const int64_t s_row = n0 + tid < N ? ((n0 + tid) / p.br) * p.scale_cols : -1;
  const int spb = static_cast<int>(p.bc / 32);  // k32 sub-stages per scale block

  auto issue = [&](int s) {
    if (s < nst) {
      const int slot = s % kS;
      const int64_t k0 = static_cast<int64_t>(s) * kBK;
      uint8_t* adst = sA + slot * kAStage;
#pragma unroll
      for (int j = 0; j < kAPer; ++j) {
        const int t = j / kRows, rr = j % kRows;
        const bool ok = a_row[rr] >= 0;
        const uint32_t dst = a_dst0 + static_cast<uint32_t>((t * BM + rr * (T / 8)) * kBK * 2);
        tc::cp_async16(adst + dst, ok ? p.terms + t * p.plane + a_row[rr] + k0 : p.terms, ok ? 16 : 0);
      }
      uint8_t* bdst = sB + slot * kBStage;
#pragma unroll
      for (int j = 0; j < kBPer; ++j)
        tc::cp_async16(bdst + b_dst[j], b_ok[j] ? b_src[j] + k0 / 2 : wb, b_ok[j] ? 16 : 0);
    }
    tc::cp_async_commit();  // always: keeps the group count uniform
  };
  // ue8m0 scales of 32 columns (the checkpoints' format): a stage's two scale bytes of a row are
  // adjacent (s_row + 2s, even: scale_cols = K / 32 is even), read as one 16-bit word — one load
  // of 32 rows per warp and stage instead of two.
  const bool pair16 = !p.scale_f32 && spb == 1 && (reinterpret_cast<uintptr_t>(sc) & 1) == 0;
  auto load_scales = [&](int s, uint32_t (&raw)[kSPer]) {
    static_assert(kSPer == 2, "two sub-stages per thread");
    raw[0] = raw[1] = 0u;
    if (s >= nst || s_row < 0) return;
    if (pair16) {
      const uint32_t w =
          __ldg(reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(sc) + s_row + 2 * s));
      raw[0] = w & 0xFFu;  // little endian: the lower address (sub-stage 0) is the low byte
      raw[1] = w >> 8;
      return;
    }
#pragma unroll
    for (int j = 0; j < kSPer; ++j) {
      const int64_t idx = s_row + (2 * s + j) / spb;
      raw[j] = p.scale_f32 ? __float_as_uint(__ldg(static_cast<const float*>(sc) + idx))
                           : static_cast<uint32_t>(__ldg(static_cast<const uint8_t*>(sc) + idx));
    }
  };
  auto store_scale = [&](int s, int j, uint32_t raw) {
    const float v = s_row < 0 ? 0.f : p.scale_f32 ? __uint_as_float(raw)
                                                  : tc::ue8m0_f32(static_cast<uint8_t>(raw));
    sS[(s % kS) * 2 * BN + j * BN + tid] = v;
  };

  const int warp = tid / 32, lane = tid % 32, g = lane >> 2, q = lane & 3;
  const int row_w = (warp / WN) * (BM / WM), col_w = (warp % WN) * NF * 8;
  // Active m16 fragments of this warp (0 .. MF): those holding at least one grouped row.
  const int mf_act = valid <= row_w ? 0 : valid - row_w >= MF * 16 ? MF : (valid - row_w + 15) / 16;
  float acc[MF][NF][4], part[MF][NF][4];
#pragma unroll
  for (int i = 0; i < MF; ++i)
#pragma unroll
    for (int j = 0; j < NF; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = part[i][j][c] = 0.f;

  // One k32 sub-stage h of a landed stage for the first M m-fragments; kFresh: the first
  // sub-stage of a scale block (C = 0). Per accumulator: k-step 0 terms x_2, x_1, x_0, then
  // k-step 1 — v2's order; between two MMAs of one accumulator the warp issues the other
  // M·NF − 1 accumulators' MMAs.
  auto compute = [&](const uint8_t* a_st, const uint8_t* b_st, int h, auto fresh_tag, auto m_tag) {
    constexpr bool kFresh = decltype(fresh_tag)::value;
    constexpr int M = decltype(m_tag)::value;
    uint32_t bv[NF];
#pragma unroll
    for (int nf = 0; nf < NF; ++nf) {
      const int n = col_w + nf * 8 + g;
      bv[nf] = *reinterpret_cast<const uint32_t*>(b_st + n * 32 + ((h ^ ((n >> 2) & 1)) * 16) + q * 4);
    }
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      // B: k 8q+4ks .. +3 of column n (two bf16x2): the low / high 16 bits of the 4 code bytes.
      uint32_t b[NF][2];
#pragma unroll
      for (int nf = 0; nf < NF; ++nf) tc::e2m1x4_to_bf16x4(bv[nf] >> (16 * ks), b[nf][0], b[nf][1]);
      // A: rows g and g+8, k 8q+4ks .. +3 (8 bytes: x = positions 2q..2q+1, y = 2q+8..+9).
      const int ua = h * 4 + ks * 2 + (q >> 1);  // unit of the permuted term row
      const int off = ((ua ^ ((g & 3) << 1)) * 16) + (q & 1) * 8;  // r & 3 == g & 3 == (r+8) & 3
      uint2 a[M][kTerms][2];
#pragma unroll
      for (int mf = 0; mf < M; ++mf) {
        const int r = row_w + mf * 16 + g;
#pragma unroll
        for (int t = 0; t < kTerms; ++t) {
          a[mf][t][0] = *reinterpret_cast<const uint2*>(a_st + (t * BM + r) * (kBK * 2) + off);
          a[mf][t][1] = *reinterpret_cast<const uint2*>(a_st + (t * BM + r + 8) * (kBK * 2) + off);
        }
      }
#pragma unroll
      for (int t = kTerms - 1; t >= 0; --t)
#pragma unroll
        for (int mf = 0; mf < M; ++mf)
#pragma unroll
          for (int nf = 0; nf < NF; ++nf) {
            const uint2& r0 = a[mf][t][0];
            const uint2& r8 = a[mf][t][1];
            if (kFresh && ks == 0 && t == kTerms - 1)
              moe_tc::mma_bf16_zero_c(part[mf][nf], r0.x, r8.x, r0.y, r8.y, b[nf][0], b[nf][1]);
            else
              tc::mma_bf16(part[mf][nf], r0.x, r8.x, r0.y, r8.y, b[nf][0], b[nf][1]);
          }
    }
  };
  auto promote = [&](const float* s_st, int h, auto m_tag) {
    constexpr int M = decltype(m_tag)::value;
    const float* srow = s_st + h * BN + col_w + 2 * q;
#pragma unroll
    for (int nf = 0; nf < NF; ++nf) {
      const float2 s2 = *reinterpret_cast<const float2*>(srow + nf * 8);
#pragma unroll
      for (int mf = 0; mf < M; ++mf)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          acc[mf][nf][c] = fmaf(part[mf][nf][c], (c & 1) ? s2.y : s2.x, acc[mf][nf][c]);
    }
  };
  // One sub-stage for this warp's active fragments (the branch is warp-uniform and the same for
  // the whole CTA).
  auto sub_stage = [&](const uint8_t* a_st, const uint8_t* b_st, const float* s_st, int h, bool fresh,
                       bool last, auto m_tag) {
    if (fresh) compute(a_st, b_st, h, std::true_type{}, m_tag);
    else compute(a_st, b_st, h, std::false_type{}, m_tag);
    if (last) promote(s_st, h, m_tag);
  };

  // Prologue: stages 0 .. kS-2 in flight; scales of stages 0 .. kS-3 decoded now, stage kS-2's
  // words in flight in `sraw` (decoded in iteration 0).
#pragma unroll
  for (int s = 0; s < kS - 1; ++s) issue(s);
  uint32_t sraw[kSPer];
#pragma unroll
  for (int s = 0; s < kS - 2; ++s) {
    load_scales(s, sraw);
#pragma unroll
    for (int j = 0; j < kSPer; ++j) store_scale(s, j, sraw[j]);
  }
  load_scales(kS - 2, sraw);

  for (int i = 0; i < nst; ++i) {
    tc::cp_async_wait<kS - 2>();  // stage i landed (this thread's copies)
    __syncthreads();  // everyone's copies of stage i and its decoded scales visible; stage i-1 consumed
    issue(i + kS - 1);
    // Scale words of stage i+kS-2 (loaded one iteration ago) -> its ring slot (read at iteration
    // i+kS-2 ≥ i+1, after a barrier; the slot's old stage i-2 was consumed before this barrier).
#pragma unroll
    for (int j = 0; j < kSPer; ++j) store_scale(i + kS - 2, j, sraw[j]);
    load_scales(i + kS - 1, sraw);
    const uint8_t* a_st = sA + (i % kS) * kAStage;
    const uint8_t* b_st = sB + (i % kS) * kBStage;
    const float* s_st = sS + (i % kS) * 2 * BN;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * i + h;  // k32 sub-stage index
      const bool fresh = j % spb == 0, last = (j + 1) % spb == 0 || j == nsub - 1;
      static_assert(MF == 2, "the dispatch below lists M = 1, 2");
      if (mf_act == 2) sub_stage(a_st, b_st, s_st, h, fresh, last, Int<2>{});
      else if (mf_act == 1) sub_stage(a_st, b_st, s_st, h, fresh, last, Int<1>{});
    }
  }
  tc::cp_async_wait<0>();

#pragma unroll
  for (int mf = 0; mf < MF; ++mf) {
    if (mf >= mf_act) continue;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = row_w + mf * 16 + g + 8 * hh;
      const int64_t off = o_off[r];
      if (off < 0) continue;
#pragma unroll
      for (int nf = 0; nf < NF; ++nf)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int64_t col = n0 + col_w + nf * 8 + 2 * q + j;
          if (col < N) p.out[off + col] = acc[mf][nf][2 * hh + j];
        }
    }
  }
}

}  // namespace deepinfer::cuda::kernels::moe_tc_v3
