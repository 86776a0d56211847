// Weight-streaming tensor-core kernel for decode-sized M (≤ 16 rows) with linear_tc's bits
// ("gemv_tc"; docs/cuda.md "Batch-invariant small-M products (session 7)").
//
// What is linear_tc's (linear_tc.cuh), kept identical here, per output element (m, n):
//  - x row m at MMA row m of one m16 fragment (rows ≥ M zero, as linear_tc's 16-row tile for
//    M ≤ 16), weight row n at MMA column n mod 8 (n8 fragments start at multiples of 8), the
//    same mma.sync m16n8k16 bf16 → fp32 (tc::mma_bf16), A = x terms, B = decoded weights;
//  - the same x split (x_0, x_1, x_2 with the NaN-remainder rule; elementwise, so where it is
//    computed does not matter), the same exact weight decoders (tc::e4m3x2_to_bf16x2,
//    tc::e2m1x4_to_bf16x4, bf16 as stored) and the same k permutation inside a k32 stage: lane q
//    holds k 8q..8q+7, k-step s takes k 8q+4s+{0,1} → positions 2q..2q+1, 8q+4s+{2,3} → 2q+8..+9;
//  - per stage: k-step 0 then 1, terms x_2, x_1, x_0, each accumulating into the block partial;
//  - zero operands past k_end (the split's end or K) and past row N, in the same 8-element
//    granules (K is a multiple of 8 for every format that passes linear_tc_supported);
//  - per scale block of bc columns (relative to the split start, a multiple of bc): partial from
//    zero, then acc = fmaf(partial, scale, acc) at the block's last stage or the split's last
//    stage; scale decoded as linear_tc does (f32 bits or tc::ue8m0_f32), 1.f for bf16 (bc 128);
//  - the same split-K boundaries (the caller's k_split) and the same split reduction kernel
//    (linear_tc_reduce_splits) over the same [split][M][G·N] workspace layout.
// So every MMA here sees the operands (A, B and C, all 16×8 elements) that the MMA of the same
// stage, k-step and term sees in linear_tc's BM = 16 tile, and every fp32 operation after the
// MMAs is the same: the output bits are equal by construction.
//
// What differs (the memory side): no shared-memory weight tile — each lane loads the weight bytes
// of its own B fragments straight into registers (8 k per lane per stage: 16 B bf16, 8 B e4m3,
// 4 B e2m1), kStep stages per load batch, the next batch in flight while the current one is
// multiplied. A CTA (4 warps) covers 128 weight rows (a warp 4 n8 fragments) over one split, so
// the grid is G·ceil(N/128) × splits CTAs (≥ 128 on every V4-Flash projection). The CTA splits its
// x slice into bf16 terms once per 16-stage chunk into shared memory (the A fragments are shared by
// the 4 warps); rows 8..15 of A are not stored when M ≤ 8.
#pragma once

#include "backend/cuda/linear_tc.cuh"

