#include "dist/nccl_backend_comm.h"

#include <string>

namespace deepinfer::dist {

using backend::Tensor;

namespace {

StatusOr<NcclType> nccl_type_of(DType t) {
  switch (t) {
    case DType::kF32: return NcclType::kFloat32;
    case DType::kBF16: return NcclType::kBFloat16;
    case DType::kF16: return NcclType::kFloat16;
    case DType::kI32: return NcclType::kInt32;
    case DType::kI64: return NcclType::kInt64;
    case DType::kU8: return NcclType::kUint8;
    default: break;
  }
  return InvalidArgument(std::string("nccl communicator: no NCCL type for ") + dtype_name(t));
}

// Element counts and offsets of row counts.
void to_elements(const std::vector<int64_t>& rows, int64_t width, std::vector<int64_t>& counts,
                 std::vector<int64_t>& offsets) {
  counts.resize(rows.size());
  offsets.assign(rows.size(), 0);
  int64_t at = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    counts[r] = rows[r] * width;
    offsets[r] = at;
    at += counts[r];
  }
}

}  // namespace

Status NcclBackendCommunicator::all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows,
                                             Tensor& recv, const std::vector<int64_t>& recv_rows) {
  DI_RETURN_IF_ERROR(check_all_to_all_args("nccl all_to_all_v", world_size(), send, send_rows, recv, recv_rows));
  DI_ASSIGN_OR_RETURN(NcclType type, nccl_type_of(send.dtype()));
  const int64_t width = send.dim(0) > 0 ? send.numel() / send.dim(0)
                        : recv.dim(0) > 0 ? recv.numel() / recv.dim(0) : 0;
  std::vector<int64_t> sc, so, rc, ro;
  to_elements(send_rows, width, sc, so);
  to_elements(recv_rows, width, rc, ro);
  DI_RETURN_IF_ERROR(nccl_->all_to_all_v(send.raw(), sc, so, recv.raw(), rc, ro, type, stream_));
  return wait_ ? nccl_->synchronize(stream_) : OkStatus();
}

Status NcclBackendCommunicator::all_reduce_sum(Tensor& inout) {
  if (inout.dtype() != DType::kF32 && inout.dtype() != DType::kI32)
    return InvalidArgument("nccl all_reduce_sum: " + inout.describe() + " (F32 or I32 only)");
  DI_ASSIGN_OR_RETURN(NcclType type, nccl_type_of(inout.dtype()));
  DI_RETURN_IF_ERROR(nccl_->all_reduce_sum(inout.raw(), inout.raw(), static_cast<size_t>(inout.numel()), type, stream_));
  return wait_ ? nccl_->synchronize(stream_) : OkStatus();
}

StatusOr<std::vector<int64_t>> NcclBackendCommunicator::exchange_counts(const std::vector<int64_t>& send,
                                                                        int64_t n) {
  const int W = world_size();
  DI_RETURN_IF_ERROR(check_exchange_args("nccl exchange_counts", W, send, n));
  std::vector<int64_t> out(static_cast<size_t>(W * n));
  if (n == 0) return out;
  DI_ASSIGN_OR_RETURN(Tensor s, be_->alloc(DType::kI64, {W * n}));
  DI_ASSIGN_OR_RETURN(Tensor r, be_->alloc(DType::kI64, {W * n}));
  DI_RETURN_IF_ERROR(be_->upload(Tensor::borrow(send.data(), DType::kI64, {W * n}), s));
  std::vector<int64_t> rows(W, n);
  DI_RETURN_IF_ERROR(all_to_all_v(s.view({W * n, 1}), rows, r, rows));
  Tensor host = Tensor::borrow(out.data(), DType::kI64, {W * n});
  DI_RETURN_IF_ERROR(be_->download(r, host));
  return out;
}

}  // namespace deepinfer::dist
