// MoE routing, row gather/scatter and the compressor's softmax pooling.
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/pdl_config.h"

namespace deepinfer::cuda::kernels {
namespace {

__device__ __forceinline__ float score_of(float l, int scoring) {
  if (scoring == 1) return 1.f / (1.f + expf(-l));
  const float sp = l > 20.f ? l : log1pf(expf(l));  // torch's softplus threshold
  return sqrtf(sp);
}

// One warp per token; lane l holds the experts l, l + 32, ... (E <= 32·kPer: kPer = 8 for
// E <= 256, V4's 256 experts, else 32 for E <= 1024; the unused slots of a lane are −inf and
// skipped, so both instantiations give the same bits). Selection:
// k rounds, each a warp argmax over the candidates strictly after the previous pick in
// (score + bias descending, expert id ascending) order — the CPU's partial-sort order. Softmax
// statistics are per-lane sums in expert order, then a fixed xor tree. The weights sum the k
// picks in pick order, as the CPU does. Session 12: for k <= 32 lane j keeps pick j's score in a
// register and writes its own weight (hash layers: lane j also reads pick j's id and logit), the
// sum still formed in pick order — the same arithmetic as the serial lane-0 loops (serial = true,
// and k > 32), without their chain of dependent global loads.
constexpr int kRoutePerMax = 32;

__device__ __forceinline__ void better(float& v, int32_t& e, float ov, int32_t oe) {
  if (oe >= 0 && (e < 0 || ov > v || (ov == v && oe < e))) v = ov, e = oe;
}

template <int kRoutePer>
__global__ void moe_route_kernel(const float* logits, const float* bias, const int32_t* hash_ids,
                                 int64_t S, int64_t E, int64_t k, int scoring, float scaling,
                                 bool renormalize, int32_t* ids, float* weights,
                                 int32_t* error_flag, bool serial) {
  pdl::enter();
  const int lane = threadIdx.x % 32;
  const int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (s >= S) return;
  const float* l = logits + s * E;
  float lv[kRoutePer];
#pragma unroll
  for (int i = 0; i < kRoutePer; ++i) {
    const int64_t e = lane + 32 * i;
    lv[i] = e < E ? l[e] : -INFINITY;
  }
  float mx = -INFINITY, den = 0.f;
  if (scoring == 2) {
#pragma unroll
    for (int i = 0; i < kRoutePer; ++i) mx = fmaxf(mx, lv[i]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
#pragma unroll
    for (int i = 0; i < kRoutePer; ++i)
      if (lane + 32 * i < E) den += expf(lv[i] - mx);
    for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);
  }
  auto sc = [&](float x) { return scoring == 2 ? expf(x - mx) / den : score_of(x, scoring); };
  int32_t* out = ids + s * k;
  float* wout = weights + s * k;
  const bool by_lane = !serial && k <= 32;
  if (hash_ids && by_lane) {
    int32_t e = 0;
    float v = 0.f;
    if (lane < k) {
      e = hash_ids[s * k + lane];
      if (e < 0 || e >= E) {
        set_error(error_flag, kErrHashExpertId);
        e = 0;
      }
      out[lane] = e;
      v = sc(l[e]);
    }
    float sum = 0.f;
    for (int64_t j = 0; j < k; ++j) sum += __shfl_sync(0xffffffffu, v, static_cast<int>(j));
    if (lane < k) wout[lane] = (renormalize ? v / (sum + 1e-20f) : v) * scaling;
    return;
  }
  if (hash_ids) {
    if (lane == 0) {
      float sum = 0.f;
      for (int64_t j = 0; j < k; ++j) {
        int32_t e = hash_ids[s * k + j];
        if (e < 0 || e >= E) {
          set_error(error_flag, kErrHashExpertId);
          e = 0;
        }
        out[j] = e;
        sum += sc(l[e]);
      }
      for (int64_t j = 0; j < k; ++j) {
        const float v = sc(l[out[j]]);
        wout[j] = (renormalize ? v / (sum + 1e-20f) : v) * scaling;
      }
    }
    return;
  }
  float sv[kRoutePer], key[kRoutePer];  // unbiased score, selection key
#pragma unroll
  for (int i = 0; i < kRoutePer; ++i) {
    const int64_t e = lane + 32 * i;
    sv[i] = e < E ? sc(lv[i]) : 0.f;
    key[i] = e < E ? sv[i] + (bias ? bias[e] : 0.f) : -INFINITY;
  }
  float prev_v = INFINITY, sum = 0.f, mine = 0.f;  // mine: lane j's pick score (by_lane)
  int32_t prev_e = -1;
  for (int64_t j = 0; j < k; ++j) {
    float bv = -INFINITY;
    int32_t be = -1;
#pragma unroll
    for (int i = 0; i < kRoutePer; ++i) {
      const int32_t e = lane + 32 * i;
      if (e >= E) continue;
      const bool after = key[i] < prev_v || (key[i] == prev_v && e > prev_e);
      if (after) better(bv, be, key[i], e);
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int32_t oe = __shfl_xor_sync(0xffffffffu, be, o);
      better(bv, be, ov, oe);
    }
    // The pick's unbiased score, from the lane that owns it.
    float ps = 0.f;
#pragma unroll
    for (int i = 0; i < kRoutePer; ++i)
      if (lane + 32 * i == be) ps = sv[i];
    ps = __shfl_sync(0xffffffffu, ps, be >= 0 ? be % 32 : 0);
    if (lane == 0) {
      out[j] = be;
      if (!by_lane) wout[j] = ps;  // normalised below
    }
    if (lane == j) mine = ps;
    sum += ps;
    prev_v = bv;
    prev_e = be;
  }
  if (by_lane) {
    if (lane < k) wout[lane] = (renormalize ? mine / (sum + 1e-20f) : mine) * scaling;
    return;
  }
  if (lane == 0)
    for (int64_t j = 0; j < k; ++j) {
      const float v = wout[j];
      wout[j] = (renormalize ? v / (sum + 1e-20f) : v) * scaling;
    }
}

__global__ void gather_kernel(const float* src, const int32_t* ids, int64_t M, int64_t N,
                              int64_t H, float* out, int32_t* error_flag, int32_t code) {
  pdl::enter();
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= M * H) return;
  const int64_t i = t / H, c = t % H;
  const int32_t id = ids[i];
  if (id < 0 || id >= N) {
    if (c == 0) set_error(error_flag, code);
    out[t] = 0.f;
    return;
  }
  out[t] = src[id * H + c];
}

// One thread per column walks the rows in order: deterministic, and exact w.r.t. the CPU order.
__global__ void scatter_add_kernel(const float* src, const int32_t* ids, const float* w, int64_t M,
                                   int64_t N, int64_t H, float* out, int32_t* error_flag) {
  pdl::enter();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= H) return;
  for (int64_t i = 0; i < M; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= N) {
      if (c == 0) set_error(error_flag, kErrScatterId);
      continue;
    }
    out[id * H + c] += (w ? w[i] : 1.f) * src[i * H + c];
  }
}

