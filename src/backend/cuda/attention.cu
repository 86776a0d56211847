// Attention over explicit per-query key lists with per-head sinks (deepseek-v4.md §4.3).
//
// Heads as the M dimension: every head of a query reads the same key list (V4 has one shared KV
// head), so a block takes one query, one KV head and a group of up to kHeads query heads (one per
// warp) and stages each chunk of kChunk keys in shared memory once for all of them.
//
// The arithmetic is canonical, so the result of a query never depends on the batch, on the grid
// or on whether the work was split:
//   * the list is cut into chunks of kChunk keys (list order); a chunk's state is
//     m = max logit, p_j = exp(logit_j − m), l = Σ_j p_j, a = Σ_j p_j · v_j (j ascending);
//   * kSuper consecutive chunks form a super-chunk, whose state is the running merge of its chunk
//     states from the empty state;
//   * the query's state is the running merge of its super-chunk states in order, then the sink
//     logit joins the denominator.
// Two implementations of that structure, chosen by the call's layout only: the wide path (one
// shared K = V head, width a multiple of 128 — V4's 512: float4 shared-memory reads, a
// reduce-scatter of the chunk's dot products so each lane owns one key's logit and exp) and the
// scalar path (every other layout; see attention() below).
// A super-chunk is the unit of splitting: with few (query, head-group) blocks the super-chunks of
// a query run in separate blocks and a second kernel merges their states in order; otherwise one
// block walks them all. Both paths call the same merge on the same values in the same order.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::cuda::kernels {
namespace {

constexpr int kHeads = 4;    // query heads per block, one per warp (more blocks for one query)
constexpr int kChunk = 32;   // keys per chunk
constexpr int kSuper = 2;    // chunks per super-chunk (split unit: 64 keys)
constexpr int kThreads = kHeads * 32;

// Running softmax state of one (query, head); lane l holds channels l + 32·i.
template <int kPer>
struct SoftState {
  float m = -INFINITY, l = 0.f;
  float a[kPer];
  __device__ void clear() {
    m = -INFINITY;
    l = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) a[i] = 0.f;
  }
};

// s ← merge(s, (m, l, a)); a part with no key (m = −inf) leaves s unchanged.
template <int kPer>
__device__ __forceinline__ void merge(SoftState<kPer>& s, float m, float l, const float* a) {
  if (m == -INFINITY) return;
  if (s.m == -INFINITY) {
    s.m = m;
    s.l = l;
#pragma unroll
    for (int i = 0; i < kPer; ++i) s.a[i] = a[i];
    return;
  }
  const float mn = fmaxf(s.m, m);
  const float cs = expf(s.m - mn), cp = expf(m - mn);
  // Explicit roundings: the same bits whichever kernel (attention or combine) merges.
  s.l = fmaf(s.l, cs, __fmul_rn(l, cp));
#pragma unroll
  for (int i = 0; i < kPer; ++i) s.a[i] = fmaf(s.a[i], cs, __fmul_rn(a[i], cp));
  s.m = mn;
}

// The factor cs on the state's values and the denominator once the sink logit joins; false when
// the output is zeros (no key, or nothing to normalize by).
template <int kPer>
__device__ __forceinline__ bool finish_scale(const SoftState<kPer>& s, const float* sink,
                                             bool any_key, float& cs, float& total) {
  float mf = s.m;
  cs = 1.f;
  total = s.l;
  if (sink) {
    mf = fmaxf(s.m, *sink);
    cs = s.m == -INFINITY ? 0.f : expf(s.m - mf);
    total = fmaf(s.l, cs, expf(*sink - mf));
  }
  return any_key && s.m != -INFINITY && total > 0.f;
}

// out[c] for the lane's channels (c = lane + 32·i): the state with the sink logit in the
// denominator.
template <int kPer>
__device__ __forceinline__ void finish(const SoftState<kPer>& s, const float* sink, bool any_key,
                                       int lane, int64_t Dv, float* o) {
  float cs, total;
  const bool ok = finish_scale(s, sink, any_key, cs, total);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t c = lane + 32 * i;
    if (c < Dv) o[c] = ok ? __fdiv_rn(__fmul_rn(s.a[i], cs), total) : 0.f;
  }
}

