// Embedding lookup, row gather / weighted scatter-add (MoE dispatch and combine), add, copy.
#include <cstring>

#include "backend/cpu/context.h"

namespace deepinfer::backend::cpu {

Status embedding(const CpuContext& ctx, const Tensor& table, const Tensor& ids, Tensor& out) {
  DI_RETURN_IF_ERROR(check_rank("embedding", "table", table, DType::kF32, 2));
  DI_RETURN_IF_ERROR(check_rank("embedding", "ids", ids, DType::kI32, 1));
  const int64_t V = table.dim(0), H = table.dim(1), S = ids.dim(0);
  DI_RETURN_IF_ERROR(check_tensor("embedding", "out", out, DType::kF32, {S, H}));
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
  DI_RETURN_IF_ERROR(check_rank("gather_rows", "src", src, DType::kF32, 2));
  DI_RETURN_IF_ERROR(check_rank("gather_rows", "ids", ids, DType::kI32, 1));
  const int64_t N = src.dim(0), H = src.dim(1), M = ids.dim(0);
  DI_RETURN_IF_ERROR(check_tensor("gather_rows", "out", out, DType::kF32, {M, H}));
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
  DI_RETURN_IF_ERROR(check_rank("scatter_add_rows", "src", src, DType::kF32, 2));
  const int64_t M = src.dim(0), H = src.dim(1);
  DI_RETURN_IF_ERROR(check_tensor("scatter_add_rows", "ids", ids, DType::kI32, {M}));
  if (weights) DI_RETURN_IF_ERROR(check_tensor("scatter_add_rows", "weights", *weights, DType::kF32, {M}));
  DI_RETURN_IF_ERROR(check_tensor("scatter_add_rows", "out", out, DType::kF32, {-1, H}));
  const int64_t N = out.dim(0);
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
  if (a.dtype() != DType::kF32 || b.dtype() != DType::kF32 || out.dtype() != DType::kF32 ||
      a.shape() != b.shape() || a.shape() != out.shape())
    return InvalidArgument("add: need three F32 tensors of one shape, got " + a.describe() + ", " +
                           b.describe() + ", " + out.describe());
  const int64_t n = a.numel();
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  float* op = out.data<float>();
  for (int64_t i = 0; i < n; ++i) op[i] = ap[i] + bp[i];
  return OkStatus();
}

Status copy(const CpuContext& ctx, const Tensor& src, Tensor& dst) {
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel())
    return InvalidArgument("copy: " + src.describe() + " -> " + dst.describe() +
                           " (need the same dtype and element count)");
  if (src.nbytes()) std::memmove(dst.raw(), src.raw(), src.nbytes());
  return OkStatus();
}

}  // namespace deepinfer::backend::cpu
