// Backend::sample on the device: one block per logits row (see sampling.h for the definition and
// src/sample/sampler.cpp for the host code each step mirrors).
#include <climits>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/pdl_config.h"
#include "backend/cuda/sampling.h"

namespace deepinfer::cuda::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr float kGreedyEpsilon = 1e-5f;       // SamplingParams::kGreedyEpsilon
constexpr double kFixedOne = 4611686018427387904.0;  // 2^62: top-p masses in fixed point

// ---- the host's arithmetic, bit for bit (src/sample/rng.cpp) ----

__device__ __forceinline__ uint4 philox4x32_10(uint4 c, uint32_t k0, uint32_t k1) {
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint32_t hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
    c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
  }
  return c;
}

// 53 bits of two words to the centre of one of 2^53 cells of (0, 1) (rng.cpp open_unit).
__device__ __forceinline__ double open_unit(uint32_t a, uint32_t b) {
  const unsigned long long bits = (static_cast<unsigned long long>(a) << 21) ^ (b >> 11);
  return __dmul_rn(__dadd_rn(__ull2double_rn(bits), 0.5), 0x1.0p-53);
}

// exp(f64(s) − f64(m)): the host's unnormalised probability of a token.
__device__ __forceinline__ double weight(float s, float m) {
  return exp(__dsub_rn(static_cast<double>(s), static_cast<double>(m)));
}

// Order-preserving map of fp32 bits to uint32 (larger float, larger key; −inf is 0x007fffff).
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// ---- block-wide helpers (fixed reduction trees: results do not depend on timing) ----

struct Shared {
  uint32_t count[256];
  unsigned long long mass[256];
  double red_d[kWarps];
  int red_i[kWarps];
  float red_f[32];
  int tile_count[kWarps];
  // broadcasts
  float floor_value;
  int found_digit;
  uint32_t before_count;
  unsigned long long before_mass;
  int id_cut;
};

// (score, id) argmax with ties to the lower id, over the block; every thread gets the result.
__device__ void block_argmax(double score, int id, Shared& sh, double* out_score, int* out_id) {
  for (int o = 16; o > 0; o >>= 1) {
    const double s2 = __shfl_xor_sync(kFull, score, o);
    const int i2 = __shfl_xor_sync(kFull, id, o);
    if (s2 > score || (s2 == score && i2 < id)) {
      score = s2;
      id = i2;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sh.red_d[warp] = score;
    sh.red_i[warp] = id;
  }
  __syncthreads();
  if (warp == 0) {
    score = lane < kWarps ? sh.red_d[lane] : -INFINITY;
    id = lane < kWarps ? sh.red_i[lane] : INT_MAX;
    for (int o = 16; o > 0; o >>= 1) {
      const double s2 = __shfl_xor_sync(kFull, score, o);
      const int i2 = __shfl_xor_sync(kFull, id, o);
      if (s2 > score || (s2 == score && i2 < id)) {
        score = s2;
        id = i2;
      }
    }
    if (lane == 0) {
      sh.red_d[0] = score;
      sh.red_i[0] = id;
    }
  }
  __syncthreads();
  *out_score = sh.red_d[0];
  *out_id = sh.red_i[0];
  __syncthreads();
}

__device__ double block_sum_f64(double v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) sh.red_d[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? sh.red_d[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    if (lane == 0) sh.red_d[0] = v;
  }
  __syncthreads();
  const double total = sh.red_d[0];
  __syncthreads();
  return total;
}

// Warp 0 only: over bins w[255], w[254], ..., w[0] (descending digits), the first digit d with
// base + (weight of the bins above d) + w[d] >= target, given base < target. Writes
// sh.found_digit (−1 if none) and the weight before it (base included) to *before.
template <typename T>
__device__ void warp_find_crossing(const T* w, T base, T target, int* found, T* before) {
  const int lane = threadIdx.x % 32;
  T local[8];
  T sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    local[i] = w[255 - (lane * 8 + i)];
    sum += local[i];
  }
  T incl = sum;
  for (int o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += n;
  }
  const T excl = incl - sum;
  const bool crosses = base + excl < target && base + incl >= target;
  const unsigned ballot = __ballot_sync(kFull, crosses);
  if (ballot == 0) {
    if (lane == 0) *found = -1;
    return;
  }
  if (lane == __ffs(ballot) - 1) {
    T cum = base + excl;
    for (int i = 0; i < 8; ++i) {
      if (cum + local[i] >= target) {
        *found = 255 - (lane * 8 + i);
        *before = cum;
        break;
      }
      cum += local[i];
    }
  }
}

