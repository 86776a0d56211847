// Split-key ("flash-decoding") attention on tensor cores for DeepSeek-V4's layout
// (deepseek-v4.md §4.3; design: docs/cuda.md "Split-key decode attention"). Every query head of
// a token reads the same rows of one shared K = V head of width 512, so the 64 heads of a block
// are the M dimension of S = Q·Kᵀ and O = P·V (FlashMLA's layout) and a key row is read from
// memory once per block for all of them.
//
// Grid (token × head group of 64, unit). A token's key list is cut into chunks of 16 keys (list
// order) and the chunks into units (AttentionFdPlan, attention_fd.h); each unit runs in its own
// block, so one token fills many SMs at batch 1. A token of one unit is finished by its block;
// otherwise every unit writes its state (m, l, a per head) to scratch and attention_fd_combine
// merges the units in order, then the sink.
//
// Block = 16 warps; warp w owns m-tile mt = w % 4 (heads 16·mt … 16·mt + 15) and channel quarter
// qt = w / 4 (channels 128·qt … 128·qt + 127):
//   * S: the warp's m-tile × 16 keys over its 128 channels (mma.sync m16n8k16, fp16 in, fp32
//     out); the four quarters are exchanged through shared memory and added in the fixed order
//     ((q0 + q1) + q2) + q3, so the four warps of an m-tile hold the same logits;
//   * online softmax in fp32 on those registers (row max and sum by a fixed quad shuffle tree);
//     P becomes the A operand of the second product without leaving registers;
//   * O = O·f + P·V for the warp's 128 output channels (16 n-tiles × 4 fp32 per lane).
// fp32 accuracy from fp16 tensor cores (attention_tc.cu's scheme): Q scaled per token, each
// K = V tile per chunk, P by 2^14, each by a power of two so its largest element lies in
// [2^14, 2^15), then split x = hi + lo (hi = fp16(x), lo = fp16(x − hi)); a product is
// hi·lo' + lo·hi' (one accumulator) plus hi·hi' (another), each chain at most 4 mma long
// (64 channels) before a round-to-nearest fp32 add; the dropped lo·lo' is ~2^-22 relative.
//
// Memory: K = V rows arrive by cp.async (16-byte copies, 4 per thread per chunk) into two raw
// fp32 tiles: chunk c + 1 is in flight while chunk c is converted and multiplied. Session 7: a
// thread converts exactly the 4 pieces it copied (it may read them after its own
// cp.async.wait_group, before any barrier), so the tile's max is reduced in the same barrier
// that publishes the chunk, and the next chunk is issued right after that barrier (which also
// retires the previous chunk's readers): 2 block barriers per chunk instead of 4. Shared memory
// (bytes): Q hi/lo [64][512] fp16 (2 × 64 Ki), K = V tile hi/lo [16][512] fp16 (2 × 16 Ki),
// raw tiles 2 × [16][512] fp32 (2 × 32 Ki) = 224 KiB, one block per SM. The 16-byte chunks of
// the fp16 rows are XOR-swizzled by row (swz) so ldmatrix is conflict-free. The quarter
// exchange of S reuses the current raw tile once it has been converted.
//
// mma.sync.m16n8k16.row.col.f32.f16.f16.f32 fragments (PTX ISA "Matrix fragments for
// mma.m16n8k16", g = lane / 4, t = lane % 4), which every index below relies on:
//   A (16×16, row-major) a0 = (row g, k 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t+8..),
//     a3 = (g + 8, 2t+8..), each an f16x2 with the lower k in the low half;
//   B (16×8, k × n) b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g);
//   C/D (16×8 fp32) c0 = (row g, n 2t), c1 = (g, 2t+1), c2 = (g + 8, 2t), c3 = (g + 8, 2t+1).
// ldmatrix.x4: lanes 8i … 8i+7 give the row addresses of 8×8 matrix i; register i of lane L holds
// row L/4, elements 2(L%4), 2(L%4)+1 of matrix i (.trans: column L/4, rows 2(L%4), 2(L%4)+1).
//   Q (A): matrix 0 = heads 0-7 × k 0-7, 1 = heads 8-15 × k 0-7, 2 = heads 0-7 × k 8-15,
//     3 = heads 8-15 × k 8-15 → a0..a3.
//   K (B of S, rows = keys stored [key][channel]): matrix 0 = keys 0-7 × ch 0-7 (b0 of keys 0-7),
//     1 = keys 0-7 × ch 8-15 (b1), 2 = keys 8-15 × ch 0-7 (b0 of keys 8-15), 3 = keys 8-15 × ch
//     8-15 (b1).
//   V (B of P·V, .trans of [key][channel]): matrix 0 = hi keys 0-7, 1 = hi keys 8-15, 2 = lo
//     keys 0-7, 3 = lo keys 8-15, one 8-channel n-tile → (hi b0, hi b1, lo b0, lo b1).
//   P (A of P·V) from the S accumulators: a0 = keys 2t..2t+1 of row g (n-tile 0 c0, c1),
//     a1 = row g + 8 (n-tile 0 c2, c3), a2 = n-tile 1 c0, c1, a3 = n-tile 1 c2, c3.
//
// Session 8: this is variant "s7" (DEEPINFER_ATTENTION_KERNEL=s7); the helpers it shares with
// attention_fd_v1.cu / attention_fd_v2.cu (fragment loaders, mma, the split, the unit cut, the
// sink, Args, the combine kernel) moved unchanged to attention_fd_common.cuh, and attention_fd()
// below dispatches on the variant.
//
// Batch invariance: a token's cut depends on its key count and the plan (under
// --batch-invariant: on its key count only), every block runs the same instructions whatever
// else is in the grid, and the batch may be walked in slices: the bits of a token never depend
// on the other tokens.
#include <atomic>
#include <cstdint>
#include <cuda_fp16.h>

