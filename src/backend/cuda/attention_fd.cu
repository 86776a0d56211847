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
// Block = 8 warps (256 threads, up to 255 registers each).
// Warp w owns the m-pair mp = w & 1 (m-tiles 2mp and 2mp + 1: heads 32·mp … 32·mp + 31) and the
// channel quarter qt = w >> 1 (channels 128·qt … 128·qt + 127):
//   * S = Q·Kᵀ: per k-step the warp loads one K hi/lo fragment pair and uses it for both of its
//     m-tiles (session 7's 16-warp kernel: every K fragment was loaded by the 4 warps of the 4 m-tiles).
//     Each m-tile's product is session 7's: hi·lo' + lo·hi' + hi·hi' per n-tile, chains of 4 k-steps, the two
//     groups of a quarter added to 0 in order; the quarters exchanged through shared memory and
//     added ((q0 + q1) + q2) + q3 by every warp of the m-pair (4 warps: a 128-thread barrier);
//   * online softmax per m-tile row (session 7's code, twice);
//   * O = O·f + P·V: one V fragment (ldmatrix.trans) per n-tile feeds both m-tiles.
// Shared memory read per chunk of 16 keys: Q 128 KiB + K 64 + V 64 + the exchange 64 (session 7:
// 128 + 128 + 128 + 80), i.e. ~25 % less; the mma count is unchanged.
//
// Memory: one raw fp32 tile [16][512] (cp.async, 8 pieces of 16 bytes per thread). A thread
// converts exactly the pieces it copied, right after its own cp.async.wait_group, and issues the
// next chunk's copies into the same slots as soon as it has converted them (no barrier is needed
// for the raw tile: nobody else reads a thread's pieces), so chunk c + 1 is in flight during
// chunk c's S, softmax and P·V. Two block barriers per chunk: A (the tile's maxima are in; the
// previous chunk's readers of K hi/lo, the exchange and the validity flags are done) and B (the
// converted tile is complete). Shared memory (bytes): Q hi/lo 2 × 64 Ki, K = V hi/lo 2 × 16 Ki,
// raw 32 Ki, exchange 16 Ki = 208 KiB, one block per SM.
//
// fp32 accuracy from fp16 tensor cores (attention_tc.cu's scheme): Q scaled per token, each
// K = V tile per chunk, P by 2^14, each by a power of two so its largest element lies in
// [2^14, 2^15), then split x = hi + lo (hi = fp16(x), lo = fp16(x − hi)); a product is
// hi·lo' + lo·hi' (one accumulator) plus hi·hi' (another), each chain at most 4 mma long
// (64 channels) before a round-to-nearest fp32 add; the dropped lo·lo' is ~2^-22 relative.
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
// History: session 7 ran 16 warps per block with two raw fp32 tiles; session 8 (helper attn)
// rescheduled it into the 8-warp layout above with the same per-element arithmetic in the same
// order (tested bitwise against session 7 on the H200 before session 9 removed the old kernel and
// the slower-in-model per-row-scale variant v2; docs/cuda.md "Split-key decode attention").
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
#include "backend/cuda/pdl.cuh"