// Adds this lane's element (digit < 256; 256 = none) to the histogram: lanes of a warp with the
// same digit are summed first and one of them adds (shared atomics on one hot bin would otherwise
// serialise a whole row). All 32 lanes must call it. Integer sums: order-free, deterministic.
__device__ __forceinline__ void warp_histogram_add(uint32_t digit, unsigned long long q,
                                                   bool with_mass, Shared& sh) {
  const int lane = threadIdx.x % 32;
  unsigned pending = __ballot_sync(kFull, digit < 256u);
  while (pending != 0) {  // uniform across the warp
    const int src = __ffs(pending) - 1;
    const uint32_t d = __shfl_sync(kFull, digit, src);
    const bool mine = digit == d;
    const unsigned group = __ballot_sync(kFull, mine);
    if (with_mass) {
      unsigned long long sum = mine ? q : 0ull;
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
      if (lane == src) atomicAdd(&sh.mass[d], sum);
    }
    if (lane == src) atomicAdd(&sh.count[d], static_cast<uint32_t>(__popc(group)));
    pending &= ~group;
  }
}

// What a random row keeps: s >= lo (min-p floor and top-k value), s > −inf, and, when top-p
// cuts, key(s) > pkey or (key(s) == pkey and t <= id_cut).
struct Filter {
  float inv_t;
  float m;
  float lo;
  bool top_p;
  uint32_t pkey;
  int id_cut;
};

__device__ __forceinline__ bool alive(float s, const Filter& f) {
  return s >= f.lo && s > -INFINITY;
}
__device__ __forceinline__ bool kept(float s, int t, const Filter& f) {
  if (!alive(s, f)) return false;
  if (!f.top_p) return true;
  const uint32_t k = order_key(s);
  return k > f.pkey || (k == f.pkey && t <= f.id_cut);
}

// Greedy: argmax of the raw row, ties to the lowest id; a NaN at id 0 wins as on the host (its
// comparisons are all false there), NaN elsewhere never does.
// Argmax by (value descending, id ascending); NaN never wins (its comparisons are false).
__device__ __forceinline__ void take(float v, int t, float& bv, int& bi) {
  if (v > bv || (v == bv && t < bi)) {
    bv = v;
    bi = t;
  }
}

