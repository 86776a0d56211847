// Split-key decode attention, session 8's kernel "v2" (issue 7; docs/cuda.md "Split-key decode
// attention v2 (session 8, helper attn)"): v1's warp layout (attention_fd_v1.cu: 8 warps, warp =
// m-pair × channel quarter, one K / V fragment for two m-tiles) with ONE block barrier per chunk
// instead of two. Not bitwise equal to s7 / v1 (K = V is scaled per row, not per chunk); the same
// plan, scratch and combine, fp32-accurate like them (tests: against a double reference).
//
// What removes barrier A: each K = V row gets its own power-of-two scale tk_r (its largest |x|
// into [2^14, 2^15)), so converting a row needs only that row: warp w copies rows 2w and 2w + 1
// (8 pieces of 16 bytes per lane), takes each row's max by warp shuffles and converts the rows
// IN PLACE — the raw fp32 pair of rows (4 KB) becomes hi(2w), hi(2w + 1), lo(2w), lo(2w + 1)
// (1 KB each, 16-byte chunks XOR-swizzled by row as in s7) in the same 4 KB, after a __syncwarp.
// Two such tiles form a ring: chunk c + 1 is copied into the other tile right after the one
// barrier of chunk c (which also retires every reader of chunk c − 1), so it is in flight during
// chunk c's S, softmax and P·V, as in v1.
// Scales: S's key column j is multiplied back by 2^−(tq + tk_j) with the softmax scale. In P·V,
// with T = min_j tk_j over the chunk's rows, P'_j = p_j · 2^(14 + T − tk_j) ≤ 2^14 (split hi/lo)
// and Σ_j P'_j·V'_j = 2^(14 + T) Σ_j p_j v_j, so the accumulator carries the scale 2^(14 + T) of
// its last chunk exactly like s7's 2^(14 + tk). Rows without a valid key or all zeros take the
// scale 60 (they do not lower T; their P' or V' is 0).
// Shared memory (bytes): Q hi/lo 2 × 64 Ki, 2 tiles × 32 Ki, exchange 16 Ki = 208 KiB.
#include <atomic>
#include <cstdint>
#include <cuda_fp16.h>

#include "backend/cuda/attention_fd.h"
#include "backend/cuda/attention_fd_common.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::cuda::kernels {
namespace {

constexpr int kV2Warps = 8;
constexpr int kV2Threads = kV2Warps * 32;
constexpr int kV2QhOff = 0;
constexpr int kV2QlOff = kV2QhOff + kH * kRowB;
constexpr int kV2TileOff = kV2QlOff + kH * kRowB;  // 2 tiles: raw fp32, then hi/lo in place
constexpr int kV2TileBytes = kNc * kD * 4;
constexpr int kV2XsOff = kV2TileOff + 2 * kV2TileBytes;
constexpr int kV2XsFloats = 16;  // per lane per warp: 2 m-tiles × 2 n-tiles × 4
constexpr int kV2XsBytes = kV2Warps * kV2XsFloats * 32 * 4;
constexpr int kV2SmemBytes = kV2XsOff + kV2XsBytes;  // 212992
static_assert(kV2SmemBytes + 1024 <= 227 * 1024, "attention_fd_v1: shared memory");
constexpr int kV2Pieces = kNc * kD / 4 / kV2Threads;  // 16-byte pieces per thread per chunk: 8
constexpr int kV2NoScale = 60;  // the scale of a row without a valid key or all zeros

// Offset in a tile of the converted hi row r (lo: + 2048): rows 2w, 2w + 1 share the 4 KB that
// held their raw fp32 values.
__device__ __forceinline__ uint32_t hi_row(int r) {
  return static_cast<uint32_t>((r >> 1) * 4096 + (r & 1) * 1024);
}
// The in-row byte offset of 16-byte chunk `chunk` of row r (s7's swizzle).
__device__ __forceinline__ uint32_t in_row(int r, int chunk) {
  return static_cast<uint32_t>((chunk ^ (r & 7)) << 4);
}

// The 4 warps of m-pair mp (w = mp, mp + 2, mp + 4, mp + 6); ids 1-2 (0 is __syncthreads).
__device__ __forceinline__ void mpair_barrier(int mp) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + mp), "r"(128) : "memory");
}