struct Args {
  const float* q;
  const float* k;
  const float* v;
  const int32_t* key_offsets;
  const int32_t* key_ids;
  int64_t nnz;
  const float* sinks;
  int64_t nH, T, nKV, D, Dv, groups;  // groups = head groups per KV head
  float scale;
  float* out;
  float* parts;     // split: [S, nH, max_super, 2 + Dv]
  int64_t max_super;
  int32_t* error_flag;
};

// Copies rows ids[0..n) (head kvh) of src [T, nKV, width] into dst [n, width]; an id of −1
// (flagged bad) copies row 0. Each thread loads kLoadBatch units before storing any.
constexpr int kLoadBatch = 8;
template <bool kVec>
__device__ __forceinline__ void stage_rows(const float* __restrict__ src, const int32_t* ids, int n,
                                           int64_t nKV, int64_t kvh, int64_t width, float* dst) {
  using Unit = typename std::conditional<kVec, float4, float>::type;  // 16-byte or 4-byte units
  const int per_row = static_cast<int>(kVec ? width / 4 : width);    // <= 1024
  const int total = n * per_row;
  for (int base = threadIdx.x; base < total; base += kThreads * kLoadBatch) {
    Unit buf[kLoadBatch];
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u) {
      const int i = base + u * kThreads;
      if (i < total) {
        const int r = i / per_row, c = i % per_row;
        const int64_t j = ids[r] < 0 ? 0 : ids[r];
        buf[u] = reinterpret_cast<const Unit*>(src + (j * nKV + kvh) * width)[c];
      }
    }
#pragma unroll
    for (int u = 0; u < kLoadBatch; ++u) {
      const int i = base + u * kThreads;
      if (i < total) reinterpret_cast<Unit*>(dst)[i] = buf[u];
    }
  }
}

// grid (S · nKV · groups, splits). split = false: blockIdx.y = 0 walks every super-chunk and
// writes out; split = true: blockIdx.y is the super-chunk, its state goes to parts.
template <int kPer, bool kSplit>
__global__ void __launch_bounds__(kThreads) attention_kernel(Args p) {
  extern __shared__ float smem[];  // K chunk [kChunk][D], then V chunk [kChunk][Dv] unless shared
  __shared__ int32_t ids_s[kChunk];
  const bool kv_shared = p.k == p.v && p.D == p.Dv;
  float* ks = smem;
  float* vs = kv_shared ? smem : smem + kChunk * p.D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bx = blockIdx.x;
  const int64_t g = bx % p.groups, kvh = (bx / p.groups) % p.nKV, s = bx / (p.groups * p.nKV);
  const int64_t per_kv = p.nH / p.nKV;
  const int64_t hl = g * kHeads + warp;  // head within the KV head's share
  const bool active = hl < per_kv;
  const int64_t h = kvh * per_kv + (active ? hl : 0);

  int64_t begin = p.key_offsets[s], end = p.key_offsets[s + 1];
  if (begin < 0 || end < begin || end > p.nnz) {
    if (threadIdx.x == 0) set_error(p.error_flag, kErrKeyOffsets);
    begin = end = 0;
  }
  const int64_t n_super = (end - begin + kChunk * kSuper - 1) / (kChunk * kSuper);
  int64_t sc_begin = 0, sc_end = n_super;
  if (kSplit) {
    sc_begin = blockIdx.y;
    sc_end = sc_begin + 1;
    if (sc_begin >= n_super) return;  // the whole block: n_super is uniform
  }

  float qv[kPer];
  const float* qh = p.q + (s * p.nH + h) * p.D;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t c = lane + 32 * i;
    qv[i] = c < p.D ? qh[c] : 0.f;
  }
  SoftState<kPer> total, sup;
  total.clear();
  for (int64_t sc = sc_begin; sc < sc_end; ++sc) {
    sup.clear();
    for (int c = 0; c < kSuper; ++c) {
      const int64_t kb = begin + (sc * kSuper + c) * kChunk;
      if (kb >= end) break;
      const int n = static_cast<int>(end - kb < kChunk ? end - kb : kChunk);
      __syncthreads();  // the previous chunk's readers are done
      if (threadIdx.x < n) {
        int32_t j = p.key_ids[kb + threadIdx.x];
        if (j < 0 || j >= p.T) {
          set_error(p.error_flag, kErrKeyId);
          j = -1;
        }
        ids_s[threadIdx.x] = j;
      }
      __syncthreads();
      // Stage the chunk's rows: the [n, D] (and [n, Dv]) block is flattened over the threads
      // and loaded kLoadBatch 16-byte chunks at a time, so many loads are in flight per thread.
      const bool vec = (p.D % 4 == 0) && (p.Dv % 4 == 0) &&
                       (reinterpret_cast<uintptr_t>(p.k) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(p.v) % 16 == 0);
      if (vec) {
        stage_rows<true>(p.k, ids_s, n, p.nKV, kvh, p.D, ks);
        if (!kv_shared) stage_rows<true>(p.v, ids_s, n, p.nKV, kvh, p.Dv, vs);
      } else {
        stage_rows<false>(p.k, ids_s, n, p.nKV, kvh, p.D, ks);
        if (!kv_shared) stage_rows<false>(p.v, ids_s, n, p.nKV, kvh, p.Dv, vs);
      }
      __syncthreads();
      if (!active) continue;
      // Logits (every lane ends with all n), chunk max.
      float logit[kChunk];
      float m = -INFINITY;
#pragma unroll
      for (int r = 0; r < kChunk; ++r) {
        logit[r] = -INFINITY;
        if (r < n && ids_s[r] >= 0) {
          float part = 0.f;
#pragma unroll
          for (int i = 0; i < kPer; ++i) {
            const int64_t c = lane + 32 * i;
            if (c < p.D) part = fmaf(qv[i], ks[r * p.D + c], part);
          }
          for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
          logit[r] = part * p.scale;
          m = fmaxf(m, logit[r]);
        }
      }
      if (m == -INFINITY) continue;  // no valid key in the chunk
      float l = 0.f, a[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) a[i] = 0.f;
#pragma unroll
      for (int r = 0; r < kChunk; ++r) {
        if (r < n && logit[r] != -INFINITY) {
          const float pr = expf(logit[r] - m);
          l += pr;
#pragma unroll
          for (int i = 0; i < kPer; ++i) {
            const int64_t c = lane + 32 * i;
            if (c < p.Dv) a[i] = fmaf(pr, vs[r * p.Dv + c], a[i]);
          }
        }
      }
      merge(sup, m, l, a);
    }
    if (!kSplit) merge(total, sup.m, sup.l, sup.a);
  }
  if (!active) return;
  if (kSplit) {
    float* part = p.parts + ((s * p.nH + h) * p.max_super + sc_begin) * (2 + p.Dv);
    if (lane == 0) {
      part[0] = sup.m;
      part[1] = sup.l;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int64_t c = lane + 32 * i;
      if (c < p.Dv) part[2 + c] = sup.a[i];
    }
    return;
  }
  finish(total, p.sinks ? p.sinks + h : nullptr, end > begin, lane, p.Dv,
         p.out + (s * p.nH + h) * p.Dv);
}

