// Split-key decode attention, variants x3 and x4 (session 10, helper attn;
// DEEPINFER_ATTENTION_KERNEL=x3 / x4): attention_fd's contract, plan, scratch and combine, with
// both products on Hopper's warpgroup MMA (wgmma: the 64 heads are one warpgroup's M; Q and K
// operands read by the tensor core straight from 128-byte-swizzled shared memory, V read N-major
// from the same tile, P from registers) and warp specialization.
//
// Why (H200, checkpoint 1): session 10's first wgmma kernels (x1, x2: 2 warpgroups doing
// everything; removed) took ~5-6 µs per 16-key chunk, like attention_fd — the tensor work is a
// fraction of that; the rest is the CUDA-core work of 8 warps (2 per scheduler) with long
// dependent chains: per chunk and thread ~1,200 instructions, a third of them the gather of the
// next tile's rows and its fp32 → fp16 hi / lo conversion. Here a third warpgroup (the producer)
// does only that, into a ring of two tiles, while the two consumer
// warpgroups run S, the softmax and P·V; registers are rebalanced with setmaxnreg (producer 88,
// consumers 208). x4 (kStaged) also stages the producer's row loads by cp.async half a chunk ahead.
//
// History: checkpoint 2 measured this kernel with P·V accumulated straight into acc in the tensor
// core (acc·f, then the 12 wgmma into acc): CSA batch 128 180.0 µs (fd 251.6), 4.47 µs per chunk,
// but its error grew with the unit's length (4.5e-6 of the bound 5e-6 at 40 chunks, 1.3e-6 at 8);
// P·V now uses attention_fd's per-chunk chains and round-to-nearest fold (below).
//
// Block = 3 warpgroups (384 threads, one block per SM); threads 0-255 are the consumers (warpgroup
// wg = tid / 128 owns channels [256·wg, 256·wg + 256) of S's sum and of P·V; their partial logits
// are exchanged through shared memory and added (wg0 + wg1) in both), 256-383 the producer. Grid, plan (AttentionFdPlan, 16-key chunks), scratch and combine: attention_fd's.
//
// Synchronization (named barriers; 0 = __syncthreads is used only before the roles split):
//   1: the consumers (256) — the Q maximum, the exchange of the partial logits;
//   2 + slot "full": the producer arrives (128) after writing tile `slot`, its row scales and
//     validity flags and fence.proxy.async; the consumers sync (256) before reading it;
//   4 + slot "empty": the consumers arrive after their last wgmma reading tile `slot` completed;
//     the producer syncs before overwriting it (from the third chunk on; the last two phases are
//     drained at the end so every barrier completes).
//
// Per-row scales (attention_fd v2's scheme, session 8): the producer converts row r with its own
// power of two 2^tk_r (its largest |v| into [2^14, 2^15); 60 for a missing or all-zero row, so it
// cannot lower T below). Logit of key j: S_j · scale · 2^−(tq + tk_j). P·V: with T = min_j tk_j,
// P'_j = p_j · 2^(14 + T − tk_j) is split hi / lo and Σ P'_j V'_j = 2^(14 + T) Σ p_j v_j, so the
// accumulator carries 2^(14 + T) (x1 carries 2^(14 + tk) of the tile).
//
// Precision: S with the hi and lo rows of each K = V atom stacked (rows 0-15 hi, 16-31 lo): one
// m64n32k16 computes Q hi·[K hi; K lo] (Q hi read once for both terms), one m64n16k16 Q lo·K hi,
// accumulated over the warpgroup's 256 channels; (hi·lo' + lo·hi') + hi·hi' per key. P·V as
// attention_fd and x1 (per chunk and 64 channels a fresh 3-term chain t, then acc = fmaf(acc, f,
// t)).
// Batch invariance: as attention_fd (a block's work depends on its token only).
#include <atomic>
#include <cstdint>
#include <cuda_fp16.h>