#include "backend/cuda/attention_fd.h"
#include "backend/cuda/attention_fd_common.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda::kernels {
namespace {

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;

constexpr int kQhOff = 0;
constexpr int kQlOff = kQhOff + kH * kRowB;
constexpr int kKhOff = kQlOff + kH * kRowB;
constexpr int kKlOff = kKhOff + kNc * kRowB;
constexpr int kRawOff = kKlOff + kNc * kRowB;
constexpr int kRawBytes = kNc * kD * 4;
constexpr int kSmemBytes = kRawOff + 2 * kRawBytes;  // 229376
static_assert(kSmemBytes + 256 + 4 * kThreads <= 227 * 1024, "attention_fd: shared memory");
static_assert(kWarps * 8 * 32 * 4 <= kRawBytes, "attention_fd: the S exchange fits a raw tile");

// The 4 warps of m-tile mt (w = mt, mt + 4, mt + 8, mt + 12); ids 1-4 (0 is __syncthreads).
__device__ __forceinline__ void mtile_barrier(int mt) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + mt), "r"(128) : "memory");
}

// Block-wide max (16 warps) through red[16]; every thread gets it. red must not be rewritten
// before the caller's next __syncthreads.
__device__ __forceinline__ float block_max16(float v, float* red) {
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float m = red[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, red[w]);
  return m;
}

// raw tile at raw_s; rows past n and bad ids are zero-filled, their validity goes to valid[r].
__device__ __forceinline__ void issue_chunk(const Args& p, int kb, int n, uint32_t raw_s,
                                            float* raw, int* valid) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int piece = tid + kThreads * u;  // 2048 pieces of 16 bytes
    const int r = piece >> 7, c4 = piece & 127;
    bool ok = false;
    int64_t j = 0;
    if (r < n) {
      j = p.ids[kb + r];
      ok = j >= 0 && j < p.T;
      if (!ok && c4 == 0) set_error(p.error_flag, kErrKeyId);
    }
    if (c4 == 0) valid[r] = ok ? 1 : 0;
    const uint32_t dst = raw_s + static_cast<uint32_t>((r * kD + c4 * 4) * 4);
    if (ok) {
      const float* src = p.kv + j * kD + c4 * 4;
      if (p.aligned) {
        cp_async16(dst, src);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) cp_async4(dst + 4 * e, src + e);
      }
    } else {
      reinterpret_cast<float4*>(raw)[r * (kD / 4) + c4] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  cp_async_commit();
}

