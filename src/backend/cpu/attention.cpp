// Attention over an explicit key list per query, with optional per-head sink logits
// (deepseek-v4.md §4.3): P = exp(l - M) / (Σ exp(l' - M) + exp(sink - M)), M = max(l, sink);
// the sink adds to the denominator only and is not scaled. GQA: head h reads kv head
// h / (nH / nKV). Softmax and accumulation in fp32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

Status attention(const CpuContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& key_offsets, const Tensor& key_ids, const Tensor* sinks, float scale,
                 Tensor& out) {
  DI_ASSIGN_OR_RETURN(const AttentionDims dims,
                      check_attention(q, k, v, key_offsets, key_ids, sinks, out));
  const int64_t S = dims.S, nH = dims.nH, D = dims.D, T = dims.T, nKV = dims.nKV, Dv = dims.Dv;
  const int32_t* off = key_offsets.data<int32_t>();
  const int32_t* ids = key_ids.data<int32_t>();
  const int64_t nnz = key_ids.dim(0);
  for (int64_t s = 0; s < S; ++s)
    if (off[s] < 0 || off[s] > off[s + 1] || off[s + 1] > nnz)
      return InvalidArgument("attention: key_offsets must be non-decreasing within [0, " +
                             std::to_string(nnz) + "], bad at query " + std::to_string(s));
  for (int64_t i = off[0]; i < off[S]; ++i)
    if (ids[i] < 0 || ids[i] >= T)
      return OutOfRange("attention: key id " + std::to_string(ids[i]) + " outside [0, " +
                        std::to_string(T) + ")");
  const int64_t group = nH / nKV;
  const float* qp = q.data<float>();
  const float* kp = k.data<float>();
  const float* vp = v.data<float>();
  float* op = out.data<float>();
  const int64_t avg_keys = S ? (off[S] - off[0]) / S + 1 : 1;
  ctx.parallel_for(S * nH, avg_keys * (D + Dv), [&](int64_t i0, int64_t i1) {
    std::vector<float> logit;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t s = i / nH, h = i % nH, kvh = h / group;
      const float* qv = qp + (s * nH + h) * D;
      const int64_t n = off[s + 1] - off[s];
      logit.resize(n);
      float mx = sinks ? sinks->data<float>()[h] : -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        const float* kv = kp + (ids[off[s] + j] * nKV + kvh) * D;
        logit[j] = dot(ctx, qv, kv, D) * scale;
        mx = std::max(mx, logit[j]);
      }
      float* o = op + (s * nH + h) * Dv;
      for (int64_t c = 0; c < Dv; ++c) o[c] = 0.f;
      if (n == 0) continue;
      float denom = 0.f;
      for (int64_t j = 0; j < n; ++j) {
        logit[j] = std::exp(logit[j] - mx);
        denom += logit[j];
      }
      if (sinks) denom += std::exp(sinks->data<float>()[h] - mx);
      const float inv = 1.0f / denom;
      for (int64_t j = 0; j < n; ++j) {
        const float p = logit[j] * inv;
        const float* vv = vp + (ids[off[s] + j] * nKV + kvh) * Dv;
        for (int64_t c = 0; c < Dv; ++c) o[c] += p * vv[c];
      }
    }
  });
  return OkStatus();
}

}  // namespace deepinfer::backend::cpu