// Issues (and commits as one group) this thread's copies of the n ≤ 16 rows whose ids are
// idp[0 … n) (global memory, or ids staged in shared memory) into the tile at raw_s / raw:
// warp w copies rows 2w + j (j < 2), lane L the float4 columns L + 32i (i < 4). Rows past n and
// bad ids are zero-filled (by the lane that owns the piece), validity goes to valid[r].
__device__ __forceinline__ void issue_chunk_v2(const Args& p, const int32_t* idp, int n,
                                               uint32_t raw_s, float* raw, int* valid) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int u = 0; u < kV2Pieces; ++u) {
    const int r = 2 * (tid >> 5) + (u >> 2), c4 = (tid & 31) + 32 * (u & 3);
    bool ok = false;
    int64_t j = 0;
    if (r < n) {
      j = idp[r];
      ok = j >= 0 && j < p.T;
      if (!ok && c4 == 0) set_error(p.error_flag, kErrKeyId);
    }
    if (c4 == 0) valid[r] = ok ? 1 : 0;  // lane 0 of the warp
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

__global__ void __launch_bounds__(kV2Threads, 1) attention_fd_v2_kernel(Args p) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ float red_q[kV2Warps];  // once: the warps' Q maxima
  __shared__ int valid_s[2][kNc];    // per tile
  __shared__ int tk_s[2][kNc];       // per tile: the rows' scales
  __shared__ int32_t ids_s[2][kNc];  // ids of chunk c in ids_s[c & 1] (staged by warp 0)
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int mp = warp & 1, qt = warp >> 1;
  const int64_t groups = p.nH / kH;
  const int64_t s = blockIdx.x / groups, g = blockIdx.x % groups;
  // Launched with PDL (pdl.cuh): every input may come from the previous kernel, so wait first
  // (every CTA, before any read); the combine (or the next kernel) may then be scheduled.
  pdl::wait();
  pdl::launch_dependents();

  int begin = p.offs[s], end = p.offs[s + 1];
  if (begin < 0 || end < begin || static_cast<int64_t>(end) > p.nnz) {
    if (tid == 0 && blockIdx.y == 0) set_error(p.error_flag, kErrKeyOffsets);
    begin = end = 0;
  }
  const int chunks = static_cast<int>((int64_t{end} - begin + kNc - 1) / kNc);
  int n_units;
  int64_t per_unit64;
  unit_layout(chunks, p.chunks_per_unit, p.grid_units, n_units, per_unit64);
  const int per_unit = static_cast<int>(per_unit64);
  if (static_cast<int>(blockIdx.y) >= n_units) return;  // uniform over the block
  auto chunk_rows = [&](int c) {
    const int kb = begin + c * kNc;
    return end - kb < kNc ? end - kb : kNc;
  };
  auto tile = [&](int b) { return reinterpret_cast<float*>(smem + kV2TileOff + b * kV2TileBytes); };
  const uint32_t tile_s = base + kV2TileOff;

  // The first chunk of the block's first unit is in flight while Q is prepared.
  {
    const int c0 = static_cast<int>(blockIdx.y) * per_unit;
    if (c0 < chunks) issue_chunk_v2(p, p.ids + begin + c0 * kNc, chunk_rows(c0), tile_s, tile(0), valid_s[0]);
  }
  // Q: scaled so the group's largest |q| lies in [2^14, 2^15), split into hi/lo fp16 (s7's
  // arithmetic; the max is order-free). The thread's 16 pieces of 8 floats (piece i = row i / 64,
  // 16-byte fp16 chunk i % 64) are all loaded before the first use.
  const float* qp = p.q + (s * p.nH + g * kH) * kD;
  int tq;
  {
    constexpr int kQPieces = kH * (kD / 8) / kV2Threads;  // 16
    float x[kQPieces][8];
#pragma unroll
    for (int k = 0; k < kQPieces; ++k) {
      const int piece = tid + kV2Threads * k;
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
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) qmax = fmaxf(qmax, __shfl_xor_sync(kFull, qmax, o));
    if (lane == 0) red_q[warp] = qmax;
    __syncthreads();
    float m = red_q[0];
#pragma unroll
    for (int w = 1; w < kV2Warps; ++w) m = fmaxf(m, red_q[w]);
    tq = scale_exp(m);
    const float qf = pow2(tq);
#pragma unroll
    for (int k = 0; k < kQPieces; ++k) {
      const int piece = tid + kV2Threads * k;
      const int r = piece >> 6, c = piece & 63;
      uint4 hi, lo;
      split2(__fmul_rn(x[k][0], qf), __fmul_rn(x[k][1], qf), hi.x, lo.x);
      split2(__fmul_rn(x[k][2], qf), __fmul_rn(x[k][3], qf), hi.y, lo.y);
      split2(__fmul_rn(x[k][4], qf), __fmul_rn(x[k][5], qf), hi.z, lo.z);
      split2(__fmul_rn(x[k][6], qf), __fmul_rn(x[k][7], qf), hi.w, lo.w);
      *reinterpret_cast<uint4*>(smem + kV2QhOff + swz(r, c)) = hi;
      *reinterpret_cast<uint4*>(smem + kV2QlOff + swz(r, c)) = lo;
    }
  }  // Q hi/lo is published by the first chunk's barriers (A, B) before S reads it.

  // ldmatrix row offsets at the quarter's first 16-byte chunk (qt·16); a k-step (2 chunks) is
  // ^ (step << 5), a P·V n-tile ^ (nt << 4) (the swizzle XORs bits 4-6 only; see attention_fd.cu;
  // a tile row's base has bits 10+ only). The second m-tile's Q rows are 16 further.
  const uint32_t q_off0 =
      swz(2 * mp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, qt * 16 + (lane >> 4));
  const uint32_t q_off1 = q_off0 + 16 * kRowB;
  const int k_row = (lane & 7) + ((lane >> 4) << 3);
  const uint32_t k_off = hi_row(k_row) + in_row(k_row, qt * 16 + ((lane >> 3) & 1));
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8;
  const uint32_t v_off = hi_row(v_row) + in_row(v_row, qt * 16) + ((lane >> 4) ? 2048u : 0u);
  float* xs = reinterpret_cast<float*>(smem + kV2XsOff);

  for (int u = blockIdx.y; u < n_units; u += gridDim.y) {
    const int c0 = u * per_unit;
    const int c1 = c0 + per_unit < chunks ? c0 + per_unit : chunks;
    if (u != static_cast<int>(blockIdx.y)) {  // a later unit (max_keys understated): restart
      __syncthreads();                         // the last unit's readers of valid_s are done
      if (c0 < c1) issue_chunk_v2(p, p.ids + begin + c0 * kNc, chunk_rows(c0), tile_s, tile(0), valid_s[0]);
    }
    // The ids of the unit's second chunk go to ids_s[1] (read by the issue in the first chunk,
    // after its barrier). From then on warp 0 loads chunk c + 2's ids during chunk c and stores
    // them after its P·V into ids_s[c & 1] (its readers, chunk c's issue, are past the barrier).
    if (warp == 0 && lane < kNc && c0 + 1 < c1 && lane < chunk_rows(c0 + 1))
      ids_s[1][lane] = p.ids[begin + (c0 + 1) * kNc + lane];
    // Softmax state of rows g and g + 8 of each m-tile (the same in the 4 warps of the m-pair).
    float m_run[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};
    float l_run[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    float acc[2][16][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int nt = 0; nt < 16; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mi][nt][i] = 0.f;
    int e_acc = 0;  // acc = a · 2^(14 + e_acc)

    for (int c = c0; c < c1; ++c) {
      const int vb = (c - c0) & 1;  // chunk c's tile, flags, scales
      // Chunk c is the only group in flight; once landed this lane reads its own pieces (and,
      // after __syncwarp, the flags lane 0 wrote when it issued the chunk).
      cp_async_wait_all();
      __syncwarp();
      const float4* raw4 = reinterpret_cast<const float4*>(tile(vb));
      float4 x[kV2Pieces];
#pragma unroll
      for (int u = 0; u < kV2Pieces; ++u)
        x[u] = raw4[(2 * warp + (u >> 2)) * (kD / 4) + lane + 32 * (u & 3)];
      int tkr[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float mx = 0.f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float4 v = x[4 * j + i];
          mx = fmaxf(mx, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
        }
#pragma unroll
        for (int o = 16; o >= 1; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
        tkr[j] = mx > 0.f && valid_s[vb][2 * warp + j] ? scale_exp(mx) : kV2NoScale;
      }
      __syncwarp();  // every lane holds its raw pieces: the rows may be overwritten in place
#pragma unroll
      for (int u = 0; u < kV2Pieces; ++u) {
        const int r = 2 * warp + (u >> 2), c4 = lane + 32 * (u & 3);
        const float kf = pow2(tkr[u >> 2] == kV2NoScale ? 0 : tkr[u >> 2]);
        uint2 hi, lo;
        split2(__fmul_rn(x[u].x, kf), __fmul_rn(x[u].y, kf), hi.x, lo.x);
        split2(__fmul_rn(x[u].z, kf), __fmul_rn(x[u].w, kf), hi.y, lo.y);
        const uint32_t at = hi_row(r) + in_row(r, c4 >> 1) + (c4 & 1) * 8;
        *reinterpret_cast<uint2*>(smem + kV2TileOff + vb * kV2TileBytes + at) = hi;
        *reinterpret_cast<uint2*>(smem + kV2TileOff + vb * kV2TileBytes + at + 2048) = lo;
      }
      if (lane == 0) tk_s[vb][2 * warp] = tkr[0], tk_s[vb][2 * warp + 1] = tkr[1];
      // The one barrier: chunk c's tile and scales are complete; every reader of chunk c − 1
      // (the other tile, its flags and scales, the exchange, ids_s[vb ^ 1]... see above) is done.
      __syncthreads();
      if (c + 1 < c1)
        issue_chunk_v2(p, ids_s[vb ^ 1], chunk_rows(c + 1), tile_s + (vb ^ 1) * kV2TileBytes,
                       tile(vb ^ 1), valid_s[vb ^ 1]);
      // Warp 0 fetches chunk c + 2's ids now (the load is in flight during S and P·V).
      int32_t next_id = 0;
      const bool stage_ids = warp == 0 && lane < kNc && c + 2 < c1 && lane < chunk_rows(c + 2);
      if (stage_ids) next_id = p.ids[begin + (c + 2) * kNc + lane];
      const uint32_t tb = base + kV2TileOff + vb * kV2TileBytes;
      int tmin = tk_s[vb][0];
#pragma unroll
      for (int r = 1; r < kNc; ++r) tmin = min(tmin, tk_s[vb][r]);

      // ---- S = Q·Kᵀ: m-tiles 2mp, 2mp + 1 × 16 keys over channels [128·qt, 128·qt + 128) ----
      float sv[2][2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) sv[mi][n][i] = 0.f;
#pragma unroll
      for (int grp = 0; grp < 2; ++grp) {
        float tx[2][2][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) tx[mi][n][i] = 0.f;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const uint32_t step = static_cast<uint32_t>(grp * 4 + ks) << 5;
          uint32_t qh[2][4], ql[2][4], kh[4], kl[4];
          ldsm_x4(qh[0], base + kV2QhOff + (q_off0 ^ step));
          ldsm_x4(ql[0], base + kV2QlOff + (q_off0 ^ step));
          ldsm_x4(qh[1], base + kV2QhOff + (q_off1 ^ step));
          ldsm_x4(ql[1], base + kV2QlOff + (q_off1 ^ step));
          ldsm_x4(kh, tb + (k_off ^ step));
          ldsm_x4(kl, tb + 2048 + (k_off ^ step));
#pragma unroll
          for (int mi = 0; mi < 2; ++mi) {  // per accumulator: hi·lo', lo·hi', hi·hi' (s7's order)
            mma(tx[mi][0], qh[mi], kl[0], kl[1]);
            mma(tx[mi][1], qh[mi], kl[2], kl[3]);
            mma(tx[mi][0], ql[mi], kh[0], kh[1]);
            mma(tx[mi][1], ql[mi], kh[2], kh[3]);
            mma(tx[mi][0], qh[mi], kh[0], kh[1]);
            mma(tx[mi][1], qh[mi], kh[2], kh[3]);
          }
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int n = 0; n < 2; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) sv[mi][n][i] = __fadd_rn(sv[mi][n][i], tx[mi][n][i]);
      }
      // Exchange the quarters: logit_j = (((q0 + q1) + q2) + q3) · scale · 2^−(tq + tk_j);
      // quarter q of m-pair mp is warp mp + 2q.
#pragma unroll
      for (int i = 0; i < kV2XsFloats; ++i)
        xs[(warp * kV2XsFloats + i) * 32 + lane] = sv[i >> 3][(i >> 2) & 1][i & 3];
      mpair_barrier(mp);
      float lf[2][2], kp[2][2];  // per key (n-tile, j): logit factor and P' factor
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int tkj = tk_s[vb][n * 8 + 2 * (lane & 3) + j];
          lf[n][j] = ldexpf(p.scale, -(tq + tkj));
          kp[n][j] = pow2(14 + tmin - tkj);
        }
      float lg[2][2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int slot = mi * 8 + i;
          float sum = xs[(mp * kV2XsFloats + slot) * 32 + lane];
#pragma unroll
          for (int q = 1; q < 4; ++q)
            sum = __fadd_rn(sum, xs[((mp + 2 * q) * kV2XsFloats + slot) * 32 + lane]);
          const int key = (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
          lg[mi][i >> 2][i & 3] = valid_s[vb][key] ? __fmul_rn(sum, lf[i >> 2][i & 1]) : -INFINITY;
        }
      // ---- online softmax per m-tile, rows g (i = 0, 1) and g + 8 (i = 2, 3) ----
      float f[2][2];
      uint32_t ph[2][4], pl[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        float pv[2][4];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = fmaxf(fmaxf(lg[mi][0][2 * r], lg[mi][0][2 * r + 1]),
                           fmaxf(lg[mi][1][2 * r], lg[mi][1][2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
          const float mn = fmaxf(m_run[mi][r], mx);
          float cs = 1.f;
          if (mn == -INFINITY) {
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) pv[nt][2 * r] = pv[nt][2 * r + 1] = 0.f;
          } else {
            cs = m_run[mi][r] == -INFINITY ? 0.f : expf(m_run[mi][r] - mn);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
              for (int j = 0; j < 2; ++j) {
                const float xv = lg[mi][nt][2 * r + j];
                pv[nt][2 * r + j] = xv == -INFINITY ? 0.f : expf(xv - mn);
              }
          }
          float rs = __fadd_rn(__fadd_rn(pv[0][2 * r], pv[0][2 * r + 1]),
                               __fadd_rn(pv[1][2 * r], pv[1][2 * r + 1]));
          rs = __fadd_rn(rs, __shfl_xor_sync(kFull, rs, 1));
          rs = __fadd_rn(rs, __shfl_xor_sync(kFull, rs, 2));
          l_run[mi][r] = fmaf(l_run[mi][r], cs, rs);
          m_run[mi][r] = mn;
          f[mi][r] = ldexpf(cs, tmin - e_acc);  // rescale and move acc into this chunk's scale
        }
        // P'_j = p_j · 2^(14 + T − tk_j) as the A operand: a0 (row g, keys 2t..), a1 (g + 8),
        // a2 (g, 8 + 2t..), a3 (g + 8, 8 + 2t..).
        split2(__fmul_rn(pv[0][0], kp[0][0]), __fmul_rn(pv[0][1], kp[0][1]), ph[mi][0], pl[mi][0]);
        split2(__fmul_rn(pv[0][2], kp[0][0]), __fmul_rn(pv[0][3], kp[0][1]), ph[mi][1], pl[mi][1]);
        split2(__fmul_rn(pv[1][0], kp[1][0]), __fmul_rn(pv[1][1], kp[1][1]), ph[mi][2], pl[mi][2]);
        split2(__fmul_rn(pv[1][2], kp[1][0]), __fmul_rn(pv[1][3], kp[1][1]), ph[mi][3], pl[mi][3]);
      }
      e_acc = tmin;

      // ---- O = O·f + P·V over the warp's 128 channels, one V fragment for both m-tiles ----
#pragma unroll
      for (int nt = 0; nt < 16; ++nt) {
        uint32_t v[4];  // hi b0, hi b1, lo b0, lo b1
        ldsm_x4_t(v, tb + (v_off ^ (static_cast<uint32_t>(nt) << 4)));
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          float t[4] = {0.f, 0.f, 0.f, 0.f};
          mma(t, ph[mi], v[2], v[3]);
          mma(t, pl[mi], v[0], v[1]);
          mma(t, ph[mi], v[0], v[1]);
          acc[mi][nt][0] = fmaf(acc[mi][nt][0], f[mi][0], t[0]);
          acc[mi][nt][1] = fmaf(acc[mi][nt][1], f[mi][0], t[1]);
          acc[mi][nt][2] = fmaf(acc[mi][nt][2], f[mi][1], t[2]);
          acc[mi][nt][3] = fmaf(acc[mi][nt][3], f[mi][1], t[3]);
        }
      }
      if (stage_ids) ids_s[vb][lane] = next_id;  // read by chunk c + 1's issue (after its barrier)
    }

    // ---- epilogue: a = acc · 2^−(14 + e_acc) ----
    const int e_out = -(14 + e_acc);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t h = g * kH + (2 * mp + mi) * 16 + lane / 4 + 8 * r;
        const int col0 = qt * 128 + 2 * (lane & 3);
        if (n_units == 1) {
          float cs, total;
          const bool ok = finish_scale(m_run[mi][r], l_run[mi][r],
                                       p.sinks ? p.sinks + h : nullptr, end > begin, cs, total);
          float* o = p.out + (s * p.nH + h) * kD;
#pragma unroll
          for (int nt = 0; nt < 16; ++nt) {
            const float a0 = ldexpf(acc[mi][nt][2 * r], e_out);
            const float a1 = ldexpf(acc[mi][nt][2 * r + 1], e_out);
            float2 v;
            v.x = ok ? __fdiv_rn(__fmul_rn(a0, cs), total) : 0.f;
            v.y = ok ? __fdiv_rn(__fmul_rn(a1, cs), total) : 0.f;
            *reinterpret_cast<float2*>(o + col0 + nt * 8) = v;
          }
        } else {
          float* part = p.parts + ((s * p.grid_units + u) * p.nH + h) * kPartRow;
          if (qt == 0 && (lane & 3) == 0) {
            part[0] = m_run[mi][r];
            part[1] = l_run[mi][r];
          }
#pragma unroll
          for (int nt = 0; nt < 16; ++nt) {
            float2 v;
            v.x = ldexpf(acc[mi][nt][2 * r], e_out);
            v.y = ldexpf(acc[mi][nt][2 * r + 1], e_out);
            *reinterpret_cast<float2*>(part + 4 + col0 + nt * 8) = v;
          }
        }
      }
  }
}

}  // namespace

void attention_fd_v2(const float* q, const float* kv, const int32_t* key_offsets,
                     const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S,
                     int64_t nH, int64_t T, float scale, float* out, float* parts,
                     const AttentionFdPlan& plan, int32_t* error_flag, cudaStream_t st) {
  if (S * nH == 0) return;
  static std::atomic<uint64_t> opt_in{0};
  opt_in_smem_per_device(opt_in, attention_fd_v2_kernel, kV2SmemBytes);
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
    // Both launches with programmatic dependent launch (their launch latency overlaps the
    // previous kernel's tail; each waits for its predecessor before reading anything).
    pdl::launch(attention_fd_v2_kernel, grid, dim3(kV2Threads), kV2SmemBytes, st, true, a);
    if (a.grid_units > 1)
      pdl::launch(attention_fd_combine, dim3(static_cast<unsigned>(n * nH)), dim3(128), 0, st, true,
                  a);
  }
}

}  // namespace deepinfer::cuda::kernels
