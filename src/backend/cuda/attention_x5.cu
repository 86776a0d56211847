// Split-key decode attention for small batches in ONE kernel (session 13, helper attn1;
// DEEPINFER_ATTENTION_KERNEL=x5..x8; docs/cuda.md "Split-key decode attention in one launch").
//
// attention_fd's math (16-key chunks, fp16 hi/lo three-term mma.sync products, online softmax,
// per-chunk P·V chains folded with fmaf) with three changes aimed at the latency of a batch-1
// decode step, where attention_fd + attention_fd_combine took ~15 µs per layer for ≤ 1 MB of
// K = V rows:
//   1. The units of a token run as one thread-block CLUSTER (cluster dims (1, U, 1), U ≤ 8, or
//      ≤ 16 where the device schedules non-portable clusters): each CTA leaves its unit's state
//      (m, l, a) in its own shared memory, and after a cluster barrier every CTA of the cluster
//      merges a slice of the outputs reading the other CTAs' states through distributed shared
//      memory, units in order (fixed order: the bits do not depend on timing), then the sink.
//      No scratch in global memory, no combine launch, no counters.
//   2. Per-head Q scales (tq_h: head h's largest |q| into [2^14, 2^15)): a block reads only its
//      own heads (attention_fd's head-split blocks read the whole 64-head group for one max),
//      and a warp splits its heads with shuffles only (no block barrier).
//   3. Per-row K = V scales (tk_r, attention_fd v2's / x4's scheme): warp w gathers rows 2w and
//      2w + 1 of a chunk and converts them itself (row max by shuffles), so a chunk needs no
//      block-wide max: one barrier before the tile is overwritten (none for a unit's first
//      chunk) and one after it is complete.
// Logit of head h and key j: S_hj · 2^−tq_h · (scale · 2^−tk_j). P·V: with T = min_j tk_j over
// the chunk, P'_j = p_j · 2^(14 + T − tk_j) ≤ 2^14 is split hi / lo and Σ P'_j V'_j =
// 2^(14 + T) Σ p_j v_j, so the accumulator carries 2^(14 + T) (a row that is missing or all zero
// takes tk = 61, above every real scale, and cannot lower T; a chunk of such rows only keeps the
// accumulator's scale).
//
// Block = 8 warps, attention_fd's warp layouts (Layout<kGr, kMt>, attention_fd_common.cuh):
// 16 heads (<1, 1>: one m-tile × 8 channel eighths, two blocks per SM), 32 heads (<1, 2>) or 64
// heads (<2, 2>: 2 head sets × 4 channel quarters). Every S element is the same sum in every
// layout (an eighth's chain over 64 channels is one of a quarter's two group chains; quarters
// are ((0 + g0) + g1), summed ((q0 + q1) + q2) + q3), and the scales are per head and per row, so
// the heads per block never change a bit: the plan may pick them by batch size. Since session 14
// the chunk loop's S tile, logit sums, softmax rows, P split and P·V are the helpers of
// attention_fd_common.cuh that attention_fd.cu calls too (the same instructions as before).
//
// The cut: a token of c chunks runs n = min(c, Umax) units of ⌈c / n⌉ chunks (unit_layout with
// 1 chunk per unit and Umax units), a function of its own key count only; U = gridDim.y =
// min(C, Umax) for the longest list's C chunks, and CTAs y ≥ n of a shorter token only help the
// merge. So a token's output bits depend on its own inputs only — not on the batch, the other
// tokens or the heads per block — as long as max_keys is not understated (if it is, the token
// is cut into gridDim.y units instead: still correct).
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "backend/cuda/attention_fd.h"
#include "backend/cuda/attention_fd_common.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::cuda::kernels {
namespace {
namespace cg = cooperative_groups;

constexpr int kX5Rows = kNc / kWarps;    // rows of a chunk per warp: 2
constexpr int kX5Cols = kD / 4 / 32;     // float4 columns per lane and row: 4
constexpr int kX5MaxUnits = 16;          // cluster size at most (non-portable above 8)
constexpr int kTkNone = 61;              // row scale of a missing / all-zero row
constexpr int kStRow = kD + 8;           // floats per head of a unit's state (bank spread)

// Diagnostics (bench_ops, attention_x5_trace): when g_x5_trace_on, thread 0 of the first
// kX5TraceCtas CTAs records the phases of its CTA (globaltimer at entry / exit, clock64 between).
constexpr int kX5TraceCtas = 256, kX5TraceSlots = 14;
__device__ int g_x5_trace_on;
__device__ unsigned long long g_x5_trace[kX5TraceCtas][kX5TraceSlots];
__device__ __forceinline__ unsigned long long x5_gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Issues (one commit group) this thread's copies of the rows 2·warp + i (i < 2) of a chunk of
// n rows with ids id[i] into the raw tile: float4 columns lane + 32k. Missing rows and bad ids are
// zero-filled (by this thread: only it reads these slots); ok[i] = the row is a valid key.
template <bool kAligned>
__device__ __forceinline__ void x5_issue(const Args& p, const int32_t (&id)[kX5Rows], int n,
                                         uint32_t raw_s, float* raw, bool (&ok)[kX5Rows]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < kX5Rows; ++i) {
    const int r = warp * kX5Rows + i;
    ok[i] = false;
    if (r < n) {
      ok[i] = id[i] >= 0 && static_cast<int64_t>(id[i]) < p.T;
      if (!ok[i] && lane == 0) set_error(p.error_flag, kErrKeyId);
    }
#pragma unroll
    for (int k = 0; k < kX5Cols; ++k) {
      const int c4 = lane + 32 * k;
      const uint32_t dst = raw_s + static_cast<uint32_t>((r * kD + c4 * 4) * 4);
      if (ok[i]) {
        const float* src = p.kv + static_cast<int64_t>(id[i]) * kD + c4 * 4;
        if (kAligned || p.aligned) {
          cp_async16(dst, src);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) cp_async4(dst + 4 * e, src + e);
        }
      } else {
        reinterpret_cast<float4*>(raw)[r * (kD / 4) + c4] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
  }
  cp_async_commit();
}

// The ids of this thread's rows in chunk c (rows past the chunk: 0, unused).
__device__ __forceinline__ void x5_load_ids(const Args& p, const TokenCut& cut, int c, int c1,
                                            int32_t (&id)[kX5Rows]) {
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (int i = 0; i < kX5Rows; ++i) {
    const int r = warp * kX5Rows + i;
    id[i] = c < c1 && r < cut.rows(c) ? p.ids[cut.begin + c * kNc + r] : 0;
  }
}

// kAligned: q and kv 16-byte aligned (the 4-byte paths compiled out: a shorter kernel).
template <int kGr, int kMt, bool kAligned>
__global__ void __launch_bounds__(kThreads, Layout<kGr, kMt>::kMinBlocks)
    attention_x5_kernel(Args p) {
  using L = Layout<kGr, kMt>;  // attention_fd's block layouts (attention_fd_common.cuh)
  constexpr int kHs = L::kHs, kHeads = L::kHeads, kNt = L::kNt;
  constexpr int kQhOff = L::kQhOff, kQlOff = L::kQlOff, kKhOff = L::kKhOff, kKlOff = L::kKlOff,
                kRawOff = L::kRawOff, kXsOff = L::kXsOff;
  // The unit's state [kHeads][kStRow] fp32 overwrites Q hi/lo and (part of) K hi/lo; the static
  // shared memory below (≤ 2 KiB) fits beside the dynamic.
  static_assert(kHeads * kStRow * 4 <= kRawOff, "state area");
  static_assert(L::kSmemBytes * L::kMinBlocks + 2048 * L::kMinBlocks <= 227 * 1024,
                "shared memory");
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int tq_s[kHeads];
  __shared__ float m_s[kHeads], l_s[kHeads];
  __shared__ int tk_s[2][kNc];
  __shared__ int valid_s[2][kNc];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  static_assert(kHs == 1 || kHs == 2, "head sets");
  const int hs = warp & (kHs - 1), pt = warp >> (kHs - 1);
  const int64_t groups = p.nH / kHeads;
  const int64_t s = blockIdx.x / groups, hb = (blockIdx.x % groups) * kHeads;  // first head
  const unsigned long long t_g0 = x5_gtime(), t_c0 = clock64();
  pdl::wait();  // PDL: every input may come from the previous kernel
  pdl::launch_dependents();
  const int bid = static_cast<int>(blockIdx.x * gridDim.y + blockIdx.y);
  const bool trace = g_x5_trace_on != 0 && tid == 0 && bid < kX5TraceCtas;
  auto stamp = [&](int i, unsigned long long v) {
    if (trace) g_x5_trace[bid][i] = v;
  };
  stamp(0, t_g0);
  stamp(1, t_c0);
  stamp(2, clock64());

  // Q of the block's heads: warp w splits heads w, w + 8, … (16 floats per lane and head), all
  // loads of a round in flight while the token's list is read.
  constexpr int kQHeads = kHeads / kWarps;  // 2, 4 or 8
  constexpr int kQRound = kQHeads > 4 ? 4 : kQHeads;
  const float* qp = p.q + (s * p.nH + hb) * kD;
  auto qload = [&](int h, int k) -> float4 {
    const float* src = qp + h * kD + (lane + 32 * k) * 4;
    if (kAligned || p.q_aligned) return *reinterpret_cast<const float4*>(src);
    return make_float4(src[0], src[1], src[2], src[3]);
  };
  float4 qv[kQRound][kX5Cols];
#pragma unroll
  for (int j = 0; j < kQRound; ++j)
#pragma unroll
    for (int k = 0; k < kX5Cols; ++k) qv[j][k] = qload(warp + kWarps * j, k);

  const TokenCut cut = token_cut(p, s);  // p.chunks_per_unit = 1, p.grid_units = gridDim.y
  const int n_units = cut.n_units, per_unit = cut.per_unit;
  const int unit = static_cast<int>(blockIdx.y);
  const bool split = n_units > 1;  // uniform over the cluster (one token)
  const bool work = unit < n_units;
  stamp(3, clock64());  // the token's cut known (offsets read)
  if (!work && !split) {
    stamp(13, x5_gtime());
    return;
  }
  const int c0 = unit * per_unit;
  const int c1 = work ? (c0 + per_unit < cut.chunks ? c0 + per_unit : cut.chunks) : c0;
  float* raw = reinterpret_cast<float*>(smem + kRawOff);
  const uint32_t raw_s = base + kRawOff;

  bool ok_cur[kX5Rows] = {false, false}, ok_next[kX5Rows] = {false, false};
  int32_t nid[kX5Rows];
  if (c0 < c1) {
    x5_load_ids(p, cut, c0, c1, nid);
    x5_issue<kAligned>(p, nid, cut.rows(c0), raw_s, raw, ok_cur);
    x5_load_ids(p, cut, c0 + 1, c1, nid);  // in flight during Q's split and the first chunk
  }
  stamp(4, clock64());  // the first chunk's copies issued (its ids read)

  // Q split: per head h the exponent tq_h; hi/lo rows (relative to hb) in the swizzled tiles.
  auto split_q_round = [&](int j0) {
#pragma unroll
    for (int j = 0; j < kQRound; ++j) {
      const int h = warp + kWarps * (j0 + j);
      float mx = 0.f;
#pragma unroll
      for (int k = 0; k < kX5Cols; ++k)
        mx = fmaxf(mx, fmaxf(fmaxf(fabsf(qv[j][k].x), fabsf(qv[j][k].y)),
                             fmaxf(fabsf(qv[j][k].z), fabsf(qv[j][k].w))));
#pragma unroll
      for (int o = 16; o >= 1; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
      const int tq = scale_exp(mx);
      if (lane == 0) tq_s[h] = tq;
      const float qf = pow2(tq);
#pragma unroll
      for (int k = 0; k < kX5Cols; ++k)
        store_split4(smem + kQhOff, smem + kQlOff, h, lane + 32 * k, qv[j][k], qf);
    }
  };
  if (work) {
    split_q_round(0);
#pragma unroll 1
    for (int j0 = kQRound; j0 < kQHeads; j0 += kQRound) {
#pragma unroll
      for (int j = 0; j < kQRound; ++j)
#pragma unroll
        for (int k = 0; k < kX5Cols; ++k) qv[j][k] = qload(warp + kWarps * (j0 + j), k);
      split_q_round(j0);
    }
  }
  stamp(5, clock64());  // Q split

  // ldmatrix offsets (attention_fd.cu's): the part's first 16-byte chunk ch0.
  const int ch0 = pt * kGr * 8;
  uint32_t q_off[kMt];
  q_off[0] = swz(hs * kMt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, ch0 + (lane >> 4));
  if (kMt > 1) q_off[kMt - 1] = q_off[0] + 16 * kRowB;
  const uint32_t k_off = swz((lane & 7) + ((lane >> 4) << 3), ch0 + ((lane >> 3) & 1));
  const uint32_t v_off = swz((lane & 7) + ((lane >> 3) & 1) * 8, ch0);
  const uint32_t vbuf = base + ((lane >> 4) ? kKlOff : kKhOff);
  float* xs = reinterpret_cast<float*>(smem + kXsOff);

  float m_run[kMt][2], l_run[kMt][2];
  float acc[kMt][kNt][4];
  init_state(m_run, l_run, acc);
  int e_acc = 0;  // acc = a · 2^(14 + e_acc)

#pragma unroll 1
  for (int c = c0; c < c1; ++c) {
    const int vb = (c - c0) & 1;
    cp_async_wait_all();  // chunk c is this thread's only group in flight
    if (c == c0) stamp(6, clock64());
    float4 x[kX5Rows][kX5Cols];
    float rmax[kX5Rows];
#pragma unroll
    for (int i = 0; i < kX5Rows; ++i) {
      rmax[i] = 0.f;
#pragma unroll
      for (int k = 0; k < kX5Cols; ++k) {
        x[i][k] =
            reinterpret_cast<const float4*>(raw)[(warp * kX5Rows + i) * (kD / 4) + lane + 32 * k];
        rmax[i] = fmaxf(rmax[i], fmaxf(fmaxf(fabsf(x[i][k].x), fabsf(x[i][k].y)),
                                       fmaxf(fabsf(x[i][k].z), fabsf(x[i][k].w))));
      }
    }
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1)
#pragma unroll
      for (int i = 0; i < kX5Rows; ++i)
        rmax[i] = fmaxf(rmax[i], __shfl_xor_sync(kFull, rmax[i], o));
    // A: the previous chunk's readers of K hi/lo (S, P·V) are done (not needed for the first).
    if (c != c0) __syncthreads();
#pragma unroll
    for (int i = 0; i < kX5Rows; ++i) {
      const int r = warp * kX5Rows + i;
      const int tk = ok_cur[i] && rmax[i] > 0.f ? scale_exp(rmax[i]) : kTkNone;
      if (lane == 0) {
        tk_s[vb][r] = tk;
        valid_s[vb][r] = ok_cur[i] ? 1 : 0;
      }
      const float kf = pow2(tk == kTkNone ? 0 : tk);
#pragma unroll
      for (int k = 0; k < kX5Cols; ++k)
        store_split4(smem + kKhOff, smem + kKlOff, r, lane + 32 * k, x[i][k], kf);
    }
    // This thread's raw slots are free: chunk c + 1 goes in flight, chunk c + 2's ids follow.
    if (c + 1 < c1) {
      x5_issue<kAligned>(p, nid, cut.rows(c + 1), raw_s, raw, ok_next);
      x5_load_ids(p, cut, c + 2, c1, nid);
    }
    // B: the converted tile, its scales and flags (and, the first time, Q) are complete.
    __syncthreads();
    if (c == c0) stamp(7, clock64());

    // ---- S = Q·Kᵀ and the exchange of its parts (attention_fd.cu's code) ----
    float sv[kMt][2][4];
    s_tile<kGr>(sv, base, q_off, k_off);
    exchange_s<kGr, kMt>(xs, sv, warp, lane, hs);
    // This lane's keys: n-tile nt, j → key nt·8 + 2(lane & 3) + j.
    float kf[2][2];
    int tkk[2][2];
    bool vk[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int key = nt * 8 + 2 * (lane & 3) + j;
        tkk[nt][j] = tk_s[vb][key];
        vk[nt][j] = valid_s[vb][key] != 0;
        kf[nt][j] = __fmul_rn(p.scale, pow2(-tkk[nt][j]));  // = ldexpf (|tk| ≤ 61)
      }
    int T = tk_s[vb][0];
#pragma unroll
    for (int r = 1; r < kNc; ++r) T = min(T, tk_s[vb][r]);
    if (T == kTkNone) T = e_acc;  // no row with a scale: keep the accumulator's
    float lg[kMt][2][4];
    float qf[2];  // 2^−tq of the lane's rows g and g + 8 of the m-tile
    s_logits<kGr>(
        xs, hs, lane, lg,
        [&](int mi) {
#pragma unroll
          for (int r = 0; r < 2; ++r) qf[r] = pow2(-tq_s[(hs * kMt + mi) * 16 + lane / 4 + 8 * r]);
        },
        [&](int, int i, float sum) {
          const int nt = i >> 2, j = i & 1, r = (i >> 1) & 1;
          return vk[nt][j] ? __fmul_rn(__fmul_rn(sum, qf[r]), kf[nt][j]) : -INFINITY;
        });
    // ---- online softmax per m-tile (attention_fd.cu's), P scaled per key ----
    float f[kMt][2];
    uint32_t ph[kMt][4], pl[kMt][4];
    float pf[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int j = 0; j < 2; ++j) pf[nt][j] = pow2(14 + T - tkk[nt][j]);
#pragma unroll
    for (int mi = 0; mi < kMt; ++mi) {
      float pv[2][4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float cs = softmax_row(lg[mi], r, m_run[mi][r], l_run[mi][r], pv);
        f[mi][r] = __fmul_rn(cs, pow2(T - e_acc));  // = ldexpf (|T − e_acc| ≤ 121)
      }
      split_p(pv, pf, ph[mi], pl[mi]);
    }
    e_acc = T;

    // ---- O = O·f + P·V (attention_fd.cu's) ----
    pv_accumulate(acc, ph, pl, f, vbuf, v_off);
    ok_cur[0] = ok_next[0];
    ok_cur[1] = ok_next[1];
  }

  const int e_out = -(14 + e_acc);
  const float f_out = pow2(e_out);  // e_out in [−75, 46]: x · f_out = ldexpf(x, e_out)
  stamp(8, clock64());              // the unit's chunks done
  if (!split) {  // the token's only unit: finish here (attention_fd.cu's epilogue)
#pragma unroll
    for (int mi = 0; mi < kMt; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t h = hb + (hs * kMt + mi) * 16 + lane / 4 + 8 * r;
        const int col0 = ch0 * 8 + 2 * (lane & 3);
        float cs, total;
        const bool ok = finish_scale(m_run[mi][r], l_run[mi][r], p.sinks ? p.sinks + h : nullptr,
                                     cut.end > cut.begin, cs, total);
        const float rs = ok ? __fdiv_rn(cs, total) : 0.f;  // one division per row
        float* o = p.out + (s * p.nH + h) * kD;
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          const float a0 = __fmul_rn(acc[mi][nt][2 * r], f_out);
          const float a1 = __fmul_rn(acc[mi][nt][2 * r + 1], f_out);
          float2 v;
          v.x = __fmul_rn(a0, rs);
          v.y = __fmul_rn(a1, rs);
          *reinterpret_cast<float2*>(o + col0 + nt * 8) = v;
        }
      }
    stamp(12, clock64());
    stamp(13, x5_gtime());
    return;
  }

