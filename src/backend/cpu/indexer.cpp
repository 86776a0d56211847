// Lightning-indexer scores and the row-wise top-k with deepinfer's tie rule
// (deepseek-v4.md §5.5: higher score first, then lower index).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

Status indexer_scores(const CpuContext& ctx, const Tensor& q, const Tensor& weights,
                      const Tensor& keys, const Tensor& visible, float weight_scale,
                      float dot_scale, Tensor& out, const Tensor* key_start) {
  DI_ASSIGN_OR_RETURN(const IndexerDims dims,
                      check_indexer_scores(q, weights, keys, visible, out, key_start));
  const int64_t S = dims.S, nI = dims.nI, cI = dims.cI, T = dims.T, Tk = keys.dim(0);
  for (int64_t s = 0; s < S; ++s) {
    const int64_t b = key_start ? key_start->data<int32_t>()[s] : 0;
    const int64_t vis = visible.data<int32_t>()[s];
    if (b < 0 || vis > T || b + std::max<int64_t>(vis, 0) > Tk)
      return OutOfRange("indexer_scores: row " + std::to_string(s) + " reads keys [" +
                        std::to_string(b) + ", " + std::to_string(b + vis) + ") of " +
                        std::to_string(Tk) + " (out width " + std::to_string(T) + ")");
  }
  const float* qp = q.data<float>();
  const float* wp = weights.data<float>();
  const float* kp = keys.data<float>();
  float* op = out.data<float>();
  ctx.parallel_for(S, T * nI * cI, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t vis = visible.data<int32_t>()[s];
      const float* ks = kp + (key_start ? key_start->data<int32_t>()[s] : 0) * cI;
      for (int64_t t = 0; t < T; ++t) {
        if (t >= vis) {
          op[s * T + t] = -std::numeric_limits<float>::infinity();
          continue;
        }
        float acc = 0.f;
        for (int64_t h = 0; h < nI; ++h) {
          const float d = dot(ctx, qp + (s * nI + h) * cI, ks + t * cI, cI);
          acc += (wp[s * nI + h] * weight_scale) * (std::max(d, 0.f) * dot_scale);
        }
        op[s * T + t] = acc;
      }
    }
  });
  return OkStatus();
}

Status topk(const CpuContext& ctx, const Tensor& scores, int64_t k, Tensor& ids) {
  DI_ASSIGN_OR_RETURN(const TopkDims dims, check_topk(scores, k, ids));
  const int64_t S = dims.S, T = dims.T;
  const float* sp = scores.data<float>();
  int32_t* ip = ids.data<int32_t>();
  const int64_t kk = std::min(k, T);
  ctx.parallel_for(S, T * 4, [&](int64_t s0, int64_t s1) {
    std::vector<int32_t> order(T);
    for (int64_t s = s0; s < s1; ++s) {
      const float* row = sp + s * T;
      std::iota(order.begin(), order.end(), 0);
      auto better = [row](int32_t a, int32_t b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
      };
      std::partial_sort(order.begin(), order.begin() + kk, order.end(), better);
      for (int64_t j = 0; j < k; ++j) {
        const bool keep = j < kk && row[order[j]] != -std::numeric_limits<float>::infinity();
        ip[s * k + j] = keep ? order[j] : -1;
      }
    }
  });
  return OkStatus();
}

}  // namespace deepinfer::backend::cpu
