// Tensor-core GEMM for stored-format weights (bf16 / e4m3 + block scales / e2m1 + group scales)
// against fp32 activations, fp32-accurate: out[m, n] = Σ_k x[m, k] · deq(w[n, k]).
//
// Arithmetic (per output element; fixed, independent of M and of the other rows):
//  - x is split into kTerms bf16 terms, x ≈ x_0 + x_1 + x_2 (x_t = bf16_rn(x − Σ_{u<t} x_u), each
//    remainder exact in fp32), the weight decoded to bf16 (bf16 / e4m3 / e2m1 values are exact in
//    bf16); one mma.sync m16n8k16 (bf16 in, fp32 accumulate) per term against the same weight
//    fragment, terms in the order x_2, x_1, x_0. With 3 terms the product is fp32-accurate.
//  - K is walked in stages of 32 (a k32 stage = two MMA k-steps: step s takes, of every 8
//    consecutive k, the 4 with (k mod 8) / 4 == s — a fixed permutation of k inside the stage
//    applied to A and B alike). Each scale block (block_cols, a multiple of 32; 128 for unscaled
//    bf16, scale 1) is accumulated from zero by the MMAs, then promoted in fp32:
//    acc = fma(partial, scale[n, kb], acc). The promotion also bounds how far the tensor core's
//    truncating accumulation can drift: at most 24 MMAs (FP8 / bf16) or 6 (FP4) per partial.
//  - A fixed split-K (k_split, chosen from N, K and the GPU only, never from M) writes split
//    partials that a second kernel sums in split order.
// So an element's bits depend only on its own x row and weight row (the MMA computes each
// element of D from its own row of A and column of B), never on M or the tile shape: the kernel
// is batch-invariant by construction and every BM instantiation gives the same bits.
//
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 register layouts relied on (PTX ISA,
// "Matrix Fragments for mma.m16n8k16"; g = lane / 4, q = lane % 4; a .b32 register holds two
// bf16, the lower k in the low half):
//   A (16×16, row-major) a[0]: (row g,   k 2q..2q+1)   a[1]: (row g+8, k 2q..2q+1)
//                        a[2]: (row g,   k 2q+8..+9)   a[3]: (row g+8, k 2q+8..+9)
//   B (16×8, "col": column n = weight row n)  b[0]: (k 2q..2q+1, n g)  b[1]: (k 2q+8..+9, n g)
//   C/D (16×8 fp32) c[0], c[1]: (row g, n 2q, 2q+1)   c[2], c[3]: (row g+8, n 2q, 2q+1)
// Since only the pairing of A's and B's k matters, lane q holds the 8 consecutive k 8q..8q+7 of
// a stage (one 16-byte bf16 load per A row, 8 / 4 / 16 weight bytes for e4m3 / e2m1 / bf16):
// k-step s uses k 8q+4s+{0,1} as positions 2q..2q+1 and k 8q+4s+{2,3} as positions 2q+8..+9.
//
// Pipeline: 4-stage cp.async ring holding raw fp32 x rows and raw weight bytes (zero-filled past
// K, past the split's end and past the last row); after a stage lands, the CTA splits its x tile
// once into a bf16 term buffer (double-buffered); warps then read A with 16-byte loads and decode
// B fragments in registers. One __syncthreads per stage.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <atomic>
#include <cstdint>

#include "backend/cuda/common.cuh"

namespace deepinfer::cuda::kernels::tc {

constexpr int kStages = 4;
constexpr int kBK = 32;  // k per stage
constexpr int kNF = 4;   // n8 fragments per warp
constexpr int kPromoteUnscaled = 128;  // promotion interval of unscaled (bf16) weights

// One problem: a plain (grouped) linear or the routed experts (kGrouped).
struct TcArgs {
  const float* x = nullptr;
  int64_t lda = 0;   // x row stride (floats)
  int64_t x_div = 1; // grouped: x row of slot i is i / x_div
  const uint8_t* w = nullptr;       // linear: [G·N, K] stored
  const void* scale = nullptr;      // linear: [ceil(G·N/br), scale_cols] or null
  const void* const* w_table = nullptr;  // grouped: per expert [N, K]
  const void* const* s_table = nullptr;  // grouped: per expert scales, or null
  const int32_t* perm = nullptr;      // grouped: sorted position -> slot
  const int32_t* row_off = nullptr;   // grouped: [E+1] first sorted position of each expert
  const int32_t* tile_off = nullptr;  // grouped: [E+1] first m-tile of each expert
  int32_t num_experts = 0;
  int32_t scale_f32 = 0;
  int64_t M = 0, N = 0, K = 0, G = 1, br = 1, scale_cols = 0;
  int64_t bc = kPromoteUnscaled;  // scale block columns = promotion interval (multiple of 32)
  int64_t k_split = 0;       // K elements per split (multiple of 32 and of bc)
  // Scaled weights: the scale tensor has < 2^31 elements (int32 offsets in the kernel).
  float* out = nullptr;
  int64_t ldo = 0;           // out row stride
  int64_t split_stride = 0;  // floats between split planes of `out`
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The launch fields that every stored-format tensor-core product (linear_tc, linear_tc_small,
// linear_tc_wa) fills alike from one call's arguments; A is TcArgs or one of its cousins.
template <class A>
inline void fill_linear_args(A& a, const float* x, const void* w, const void* scale,
                             bool scale_f32, int64_t M, int64_t N, int64_t K, int64_t G,
                             int64_t block_rows, int64_t block_cols, int64_t k_split, float* out,
                             float* workspace) {
  const int64_t splits = (K + k_split - 1) / k_split;
  a.x = x;
  a.lda = G * K;
  a.w = static_cast<const uint8_t*>(w);
  a.scale = scale;
  a.scale_f32 = scale_f32 ? 1 : 0;
  a.M = M;
  a.N = N;
  a.K = K;
  a.br = scale ? block_rows : 1;
  a.bc = scale ? block_cols : kPromoteUnscaled;
  a.scale_cols = scale ? (K + block_cols - 1) / block_cols : 0;
  a.k_split = k_split;
  a.ldo = G * N;
  a.split_stride = M * G * N;
  a.out = splits > 1 ? workspace : out;
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t bf16x2_bits(__nv_bfloat162 v) {
  return *reinterpret_cast<uint32_t*>(&v);
}

// Two e4m3 codes (low byte = lower k) -> bf16x2, exact: e4m3 -> f16 (hardware, exact) -> f32 ->
// bf16 (exact: at most 4 significant bits).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t v16) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v16 & 0xFFFFu),
                                                   __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return bf16x2_bits(__floats2bfloat162_rn(f.x, f.y));
}

// Four e2m1 codes (bits 0..15, low nibble = lower k) -> two bf16x2, exact: the low and high
// bytes of bf16(|code|) are looked up with byte permutes, the sign ORed in.
// |code| 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6 = bf16 0x0000 0x3F00 0x3F80 0x3FC0 0x4000 0x4040 0x4080 0x40C0.
__device__ __forceinline__ void e2m1x4_to_bf16x4(uint32_t v, uint32_t& r0, uint32_t& r1) {
  const uint32_t sel = v & 0x7777u;
  const uint32_t lo = __byte_perm(0xC0800000u, 0xC0804000u, sel);
  const uint32_t hi = __byte_perm(0x3F3F3F00u, 0x40404040u, sel);
  r0 = __byte_perm(lo, hi, 0x5140) | ((v << 12) & 0x8000u) | ((v << 24) & 0x80000000u);
  r1 = __byte_perm(lo, hi, 0x7362) | ((v << 4) & 0x8000u) | ((v << 16) & 0x80000000u);
}

__device__ __forceinline__ float ue8m0_f32(uint8_t e) {  // as common/dtypes ue8m0_to_f32
  return e == 0xFF ? __int_as_float(0x7FC00000)
                   : (e == 0 ? __int_as_float(0x00400000) : __int_as_float(static_cast<int>(e) << 23));
}

template <int kFmt> struct WFmt;
template <> struct WFmt<0> { static constexpr int kRowBytes = 64; };  // bf16: bytes per row per stage
template <> struct WFmt<1> { static constexpr int kRowBytes = 32; };  // e4m3
template <> struct WFmt<2> { static constexpr int kRowBytes = 16; };  // e2m1

template <int kFmt>
__device__ __forceinline__ int64_t w_bytes(int64_t k) {
  return kFmt == 0 ? 2 * k : kFmt == 1 ? k : k / 2;
}

template <int kFmt, int kTerms, int BM, int WM, int WN>
struct TcShape {
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int BN = WN * kNF * 8;
  static constexpr int MF = BM / WM / 16;
  static constexpr int kBRow = WFmt<kFmt>::kRowBytes;
  static constexpr int kAfpBytes = kStages * BM * kBK * 4;
  static constexpr int kBBytes = kStages * BN * kBRow;
  static constexpr int kABufBytes = 2 * kTerms * BM * kBK * 2;
  static constexpr int kSmem = kAfpBytes + kBBytes + kABufBytes + BM * 16;
  static_assert(BM % (WM * 16) == 0, "BM must be a multiple of 16·WM");
};

template <int kFmt, int kTerms, int BM, int WM, int WN, bool kGrouped>
__global__ void __launch_bounds__(WM * WN * 32)
tc_kernel(const TcArgs p) {
  using S = TcShape<kFmt, kTerms, BM, WM, WN>;
  constexpr int T = S::kThreads, BN = S::BN, MF = S::MF, BROW = S::kBRow, CPR = BROW / 16;
  constexpr int EPC = kFmt == 0 ? 8 : kFmt == 1 ? 16 : 32;  // weight elements per 16-byte chunk
  constexpr bool kScaled = kFmt != 0;
  extern __shared__ __align__(16) uint8_t smem[];
  float* afp = reinterpret_cast<float*>(smem);                          // [kStages][BM][32] f32
  uint8_t* braw = smem + S::kAfpBytes;                                  // [kStages][BN][BROW]
  uint16_t* abuf = reinterpret_cast<uint16_t*>(braw + S::kBBytes);      // [2][kTerms][BM][32] bf16
  int64_t* a_off = reinterpret_cast<int64_t*>(smem + S::kAfpBytes + S::kBBytes + S::kABufBytes);
  int64_t* o_off = a_off + BM;                                          // [BM] each

  const int tid = threadIdx.x;
  const int64_t N = p.N, K = p.K;
  int64_t n0, wrow0;
  const uint8_t* wb;
  const void* sc;
  if constexpr (kGrouped) {
    const int t = blockIdx.y;
    if (t >= p.tile_off[p.num_experts]) return;  // the grid is an upper bound: no work here
    int lo = 0, hi = p.num_experts - 1;          // the expert owning tile t
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.tile_off[mid] <= t) lo = mid;
      else hi = mid - 1;
    }
    const int e = lo;
    n0 = static_cast<int64_t>(blockIdx.x) * BN;
    wrow0 = 0;
    wb = static_cast<const uint8_t*>(p.w_table[e]);
    sc = p.s_table != nullptr ? p.s_table[e] : nullptr;
    const int64_t pos0 = p.row_off[e] + static_cast<int64_t>(t - p.tile_off[e]) * BM;
    const int64_t pos_end = p.row_off[e + 1];
    for (int r = tid; r < BM; r += T) {
      const int64_t pos = pos0 + r;
      if (pos < pos_end) {
        const int64_t slot = p.perm[pos];
        a_off[r] = (slot / p.x_div) * K;
        o_off[r] = slot * p.ldo;
      } else {
        a_off[r] = -1;
        o_off[r] = -1;
      }
    }
  } else {
    const int64_t ntiles = (N + BN - 1) / BN;
    const int64_t g = blockIdx.x / ntiles;
    n0 = (blockIdx.x % ntiles) * BN;
    wrow0 = g * N;
    wb = p.w + w_bytes<kFmt>(K) * g * N;
    sc = p.scale;
    for (int r = tid; r < BM; r += T) {
      const int64_t m = static_cast<int64_t>(blockIdx.y) * BM + r;
      a_off[r] = m < p.M ? m * p.lda + g * K : -1;
      o_off[r] = m < p.M ? blockIdx.z * p.split_stride + m * p.ldo + g * N : -1;
    }
  }
  const int64_t row_bytes = w_bytes<kFmt>(K);
  const int64_t k_begin = static_cast<int64_t>(blockIdx.z) * p.k_split;
  const int64_t k_end = k_begin + p.k_split < K ? k_begin + p.k_split : K;
  const int nst = k_end > k_begin ? static_cast<int>((k_end - k_begin + kBK - 1) / kBK) : 0;
  __syncthreads();

  auto issue = [&](int s) {
    const int slot = s % kStages;
    if (s < nst) {
      const int64_t k0 = k_begin + static_cast<int64_t>(s) * kBK;
      float* adst = afp + slot * BM * kBK;
      for (int u = tid; u < BM * 8; u += T) {
        const int r = u >> 3, c = u & 7;
        const int64_t k = k0 + c * 4, off = a_off[r];
        const bool ok = off >= 0 && k < k_end;
        cp_async16(adst + r * kBK + c * 4, ok ? p.x + off + k : p.x, ok ? 16 : 0);
      }
      uint8_t* bdst = braw + slot * BN * BROW;
      for (int u = tid; u < BN * CPR; u += T) {
        const int n = u / CPR, c = u % CPR;
        const int64_t k = k0 + c * EPC;
        const bool ok = n0 + n < N && k < k_end;
        cp_async16(bdst + n * BROW + c * 16, ok ? wb + (n0 + n) * row_bytes + w_bytes<kFmt>(k) : wb,
                   ok ? 16 : 0);
      }
    }
    cp_async_commit();  // always: keeps the group count uniform
  };

  // fp32 x tile of a landed stage -> kTerms bf16 terms (hi first), once per CTA.
  auto convert = [&](int s) {
    const float* src = afp + (s % kStages) * BM * kBK;
    uint16_t* dst = abuf + (s & 1) * kTerms * BM * kBK;
    for (int u = tid; u < BM * 8; u += T) {
      const float4 v = *reinterpret_cast<const float4*>(src + u * 4);
      float r[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int t = 0; t < kTerms; ++t) {
        const __nv_bfloat162 h01 = __floats2bfloat162_rn(r[0], r[1]);
        const __nv_bfloat162 h23 = __floats2bfloat162_rn(r[2], r[3]);
        *reinterpret_cast<uint2*>(dst + t * BM * kBK + u * 4) = make_uint2(bf16x2_bits(h01), bf16x2_bits(h23));
        if (t + 1 < kTerms) {
          const float2 f01 = __bfloat1622float2(h01), f23 = __bfloat1622float2(h23);
          r[0] -= f01.x;
          r[1] -= f01.y;
          r[2] -= f23.x;
          r[3] -= f23.y;
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if (r[i] != r[i]) r[i] = 0.f;  // ±inf x: the remainder inf − inf is not a term
        }
      }
    }
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
  float scl[kNF][2];
  // Scale element of this thread's column (nf, j) in block kb: srow[nf][j] + kb (−1: past N).
  // int32: the host checks that the scale tensor has fewer than 2^31 elements.
  int32_t srow[kNF][2];
#pragma unroll
  for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      scl[nf][j] = 1.f;
      const int64_t col = n0 + col_w + nf * 8 + 2 * q + j;
      srow[nf][j] = kScaled && col < N ? static_cast<int32_t>(((wrow0 + col) / p.br) * p.scale_cols) : -1;
    }
  const int spb = static_cast<int>(p.bc / kBK);          // stages per scale block
  const int32_t kb0 = static_cast<int32_t>(k_begin / p.bc);  // first scale block of this split
  // Raw scale words (f32 bits or the ue8m0 byte), decoded only when a block starts using them.
  uint32_t scl_next[kNF][2];
  auto load_scales = [&](int32_t kb, uint32_t (&dst)[kNF][2]) {
#pragma unroll
    for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        uint32_t v = 0;
        if (srow[nf][j] >= 0) {
          const int32_t idx = srow[nf][j] + kb;
          v = p.scale_f32 ? __float_as_uint(static_cast<const float*>(sc)[idx])
                          : static_cast<uint32_t>(static_cast<const uint8_t*>(sc)[idx]);
        }
        dst[nf][j] = v;
      }
  };
  auto use_scales = [&](const uint32_t (&raw)[kNF][2]) {
#pragma unroll
    for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        scl[nf][j] = srow[nf][j] < 0 ? 0.f
                     : p.scale_f32 ? __uint_as_float(raw[nf][j])
                                   : ue8m0_f32(static_cast<uint8_t>(raw[nf][j]));
  };

  auto compute = [&](int s, float (&c)[MF][kNF][4]) {
    const uint8_t* bsrc = braw + (s % kStages) * BN * BROW;
    uint32_t b[kNF][2][2];
#pragma unroll
    for (int nf = 0; nf < kNF; ++nf) {
      const int n = col_w + nf * 8 + g;
      if constexpr (kFmt == 0) {
        const uint4 v = *reinterpret_cast<const uint4*>(bsrc + n * BROW + q * 16);
        b[nf][0][0] = v.x;
        b[nf][0][1] = v.y;
        b[nf][1][0] = v.z;
        b[nf][1][1] = v.w;
      } else if constexpr (kFmt == 1) {
        const uint2 v = *reinterpret_cast<const uint2*>(bsrc + n * BROW + q * 8);
        b[nf][0][0] = e4m3x2_to_bf16x2(v.x);
        b[nf][0][1] = e4m3x2_to_bf16x2(v.x >> 16);
        b[nf][1][0] = e4m3x2_to_bf16x2(v.y);
        b[nf][1][1] = e4m3x2_to_bf16x2(v.y >> 16);
      } else {
        const uint32_t v = *reinterpret_cast<const uint32_t*>(bsrc + n * BROW + q * 4);
        e2m1x4_to_bf16x4(v, b[nf][0][0], b[nf][0][1]);
        e2m1x4_to_bf16x4(v >> 16, b[nf][1][0], b[nf][1][1]);
      }
    }
    const uint16_t* asrc = abuf + (s & 1) * kTerms * BM * kBK;
#pragma unroll
    for (int mf = 0; mf < MF; ++mf) {
      const int r = row_w + mf * 16 + g;
      uint4 a[kTerms][2];
#pragma unroll
      for (int t = 0; t < kTerms; ++t) {
        a[t][0] = *reinterpret_cast<const uint4*>(asrc + t * BM * kBK + r * kBK + q * 8);
        a[t][1] = *reinterpret_cast<const uint4*>(asrc + t * BM * kBK + (r + 8) * kBK + q * 8);
      }
      // Per accumulator c[mf][nf]: k-step 0 terms x_2, x_1, x_0, then k-step 1 (the fixed order);
      // the nf loop innermost puts kNF − 1 independent MMAs between two dependent ones.
#pragma unroll
      for (int ks = 0; ks < 2; ++ks)
#pragma unroll
        for (int t = kTerms - 1; t >= 0; --t)
#pragma unroll
          for (int nf = 0; nf < kNF; ++nf) {
            const uint4& r0 = a[t][0];
            const uint4& r8 = a[t][1];
            mma_bf16(c[mf][nf], ks ? r0.z : r0.x, ks ? r8.z : r8.x, ks ? r0.w : r0.y,
                     ks ? r8.w : r8.y, b[nf][ks][0], b[nf][ks][1]);
          }
    }
  };

  // Prologue: stages 0 .. kStages-2 in flight; stage 0's x split into terms.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) issue(s);
  cp_async_wait<kStages - 2>();
  __syncthreads();
  if (nst > 0) convert(0);

  for (int i = 0; i < nst; ++i) {
    cp_async_wait<kStages - 3>();  // stages <= i+1 landed (this thread's copies)
    __syncthreads();               // everyone's copies + term buffer i visible; stage i-1 consumed
    issue(i + kStages - 1);
    if constexpr (kScaled) {
      // Scales are loaded one scale block ahead into registers (scl_next), so the global load's
      // latency is hidden behind a block of MMAs instead of stalling its first stage.
      if (i % spb == 0) {
        const int blk = i / spb;
        if (blk == 0) load_scales(kb0, scl_next);
        use_scales(scl_next);
        if ((blk + 1) * spb < nst) load_scales(kb0 + blk + 1, scl_next);
      }
    }
    compute(i, part);
    if ((i + 1) % spb == 0 || i == nst - 1) {  // last stage of the block: promote
#pragma unroll
      for (int mf = 0; mf < MF; ++mf)
#pragma unroll
        for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            acc[mf][nf][c] = fmaf(part[mf][nf][c], scl[nf][c & 1], acc[mf][nf][c]);
            part[mf][nf][c] = 0.f;
          }
    }
    if (i + 1 < nst) convert(i + 1);
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mf = 0; mf < MF; ++mf)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row_w + mf * 16 + g + 8 * h;
      const int64_t off = o_off[r];
      if (off < 0) continue;
#pragma unroll
      for (int nf = 0; nf < kNF; ++nf)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int64_t col = n0 + col_w + nf * 8 + 2 * q + j;
          if (col < N) p.out[off + col] = acc[mf][nf][2 * h + j];
        }
    }
}

// Launches one instantiation (opts in to > 48 KB of shared memory once per device).
template <int kFmt, int kTerms, int BM, int WM, int WN, bool kGrouped>
void launch_tc(const TcArgs& a, dim3 grid, cudaStream_t s) {
  using S = TcShape<kFmt, kTerms, BM, WM, WN>;
  static std::atomic<uint64_t> attr_set{0};
  opt_in_smem_per_device(attr_set, tc_kernel<kFmt, kTerms, BM, WM, WN, kGrouped>, S::kSmem);
  tc_kernel<kFmt, kTerms, BM, WM, WN, kGrouped><<<grid, S::kThreads, S::kSmem, s>>>(a);
}

}  // namespace deepinfer::cuda::kernels::tc