  // ---- a split token: the unit's state into shared memory, then the cluster's merge ----
  float* st = reinterpret_cast<float*>(smem);  // [kHeads][kStRow] over Q hi/lo (and K)
  __syncthreads();                             // every reader of Q and K hi/lo is done
  if (work) {
#pragma unroll
    for (int mi = 0; mi < kMt; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int hl = (hs * kMt + mi) * 16 + lane / 4 + 8 * r;
        const int col0 = ch0 * 8 + 2 * (lane & 3);
        if (pt == 0 && (lane & 3) == 0) {
          m_s[hl] = m_run[mi][r];
          l_s[hl] = l_run[mi][r];
        }
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
          float2 v;
          v.x = __fmul_rn(acc[mi][nt][2 * r], f_out);
          v.y = __fmul_rn(acc[mi][nt][2 * r + 1], f_out);
          *reinterpret_cast<float2*>(st + hl * kStRow + col0 + nt * 8) = v;
        }
      }
  }
  cg::cluster_group cluster = cg::this_cluster();
  stamp(9, clock64());  // the state written
  cluster.sync();       // every unit's state is written (release / acquire across the cluster)
  stamp(10, clock64());
  // Items (head, float4 column) of the block's heads: rank r of the cluster takes r·256 + i,
  // (r + U)·256 + i, …. Per item (attention_fd_combine's arithmetic): M = max_u m_u,
  // w_u = exp(m_u − M) (0 for a unit without a valid key), L = Σ_u l_u·w_u and a = Σ_u a_u·w_u in
  // unit order, then the sink. The m of every unit, then groups of 8 units (m, l, a each), every
  // load of a group issued at once (a short loop: a batch-1 CTA runs this code once, cold).
  constexpr int kGroup = 8;
  const int U = static_cast<int>(gridDim.y);
  for (int it = unit * kThreads + tid; it < kHeads * (kD / 4); it += U * kThreads) {
    const int hl = it / (kD / 4), c4 = it % (kD / 4);
    float M = -INFINITY;
#pragma unroll
    for (int u = 0; u < kX5MaxUnits; ++u)
      if (u < n_units) M = fmaxf(M, *cluster.map_shared_rank(&m_s[hl], u));
    float Ls = 0.f;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 1
    for (int u0 = 0; u0 < n_units; u0 += kGroup) {
      float mq[kGroup], lq[kGroup];
      float4 vq[kGroup];
#pragma unroll
      for (int k = 0; k < kGroup; ++k)
        if (u0 + k < n_units) {
          mq[k] = *cluster.map_shared_rank(&m_s[hl], u0 + k);
          lq[k] = *cluster.map_shared_rank(&l_s[hl], u0 + k);
          vq[k] = *reinterpret_cast<const float4*>(
              cluster.map_shared_rank(st + hl * kStRow + 4 * c4, u0 + k));
        }
#pragma unroll
      for (int k = 0; k < kGroup; ++k)
        if (u0 + k < n_units) merge_unit(unit_weight(mq[k], M), lq[k], vq[k], Ls, a);
    }
    const int64_t h = hb + hl;
    float cs, total;
    const bool ok =
        finish_scale(M, Ls, p.sinks ? p.sinks + h : nullptr, cut.end > cut.begin, cs, total);
    float4 o;
    const float rs = ok ? __fdiv_rn(cs, total) : 0.f;
    o.x = __fmul_rn(a.x, rs);
    o.y = __fmul_rn(a.y, rs);
    o.z = __fmul_rn(a.z, rs);
    o.w = __fmul_rn(a.w, rs);
    reinterpret_cast<float4*>(p.out + (s * p.nH + h) * kD)[c4] = o;
  }
  stamp(11, clock64());  // the merge done
  cluster.sync();        // the other CTAs' shared memory stays until every CTA has read it
  stamp(12, clock64());
  stamp(13, x5_gtime());
}