#include "backend/cuda/attention_fd.h"
#include "backend/cuda/attention_fd_common.cuh"
#include "backend/cuda/attention_wgmma.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::cuda::kernels {
namespace {

constexpr int kX4Threads = 384;
constexpr int kX4Consumers = 256;
constexpr int kX4ProducerRegs = 88, kX4ConsumerRegs = 208;  // 128·88 + 256·208 = 384·168
constexpr int kX4QhOff = 0;
constexpr int kX4KOff = 2 * kQPlane;
constexpr int kX4TA = 2 * kKAtom;     // stacked atom: rows 0-15 hi, 16-31 lo (4 KiB)
constexpr int kX4TL = kKAtom;         // lo rows relative to hi rows
constexpr int kX4KBuf = 2 * kKPlane;  // one tile (hi and lo) = 32 KiB
constexpr int kX4XsOff = kX4KOff + 2 * kX4KBuf;
constexpr int kX4XsSlot = 2 * 8 * 128 * 4;  // per tile slot: 2 warpgroups × 8 floats × 128 threads
constexpr int kX4StgOff = kX4XsOff + 2 * kX4XsSlot;  // kStaged: 2 rows of fp32 per producer warp
constexpr int kX4StgWarp = 2 * kD * 4;
constexpr int kX4SmemBytes = kX4StgOff + 4 * kX4StgWarp + 1024;  // + alignment slack
static_assert(kX4SmemBytes + 512 <= 227 * 1024, "attention_x4: shared memory");

__device__ __forceinline__ void named_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
template <int N>
__device__ __forceinline__ void regs_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void regs_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// kStaged (variant x4): the producer's row loads go through a per-warp staging buffer by cp.async,
// one half-chunk (2 rows per warp) ahead, so their latency overlaps the conversion of the previous
// half; without it (variant x3) each half is loaded into registers and converted at once.
template <bool kStaged>
__global__ void __launch_bounds__(kX4Threads, 1) attention_x4_kernel(Args p) {
  extern __shared__ unsigned char x4_smem_raw[];
  __shared__ float red_q[8];         // the consumer warps' Q maxima
  __shared__ int tk_s[2][kNc];       // per tile slot: each row's scale exponent
  __shared__ int valid_s[2][kNc];    // per tile slot: each row's validity
  __shared__ int tmin_s[2][4];       // per tile slot: each producer warp's smallest row exponent
  const uint32_t raw_base = static_cast<uint32_t>(__cvta_generic_to_shared(x4_smem_raw));
  const uint32_t base = (raw_base + 1023u) & ~1023u;
  unsigned char* smem = x4_smem_raw + (base - raw_base);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t groups = p.nH / kH;
  const int64_t s = blockIdx.x / groups, g = blockIdx.x % groups;
  pdl::wait();
  pdl::launch_dependents();

  const TokenCut cut = token_cut(p, s);
  const int begin = cut.begin, end = cut.end, chunks = cut.chunks, n_units = cut.n_units,
            per_unit = cut.per_unit;
  // n_units ≤ grid_units = gridDim.y (unit_layout caps it), so a block runs at most one unit.
  if (static_cast<int>(blockIdx.y) >= n_units) return;  // uniform over the block
  const int u = static_cast<int>(blockIdx.y);
  const int c0 = u * per_unit;
  const int c1 = c0 + per_unit < chunks ? c0 + per_unit : chunks;
  const int count = c1 - c0;  // chunks of this unit (≥ 0)

  if (tid >= kX4Consumers) {
    // ================================ producer ================================
    regs_dec<kX4ProducerRegs>();
    const int pt = tid - kX4Consumers, pw = pt >> 5;  // producer warp pw owns rows pw + 4k
    // The ids of the warp's 4 rows of the next chunk are loaded one chunk ahead (−1: no row), so
    // a row's load never waits on its id; the rows themselves were prefetched to L2.
    auto row_ids = [&](int c, int (&id)[4]) {
      const int n = cut.rows(c);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int r = pw + 4 * k;
        id[k] = r < n ? p.ids[begin + c * kNc + r] : -1;
      }
    };
    int idr[4] = {-1, -1, -1, -1};
    if (count > 0) row_ids(c0, idr);
    // kStaged: this warp's 2 staged rows (fp32) and the copy of two rows into them (a bad id
    // copies nothing: its row reads as zeros).
    const bool staged = kStaged && p.aligned;
    const unsigned char* stg = smem + kX4StgOff + pw * kX4StgWarp;
    const uint32_t stg_s = base + kX4StgOff + pw * kX4StgWarp;
    auto stage = [&](int id0, int id1) {
      const int id2[2] = {id0, id1};
#pragma unroll
      for (int k = 0; k < 2; ++k)
        if (id2[k] >= 0 && id2[k] < p.T)
#pragma unroll
          for (int q = 0; q < 4; ++q)
            cp_async16(stg_s + k * (kD * 4) + (lane + 32 * q) * 16,
                       p.kv + int64_t{id2[k]} * kD + (lane + 32 * q) * 4);
      cp_async_commit();
    };
    if (staged && count > 0) stage(idr[0], idr[1]);
    for (int i = 0; i < count; ++i) {
      const int c = c0 + i, slot = i & 1;
      const int n = cut.rows(c);
      int idn[4] = {-1, -1, -1, -1};
      if (i + 1 < count) {
        row_ids(c + 1, idn);
        // Chunk c + 1's rows go to L2 now (warp 0, one row per lane).
        if (pw == 0 && lane < cut.rows(c + 1)) {
          const int32_t id = p.ids[begin + (c + 1) * kNc + lane];
          if (id >= 0 && id < p.T) pdl::prefetch_l2_bulk(p.kv + int64_t{id} * kD, kD * 4);
        }
      }
      // This chunk's 4 rows of the warp into L1 (no registers): the loads below then wait on L1,
      // not L2, while the two halves are converted one after the other.
      if (p.aligned && !staged) {
#pragma unroll
        for (int k = 0; k < 4; ++k)
          if (idr[k] >= 0 && idr[k] < p.T)
#pragma unroll
            for (int q = 0; q < 4; ++q)
              asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p.kv + int64_t{idr[k]} * kD +
                                                             (lane + 32 * q) * 4));
      }
      if (i >= 2) named_sync(4 + slot, kX4Threads);  // the consumers are done with chunk c − 2
      unsigned char* tile = smem + kX4KOff + slot * kX4KBuf;
      int tmin = 60;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float4 x[2][4];
        bool ok[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const int r = pw + 4 * (2 * half + k);
          const int64_t j = idr[2 * half + k];
          ok[k] = j >= 0 && j < p.T;
          if (r < n && !ok[k] && lane == 0) set_error(p.error_flag, kErrKeyId);
        }
        if (staged) {
          // This half was staged by the previous step; each lane reads the pieces it copied.
          cp_async_wait_all();
#pragma unroll
          for (int k = 0; k < 2; ++k)
#pragma unroll
            for (int q = 0; q < 4; ++q)
              x[k][q] = ok[k] ? *reinterpret_cast<const float4*>(stg + k * (kD * 4) +
                                                                  (lane + 32 * q) * 16)
                              : make_float4(0.f, 0.f, 0.f, 0.f);
        } else {
#pragma unroll
          for (int k = 0; k < 2; ++k) {
            const float* src = p.kv + (ok[k] ? idr[2 * half + k] : 0) * int64_t{kD};
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              const int c4 = lane + 32 * q;
              if (!ok[k]) {
                x[k][q] = make_float4(0.f, 0.f, 0.f, 0.f);
              } else if (p.aligned) {
                x[k][q] = *reinterpret_cast<const float4*>(src + c4 * 4);
              } else {
                x[k][q] =
                    make_float4(src[c4 * 4], src[c4 * 4 + 1], src[c4 * 4 + 2], src[c4 * 4 + 3]);
              }
            }
          }
        }
        float mxr[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          float mx = 0.f;
#pragma unroll
          for (int q = 0; q < 4; ++q)
            mx = fmaxf(mx, fmaxf(fmaxf(fabsf(x[k][q].x), fabsf(x[k][q].y)),
                                 fmaxf(fabsf(x[k][q].z), fabsf(x[k][q].w))));
          mxr[k] = mx;
        }
        // The staging buffer's values are in registers (the maxima used them; the empty asm keeps
        // the compiler from moving the reads or the maxima below the copies that overwrite the
        // buffer): the next half goes in flight (this chunk's second half, or the next chunk's).
        asm volatile("" ::"f"(mxr[0]), "f"(mxr[1]) : "memory");
        if (staged) {
          if (half == 0) {
            stage(idr[2], idr[3]);
          } else if (i + 1 < count) {
            stage(idn[0], idn[1]);
          }
        }
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const int r = pw + 4 * (2 * half + k);
          float mx = mxr[k];