// ---- The wide path: D and Dv multiples of 128 (V4: 512) ----
//
// Lane l holds channels 4·l + 128·i + j (i < kP4, j < 4) of q and of the value sums, so a K or V
// row is read from shared memory as float4s; a warp serves kHW heads, so each float4 read feeds
// 4·kHW FMAs. Per chunk and head:
//   * each lane sums its channels' products for every key of the chunk (i ascending, j
//     ascending), then a reduce-scatter butterfly per 16 keys (16 shuffles) leaves lane r with
//     key r's dot product; logit_r = dot · scale, −inf for an invalid key or r >= n;
//   * m = max over the warp, p_r = exp(logit_r − m) (one expf per lane), l = Σ p_r by the xor
//     butterfly (offsets 16, 8, 4, 2, 1);
//   * a[c] = Σ_r p_r · v_r[c], r ascending (one fma chain per channel).
// Every head runs exactly these operations whatever kHW, the grid or the split, so the result of
// a (query, head) depends only on its own inputs. Chunk → super-chunk → query merges as above.
constexpr unsigned kFull = 0xffffffffu;

// One step of the reduce-scatter: v[0..2·O) → v[0..O); the lane keeps the half its bit O selects
// and adds its partner's partial sums of that half.
template <int O, int N>
__device__ __forceinline__ void reduce_scatter_step(float (&v)[N], int lane) {
  const bool up = (lane & O) != 0;
#pragma unroll
  for (int k = 0; k < O; ++k) {
    const float send = up ? v[k] : v[k + O];
    const float keep = up ? v[k + O] : v[k];
    v[k] = __fadd_rn(keep, __shfl_xor_sync(kFull, send, O));
  }
}