// Elements [t0, t1) of the row streamed with 16-byte loads (when x + t0 is 16-byte aligned), four
// in flight per thread, into four independent (value, id) chains merged with the same comparator:
// the argmax (ties to the lowest id) does not depend on the order the elements are visited in, so
// this is the scalar loop's result. Returns the block's (value, id); id INT_MAX when [t0, t1) is
// empty or holds only NaN.
__device__ void greedy_range(const float* x, int64_t t0, int64_t t1, Shared& sh, float* out_v,
                             int* out_i) {
  float bv[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  int bi[4] = {INT_MAX, INT_MAX, INT_MAX, INT_MAX};
  int64_t done = t0;
  if ((reinterpret_cast<uintptr_t>(x + t0) & 15) == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(x + t0);
    const int64_t n4 = (t1 - t0) / 4;
    constexpr int kU = 4;
    int64_t j = threadIdx.x;
    for (; j + (kU - 1) * kThreads < n4; j += kU * kThreads) {
      float4 v[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) v[u] = __ldg(x4 + j + u * kThreads);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int t = static_cast<int>(t0 + 4 * (j + u * kThreads));
        take(v[u].x, t, bv[u], bi[u]);
        take(v[u].y, t + 1, bv[u], bi[u]);
        take(v[u].z, t + 2, bv[u], bi[u]);
        take(v[u].w, t + 3, bv[u], bi[u]);
      }
    }
    for (; j < n4; j += kThreads) {
      const float4 v = __ldg(x4 + j);
      const int t = static_cast<int>(t0 + 4 * j);
      take(v.x, t, bv[0], bi[0]);
      take(v.y, t + 1, bv[0], bi[0]);
      take(v.z, t + 2, bv[0], bi[0]);
      take(v.w, t + 3, bv[0], bi[0]);
    }
    done = t0 + 4 * n4;
  }
  for (int64_t t = done + threadIdx.x; t < t1; t += kThreads)
    take(x[t], static_cast<int>(t), bv[0], bi[0]);
#pragma unroll
  for (int u = 1; u < 4; ++u) take(bv[u], bi[u], bv[0], bi[0]);
  // Values as doubles: the float order is kept exactly, so the reduction is the same argmax.
  double best;
  int id;
  block_argmax(bi[0] == INT_MAX ? -INFINITY : static_cast<double>(bv[0]), bi[0], sh, &best, &id);
  *out_v = static_cast<float>(best);
  *out_i = id;
}

// Greedy: the argmax of the whole row; a NaN at id 0 wins as on the host, an all-NaN row is id 0.
__device__ int greedy_token(const float* x, int64_t V, Shared& sh) {
  float v;
  int id;
  greedy_range(x, 0, V, sh, &v, &id);
  if (isnan(x[0]) || id == INT_MAX) return 0;
  return id;
}

// The smallest fp32 f with !(exp(f64(f) − m) < min_p), by bisection over the order keys between
// −inf (never kept: exp(−inf) = 0 < min_p) and m (always kept: exp(0) = 1 >= min_p).
__device__ float min_p_floor(float m, float min_p) {
  uint32_t lo = order_key(-INFINITY), hi = order_key(m);
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (weight(key_value(mid), m) < static_cast<double>(min_p)) lo = mid;
    else hi = mid;
  }
  return key_value(hi);
}

// The k-th largest (1 <= k < V) of v_t = (s_t >= floor ? s_t : −inf) over the whole row, as
// nth_element does on the host: radix select on the order keys, 8 bits a pass from the top.
__device__ float top_k_value(const float* x, int64_t V, float inv_t, float floor, uint32_t k,
                             Shared& sh) {
  uint32_t prefix = 0, above = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.count[i] = 0;
    __syncthreads();
    for (int64_t t0 = 0; t0 < V; t0 += kThreads) {  // same trip count for every thread
      const int64_t t = t0 + threadIdx.x;
      uint32_t digit = 256u;
      if (t < V) {
        const float s = __fmul_rn(x[t], inv_t);
        const uint32_t key = order_key(s >= floor ? s : -INFINITY);
        if (pass == 0 || (key >> (shift + 8)) == (prefix >> (shift + 8))) digit = (key >> shift) & 255u;
      }
      warp_histogram_add(digit, 0ull, /*with_mass=*/false, sh);
    }
    __syncthreads();
    if (threadIdx.x < 32) warp_find_crossing<uint32_t>(sh.count, above, k, &sh.found_digit, &sh.before_count);
    __syncthreads();
    // Always found: the bins hold every remaining candidate and above < k <= above + their count.
    prefix |= static_cast<uint32_t>(sh.found_digit) << shift;
    above = sh.before_count;
    __syncthreads();
  }
  return key_value(prefix);
}

