// Embedding lookup, row gather / weighted scatter-add (MoE dispatch and combine), add, copy.
#include <cstring>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

Status embedding(const CpuContext& ctx, const Tensor& table, const Tensor& ids, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const GatherDims dims, check_embedding(table, ids, out));
  const int64_t V = dims.N, H = dims.H, S = dims.M;
  for (int64_t s = 0; s < S; ++s) {
    const int32_t id = ids.data<int32_t>()[s];
    if (id < 0 || id >= V)
      return OutOfRange("embedding: token id " + std::to_string(id) + " at position " +
                        std::to_string(s) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
    std::memcpy(out.data<float>() + s * H, table.data<float>() + id * H, H * sizeof(float));
  }
  return OkStatus();
}

Status gather_rows(const CpuContext& ctx, const Tensor& src, const Tensor& ids, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const GatherDims dims, check_gather_rows(src, ids, out));
  const int64_t N = dims.N, H = dims.H, M = dims.M;
  for (int64_t i = 0; i < M; ++i) {
    const int32_t id = ids.data<int32_t>()[i];
    if (id < 0 || id >= N)
      return OutOfRange("gather_rows: id " + std::to_string(id) + " outside [0, " + std::to_string(N) + ")");
    std::memcpy(out.data<float>() + i * H, src.data<float>() + id * H, H * sizeof(float));
  }
  return OkStatus();
}

Status scatter_add_rows(const CpuContext& ctx, const Tensor& src, const Tensor& ids,
                        const Tensor* weights, Tensor& out) {
  DI_ASSIGN_OR_RETURN(const GatherDims dims, check_scatter_add_rows(src, ids, weights, out));
  const int64_t M = dims.M, H = dims.H, N = dims.N;
  for (int64_t i = 0; i < M; ++i) {
    const int32_t id = ids.data<int32_t>()[i];
    if (id < 0 || id >= N)
      return OutOfRange("scatter_add_rows: id " + std::to_string(id) + " outside [0, " + std::to_string(N) + ")");
    const float wgt = weights ? weights->data<float>()[i] : 1.f;
    const float* s = src.data<float>() + i * H;
    float* o = out.data<float>() + id * H;
    for (int64_t c = 0; c < H; ++c) o[c] += wgt * s[c];
  }
  return OkStatus();
}

Status add(const CpuContext& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  DI_RETURN_IF_ERROR(check_add(a, b, out));
  const int64_t n = a.numel();
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  float* op = out.data<float>();
  for (int64_t i = 0; i < n; ++i) op[i] = ap[i] + bp[i];
  return OkStatus();
}

Status copy(const CpuContext& ctx, const Tensor& src, Tensor& dst) {
  DI_RETURN_IF_ERROR(check_copy(src, dst));
  if (src.nbytes()) std::memmove(dst.raw(), src.raw(), src.nbytes());
  return OkStatus();
}

}  // namespace deepinfer::backend::cpu