// v[0..16) per lane (lane L: its partial sums for 16 keys) → the total of key lane % 16 in lanes
// L and L ^ 16: steps 8, 4, 2, 1 (after step O, v[k] is the key whose bits below O are k and the
// others the lane's), each over a half-warp, then the two half-warps' sums are added (15 + 1
// shuffles for 16 keys).
__device__ __forceinline__ float reduce_scatter16(float (&v)[kChunk / 2], int lane) {
  reduce_scatter_step<8>(v, lane);
  reduce_scatter_step<4>(v, lane);
  reduce_scatter_step<2>(v, lane);
  reduce_scatter_step<1>(v, lane);
  return __fadd_rn(v[0], __shfl_xor_sync(kFull, v[0], 16));
}

template <int kP4, int kHW, bool kSplit>
__global__ void __launch_bounds__(kThreads) attention_wide_kernel(Args p) {
  constexpr int kPer = 4 * kP4;  // channels per lane
  extern __shared__ float4 smem4[];  // K chunk [kChunk][D], then V chunk [kChunk][Dv] unless shared
  __shared__ int32_t ids_s[kChunk];
  __shared__ float4 ps[kHeads][kHW][kChunk / 4];  // a warp's weights p_r per head
  float* smem = reinterpret_cast<float*>(smem4);
  const bool kv_shared = p.k == p.v && p.D == p.Dv;
  const float4* ks = smem4;
  const float4* vs = kv_shared ? smem4 : smem4 + kChunk * p.D / 4;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bx = blockIdx.x;
  const int64_t g = bx % p.groups, kvh = (bx / p.groups) % p.nKV, s = bx / (p.groups * p.nKV);
  const int64_t per_kv = p.nH / p.nKV;
  const int64_t hl0 = (g * kHeads + warp) * kHW;  // first head of this warp within the KV head
  const bool active = hl0 < per_kv;
  int64_t h[kHW];
#pragma unroll
  for (int t = 0; t < kHW; ++t) h[t] = kvh * per_kv + (hl0 + t < per_kv ? hl0 + t : 0);
  const int D4 = static_cast<int>(p.D / 4), Dv4 = static_cast<int>(p.Dv / 4);

  int64_t begin = p.key_offsets[s], end = p.key_offsets[s + 1];
  if (begin < 0 || end < begin || end > p.nnz) {
    if (threadIdx.x == 0) set_error(p.error_flag, kErrKeyOffsets);
    begin = end = 0;
  }
  const int64_t n_super = (end - begin + kChunk * kSuper - 1) / (kChunk * kSuper);
  int64_t sc_begin = 0, sc_end = n_super;
  if (kSplit) {
    sc_begin = blockIdx.y;
    sc_end = sc_begin + 1;
    if (sc_begin >= n_super) return;  // the whole block: n_super is uniform
  }

  float4 qv[kHW][kP4];
#pragma unroll
  for (int t = 0; t < kHW; ++t) {
    const float* qh = p.q + (s * p.nH + h[t]) * p.D;
#pragma unroll
    for (int i = 0; i < kP4; ++i) {
      const int64_t c = 4 * lane + 128 * i;
      qv[t][i] = c < p.D ? make_float4(qh[c], qh[c + 1], qh[c + 2], qh[c + 3])
                         : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  SoftState<kPer> total[kHW], sup[kHW];
#pragma unroll
  for (int t = 0; t < kHW; ++t) total[t].clear();
  for (int64_t sc = sc_begin; sc < sc_end; ++sc) {
#pragma unroll
    for (int t = 0; t < kHW; ++t) sup[t].clear();
    for (int c = 0; c < kSuper; ++c) {
      const int64_t kb = begin + (sc * kSuper + c) * kChunk;
      if (kb >= end) break;
      const int n = static_cast<int>(end - kb < kChunk ? end - kb : kChunk);
      __syncthreads();  // the previous chunk's readers are done
      if (threadIdx.x < n) {
        int32_t j = p.key_ids[kb + threadIdx.x];
        if (j < 0 || j >= p.T) {
          set_error(p.error_flag, kErrKeyId);
          j = -1;
        }
        ids_s[threadIdx.x] = j;
      }
      __syncthreads();
      const bool vec = (reinterpret_cast<uintptr_t>(p.k) % 16 == 0) &&
                       (reinterpret_cast<uintptr_t>(p.v) % 16 == 0);
      if (vec) {
        stage_rows<true>(p.k, ids_s, n, p.nKV, kvh, p.D, smem);
        if (!kv_shared) stage_rows<true>(p.v, ids_s, n, p.nKV, kvh, p.Dv, smem + kChunk * p.D);
      } else {
        stage_rows<false>(p.k, ids_s, n, p.nKV, kvh, p.D, smem);
        if (!kv_shared) stage_rows<false>(p.v, ids_s, n, p.nKV, kvh, p.Dv, smem + kChunk * p.D);
      }
      __syncthreads();
      if (!active) continue;
      // Logits: lane r ends with key r's. Two halves of 16 keys: lanes < 16 keep the first's.
      float pr[kHW], m[kHW];
#pragma unroll
      for (int t = 0; t < kHW; ++t) pr[t] = 0.f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (16 * half >= n) break;
        float part[kHW][kChunk / 2];
#pragma unroll
        for (int rr = 0; rr < kChunk / 2; ++rr) {
          const int r = 16 * half + rr;
#pragma unroll
          for (int t = 0; t < kHW; ++t) part[t][rr] = 0.f;
          if (r < n) {
#pragma unroll
            for (int i = 0; i < kP4; ++i) {
              if (128 * i < p.D) {
                const float4 kk = ks[r * D4 + lane + 32 * i];
#pragma unroll
                for (int t = 0; t < kHW; ++t) {
                  float x = part[t][rr];
                  x = fmaf(qv[t][i].x, kk.x, x);
                  x = fmaf(qv[t][i].y, kk.y, x);
                  x = fmaf(qv[t][i].z, kk.z, x);
                  part[t][rr] = fmaf(qv[t][i].w, kk.w, x);
                }
              }
            }
          }
        }
#pragma unroll
        for (int t = 0; t < kHW; ++t) {
          const float dot = reduce_scatter16(part[t], lane);
          if ((lane >> 4) == half) pr[t] = dot;
        }
      }
      const bool valid = lane < n && ids_s[lane < n ? lane : 0] >= 0;
#pragma unroll
      for (int t = 0; t < kHW; ++t) {
        pr[t] = valid ? __fmul_rn(pr[t], p.scale) : -INFINITY;  // the logit for now
        m[t] = pr[t];
      }
#pragma unroll
      for (int o = 16; o >= 1; o >>= 1)
#pragma unroll
        for (int t = 0; t < kHW; ++t) m[t] = fmaxf(m[t], __shfl_xor_sync(kFull, m[t], o));
      float l[kHW];
#pragma unroll
      for (int t = 0; t < kHW; ++t) {
        pr[t] = pr[t] == -INFINITY ? 0.f : expf(pr[t] - m[t]);
        l[t] = pr[t];
      }
#pragma unroll
      for (int o = 16; o >= 1; o >>= 1)
#pragma unroll
        for (int t = 0; t < kHW; ++t) l[t] = __fadd_rn(l[t], __shfl_xor_sync(kFull, l[t], o));
#pragma unroll
      for (int t = 0; t < kHW; ++t) reinterpret_cast<float*>(ps[warp][t])[lane] = pr[t];
      __syncwarp();
      // Weighted values, keys in order.
      float a[kHW][kPer];
#pragma unroll
      for (int t = 0; t < kHW; ++t)
#pragma unroll
        for (int i = 0; i < kPer; ++i) a[t][i] = 0.f;
#pragma unroll
      for (int r4 = 0; r4 < kChunk / 4; ++r4) {
        if (4 * r4 >= n) break;
        float4 w[kHW];
#pragma unroll
        for (int t = 0; t < kHW; ++t) w[t] = ps[warp][t][r4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int r = 4 * r4 + u;
          if (r < n) {
#pragma unroll
            for (int i = 0; i < kP4; ++i) {
              if (128 * i < p.Dv) {
                const float4 vv = vs[r * Dv4 + lane + 32 * i];
#pragma unroll
                for (int t = 0; t < kHW; ++t) {
                  const float pw = u == 0 ? w[t].x : u == 1 ? w[t].y : u == 2 ? w[t].z : w[t].w;
                  a[t][4 * i + 0] = fmaf(pw, vv.x, a[t][4 * i + 0]);
                  a[t][4 * i + 1] = fmaf(pw, vv.y, a[t][4 * i + 1]);
                  a[t][4 * i + 2] = fmaf(pw, vv.z, a[t][4 * i + 2]);
                  a[t][4 * i + 3] = fmaf(pw, vv.w, a[t][4 * i + 3]);
                }
              }
            }
          }
        }
      }
      __syncwarp();  // ps is rewritten by the next chunk
#pragma unroll
      for (int t = 0; t < kHW; ++t) merge(sup[t], m[t], l[t], a[t]);
    }
    if (!kSplit) {
#pragma unroll
      for (int t = 0; t < kHW; ++t) merge(total[t], sup[t].m, sup[t].l, sup[t].a);
    }
  }
  if (!active) return;
#pragma unroll
  for (int t = 0; t < kHW; ++t) {
    if (hl0 + t >= per_kv) break;
    if (kSplit) {
      float* part = p.parts + ((s * p.nH + h[t]) * p.max_super + sc_begin) * (2 + p.Dv);
      if (lane == 0) {
        part[0] = sup[t].m;
        part[1] = sup[t].l;
      }
#pragma unroll
      for (int i = 0; i < kP4; ++i) {
        const int64_t c = 4 * lane + 128 * i;
        if (c < p.Dv)
#pragma unroll
          for (int j = 0; j < 4; ++j) part[2 + c + j] = sup[t].a[4 * i + j];
      }
      continue;
    }
    float cs, tot;
    const bool ok = finish_scale(total[t], p.sinks ? p.sinks + h[t] : nullptr, end > begin, cs, tot);
    float* o = p.out + (s * p.nH + h[t]) * p.Dv;
#pragma unroll
    for (int i = 0; i < kP4; ++i) {
      const int64_t c = 4 * lane + 128 * i;
      if (c < p.Dv)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          o[c + j] = ok ? __fdiv_rn(__fmul_rn(total[t].a[4 * i + j], cs), tot) : 0.f;
    }
  }
}

// One warp per (query, head): merges the super-chunk states in order, then the sink.
template <int kPer>
__global__ void __launch_bounds__(128) combine_kernel(Args p, int64_t S) {
  const int lane = threadIdx.x % 32;
  const int64_t w = blockIdx.x * 4 + threadIdx.x / 32;
  if (w >= S * p.nH) return;
  const int64_t s = w / p.nH, h = w % p.nH;
  int64_t begin = p.key_offsets[s], end = p.key_offsets[s + 1];
  if (begin < 0 || end < begin || end > p.nnz) begin = end = 0;  // flagged by the main kernel
  const int64_t n_super = (end - begin + kChunk * kSuper - 1) / (kChunk * kSuper);
  SoftState<kPer> total;
  total.clear();
  float a[kPer];
  for (int64_t sc = 0; sc < n_super; ++sc) {
    const float* part = p.parts + ((s * p.nH + h) * p.max_super + sc) * (2 + p.Dv);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int64_t c = lane + 32 * i;
      a[i] = c < p.Dv ? part[2 + c] : 0.f;
    }
    merge(total, part[0], part[1], a);
  }
  finish(total, p.sinks ? p.sinks + h : nullptr, end > begin, lane, p.Dv,
         p.out + (s * p.nH + h) * p.Dv);
}