__global__ void __launch_bounds__(kThreads, 1) attention_fd_kernel(Args p) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float red[kWarps];    // per chunk: the warps' K = V tile maxima
  __shared__ float red_q[kWarps];  // once: the warps' Q maxima (own array: no barrier between)
  __shared__ int valid_s[2][kNc];
  __shared__ uint32_t off_s[kThreads];  // k_off | v_off << 16 below (written, read by its thread)
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int mt = warp & 3, qt = warp >> 2;
  const int64_t groups = p.nH / kH;
  const int64_t s = blockIdx.x / groups, g = blockIdx.x % groups;

  // List positions are int32 (key_offsets is int32), so the chunk walk runs in 32-bit registers.
  int begin = p.offs[s], end = p.offs[s + 1];
  if (begin < 0 || end < begin || static_cast<int64_t>(end) > p.nnz) {
    if (tid == 0 && blockIdx.y == 0) set_error(p.error_flag, kErrKeyOffsets);
    begin = end = 0;
  }
  const int chunks = static_cast<int>((int64_t{end} - begin + kNc - 1) / kNc);
  int n_units;
  int64_t per_unit64;
  unit_layout(chunks, p.chunks_per_unit, p.grid_units, n_units, per_unit64);
  const int per_unit = static_cast<int>(per_unit64);  // ≤ chunks
  if (static_cast<int>(blockIdx.y) >= n_units) return;  // uniform over the block
  auto chunk_rows = [&](int c) {
    const int kb = begin + c * kNc;
    return end - kb < kNc ? end - kb : kNc;
  };
  auto raw_at = [&](int b) { return reinterpret_cast<float*>(smem + kRawOff + b * kRawBytes); };
  const uint32_t raw_s0 = base + kRawOff;

  // The first chunk of the block's first unit is in flight while Q is prepared.
  {
    const int c0 = static_cast<int>(blockIdx.y) * per_unit;
    if (c0 < chunks) issue_chunk(p, begin + c0 * kNc, chunk_rows(c0), raw_s0, raw_at(0), valid_s[0]);
  }
  // Q: scaled so the group's largest |q| lies in [2^14, 2^15), split into hi/lo fp16. One pass:
  // the thread's 8 pieces of 8 floats (piece i = floats 8i … 8i + 7 = row i / 64, 16-byte fp16
  // chunk i % 64) are all loaded before the first use, then kept in registers for the split.
  const float* qp = p.q + (s * p.nH + g * kH) * kD;
  int tq;
  {
    constexpr int kQPieces = kH * (kD / 8) / kThreads;  // 8
    float x[kQPieces][8];
#pragma unroll
    for (int k = 0; k < kQPieces; ++k) {
      const int piece = tid + kThreads * k;
      if (p.q_aligned) {
        const float4 a = reinterpret_cast<const float4*>(qp)[2 * piece];
        const float4 b = reinterpret_cast<const float4*>(qp)[2 * piece + 1];
        x[k][0] = a.x, x[k][1] = a.y, x[k][2] = a.z, x[k][3] = a.w;
        x[k][4] = b.x, x[k][5] = b.y, x[k][6] = b.z, x[k][7] = b.w;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) x[k][e] = qp[piece * 8 + e];
      }
    }
    float qmax = 0.f;
#pragma unroll
    for (int k = 0; k < kQPieces; ++k)
#pragma unroll
      for (int e = 0; e < 8; ++e) qmax = fmaxf(qmax, fabsf(x[k][e]));
    tq = scale_exp(block_max16(qmax, red_q));
    const float qf = pow2(tq);