// Top-p over the alive tokens (f.lo set): fills f.top_p / f.pkey / f.id_cut.
__device__ void top_p_cut(const float* x, int64_t V, float top_p, Filter& f, Shared& sh) {
  double part = 0.0;
  for (int64_t t = threadIdx.x; t < V; t += kThreads) {
    const float s = __fmul_rn(x[t], f.inv_t);
    if (alive(s, f)) part += weight(s, f.m);
  }
  const double z = block_sum_f64(part, sh);
  auto mass = [&](float s) -> unsigned long long {
    return static_cast<unsigned long long>(__dmul_rn(__ddiv_rn(weight(s, f.m), z), kFixedOne));
  };
  unsigned long long target = static_cast<unsigned long long>(__dmul_rn(static_cast<double>(top_p), kFixedOne));
  if (target == 0) target = 1;  // the first-ranked token is always kept (mass above it is 0)
  uint32_t prefix = 0, count_at = 0;
  unsigned long long above = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = threadIdx.x; i < 256; i += kThreads) {
      sh.count[i] = 0;
      sh.mass[i] = 0;
    }
    __syncthreads();
    for (int64_t t0 = 0; t0 < V; t0 += kThreads) {  // same trip count for every thread
      const int64_t t = t0 + threadIdx.x;
      uint32_t digit = 256u;
      unsigned long long q = 0;
      if (t < V) {
        const float s = __fmul_rn(x[t], f.inv_t);
        const uint32_t key = order_key(s);
        if (alive(s, f) && (pass == 0 || (key >> (shift + 8)) == (prefix >> (shift + 8)))) {
          digit = (key >> shift) & 255u;
          q = mass(s);
        }
      }
      warp_histogram_add(digit, q, /*with_mass=*/true, sh);
    }
    __syncthreads();
    if (threadIdx.x < 32)
      warp_find_crossing<unsigned long long>(sh.mass, above, target, &sh.found_digit, &sh.before_mass);
    __syncthreads();
    const int d = sh.found_digit;
    if (d < 0) {  // pass 0 only (integer sums are exact): the kept mass never reaches top_p
      f.top_p = false;
      __syncthreads();
      return;
    }
    prefix |= static_cast<uint32_t>(d) << shift;
    above = sh.before_mass;
    count_at = sh.count[d];
    __syncthreads();
  }
  // Every token of value key_value(prefix) has the same mass q; the n-th of them by id is the last
  // kept, n = the fewest with above + n·q >= target.
  const unsigned long long q = mass(key_value(prefix));
  const unsigned long long n = (target - above + q - 1) / q;
  f.top_p = true;
  f.pkey = prefix;
  f.id_cut = INT_MAX;
  if (n >= count_at) return;
  // Ties at the boundary value: the id of the n-th (in id order), by a block scan over tiles.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned long long running = 0;
  if (threadIdx.x == 0) sh.id_cut = INT_MAX;
  for (int64_t base = 0; base < V; base += kThreads) {
    const int64_t t = base + threadIdx.x;
    bool tie = false;
    if (t < V) {
      const float s = __fmul_rn(x[t], f.inv_t);
      tie = alive(s, f) && order_key(s) == prefix;
    }
    const unsigned ballot = __ballot_sync(kFull, tie);
    if (lane == 0) sh.tile_count[warp] = __popc(ballot);
    __syncthreads();
    unsigned long long warp_off = 0, tile_total = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) warp_off += sh.tile_count[w];
      tile_total += sh.tile_count[w];
    }
    const unsigned long long rank = running + warp_off + __popc(ballot & ((1u << lane) - 1u));
    if (tie && rank == n - 1) sh.id_cut = static_cast<int>(t);
    running += tile_total;
    __syncthreads();
    if (running >= n) break;  // uniform: every thread has the same running count
  }
  f.id_cut = sh.id_cut;
  __syncthreads();
}