// Opts a kernel in to all of a block's shared memory (once per device: the attribute is per
// device, and threads-as-ranks drive several devices from one process) when a launch could come
// near the default 48 KB limit, which covers static + dynamic memory together. The session-4 bug
// (D 256 + Dv 128 = exactly 48 KB of dynamic memory plus the static arrays, launched without the
// opt-in and refused) came from comparing the dynamic part alone with 48 KB. `done`: the
// kernel's own device bit set.
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes, std::atomic<uint64_t>& done) {
  if (bytes > 32 * 1024) opt_in_max_smem_per_device(done, kernel);
}

template <int kPer>
void launch(const Args& a, int64_t S, bool split, cudaStream_t st) {
  static std::atomic<uint64_t> split_opt_in{0}, whole_opt_in{0};
  const bool kv_shared = a.k == a.v && a.D == a.Dv;
  const size_t smem = sizeof(float) * kChunk * (a.D + (kv_shared ? 0 : a.Dv));
  const unsigned bx = static_cast<unsigned>(S * a.nKV * a.groups);
  if (split) {
    allow_smem(attention_kernel<kPer, true>, smem, split_opt_in);
    attention_kernel<kPer, true>
        <<<dim3(bx, static_cast<unsigned>(a.max_super)), kThreads, smem, st>>>(a);
    combine_kernel<kPer><<<grid_for(S * a.nH, 4), 128, 0, st>>>(a, S);
  } else {
    allow_smem(attention_kernel<kPer, false>, smem, whole_opt_in);
    attention_kernel<kPer, false><<<bx, kThreads, smem, st>>>(a);
  }
}