#pragma unroll
    for (int k = 0; k < kQPieces; ++k) {
      const int piece = tid + kThreads * k;
      const int r = piece >> 6, c = piece & 63;
      uint4 hi, lo;
      split2(__fmul_rn(x[k][0], qf), __fmul_rn(x[k][1], qf), hi.x, lo.x);
      split2(__fmul_rn(x[k][2], qf), __fmul_rn(x[k][3], qf), hi.y, lo.y);
      split2(__fmul_rn(x[k][4], qf), __fmul_rn(x[k][5], qf), hi.z, lo.z);
      split2(__fmul_rn(x[k][6], qf), __fmul_rn(x[k][7], qf), hi.w, lo.w);
      *reinterpret_cast<uint4*>(smem + kQhOff + swz(r, c)) = hi;
      *reinterpret_cast<uint4*>(smem + kQlOff + swz(r, c)) = lo;
    }
  }  // Q hi/lo is published by the first chunk's barriers (B, D) before S reads it.

  // This thread's pieces of every chunk (issue_chunk): float4 column c4 of rows r0 + 4i, i < 4.
  const int c4 = tid & 127, r0 = tid >> 7;
  // The lane's ldmatrix row offsets at the warp's first 16-byte chunk (qt·16). swz XORs the chunk
  // index with row & 7 (bits 4-6 of the offset; row·1024 and qt·256 leave bits 4-7 clear), so the
  // offset of chunk qt·16 + d is this offset ^ (d << 4) for any d < 16: a k-step (2 chunks)
  // is ^ (step << 5), a P·V n-tile ^ (nt << 4): one LOP per address, nothing to spill.
  const uint32_t q_off = swz(mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, qt * 16 + (lane >> 4));
  // k_off and v_off (both < 2^14) are re-read from shared memory each chunk: computed from
  // registers, their 8 + 16 per-step addresses were hoisted out of the chunk loop and kept live
  // (or spilled) through P·V (128 registers at most at 512 threads); a load in the loop cannot be
  // hoisted, and each address is then one LOP (+ add).
  off_s[tid] = swz((lane & 7) + ((lane >> 4) << 3), qt * 16 + ((lane >> 3) & 1)) |
               (swz((lane & 7) + ((lane >> 3) & 1) * 8, qt * 16) << 16);
  for (int u = blockIdx.y; u < n_units; u += gridDim.y) {
    const int c0 = u * per_unit;
    const int c1 = c0 + per_unit < chunks ? c0 + per_unit : chunks;
    if (u != static_cast<int>(blockIdx.y)) {  // a later unit (max_keys understated): restart
      __syncthreads();                         // the last unit's readers of the raw tiles are done
      if (c0 < c1) issue_chunk(p, begin + c0 * kNc, chunk_rows(c0), raw_s0, raw_at(0), valid_s[0]);
    }
    // Softmax state of rows g and g + 8 of the m-tile (the same in the 4 warps of the m-tile).
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
    float acc[16][4];
#pragma unroll
    for (int nt = 0; nt < 16; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][i] = 0.f;
    int e_acc = 0;  // acc = a · 2^(14 + e_acc)

    for (int c = c0; c < c1; ++c) {
      const int b = (c - c0) & 1;
      // Chunk c is the only group in flight: once it has landed this thread may read the
      // pieces it copied (or zero-filled) itself; the tile's max starts from them.
      cp_async_wait_all();
      const float4* raw4 = reinterpret_cast<const float4*>(raw_at(b));
      float kmax = 0.f;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 x = raw4[(r0 + 4 * i) * (kD / 4) + c4];
        kmax = fmaxf(kmax, fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w))));
      }
#pragma unroll
      for (int o = 16; o >= 1; o >>= 1) kmax = fmaxf(kmax, __shfl_xor_sync(kFull, kmax, o));
      if (lane == 0) red[warp] = kmax;
      // B: chunk c's validity flags and every warp's max are in; the previous chunk's readers
      // (K hi/lo by S and P·V, raw tile b ^ 1 as the S exchange, valid_s[b ^ 1]) are done, so
      // chunk c + 1 may now overwrite raw tile b ^ 1 and its flags.
      __syncthreads();
      if (c + 1 < c1)
        issue_chunk(p, begin + (c + 1) * kNc, chunk_rows(c + 1), raw_s0 + (b ^ 1) * kRawBytes,
                    raw_at(b ^ 1), valid_s[b ^ 1]);
      float tmax = red[0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) tmax = fmaxf(tmax, red[w]);
      const int tk = scale_exp(tmax);
      const float kf = pow2(tk);
      // Convert the thread's own 4 pieces (4 floats → 8 bytes of hi and of lo each).
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = r0 + 4 * i;
        const float4 x = raw4[r * (kD / 4) + c4];
        uint2 hi, lo;
        split2(__fmul_rn(x.x, kf), __fmul_rn(x.y, kf), hi.x, lo.x);
        split2(__fmul_rn(x.z, kf), __fmul_rn(x.w, kf), hi.y, lo.y);
        const uint32_t at = swz(r, c4 >> 1) + (c4 & 1) * 8;
        *reinterpret_cast<uint2*>(smem + kKhOff + at) = hi;
        *reinterpret_cast<uint2*>(smem + kKlOff + at) = lo;
      }
      // D: the converted tile is complete; red is free again; raw tile b is free (the exchange).
      __syncthreads();
      float* raw = raw_at(b);

      // ---- S = Q·Kᵀ: m-tile mt × 16 keys over channels [128·qt, 128·qt + 128) ----
      float sv[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      const uint32_t k_off = off_s[tid] & 0xffffu;
#pragma unroll
      for (int grp = 0; grp < 2; ++grp) {
        // hi·lo' + lo·hi' + hi·hi' per n-tile, 4 k-steps (64 channels) per chain.
        float tx[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const uint32_t step = static_cast<uint32_t>(grp * 4 + ks) << 5;  // 2 chunks a step
          uint32_t qh[4], ql[4], kh[4], kl[4];
          const uint32_t qa = q_off ^ step;
          ldsm_x4(qh, base + kQhOff + qa);
          ldsm_x4(ql, base + kQlOff + qa);
          const uint32_t ka = k_off ^ step;  // k_off < 2^14: the XOR stays in the low half
          ldsm_x4(kh, base + kKhOff + ka);
          ldsm_x4(kl, base + kKlOff + ka);
          mma(tx[0], qh, kl[0], kl[1]);
          mma(tx[1], qh, kl[2], kl[3]);
          mma(tx[0], ql, kh[0], kh[1]);
          mma(tx[1], ql, kh[2], kh[3]);
          mma(tx[0], qh, kh[0], kh[1]);
          mma(tx[1], qh, kh[2], kh[3]);
        }
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) sv[n][i] = __fadd_rn(sv[n][i], tx[n][i]);
      }
      // Exchange the quarters: logit = (((q0 + q1) + q2) + q3) · scale · 2^−(tq + tk).
      float* xs = raw;