#pragma unroll
          for (int o = 16; o >= 1; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
          const int tk = ok[k] && mx > 0.f && isfinite(mx) ? scale_exp(mx) : 60;
          tmin = min(tmin, tk);
          const float kf = pow2(tk);
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const int c4 = lane + 32 * q;
            uint2 hi, lo;
            split2(__fmul_rn(x[k][q].x, kf), __fmul_rn(x[k][q].y, kf), hi.x, lo.x);
            split2(__fmul_rn(x[k][q].z, kf), __fmul_rn(x[k][q].w, kf), hi.y, lo.y);
            const uint32_t at = static_cast<uint32_t>((c4 >> 4) * kX4TA) +
                                sw128(r, (c4 & 15) >> 1) + static_cast<uint32_t>((c4 & 1) * 8);
            *reinterpret_cast<uint2*>(tile + at) = hi;
            *reinterpret_cast<uint2*>(tile + kX4TL + at) = lo;
          }
          if (lane == 0) {
            tk_s[slot][r] = tk;
            valid_s[slot][r] = ok[k] ? 1 : 0;
          }
        }
      }
      if (lane == 0) tmin_s[slot][pw] = tmin;
#pragma unroll
      for (int k = 0; k < 4; ++k) idr[k] = idn[k];
      fence_proxy_async();
      named_arrive(2 + slot, kX4Threads);  // tile `slot` holds chunk c
    }
    // Drain: the consumers' "empty" arrivals of the last (up to) two chunks.
    for (int i = count - 2 < 0 ? 0 : count - 2; i < count; ++i) named_sync(4 + (i & 1), kX4Threads);
    return;
  }

  // ================================ consumers ================================
  regs_inc<kX4ConsumerRegs>();
  const int wg = tid >> 7, wl = warp & 3, t128 = tid & 127;
  // ---- Q: scaled and split into hi/lo fp16 (split_q), into the 128B-swizzle atoms ----
  const float* qp = p.q + (s * p.nH + g * kH) * kD;
  const int tq = split_q<kX4Consumers>(
      qp, p.q_aligned, red_q, [] { named_sync(1, kX4Consumers); },
      [&](int r, int c, const uint4& hi, const uint4& lo) {  // head r, channels 8c … 8c + 7
        const uint32_t at = static_cast<uint32_t>((c >> 3) * kQAtom) + sw128(r, c & 7);
        *reinterpret_cast<uint4*>(smem + kX4QhOff + at) = hi;
        *reinterpret_cast<uint4*>(smem + kX4QhOff + kQPlane + at) = lo;
      });
  fence_proxy_async();  // Q is published to the tensor core by the first "full" barrier

  const uint64_t q_desc = wg_desc(base + kX4QhOff + wg * 4 * kQAtom, 16, 1024);
  const uint64_t k_desc0 = wg_desc(base + kX4KOff + wg * 4 * kX4TA, 16, 1024);
  const uint64_t v_desc0 = wg_desc(base + kX4KOff + wg * 4 * kX4TA, 1024, 1024);
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.f, 0.f};
  float acc[4][32];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[a][i] = 0.f;
  int e_acc = 0;  // acc = a · 2^(14 + e_acc)

  for (int i = 0; i < count; ++i) {
    const int slot = i & 1;
    const uint64_t k_desc = k_desc0 + static_cast<uint64_t>(slot * (kX4KBuf >> 4));
    const uint64_t v_desc = v_desc0 + static_cast<uint64_t>(slot * (kX4KBuf >> 4));
    named_sync(2 + slot, kX4Threads);  // tile `slot` (chunk c0 + i) is in

    // S over this warpgroup's 256 channels: t32 = [Σ hi·hi' | Σ hi·lo'], t0 = Σ lo·hi'.
    float t32[16], t0[8], sv[8];
    wg_fence();
#pragma unroll
    for (int grp = 0; grp < 4; ++grp)
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint64_t qh = q_desc + ((grp * kQAtom + ks * 32) >> 4), ql = qh + (kQPlane >> 4);
        const uint64_t kk = k_desc + ((grp * kX4TA + ks * 32) >> 4);  // N = 32: [hi; lo], 16: hi
        if (grp == 0 && ks == 0) {
          wgmma_s32_first(t32, qh, kk);
          wgmma_s_first(t0, ql, kk);
        } else {
          wgmma_s32(t32, qh, kk);
          wgmma_s(t0, ql, kk);
        }
      }
    wg_commit();
    // While S runs: this chunk's row scales; T = the smallest.
    int tkey[4];  // keys 2t, 2t + 1, 8 + 2t, 9 + 2t of this thread's fragments
    const int T = min(min(tmin_s[slot][0], tmin_s[slot][1]), min(tmin_s[slot][2], tmin_s[slot][3]));
    tkey[0] = tk_s[slot][2 * (lane & 3)];
    tkey[1] = tk_s[slot][2 * (lane & 3) + 1];
    tkey[2] = tk_s[slot][8 + 2 * (lane & 3)];
    tkey[3] = tk_s[slot][9 + 2 * (lane & 3)];
    wg_wait<0>();
    reg_fence(t0);
    reg_fence(t32);