template <int kGr, int kMt, bool kAligned>
auto x5_kernel_prepared(int units) {
  using L = Layout<kGr, kMt>;
  auto kernel = attention_x5_kernel<kGr, kMt, kAligned>;
  static std::atomic<uint64_t> opt_in{0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if ((opt_in.load(std::memory_order_relaxed) & bit) == 0) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmemBytes);
    if (L::kMinBlocks > 1)
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared);
    cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    opt_in.fetch_or(bit, std::memory_order_relaxed);
  }
  (void)units;
  return kernel;
}

std::atomic<bool> g_x5_force_cluster{false};

template <int kGr, int kMt>
void launch_x5(const Args& a, int64_t n_tokens, int units, bool pdl, cudaStream_t st) {
  using L = Layout<kGr, kMt>;
  auto kernel = a.aligned && a.q_aligned ? x5_kernel_prepared<kGr, kMt, true>(units)
                                         : x5_kernel_prepared<kGr, kMt, false>(units);
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = 1;
  attr[1].val.clusterDim.y = static_cast<unsigned>(units);
  attr[1].val.clusterDim.z = 1;
  // One unit per token: no cluster attribute (unless forced, to measure what it costs).
  const bool cluster = units > 1 || g_x5_force_cluster.load(std::memory_order_relaxed);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim =
      dim3(static_cast<unsigned>(n_tokens * (a.nH / L::kHeads)), static_cast<unsigned>(units));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = L::kSmemBytes;
  cfg.stream = st;
  // attr[0] = PDL (x7: a plain launch, to measure what PDL costs around a cluster kernel).
  cfg.attrs = pdl ? attr : attr + 1;
  cfg.numAttrs = (pdl ? 1 : 0) + (cluster ? 1 : 0);
  if (cfg.numAttrs == 0) cfg.attrs = nullptr;
  (void)cudaLaunchKernelEx(&cfg, kernel, a);  // sets the last error too
}