// The same update as scatter_add_kernel's `out[id] += w[i] * src[i]`, for the rows i = s·k + j
// of one owner s in order; the running value stays in a register between the k updates.
__global__ void combine_slots_kernel(const float* src, const float* w, int64_t S, int64_t k,
                                     int64_t H, float* out, bool overwrite) {
  pdl::enter();
  const int64_t c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t s = blockIdx.x;
  if (c >= H || s >= S) return;
  float acc = overwrite ? 0.f : out[s * H + c];
  for (int64_t j = 0; j < k; ++j) {
    const int64_t i = s * k + j;
    acc += w[i] * src[i * H + c];
  }
  out[s * H + c] = acc;
}

__global__ void softmax_pool_kernel(const float* values, const float* scores, int64_t n,
                                    int64_t L, int64_t d, float* out) {
  pdl::enter();
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= n * d) return;
  const int64_t r = t / d, c = t % d;
  const float* sc = scores + r * L * d + c;
  const float* va = values + r * L * d + c;
  float mx = -INFINITY;
  for (int64_t l = 0; l < L; ++l) mx = fmaxf(mx, sc[l * d]);
  if (mx == -INFINITY) {
    out[t] = 0.f;
    return;
  }
  float den = 0.f, acc = 0.f;
  for (int64_t l = 0; l < L; ++l) {
    const float e = expf(sc[l * d] - mx);
    den += e;
    acc += e * va[l * d];
  }
  out[t] = acc / den;
}

}  // namespace

void moe_route(const float* logits, const float* bias, const int32_t* hash_ids, int64_t S,
               int64_t E, int64_t k, int scoring, float routed_scaling, bool renormalize,
               int32_t* ids, float* weights, int32_t* error_flag, cudaStream_t s, bool serial) {
  if (S <= 0) return;
  if (E <= 32 * 8)
    pdl::launch(moe_route_kernel<8>, grid_for(S, 4), 128, 0, s, pdl::small_kernels(), logits, bias,
                hash_ids, S, E, k, scoring, routed_scaling, renormalize, ids, weights, error_flag,
                serial);
  else
    pdl::launch(moe_route_kernel<kRoutePerMax>, grid_for(S, 4), 128, 0, s, pdl::small_kernels(),
                logits, bias, hash_ids, S, E, k, scoring, routed_scaling, renormalize, ids, weights,
                error_flag, serial);
}

void gather_rows(const float* table, const int32_t* ids, int64_t rows_out, int64_t rows_in,
                 int64_t H, float* out, int32_t* error_flag, int32_t error_code, cudaStream_t s) {
  if (rows_out * H > 0)
    pdl::launch(gather_kernel, grid_for(rows_out * H, 256), 256, 0, s, pdl::small_kernels(), table,
                ids, rows_out, rows_in, H, out, error_flag, error_code);
}

void scatter_add_rows(const float* src, const int32_t* ids, const float* w, int64_t M,
                      int64_t N, int64_t H, float* out, int32_t* error_flag, cudaStream_t s) {
  if (H > 0 && M > 0)
    pdl::launch(scatter_add_kernel, grid_for(H, 128), 128, 0, s, pdl::small_kernels(), src, ids, w,
                M, N, H, out, error_flag);
}

void combine_slots(const float* slot_out, const float* w, int64_t S, int64_t k, int64_t H,
                   float* out, cudaStream_t s, bool overwrite) {
  if (S <= 0 || H <= 0 || k <= 0) return;
  const dim3 grid(static_cast<unsigned>(S), static_cast<unsigned>((H + 127) / 128));  // H ≤ 8.3 M
  pdl::launch(combine_slots_kernel, grid, 128, 0, s, pdl::small_kernels(), slot_out, w, S, k, H,
              out, overwrite);
}

void softmax_pool(const float* values, const float* scores, int64_t n, int64_t L, int64_t d,
                  float* out, cudaStream_t s) {
  if (n * d > 0)
    pdl::launch(softmax_pool_kernel, grid_for(n * d, 256), 256, 0, s, pdl::small_kernels(), values,
                scores, n, L, d, out);
}

}  // namespace deepinfer::cuda::kernels
