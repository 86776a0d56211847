#include "dist/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace deepinfer::dist {
namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId::bytes), "NCCL unique id size changed");

Status nccl_error(const char* call, ncclResult_t r, ncclComm_t comm = nullptr) {
  std::string msg = std::string(call) + " failed: " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') msg += " (" + std::string(last) + ")";
  return Internal(msg);
}

Status cuda_error(const char* call, cudaError_t e) {
  return Internal(std::string(call) + " failed: " + cudaGetErrorString(e));
}

ncclDataType_t to_nccl(NcclType t) {
  switch (t) {
    case NcclType::kFloat32: return ncclFloat32;
    case NcclType::kBFloat16: return ncclBfloat16;
    case NcclType::kFloat16: return ncclFloat16;
    case NcclType::kInt32: return ncclInt32;
    case NcclType::kInt64: return ncclInt64;
    case NcclType::kUint8: return ncclUint8;
  }
  return ncclUint8;
}

Status check_counts(const char* name, const std::vector<int64_t>& counts,
                    const std::vector<int64_t>& offsets, int world_size) {
  if (counts.size() != static_cast<size_t>(world_size) || offsets.size() < counts.size()) {
    return InvalidArgument(std::string(name) + ": counts/offsets must have world_size (" +
                           std::to_string(world_size) + ") entries");
  }
  for (int r = 0; r < world_size; ++r) {
    if (counts[r] < 0 || offsets[r] < 0) {
      return InvalidArgument(std::string(name) + ": negative count or offset for rank " + std::to_string(r));
    }
  }
  return OkStatus();
}

}  // namespace

std::string NcclUniqueId::to_hex() const {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

StatusOr<NcclUniqueId> NcclUniqueId::from_hex(const std::string& hex) {
  NcclUniqueId id;
  if (hex.size() != id.bytes.size() * 2) {
    return InvalidArgument("NCCL unique id: expected " + std::to_string(id.bytes.size() * 2) +
                           " hex digits, got " + std::to_string(hex.size()));
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < id.bytes.size(); ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return InvalidArgument("NCCL unique id: non-hex character at position " + std::to_string(2 * i));
    }
    id.bytes[i] = static_cast<char>((hi << 4) | lo);
  }
  return id;
}

StatusOr<NcclUniqueId> nccl_unique_id() {
  ncclUniqueId raw;
  const ncclResult_t r = ncclGetUniqueId(&raw);
  if (r != ncclSuccess) return nccl_error("ncclGetUniqueId", r);
  NcclUniqueId id;
  std::copy(raw.internal, raw.internal + sizeof(raw.internal), id.bytes.begin());
  return id;
}

size_t nccl_type_size(NcclType t) {
  switch (t) {
    case NcclType::kFloat32: case NcclType::kInt32: return 4;
    case NcclType::kBFloat16: case NcclType::kFloat16: return 2;
    case NcclType::kInt64: return 8;
    case NcclType::kUint8: return 1;
  }
  return 1;
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(const NcclUniqueId& id,
                                                                      int world_size, int rank,
                                                                      int device) {
  if (world_size < 1) return InvalidArgument("world_size must be >= 1, got " + std::to_string(world_size));
  if (rank < 0 || rank >= world_size) {
    return InvalidArgument("rank " + std::to_string(rank) + " outside [0, " + std::to_string(world_size) + ")");
  }
  int num_devices = 0;
  cudaError_t e = cudaGetDeviceCount(&num_devices);
  if (e != cudaSuccess) return cuda_error("cudaGetDeviceCount", e);
  if (device < 0 || device >= num_devices) {
    return InvalidArgument("device " + std::to_string(device) + " outside [0, " +
                           std::to_string(num_devices) + ")");
  }
  e = cudaSetDevice(device);
  if (e != cudaSuccess) return cuda_error("cudaSetDevice", e);
  ncclUniqueId raw;
  std::copy(id.bytes.begin(), id.bytes.end(), raw.internal);
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRank(&comm, world_size, raw, rank);
  if (r != ncclSuccess) return nccl_error("ncclCommInitRank", r);
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, world_size, rank, device));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) ncclCommDestroy(comm_);
}

Status NcclCommunicator::all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                                      const std::vector<int64_t>& send_offsets, void* recv,
                                      const std::vector<int64_t>& recv_counts,
                                      const std::vector<int64_t>& recv_offsets, NcclType type,
                                      CUstream_st* stream) {
  DI_RETURN_IF_ERROR(check_counts("all_to_all_v send", send_counts, send_offsets, world_size_));
  DI_RETURN_IF_ERROR(check_counts("all_to_all_v recv", recv_counts, recv_offsets, world_size_));
  const size_t elem = nccl_type_size(type);
  const ncclDataType_t dt = to_nccl(type);
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return nccl_error("ncclGroupStart", r, comm_);
  Status status;
  for (int peer = 0; peer < world_size_ && status.ok(); ++peer) {
    if (send_counts[peer] > 0) {
      const char* p = static_cast<const char*>(send) + send_offsets[peer] * elem;
      r = ncclSend(p, static_cast<size_t>(send_counts[peer]), dt, peer, comm_, stream);
      if (r != ncclSuccess) status = nccl_error("ncclSend", r, comm_);
    }
    if (status.ok() && recv_counts[peer] > 0) {
      char* p = static_cast<char*>(recv) + recv_offsets[peer] * elem;
      r = ncclRecv(p, static_cast<size_t>(recv_counts[peer]), dt, peer, comm_, stream);
      if (r != ncclSuccess) status = nccl_error("ncclRecv", r, comm_);
    }
  }
  r = ncclGroupEnd();  // always close the group, even after an error inside it
  if (status.ok() && r != ncclSuccess) status = nccl_error("ncclGroupEnd", r, comm_);
  return status;
}

Status NcclCommunicator::all_reduce_sum(const void* send, void* recv, size_t count, NcclType type,
                                        CUstream_st* stream) {
  const ncclResult_t r = ncclAllReduce(send, recv, count, to_nccl(type), ncclSum, comm_, stream);
  if (r != ncclSuccess) return nccl_error("ncclAllReduce", r, comm_);
  return OkStatus();
}

Status NcclCommunicator::synchronize(CUstream_st* stream) {
  const cudaError_t e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return cuda_error("cudaStreamSynchronize (after an NCCL collective)", e);
  return OkStatus();
}

}  // namespace deepinfer::dist