#pragma unroll
      for (int i = 0; i < 8; ++i) xs[(warp * 8 + i) * 32 + lane] = sv[i >> 2][i & 3];
      mtile_barrier(mt);
      const float lf = ldexpf(p.scale, -(tq + tk));
      float lg[2][4];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        float sum = xs[(mt * 8 + i) * 32 + lane];
#pragma unroll
        for (int q = 1; q < 4; ++q) sum = __fadd_rn(sum, xs[((q * 4 + mt) * 8 + i) * 32 + lane]);
        const int key = (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
        lg[i >> 2][i & 3] = valid_s[b][key] ? __fmul_rn(sum, lf) : -INFINITY;
      }
      // ---- online softmax, rows g (i = 0, 1) and g + 8 (i = 2, 3) ----
      float f[2];
      float pv[2][4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = fmaxf(fmaxf(lg[0][2 * r], lg[0][2 * r + 1]), fmaxf(lg[1][2 * r], lg[1][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
        const float mn = fmaxf(m_run[r], mx);
        float cs = 1.f;
        if (mn == -INFINITY) {
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) pv[nt][2 * r] = pv[nt][2 * r + 1] = 0.f;
        } else {
          cs = m_run[r] == -INFINITY ? 0.f : expf(m_run[r] - mn);
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const float x = lg[nt][2 * r + j];
              pv[nt][2 * r + j] = x == -INFINITY ? 0.f : expf(x - mn);
            }
        }
        float rs = __fadd_rn(__fadd_rn(pv[0][2 * r], pv[0][2 * r + 1]),
                             __fadd_rn(pv[1][2 * r], pv[1][2 * r + 1]));
        rs = __fadd_rn(rs, __shfl_xor_sync(kFull, rs, 1));
        rs = __fadd_rn(rs, __shfl_xor_sync(kFull, rs, 2));
        l_run[r] = fmaf(l_run[r], cs, rs);
        m_run[r] = mn;
        f[r] = ldexpf(cs, tk - e_acc);  // rescale and move acc into this tile's scale
      }
      e_acc = tk;
      // P · 2^14 as the A operand: a0 (row g, keys 2t..), a1 (g + 8), a2 (g, 8 + 2t..), a3.
      constexpr float kP = 16384.f;
      uint32_t ph[4], pl[4];
      split2(__fmul_rn(pv[0][0], kP), __fmul_rn(pv[0][1], kP), ph[0], pl[0]);
      split2(__fmul_rn(pv[0][2], kP), __fmul_rn(pv[0][3], kP), ph[1], pl[1]);
      split2(__fmul_rn(pv[1][0], kP), __fmul_rn(pv[1][1], kP), ph[2], pl[2]);
      split2(__fmul_rn(pv[1][2], kP), __fmul_rn(pv[1][3], kP), ph[3], pl[3]);

      // ---- O = O·f + P·V over the warp's 128 channels ----
      const uint32_t vbuf = base + ((lane >> 4) ? kKlOff : kKhOff);
      const uint32_t vo = off_s[tid] >> 16;
#pragma unroll
      for (int nt = 0; nt < 16; ++nt) {
        uint32_t v[4];  // hi b0, hi b1, lo b0, lo b1
        ldsm_x4_t(v, vbuf + (vo ^ (static_cast<uint32_t>(nt) << 4)));
        float t[4] = {0.f, 0.f, 0.f, 0.f};
        mma(t, ph, v[2], v[3]);
        mma(t, pl, v[0], v[1]);
        mma(t, ph, v[0], v[1]);
        acc[nt][0] = fmaf(acc[nt][0], f[0], t[0]);
        acc[nt][1] = fmaf(acc[nt][1], f[0], t[1]);
        acc[nt][2] = fmaf(acc[nt][2], f[1], t[2]);
        acc[nt][3] = fmaf(acc[nt][3], f[1], t[3]);
      }
    }

    // ---- epilogue: a = acc · 2^−(14 + e_acc) ----
    const int e_out = -(14 + e_acc);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t h = g * kH + mt * 16 + lane / 4 + 8 * r;
      const int col0 = qt * 128 + 2 * (lane & 3);
      if (n_units == 1) {
        float cs, total;
        const bool ok = finish_scale(m_run[r], l_run[r], p.sinks ? p.sinks + h : nullptr,
                                     end > begin, cs, total);
        float* o = p.out + (s * p.nH + h) * kD;
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) {
          const float a0 = ldexpf(acc[nt][2 * r], e_out), a1 = ldexpf(acc[nt][2 * r + 1], e_out);
          float2 v;
          v.x = ok ? __fdiv_rn(__fmul_rn(a0, cs), total) : 0.f;
          v.y = ok ? __fdiv_rn(__fmul_rn(a1, cs), total) : 0.f;
          *reinterpret_cast<float2*>(o + col0 + nt * 8) = v;
        }
      } else {
        float* part = p.parts + ((s * p.grid_units + u) * p.nH + h) * kPartRow;
        if (qt == 0 && (lane & 3) == 0) {
          part[0] = m_run[r];
          part[1] = l_run[r];
        }
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) {
          float2 v;
          v.x = ldexpf(acc[nt][2 * r], e_out);
          v.y = ldexpf(acc[nt][2 * r + 1], e_out);
          *reinterpret_cast<float2*>(part + 4 + col0 + nt * 8) = v;
        }
      }
    }
  }
}

}  // namespace