template <int kGr, int kMt>
int max_cluster_of(int want) {
  using L = Layout<kGr, kMt>;
  auto kernel = x5_kernel_prepared<kGr, kMt, true>(want);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = static_cast<unsigned>(want);
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1, static_cast<unsigned>(want));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = L::kSmemBytes;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  return n;
}

}  // namespace

void set_attention_x5_force_cluster(bool on) { g_x5_force_cluster.store(on); }

void attention_x5_trace(bool on) {
  const int v = on ? 1 : 0;
  if (on) {
    static const std::vector<unsigned long long> zeros(size_t{kX5TraceCtas} * kX5TraceSlots, 0);
    cudaMemcpyToSymbol(g_x5_trace, zeros.data(), zeros.size() * sizeof(unsigned long long));
  }
  cudaMemcpyToSymbol(g_x5_trace_on, &v, sizeof v);
}

int attention_x5_trace_read(std::vector<unsigned long long>& out) {
  out.assign(size_t{kX5TraceCtas} * kX5TraceSlots, 0);
  if (cudaMemcpyFromSymbol(out.data(), g_x5_trace, out.size() * sizeof(unsigned long long)) !=
      cudaSuccess) {
    cudaGetLastError();
    out.clear();
    return 0;
  }
  return kX5TraceSlots;
}

