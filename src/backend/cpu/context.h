// Shared plumbing of the CPU backend's op files: the mode (fast / reference) and the thread pool.
#pragma once

#include <cstdint>
#include <functional>

#include "backend/backend.h"
#include "backend/op_checks.h"
#include "common/thread_pool.h"

namespace deepinfer::backend::cpu {

struct CpuContext {
  bool reference = false;
  ThreadPool* pool = nullptr;  // null in reference mode

  // Runs fn(begin, end) over [0, n): in chunks on the pool in fast mode, serially in reference
  // mode or when n * cost_per_item is too small to be worth waking threads.
  void parallel_for(int64_t n, int64_t cost_per_item,
                    const std::function<void(int64_t, int64_t)>& fn) const {
    if (n <= 0) return;
    if (reference || pool == nullptr || pool->num_threads() == 1 || n * cost_per_item < 32768 ||
        n == 1) {
      fn(0, n);
      return;
    }
    pool->parallel_for(n, fn);
  }
};

// Dot product with a fixed 16-lane accumulation order (vectorizes at -O3 without -ffast-math,
// and gives the same bits for a row whatever the batch it is in).
inline float dot16(const float* a, const float* b, int64_t k) {
  float acc[16] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t i = 0;
  for (; i + 16 <= k; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.f;
  for (; i < k; ++i) tail += a[i] * b[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0] + tail;
}

// Reference dot product: one fp32 accumulator, plain order.
inline float dot_ref(const float* a, const float* b, int64_t k) {
  float acc = 0.f;
  for (int64_t i = 0; i < k; ++i) acc += a[i] * b[i];
  return acc;
}

inline float dot(const CpuContext& ctx, const float* a, const float* b, int64_t k) {
  return ctx.reference ? dot_ref(a, b, k) : dot16(a, b, k);
}

// ---- op entry points, one family per file (shapes checked by the callers in cpu_backend.cpp
// are re-checked here: each function is self-contained) ----
Status dequantize(const CpuContext& ctx, const Tensor& w, const Tensor* scale, int64_t block_rows,
                  int64_t block_cols, Tensor& out);
Status embedding(const CpuContext& ctx, const Tensor& table, const Tensor& ids, Tensor& out);
Status compressor_slots(const CpuContext& ctx, const Tensor& kv, const Tensor& gate,
                        const Tensor& ape, const Tensor* overlap_kv, const Tensor* overlap_gate,
                        int64_t m, Tensor& values, Tensor& scores, Tensor* next_overlap_kv,
                        Tensor* next_overlap_gate);
Status matmul(const CpuContext& ctx, const Tensor& x, const Tensor& w, Tensor& out, int64_t groups);
Status rms_norm(const CpuContext& ctx, const Tensor& x, const Tensor* weight, float eps, Tensor& out);
Status rope(const CpuContext& ctx, Tensor& x, const Tensor& positions, const Tensor& inv_freq,
            RopeStyle style, float mscale, bool inverse);
Status attention(const CpuContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& key_offsets, const Tensor& key_ids, const Tensor* sinks, float scale,
                 Tensor& out);
Status softmax_pool(const CpuContext& ctx, const Tensor& values, const Tensor& scores, Tensor& out);
Status indexer_scores(const CpuContext& ctx, const Tensor& q, const Tensor& weights,
                      const Tensor& keys, const Tensor& visible, float weight_scale, float dot_scale,
                      Tensor& out, const Tensor* key_start);
Status topk(const CpuContext& ctx, const Tensor& scores, int64_t k, Tensor& ids);
Status moe_route(const CpuContext& ctx, const Tensor& logits, const Tensor* bias,
                 const Tensor* hash_ids, const RouterParams& params, Tensor& ids, Tensor& weights);
Status swiglu(const CpuContext& ctx, const Tensor& gate_up, float limit, Tensor& out);
Status gather_rows(const CpuContext& ctx, const Tensor& src, const Tensor& ids, Tensor& out);
Status scatter_add_rows(const CpuContext& ctx, const Tensor& src, const Tensor& ids,
                        const Tensor* weights, Tensor& out);
Status hc_coeffs(const CpuContext& ctx, const Tensor& mix, const Tensor& base, const Tensor& scale,
                 const HcParams& params, Tensor& pre, Tensor* post, Tensor* comb);
Status hc_collapse(const CpuContext& ctx, const Tensor& x, const Tensor& pre, Tensor& out);
Status hc_expand(const CpuContext& ctx, const Tensor& x, const Tensor& y, const Tensor& post,
                 const Tensor& comb, Tensor& out);
Status add(const CpuContext& ctx, const Tensor& a, const Tensor& b, Tensor& out);
Status copy(const CpuContext& ctx, const Tensor& src, Tensor& dst);

}  // namespace deepinfer::backend::cpu