template <int kP4>
void launch_wide(Args a, int64_t S, bool split, cudaStream_t st) {
  // One head per warp (kHW = 1): with two, the D = 512 kernel spills (255 registers).
  static std::atomic<uint64_t> split_opt_in{0}, whole_opt_in{0};
  const bool kv_shared = a.k == a.v && a.D == a.Dv;
  const size_t smem = sizeof(float) * kChunk * (a.D + (kv_shared ? 0 : a.Dv));
  const unsigned bx = static_cast<unsigned>(S * a.nKV * a.groups);
  if (split) {
    allow_smem(attention_wide_kernel<kP4, 1, true>, smem, split_opt_in);
    attention_wide_kernel<kP4, 1, true>
        <<<dim3(bx, static_cast<unsigned>(a.max_super)), kThreads, smem, st>>>(a);
    combine_kernel<kP4 * 4><<<grid_for(S * a.nH, 4), 128, 0, st>>>(a, S);
  } else {
    allow_smem(attention_wide_kernel<kP4, 1, false>, smem, whole_opt_in);
    attention_wide_kernel<kP4, 1, false><<<bx, kThreads, smem, st>>>(a);
  }
}

}  // namespace

int64_t attention_parts_floats(int64_t S, int64_t nH, int64_t nKV, int64_t Dv,
                               int64_t max_keys, int num_sms) {
  const int64_t groups = (nH / nKV + kHeads - 1) / kHeads;
  const int64_t max_super = (max_keys + kChunk * kSuper - 1) / (kChunk * kSuper);
  if (max_super <= 1 || S * nKV * groups >= 2 * static_cast<int64_t>(num_sms)) return 0;
  return S * nH * max_super * (2 + Dv);
}