int attention_x5_max_units(int want, int heads_per_block) {
  want = want < 1 ? 1 : (want > kX5MaxUnits ? kX5MaxUnits : want);
  if (want <= 8) return want;             // portable cluster sizes
  static std::atomic<int> cached[3][64];  // [heads 16 / 32 / 64][device]: 0 unknown
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 8;
  }
  const int hi = heads_per_block == 16 ? 0 : heads_per_block == 32 ? 1 : 2;
  std::atomic<int>& c = cached[hi][dev & 63];
  int v = c.load(std::memory_order_relaxed);
  if (v == 0) {
    const int n = hi == 0   ? max_cluster_of<1, 1>(kX5MaxUnits)
                  : hi == 1 ? max_cluster_of<1, 2>(kX5MaxUnits)
                            : max_cluster_of<2, 2>(kX5MaxUnits);
    v = n > 0 ? kX5MaxUnits : 8;
    c.store(v, std::memory_order_relaxed);
  }
  return want < v ? want : v;
}

void attention_fd_x5(const float* q, const float* kv, const int32_t* key_offsets,
                     const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
                     int64_t T, float scale, float* out, const AttentionFdPlan& plan,
                     int32_t* error_flag, cudaStream_t st) {
  if (S * nH == 0) return;
  const int units =
      plan.grid_units < 1 ? 1 : (plan.grid_units > kX5MaxUnits ? kX5MaxUnits : plan.grid_units);
  // grid.x ≤ 2^31 − 1 blocks: tokens in slices (a token's bits do not depend on the slice).
  const int64_t per_launch = int64_t{1} << 24;
  for (int64_t s0 = 0; s0 < S; s0 += per_launch) {
    const int64_t n = S - s0 < per_launch ? S - s0 : per_launch;
    const Args a = slice_args(q, kv, key_offsets, key_ids, nnz, sinks, nH, T, scale, out, s0,
                              nullptr, /*chunks_per_unit=*/1, units, error_flag);
    const bool pdl = plan.variant != 7;
    if (plan.heads_per_block == 16)
      launch_x5<1, 1>(a, n, units, pdl, st);
    else if (plan.heads_per_block == 32)
      launch_x5<1, 2>(a, n, units, pdl, st);
    else
      launch_x5<2, 2>(a, n, units, pdl, st);
  }
}

}  // namespace deepinfer::cuda::kernels