namespace deepinfer::cuda::kernels::tcg {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kNF = 4;                    // n8 fragments per warp
constexpr int kBN = kWarps * kNF * 8;     // weight rows per CTA (128)
constexpr int kChunk = 16;                // k32 stages of x terms staged per chunk (512 columns)
constexpr int kTerms = 3;

struct GemvTcArgs {
  const float* x = nullptr;     // [M, lda] fp32 (group g reads columns g·K ..)
  int64_t lda = 0;
  const uint8_t* w = nullptr;   // [G·N, K] stored
  const void* scale = nullptr;  // [ceil(G·N/br), scale_cols] ue8m0 / f32, or null (bf16)
  int32_t scale_f32 = 0;
  int64_t M = 0, N = 0, K = 0, br = 1, scale_cols = 0;
  int64_t bc = tc::kPromoteUnscaled;  // promotion interval (scale block columns, multiple of 32)
  int64_t k_split = 0;
  float* out = nullptr;         // out or the split workspace
  int64_t ldo = 0;              // G·N
  int64_t split_stride = 0;     // M·G·N
};

// Per format: stages per load batch (32 B of one weight row per lane per batch) and the lane's
// load unit for one stage (8 k).
template <int kFmt> struct GFmt;
template <> struct GFmt<0> { using W = uint4; static constexpr int kStep = 2; };
template <> struct GFmt<1> { using W = uint2; static constexpr int kStep = 4; };
template <> struct GFmt<2> { using W = uint32_t; static constexpr int kStep = 8; };

template <typename W> __device__ __forceinline__ W zero_w();
template <> __device__ __forceinline__ uint4 zero_w<uint4>() { return make_uint4(0, 0, 0, 0); }
template <> __device__ __forceinline__ uint2 zero_w<uint2>() { return make_uint2(0, 0); }
template <> __device__ __forceinline__ uint32_t zero_w<uint32_t>() { return 0u; }

template <typename W> __device__ __forceinline__ W load_w(const uint8_t* p) {
  return __ldg(reinterpret_cast<const W*>(p));
}

// B fragments of one stage from the lane's 8 k (k 8q..8q+7): exactly linear_tc's compute().
template <int kFmt>
__device__ __forceinline__ void decode_b(const typename GFmt<kFmt>::W& v, uint32_t (&b)[2][2]) {
  if constexpr (kFmt == 0) {
    b[0][0] = v.x;
    b[0][1] = v.y;
    b[1][0] = v.z;
    b[1][1] = v.w;
  } else if constexpr (kFmt == 1) {
    b[0][0] = tc::e4m3x2_to_bf16x2(v.x);
    b[0][1] = tc::e4m3x2_to_bf16x2(v.x >> 16);
    b[1][0] = tc::e4m3x2_to_bf16x2(v.y);
    b[1][1] = tc::e4m3x2_to_bf16x2(v.y >> 16);
  } else {
    tc::e2m1x4_to_bf16x4(v, b[0][0], b[0][1]);
    tc::e2m1x4_to_bf16x4(v >> 16, b[1][0], b[1][1]);
  }
}

// kRows: 8 (M ≤ 8: A rows 8..15 are zero registers) or 16.
template <int kFmt, int kRows>
__global__ void __launch_bounds__(kThreads)
gemv_tc_kernel(const GemvTcArgs p) {
  using F = GFmt<kFmt>;
  using W = typename F::W;
  constexpr int kStep = F::kStep;
  constexpr bool kScaled = kFmt != 0;
  static_assert(kChunk % (2 * kStep) == 0, "a chunk holds whole pairs of load batches");
  // x terms of one chunk: [kChunk stages][kTerms][kRows][32 k] bf16 (24 / 48 KB).
  __shared__ __align__(16) uint16_t abuf[kChunk * kTerms * kRows * tc::kBK];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, q = lane & 3;
  const int64_t N = p.N, K = p.K, M = p.M;
  const int64_t ntiles = (N + kBN - 1) / kBN;
  const int64_t grp = blockIdx.x / ntiles;
  const int64_t n0 = (blockIdx.x % ntiles) * kBN + warp * (kNF * 8);  // this warp's first row
  const int64_t row_bytes = tc::w_bytes<kFmt>(K);
  const uint8_t* wb = p.w + row_bytes * grp * N;
  const float* xg = p.x + grp * K;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.k_split;
  const int64_t k_end = k_begin + p.k_split < K ? k_begin + p.k_split : K;
  const int nst = k_end > k_begin ? static_cast<int>((k_end - k_begin + tc::kBK - 1) / tc::kBK) : 0;
  const int nsteps = (nst + kStep - 1) / kStep;

  // This lane's B rows (weight row n0 + 8f + g) and whether they exist.
  const uint8_t* wrow[kNF];
  bool row_ok[kNF];
#pragma unroll
  for (int f = 0; f < kNF; ++f) {
    const int64_t n = n0 + f * 8 + g;
    row_ok[f] = n < N;
    wrow[f] = wb + (row_ok[f] ? n : 0) * row_bytes;
  }
  // Loads of load batch st (stages st·kStep ..) into v; zero past k_end and past N, as linear_tc's
  // zero-filled copies. Batches past the split load nothing (never multiplied).
  auto load_batch = [&](W (&v)[kNF][kStep], int st) {
    if (st >= nsteps) return;
#pragma unroll
    for (int u = 0; u < kStep; ++u) {
      const int64_t k = k_begin + static_cast<int64_t>(st * kStep + u) * tc::kBK + 8 * q;
      const bool k_ok = k < k_end;
      const int64_t off = tc::w_bytes<kFmt>(k_ok ? k : 0);
#pragma unroll
      for (int f = 0; f < kNF; ++f) v[f][u] = row_ok[f] && k_ok ? load_w<W>(wrow[f] + off) : zero_w<W>();
    }
  };

  // x terms of stages cs .. cs + kChunk − 1 (those < nst), as linear_tc's convert().
  auto convert_chunk = [&](int cs) {
    const int nli = nst - cs < kChunk ? nst - cs : kChunk;
    for (int u = tid; u < nli * kRows * 8; u += kThreads) {
      const int li = u / (kRows * 8), r = (u / 8) % kRows, c = u % 8;
      const int64_t k = k_begin + static_cast<int64_t>(cs + li) * tc::kBK + c * 4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < M && k < k_end) v = __ldg(reinterpret_cast<const float4*>(xg + r * p.lda + k));
      float rr[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int t = 0; t < kTerms; ++t) {
        const __nv_bfloat162 h01 = __floats2bfloat162_rn(rr[0], rr[1]);
        const __nv_bfloat162 h23 = __floats2bfloat162_rn(rr[2], rr[3]);
        *reinterpret_cast<uint2*>(abuf + ((li * kTerms + t) * kRows + r) * tc::kBK + c * 4) =
            make_uint2(tc::bf16x2_bits(h01), tc::bf16x2_bits(h23));
        if (t + 1 < kTerms) {
          const float2 f01 = __bfloat1622float2(h01), f23 = __bfloat1622float2(h23);
          rr[0] -= f01.x;
          rr[1] -= f01.y;
          rr[2] -= f23.x;
          rr[3] -= f23.y;
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if (rr[i] != rr[i]) rr[i] = 0.f;  // ±inf x: the remainder inf − inf is not a term
        }
      }
    }
  };