size_t attention_smem_bytes(int64_t D, int64_t Dv, bool kv_shared) {
  return sizeof(float) * kChunk * (D + (kv_shared ? 0 : Dv));
}

void attention(const float* q, const float* k, const float* v, const int32_t* key_offsets,
               const int32_t* key_ids, int64_t nnz, const float* sinks, int64_t S, int64_t nH,
               int64_t T, int64_t nKV, int64_t D, int64_t Dv, float scale, float* out,
               float* parts, int64_t max_keys, int32_t* error_flag, cudaStream_t s) {
  if (S * nH == 0) return;
  Args a{q, k, v, key_offsets, key_ids, nnz, sinks, nH, T, nKV, D, Dv,
         (nH / nKV + kHeads - 1) / kHeads, scale, out, parts,
         (max_keys + kChunk * kSuper - 1) / (kChunk * kSuper), error_flag};
  const bool split = parts != nullptr;
  // The wide path: widths multiples of 128 (V4: one shared K = V head of 512; also GQA and
  // separate K/V). Session 4 restricted it to V4's layout after WideGqaAndOddHeadCountsMatchCpu
  // failed for D 256 / Dv 128 — on both paths, because that layout's 48 KB of dynamic shared
  // memory plus the static arrays was launched without raising the limit (see allow_smem). The
  // choice depends on the call's layout only, never on the batch.
  if (D % 128 == 0 && Dv % 128 == 0) {
    const int64_t p4 = std::max(D, Dv) / 128;
    if (p4 <= 1) launch_wide<1>(a, S, split, s);
    else if (p4 <= 2) launch_wide<2>(a, S, split, s);
    else if (p4 <= 4) launch_wide<4>(a, S, split, s);
    else launch_wide<8>(a, S, split, s);
    return;
  }
  const int64_t per = (std::max(D, Dv) + 31) / 32;
  if (per <= 1) launch<1>(a, S, split, s);
  else if (per <= 2) launch<2>(a, S, split, s);
  else if (per <= 4) launch<4>(a, S, split, s);
  else if (per <= 8) launch<8>(a, S, split, s);
  else if (per <= 16) launch<16>(a, S, split, s);
  else launch<32>(a, S, split, s);
}

}  // namespace deepinfer::cuda::kernels