// The filter of a random row; returns false when every token is −inf after temperature.
__device__ bool random_filter(const float* x, int64_t V, const SampleRow& row, Filter& f, Shared& sh) {
  f.inv_t = __fdiv_rn(1.0f, row.temperature);
  float local = -INFINITY;
  for (int64_t t = threadIdx.x; t < V; t += kThreads) local = fmaxf(local, __fmul_rn(x[t], f.inv_t));
  f.m = block_max<kThreads>(local, sh.red_f);
  f.lo = -INFINITY;
  f.top_p = false;
  f.pkey = 0;
  f.id_cut = INT_MAX;
  if (f.m == -INFINITY) return false;
  if (row.min_p > 0.0f) {
    if (threadIdx.x == 0) sh.floor_value = min_p_floor(f.m, row.min_p);
    __syncthreads();
    f.lo = sh.floor_value;
    __syncthreads();
  }
  if (row.top_k > 0 && static_cast<int64_t>(row.top_k) < V) {
    const float kth = top_k_value(x, V, f.inv_t, f.lo, static_cast<uint32_t>(row.top_k), sh);
    f.lo = fmaxf(f.lo, kth);  // v >= kth with kth > −inf means s >= floor and s >= kth
  }
  if (row.top_p < 1.0f) top_p_cut(x, V, row.top_p, f, sh);
  return true;
}

// The exponential race over the kept tokens: argmax p_t / E_t, ties to the lowest id.
__device__ int race(const float* x, int64_t V, const SampleRow& row, const Filter& f, Shared& sh) {
  const uint32_t k0 = static_cast<uint32_t>(row.seed), k1 = static_cast<uint32_t>(row.seed >> 32);
  double best = -1.0;
  int bi = INT_MAX;
  const int64_t pairs = (V + 1) / 2;
  for (int64_t j = threadIdx.x; j < pairs; j += kThreads) {
    const int64_t t0 = 2 * j, t1 = 2 * j + 1;
    const float s0 = __fmul_rn(x[t0], f.inv_t);
    const float s1 = t1 < V ? __fmul_rn(x[t1], f.inv_t) : -INFINITY;
    const bool keep0 = kept(s0, static_cast<int>(t0), f);
    const bool keep1 = t1 < V && kept(s1, static_cast<int>(t1), f);
    if (!keep0 && !keep1) continue;
    // counter {token / 2, output_position, sequence_index, stream kTokenSampling = 0}
    const uint4 c = philox4x32_10(
        make_uint4(static_cast<uint32_t>(j), row.output_position, row.sequence_index, 0u), k0, k1);
    if (keep0) {
      const double score = __ddiv_rn(weight(s0, f.m), -log(open_unit(c.x, c.y)));
      if (score > best) {
        best = score;
        bi = static_cast<int>(t0);
      }
    }
    if (keep1) {
      const double score = __ddiv_rn(weight(s1, f.m), -log(open_unit(c.z, c.w)));
      if (score > best) {
        best = score;
        bi = static_cast<int>(t1);
      }
    }
  }
  double score;
  int id;
  block_argmax(best, bi, sh, &score, &id);
  return id == INT_MAX ? 0 : id;
}

// Session 12: the greedy rows' argmax in kGreedyParts slices of a row, one block each (one block
// per row took ~14 µs for V = 129,280: ~16 rounds of dependent loads per thread); the slices are a
// multiple of 4 elements, so a slice of a 16-byte aligned row starts aligned. Random rows: nothing.
constexpr int kGreedyParts = 16;
__global__ void __launch_bounds__(kThreads)
    greedy_parts_kernel(const float* logits, int64_t V, const SampleRow* rows, float* part_v,
                        int* part_i) {
  pdl::enter();
  __shared__ Shared sh;
  const int64_t r = blockIdx.y;
  const int p = static_cast<int>(blockIdx.x);
  if (!(rows[r].temperature < kGreedyEpsilon)) return;  // the same for every thread of the block
  const int64_t chunk = ((V + kGreedyParts - 1) / kGreedyParts + 3) / 4 * 4;
  const int64_t t0 = min(V, p * chunk), t1 = min(V, t0 + chunk);
  float v;
  int id;
  greedy_range(logits + r * V, t0, t1, sh, &v, &id);
  if (threadIdx.x == 0) {
    part_v[r * kGreedyParts + p] = v;
    part_i[r * kGreedyParts + p] = id;
  }
}