  float acc[kNF][4], part[kNF][4];
#pragma unroll
  for (int f = 0; f < kNF; ++f)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[f][c] = part[f][c] = 0.f;

  // Scales of this lane's output columns n0 + 8f + 2q + j (linear_tc's srow / load / use).
  int32_t srow[kNF][2];
  uint32_t sraw[kNF][2];
#pragma unroll
  for (int f = 0; f < kNF; ++f)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t col = n0 + f * 8 + 2 * q + j;
      srow[f][j] = kScaled && col < N ? static_cast<int32_t>(((grp * N + col) / p.br) * p.scale_cols) : -1;
      sraw[f][j] = 0;
    }
  const int spb = static_cast<int>(p.bc / tc::kBK);          // stages per scale block
  const int32_t kb0 = static_cast<int32_t>(k_begin / p.bc);  // first scale block of this split

  // Stage i (li: its index in the staged chunk; v: its weights): linear_tc's compute() for the
  // single 16-row fragment, then its promotion rule.
  auto stage = [&](int i, int li, const W (&v)[kNF][kStep], int u) {
    if constexpr (kScaled) {
      if (i % spb == 0) {  // the block's raw scales, used at its last stage
        const int32_t kb = kb0 + i / spb;
#pragma unroll
        for (int f = 0; f < kNF; ++f)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            uint32_t r = 0;
            if (srow[f][j] >= 0) {
              const int32_t idx = srow[f][j] + kb;
              r = p.scale_f32 ? __float_as_uint(__ldg(static_cast<const float*>(p.scale) + idx))
                              : static_cast<uint32_t>(__ldg(static_cast<const uint8_t*>(p.scale) + idx));
            }
            sraw[f][j] = r;
          }
      }
    }
    uint32_t b[kNF][2][2];