namespace deepinfer::cuda::kernels {
namespace {

constexpr int kPieces = kNc * kD / 4 / kThreads;  // 16-byte pieces per thread per chunk: 8

// The block's warp layout is Layout<kGr, kMt> (attention_fd_common.cuh): fd <2, 2> (the layout
// above), session 11's head-split blocks <1, 2> (32 heads) and <1, 1> (16 heads); a head-split
// block gives fd's bits for its heads. The chunk loop's pieces (s_tile, s_logits, softmax_row,
// split_p, pv_accumulate) are shared with attention_x5.cu since session 14.

// Issues (and commits as one group) this thread's copies of the n ≤ 16 rows whose ids are
// idp[0 … n) (global memory, or the chunk's ids staged in shared memory) into the raw tile:
// pieces tid + 256·u (row (tid >> 7) + 2u, float4 column tid & 127). Rows past n and bad ids are
// zero-filled (by the thread that owns the piece), validity goes to valid[r].
__device__ __forceinline__ void issue_chunk(const Args& p, const int32_t* idp, int n,
                                            uint32_t raw_s, float* raw, int* valid) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int u = 0; u < kPieces; ++u) {
    const int piece = tid + kThreads * u;
    const int r = piece >> 7, c4 = piece & 127;
    bool ok = false;
    int64_t j = 0;
    if (r < n) {
      j = idp[r];
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

template <int kGr, int kMt>
__global__ void __launch_bounds__(kThreads, Layout<kGr, kMt>::kMinBlocks)
    attention_fd_kernel(Args p) {
  using L = Layout<kGr, kMt>;
  constexpr int kHs = L::kHs, kHeads = L::kHeads;
  constexpr int kQhOff = L::kQhOff, kQlOff = L::kQlOff, kKhOff = L::kKhOff, kKlOff = L::kKlOff,
                kRawOff = L::kRawOff, kXsOff = L::kXsOff;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float red[kWarps];    // per chunk: the warps' K = V tile maxima
  __shared__ float red_q[kWarps];  // once: the warps' Q maxima
  __shared__ int valid_s[2][kNc];
  __shared__ int32_t ids_s[kNc];  // the key ids of the next chunk to issue (staged by warp 0)
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  static_assert(kHs == 1 || kHs == 2, "head sets");
  const int hs = warp & (kHs - 1), pt = warp >> (kHs - 1);  // fd: m-pair, channel quarter
  const int64_t groups = p.nH / kHeads;
  const int64_t s = blockIdx.x / groups, hb = (blockIdx.x % groups) * kHeads;  // first head
  // Launched with PDL (pdl.cuh): every input may come from the previous kernel, so wait first
  // (every CTA, before any read); the combine (or the next kernel) may then be scheduled.
  pdl::wait();
  pdl::launch_dependents();

  const TokenCut cut = token_cut(p, s);
  const int begin = cut.begin, end = cut.end, chunks = cut.chunks, n_units = cut.n_units,
            per_unit = cut.per_unit;
  if (static_cast<int>(blockIdx.y) >= n_units) return;  // uniform over the block
  float* raw = reinterpret_cast<float*>(smem + kRawOff);
  const uint32_t raw_s = base + kRawOff;

  // The first chunk of the block's first unit is in flight while Q is prepared.
  {
    const int c0 = static_cast<int>(blockIdx.y) * per_unit;
    if (c0 < chunks) issue_chunk(p, p.ids + begin + c0 * kNc, cut.rows(c0), raw_s, raw, valid_s[0]);
  }
  // Q: scaled and split into hi/lo fp16 (split_q, attention_fd_common.cuh; session 7's
  // arithmetic). Q hi/lo is published by the first chunk's barriers (A, B) before S reads it.
  // A head-split block reads its whole group of 64 heads for the max (the same tq as fd).
  const int own0 = kHeads == kH ? 0 : static_cast<int>(hb % kH);
  const float* qp = p.q + (s * p.nH + (hb - own0)) * kD;
  const int tq = split_q<kThreads, kHeads>(
      qp, p.q_aligned, red_q, [] { __syncthreads(); },
      [&](int r, int c, const uint4& hi, const uint4& lo) {
        *reinterpret_cast<uint4*>(smem + kQhOff + swz(r, c)) = hi;
        *reinterpret_cast<uint4*>(smem + kQlOff + swz(r, c)) = lo;
      },
      own0);

  // This thread's pieces of every chunk: float4 column c4 of rows r0 + 2i, i < 8.
  const int c4 = tid & 127, r0 = tid >> 7;
  // ldmatrix row offsets at the part's first 16-byte chunk (pt·kGr·8: fd's quarter qt·16); a
  // k-step (2 chunks) is ^ (step << 5), a P·V n-tile ^ (nt << 4) (swz XORs bits 4-6 only). The
  // next m-tile's Q rows are 16 further (the same row & 7): + 16 rows.
  const int ch0 = pt * kGr * 8;
  uint32_t q_off[kMt];
  q_off[0] = swz(hs * kMt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, ch0 + (lane >> 4));
  if (kMt > 1) q_off[kMt - 1] = q_off[0] + 16 * kRowB;
  const uint32_t k_off = swz((lane & 7) + ((lane >> 4) << 3), ch0 + ((lane >> 3) & 1));
  const uint32_t v_off = swz((lane & 7) + ((lane >> 3) & 1) * 8, ch0);
  const uint32_t vbuf = base + ((lane >> 4) ? kKlOff : kKhOff);
  float* xs = reinterpret_cast<float*>(smem + kXsOff);

  for (int u = blockIdx.y; u < n_units; u += gridDim.y) {
    const int c0 = u * per_unit;
    const int c1 = c0 + per_unit < chunks ? c0 + per_unit : chunks;
    if (u != static_cast<int>(blockIdx.y)) {  // a later unit (max_keys understated): restart
      __syncthreads();                         // the last unit's readers of valid_s are done
      if (c0 < c1) issue_chunk(p, p.ids + begin + c0 * kNc, cut.rows(c0), raw_s, raw, valid_s[0]);
    }
    // The ids of the unit's second chunk go to ids_s (read by the issue in the first chunk,
    // after its barrier A). From then on warp 0 loads chunk c + 2's ids during chunk c and stores
    // them after its P·V, so the issue never waits on a global load of ids.
    if (warp == 0 && lane < kNc && c0 + 1 < c1 && lane < cut.rows(c0 + 1))
      ids_s[lane] = p.ids[begin + (c0 + 1) * kNc + lane];
    // Softmax state of rows g and g + 8 of each m-tile (the same in the warps of the head set).
    float m_run[kMt][2], l_run[kMt][2];
    float acc[kMt][L::kNt][4];
    init_state(m_run, l_run, acc);
    int e_acc = 0;  // acc = a · 2^(14 + e_acc)

    for (int c = c0; c < c1; ++c) {
      const int vb = (c - c0) & 1;  // validity flags of chunk c
      // Chunk c is the only group in flight; once landed this thread reads its own pieces.
      cp_async_wait_all();
      float4 x[kPieces];
      float kmax = 0.f;
#pragma unroll
      for (int i = 0; i < kPieces; ++i) {
        x[i] = reinterpret_cast<const float4*>(raw)[(r0 + 2 * i) * (kD / 4) + c4];
        kmax = fmaxf(kmax, fmaxf(fmaxf(fabsf(x[i].x), fabsf(x[i].y)),
                                 fmaxf(fabsf(x[i].z), fabsf(x[i].w))));
      }
#pragma unroll
      for (int o = 16; o >= 1; o >>= 1) kmax = fmaxf(kmax, __shfl_xor_sync(kFull, kmax, o));
      if (lane == 0) red[warp] = kmax;
      // A: every warp's max is in; the previous chunk's readers (K hi/lo by S and P·V, the
      // exchange, valid_s[vb ^ 1]) are done.
      __syncthreads();
      float tmax = red[0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) tmax = fmaxf(tmax, red[w]);
      const int tk = scale_exp(tmax);
      const float kf = pow2(tk);
#pragma unroll
      for (int i = 0; i < kPieces; ++i)
        store_split4(smem + kKhOff, smem + kKlOff, r0 + 2 * i, c4, x[i], kf);
      // The thread's raw slots are free (it alone reads them): chunk c + 1 goes in flight now.
      if (c + 1 < c1) issue_chunk(p, ids_s, cut.rows(c + 1), raw_s, raw, valid_s[vb ^ 1]);
      // B: the converted tile is complete; every reader of ids_s is done.
      __syncthreads();
      // Warp 0 fetches chunk c + 2's ids now (the load is in flight during S and P·V).
      int32_t next_id = 0;
      const bool stage_ids = warp == 0 && lane < kNc && c + 2 < c1 && lane < cut.rows(c + 2);
      if (stage_ids) next_id = p.ids[begin + (c + 2) * kNc + lane];

      // ---- S = Q·Kᵀ: the warp's m-tiles × 16 keys over its kGr groups of 64 channels ----
      float sv[kMt][2][4];
      s_tile<kGr>(sv, base, q_off, k_off);
      // Exchange the parts: logit = (((q0 + q1) + q2) + q3) · scale · 2^−(tq + tk) (s_logits).
      exchange_s<kGr, kMt>(xs, sv, warp, lane, hs);
      const float lf = ldexpf(p.scale, -(tq + tk));
      float lg[kMt][2][4];
      s_logits<kGr>(
          xs, hs, lane, lg, [](int) {},
          [&](int, int i, float sum) {
            const int key = (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
            return valid_s[vb][key] ? __fmul_rn(sum, lf) : -INFINITY;
          });
      // ---- online softmax per m-tile, rows g (i = 0, 1) and g + 8 (i = 2, 3) ----
      float f[kMt][2];
      uint32_t ph[kMt][4], pl[kMt][4];
      // P · 2^14 as the A operand.
      constexpr float kP = 16384.f;
      constexpr float kPf[2][2] = {{kP, kP}, {kP, kP}};
#pragma unroll
      for (int mi = 0; mi < kMt; ++mi) {
        float pv[2][4];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float cs = softmax_row(lg[mi], r, m_run[mi][r], l_run[mi][r], pv);
          f[mi][r] = ldexpf(cs, tk - e_acc);  // rescale and move acc into this tile's scale
        }
        split_p(pv, kPf, ph[mi], pl[mi]);
      }
      e_acc = tk;

      // ---- O = O·f + P·V over the warp's 64·kGr channels, one V fragment for its m-tiles ----
      pv_accumulate(acc, ph, pl, f, vbuf, v_off);
      if (stage_ids) ids_s[lane] = next_id;  // read by chunk c + 1's issue, after its barrier A
    }

    // ---- epilogue: a = acc · 2^−(14 + e_acc) (session 7's) ----
    const int e_out = -(14 + e_acc);
#pragma unroll
    for (int mi = 0; mi < kMt; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t h = hb + (hs * kMt + mi) * 16 + lane / 4 + 8 * r;
        const int col0 = ch0 * 8 + 2 * (lane & 3);
        if (n_units == 1) {
          float cs, total;
          const bool ok = finish_scale(m_run[mi][r], l_run[mi][r],
                                       p.sinks ? p.sinks + h : nullptr, end > begin, cs, total);
          float* o = p.out + (s * p.nH + h) * kD;
#pragma unroll
          for (int nt = 0; nt < L::kNt; ++nt) {
            const float a0 = ldexpf(acc[mi][nt][2 * r], e_out);
            const float a1 = ldexpf(acc[mi][nt][2 * r + 1], e_out);
            float2 v;
            v.x = ok ? __fdiv_rn(__fmul_rn(a0, cs), total) : 0.f;
            v.y = ok ? __fdiv_rn(__fmul_rn(a1, cs), total) : 0.f;
            *reinterpret_cast<float2*>(o + col0 + nt * 8) = v;
          }
        } else {
          float* part = p.parts + ((s * p.grid_units + u) * p.nH + h) * kPartRow;
          if (pt == 0 && (lane & 3) == 0) {
            part[0] = m_run[mi][r];
            part[1] = l_run[mi][r];
          }
#pragma unroll
          for (int nt = 0; nt < L::kNt; ++nt) {
            float2 v;
            v.x = ldexpf(acc[mi][nt][2 * r], e_out);
            v.y = ldexpf(acc[mi][nt][2 * r + 1], e_out);
            *reinterpret_cast<float2*>(part + 4 + col0 + nt * 8) = v;
          }
        }
      }
  }
}

template <int kGr, int kMt>
void launch_fd(const float* q, const float* kv, const int32_t* key_offsets, const int32_t* key_ids,
               int64_t nnz, const float* sinks, int64_t S, int64_t nH, int64_t T, float scale,
               float* out, float* parts, const AttentionFdPlan& plan, int32_t* error_flag,
               cudaStream_t st) {
  using L = Layout<kGr, kMt>;
  static std::atomic<uint64_t> opt_in{0};
  opt_in_smem_per_device(opt_in, attention_fd_kernel<kGr, kMt>, L::kSmemBytes,
                         /*max_carveout=*/L::kMinBlocks > 1);
  launch_split_key(
      q, kv, key_offsets, key_ids, nnz, sinks, S, nH, T, scale, out, parts, plan, error_flag, st,
      [&](const Args& a, dim3 grid) {
        pdl::launch(attention_fd_kernel<kGr, kMt>, grid, dim3(kThreads), L::kSmemBytes, st, true, a);
      },
      L::kHeads);
}

}  // namespace

void attention_fd(const float* q, const float* kv, const int32_t* key_offsets,
                  const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
                  int64_t T, float scale, float* out, float* parts, const AttentionFdPlan& plan,
                  int32_t* error_flag, cudaStream_t st) {
  if (S * nH == 0) return;
  if (plan.variant >= 5) {  // one launch per call, clusters merge the units (attention_x5.cu)
    attention_fd_x5(q, kv, key_offsets, key_ids, nnz, sinks, S, nH, T, scale, out, plan, error_flag,
                    st);
    return;
  }
  if (plan.variant == 3 || plan.variant == 4) {  // warp-specialized wgmma kernels (attention_x4.cu)
    attention_fd_x4(q, kv, key_offsets, key_ids, nnz, sinks, S, nH, T, scale, out, parts, plan,
                    error_flag, st);
    return;
  }
  // Session 11: head-split blocks (variants x1 / x2; the plan picks the heads per block).
  const auto launch = plan.heads_per_block == 32   ? &launch_fd<1, 2>
                      : plan.heads_per_block == 16 ? &launch_fd<1, 1>
                                                   : &launch_fd<2, 2>;
  launch(q, kv, key_offsets, key_ids, nnz, sinks, S, nH, T, scale, out, parts, plan, error_flag, st);
}

}  // namespace deepinfer::cuda::kernels