#pragma unroll
    for (int k = 0; k < 8; ++k) sv[k] = __fadd_rn(__fadd_rn(t32[8 + k], t0[k]), t32[k]);

    // Exchange the two warpgroups' partial logits (slot-indexed buffer: the one written here
    // was last read in chunk i − 2, before both warpgroups passed chunk i − 1's exchange).
    float* xs = reinterpret_cast<float*>(smem + kX4XsOff + slot * kX4XsSlot);
#pragma unroll
    for (int k = 0; k < 8; ++k) xs[(wg * 8 + k) * 128 + t128] = sv[k];
    named_sync(1, kX4Consumers);
    // scale · 2^−(tq + tk_j) for the thread's 4 keys.
    float lf[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) lf[k] = ldexpf(p.scale, -(tq + tkey[k]));
    float lg[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float sum = __fadd_rn(xs[k * 128 + t128], xs[(8 + k) * 128 + t128]);
      const int key = (k >> 2) * 8 + 2 * (lane & 3) + (k & 1);
      lg[k] = valid_s[slot][key] ? __fmul_rn(sum, lf[(k >> 2) * 2 + (k & 1)]) : -INFINITY;
    }
    float f[2];
    uint32_t ph[4], pl[4];
    {
      float pv[8];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = fmaxf(fmaxf(lg[2 * r], lg[2 * r + 1]), fmaxf(lg[4 + 2 * r], lg[4 + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
        const float mn = fmaxf(m_run[r], mx);
        float cs = 1.f;
        if (mn == -INFINITY) {
          pv[2 * r] = pv[2 * r + 1] = pv[4 + 2 * r] = pv[4 + 2 * r + 1] = 0.f;
        } else {
          cs = m_run[r] == -INFINITY ? 0.f : expf(m_run[r] - mn);
#pragma unroll
          for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              const float xv = lg[4 * nt + 2 * r + j];
              pv[4 * nt + 2 * r + j] = xv == -INFINITY ? 0.f : expf(xv - mn);
            }
        }
        float rs = __fadd_rn(__fadd_rn(pv[2 * r], pv[2 * r + 1]),
                             __fadd_rn(pv[4 + 2 * r], pv[4 + 2 * r + 1]));
        rs = __fadd_rn(rs, __shfl_xor_sync(kFull, rs, 1));
        rs = __fadd_rn(rs, __shfl_xor_sync(kFull, rs, 2));
        l_run[r] = fmaf(l_run[r], cs, rs);
        m_run[r] = mn;
        f[r] = ldexpf(cs, T - e_acc);  // rescale and move acc into this chunk's scale 2^(14 + T)
      }
      // P'_j = p_j · 2^(14 + T − tk_j) as the A operand: a0 (row g, keys 2t..), a1 (g + 8),
      // a2 (g, 8 + 2t..), a3 (g + 8, 8 + 2t..).
      float w[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) w[k] = pow2(14 + T - tkey[k]);
      split2(__fmul_rn(pv[0], w[0]), __fmul_rn(pv[1], w[1]), ph[0], pl[0]);
      split2(__fmul_rn(pv[2], w[0]), __fmul_rn(pv[3], w[1]), ph[1], pl[1]);
      split2(__fmul_rn(pv[4], w[2]), __fmul_rn(pv[5], w[3]), ph[2], pl[2]);
      split2(__fmul_rn(pv[6], w[2]), __fmul_rn(pv[7], w[3]), ph[3], pl[3]);
    }
    e_acc = T;

    // P·V over this warpgroup's 256 channels, attention_fd's accumulation: per 64 channels a
    // chain of 3 wgmma into a fresh accumulator t, then acc = acc·f + t (a round-to-nearest fp32
    // update per chunk: the error does not grow with the unit's length, which accumulating
    // straight into acc in the tensor core did — checkpoint 2: 4.5e-6 at 40 chunks). Two t
    // buffers alternate so a chain runs while the previous one is folded.
    float ta[32], tb[32];
    auto pv_chain = [&](int at, float (&t)[32]) {
      const uint64_t vh = v_desc + ((at * kX4TA) >> 4), vl = vh + (kX4TL >> 4);
      wg_fence();
      wgmma_pv_first(t, ph, vl);  // hi·lo'
      wgmma_pv(t, pl, vh);        // lo·hi'
      wgmma_pv(t, ph, vh);        // hi·hi'
      wg_commit();
    };
    auto fold = [&](float (&a)[32], float (&t)[32]) {
      reg_fence(t);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        a[4 * j + 0] = fmaf(a[4 * j + 0], f[0], t[4 * j + 0]);
        a[4 * j + 1] = fmaf(a[4 * j + 1], f[0], t[4 * j + 1]);
        a[4 * j + 2] = fmaf(a[4 * j + 2], f[1], t[4 * j + 2]);
        a[4 * j + 3] = fmaf(a[4 * j + 3], f[1], t[4 * j + 3]);
      }
    };
    pv_chain(0, ta);
    pv_chain(1, tb);
    wg_wait<1>();
    fold(acc[0], ta);
    pv_chain(2, ta);
    wg_wait<1>();
    fold(acc[1], tb);
    pv_chain(3, tb);
    wg_wait<1>();
    fold(acc[2], ta);
    wg_wait<0>();
    fold(acc[3], tb);
    named_arrive(4 + slot, kX4Threads);  // tile `slot` is free for chunk c0 + i + 2
  }

  // ---- epilogue: a = acc · 2^−(14 + e_acc) ----
  const int e_out = -(14 + e_acc);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t h = g * kH + 16 * wl + lane / 4 + 8 * r;
    const int colq = 2 * (lane & 3);
    if (n_units == 1) {
      float cs, total;
      const bool ok = finish_scale(m_run[r], l_run[r], p.sinks ? p.sinks + h : nullptr,
                                   end > begin, cs, total);
      float* o = p.out + (s * p.nH + h) * kD;
#pragma unroll
      for (int at = 0; at < 4; ++at)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float a0 = ldexpf(acc[at][4 * j + 2 * r], e_out);
          const float a1 = ldexpf(acc[at][4 * j + 2 * r + 1], e_out);
          float2 v;
          v.x = ok ? __fdiv_rn(__fmul_rn(a0, cs), total) : 0.f;
          v.y = ok ? __fdiv_rn(__fmul_rn(a1, cs), total) : 0.f;
          *reinterpret_cast<float2*>(o + (wg * 4 + at) * 64 + 8 * j + colq) = v;
        }
    } else {
      float* part = p.parts + ((s * p.grid_units + u) * p.nH + h) * kPartRow;
      if (wg == 0 && (lane & 3) == 0) {
        part[0] = m_run[r];
        part[1] = l_run[r];
      }
#pragma unroll
      for (int at = 0; at < 4; ++at)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float2 v;
          v.x = ldexpf(acc[at][4 * j + 2 * r], e_out);
          v.y = ldexpf(acc[at][4 * j + 2 * r + 1], e_out);
          *reinterpret_cast<float2*>(part + 4 + (wg * 4 + at) * 64 + 8 * j + colq) = v;
        }
    }
  }
}

}  // namespace

void attention_fd_x4(const float* q, const float* kv, const int32_t* key_offsets,
                     const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
                     int64_t T, float scale, float* out, float* parts, const AttentionFdPlan& plan,
                     int32_t* error_flag, cudaStream_t st) {
  if (S * nH == 0) return;
  static std::atomic<uint64_t> opt_in[2] = {};
  opt_in_smem_per_device(opt_in[0], attention_x4_kernel<false>, kX4SmemBytes);
  opt_in_smem_per_device(opt_in[1], attention_x4_kernel<true>, kX4SmemBytes);
  launch_split_key(q, kv, key_offsets, key_ids, nnz, sinks, S, nH, T, scale, out, parts, plan,
                   error_flag, st, [&](const Args& a, dim3 grid) {
                     if (plan.variant == 4) {
                       pdl::launch(attention_x4_kernel<true>, grid, dim3(kX4Threads), kX4SmemBytes,
                                   st, true, a);
                     } else {
                       pdl::launch(attention_x4_kernel<false>, grid, dim3(kX4Threads),
                                   kX4SmemBytes, st, true, a);
                     }
                   });
}

}  // namespace deepinfer::cuda::kernels