void attention_fd(const float* q, const float* kv, const int32_t* key_offsets,
                  const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
                  int64_t T, float scale, float* out, float* parts, const AttentionFdPlan& plan,
                  int32_t* error_flag, cudaStream_t st) {
  const int variant = attention_fd_variant_requested();
  if (variant == kFdVariantV1) {
    attention_fd_v1(q, kv, key_offsets, key_ids, nnz, sinks, S, nH, T, scale, out, parts, plan,
                    error_flag, st);
  } else if (variant == kFdVariantV2) {
    attention_fd_v2(q, kv, key_offsets, key_ids, nnz, sinks, S, nH, T, scale, out, parts, plan,
                    error_flag, st);
  } else {
    attention_fd_s7(q, kv, key_offsets, key_ids, nnz, sinks, S, nH, T, scale, out, parts, plan,
                    error_flag, st);
  }
}

void attention_fd_s7(const float* q, const float* kv, const int32_t* key_offsets,
                     const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S,
                     int64_t nH, int64_t T, float scale, float* out, float* parts,
                     const AttentionFdPlan& plan, int32_t* error_flag, cudaStream_t st) {
  if (S * nH == 0) return;
  static std::atomic<uint64_t> opt_in{0};
  opt_in_smem_per_device(opt_in, attention_fd_kernel, kSmemBytes);
  const bool split = plan.grid_units > 1 && parts != nullptr;
  const int64_t slice = split ? slice_tokens_of(plan, S, nH) : S;
  for (int64_t s0 = 0; s0 < S; s0 += slice) {
    const int64_t n = S - s0 < slice ? S - s0 : slice;
    Args a{q + s0 * nH * kD,
           kv,
           key_offsets + s0,
           key_ids,
           nnz,
           nH,
           T,
           sinks,
           scale,
           out + s0 * nH * kD,
           split ? parts : nullptr,
           plan.chunks_per_unit < 1 ? 1 : plan.chunks_per_unit,
           split ? plan.grid_units : 1,
           reinterpret_cast<uintptr_t>(kv) % 16 == 0,
           reinterpret_cast<uintptr_t>(q) % 16 == 0,
           error_flag};
    const dim3 grid(static_cast<unsigned>(n * (nH / kH)), static_cast<unsigned>(a.grid_units));
    attention_fd_kernel<<<grid, kThreads, kSmemBytes, st>>>(a);
    if (a.grid_units > 1) attention_fd_combine<<<static_cast<unsigned>(n * nH), 128, 0, st>>>(a);
  }
}

}  // namespace deepinfer::cuda::kernels