// parts (may be null): greedy_parts_kernel's slices of the greedy rows, merged here with take's
// comparator (the argmax does not depend on how the row was cut: the same id as greedy_token).
__global__ void __launch_bounds__(kThreads)
    sample_rows_kernel(const float* logits, int64_t V, const SampleRow* rows, int32_t* ids,
                       const float* part_v, const int* part_i) {
  pdl::enter();
  __shared__ Shared sh;
  const int64_t r = blockIdx.x;
  const float* x = logits + r * V;
  const SampleRow row = rows[r];
  int token = 0;
  if (row.temperature < kGreedyEpsilon && part_v != nullptr) {
    if (threadIdx.x == 0) {
      float bv = -INFINITY;
      int bi = INT_MAX;
      for (int p = 0; p < kGreedyParts; ++p)
        take(part_v[r * kGreedyParts + p], part_i[r * kGreedyParts + p], bv, bi);
      ids[r] = isnan(x[0]) || bi == INT_MAX ? 0 : bi;
    }
    return;
  }
  if (row.temperature < kGreedyEpsilon) {
    token = greedy_token(x, V, sh);
  } else {
    Filter f;
    // Everything −inf: the host's fallback, argmax of an all −inf row = id 0.
    token = random_filter(x, V, row, f, sh) ? race(x, V, row, f, sh) : 0;
  }
  if (threadIdx.x == 0) ids[r] = token;
}

__global__ void __launch_bounds__(kThreads) sample_filter_mask_kernel(const float* logits, int64_t V,
                                                                      const SampleRow* rows,
                                                                      uint8_t* kept_out) {
  pdl::enter();
  __shared__ Shared sh;
  const int64_t r = blockIdx.x;
  const float* x = logits + r * V;
  uint8_t* out = kept_out + r * V;
  const SampleRow row = rows[r];
  if (row.temperature < kGreedyEpsilon) {
    const int token = greedy_token(x, V, sh);
    for (int64_t t = threadIdx.x; t < V; t += kThreads) out[t] = t == token ? 1 : 0;
    return;
  }
  Filter f;
  const bool any = random_filter(x, V, row, f, sh);
  for (int64_t t = threadIdx.x; t < V; t += kThreads)
    out[t] = any && kept(__fmul_rn(x[t], f.inv_t), static_cast<int>(t), f) ? 1 : 0;
}

}  // namespace

size_t sample_rows_scratch_bytes(int64_t S) {
  return static_cast<size_t>(S) * kGreedyParts * (sizeof(float) + sizeof(int));
}

void sample_rows(const float* logits, int64_t S, int64_t V, const SampleRow* rows, int32_t* ids,
                 void* scratch, cudaStream_t s) {
  if (S <= 0) return;
  float* part_v = nullptr;
  int* part_i = nullptr;
  if (scratch != nullptr && S <= 65535) {
    part_v = static_cast<float*>(scratch);
    part_i = reinterpret_cast<int*>(part_v + S * kGreedyParts);
    pdl::launch(greedy_parts_kernel, dim3(kGreedyParts, static_cast<unsigned>(S)), kThreads, 0, s,
                pdl::small_kernels(), logits, V, rows, part_v, part_i);
  }
  pdl::launch(sample_rows_kernel, static_cast<unsigned>(S), kThreads, 0, s, pdl::small_kernels(),
              logits, V, rows, ids, static_cast<const float*>(part_v),
              static_cast<const int*>(part_i));
}

void sample_filter_mask(const float* logits, int64_t S, int64_t V, const SampleRow* rows,
                        uint8_t* kept, cudaStream_t s) {
  if (S <= 0) return;
  pdl::launch(sample_filter_mask_kernel, static_cast<unsigned>(S), kThreads, 0, s,
              pdl::small_kernels(), logits, V, rows, kept);
}

}  // namespace deepinfer::cuda::kernels