#pragma unroll
    for (int f = 0; f < kNF; ++f) decode_b<kFmt>(v[f][u], b[f]);
    const uint16_t* as = abuf + li * kTerms * kRows * tc::kBK;
    uint4 a[kTerms][2];
#pragma unroll
    for (int t = 0; t < kTerms; ++t) {
      a[t][0] = *reinterpret_cast<const uint4*>(as + (t * kRows + g) * tc::kBK + q * 8);
      a[t][1] = kRows == 16 ? *reinterpret_cast<const uint4*>(as + (t * kRows + (g + 8) % kRows) * tc::kBK + q * 8)
                            : make_uint4(0, 0, 0, 0);
    }
    // Per accumulator: k-step 0 terms x_2, x_1, x_0, then k-step 1 (linear_tc's fixed order).
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int t = kTerms - 1; t >= 0; --t)
#pragma unroll
        for (int f = 0; f < kNF; ++f) {
          const uint4& r0 = a[t][0];
          const uint4& r8 = a[t][1];
          tc::mma_bf16(part[f], ks ? r0.z : r0.x, ks ? r8.z : r8.x, ks ? r0.w : r0.y,
                       ks ? r8.w : r8.y, b[f][ks][0], b[f][ks][1]);
        }
    if ((i + 1) % spb == 0 || i == nst - 1) {  // last stage of the block (or split): promote
#pragma unroll
      for (int f = 0; f < kNF; ++f)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float s = !kScaled ? 1.f
                          : srow[f][j] < 0 ? 0.f
                          : p.scale_f32 ? __uint_as_float(sraw[f][j])
                                        : tc::ue8m0_f32(static_cast<uint8_t>(sraw[f][j]));
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            acc[f][2 * h + j] = fmaf(part[f][2 * h + j], s, acc[f][2 * h + j]);
            part[f][2 * h + j] = 0.f;
          }
        }
    }
  };
  auto batch = [&](const W (&v)[kNF][kStep], int st, int cs) {
#pragma unroll
    for (int u = 0; u < kStep; ++u) {
      const int i = st * kStep + u;
      if (i < nst) stage(i, i - cs, v, u);
    }
  };

  W va[kNF][kStep], vb[kNF][kStep];
  load_batch(va, 0);
  for (int cs = 0; cs < nst; cs += kChunk) {
    if (cs > 0) __syncthreads();  // every warp is done with the previous chunk's terms
    convert_chunk(cs);
    __syncthreads();
    const int st_end = (cs + kChunk) / kStep < nsteps ? (cs + kChunk) / kStep : nsteps;
    // Pairs of batches (a chunk starts at an even batch): va holds batch st on entry.
    for (int st = cs / kStep; st < st_end; st += 2) {
      load_batch(vb, st + 1);
      batch(va, st, cs);
      if (st + 1 < st_end) {
        load_batch(va, st + 2);
        batch(vb, st + 1, cs);
      }
    }
  }

  // acc → out (or split plane blockIdx.y of the workspace): rows g (and g + 8), columns 2q, 2q+1.
#pragma unroll
  for (int h = 0; h < kRows / 8; ++h) {
    const int64_t m = g + 8 * h;
    if (m >= M) continue;
    float* o = p.out + blockIdx.y * p.split_stride + m * p.ldo + grp * N;
#pragma unroll
    for (int f = 0; f < kNF; ++f)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int64_t col = n0 + f * 8 + 2 * q + j;
        if (col < N) o[col] = acc[f][2 * h + j];
      }
  }
}

}  // namespace deepinfer::cuda::kernels::tcg
