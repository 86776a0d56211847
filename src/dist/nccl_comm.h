// NCCL communicator group for one process per GPU (built only with CUDA and NCCL).
//
// The launcher (`deepinfer` with --tensor-parallel-size / --data-parallel-size) creates one
// unique id on rank 0 (nccl_unique_id), passes it to every rank as hex text (to_hex/from_hex),
// and each rank calls NcclCommunicator::create(id, world_size, rank, device). The launcher also
// sets NCCL_NVLS_ENABLE=0 in the children's environment before they start: NVLink multicast
// (NVLS) stays off on the machines deepinfer runs on. This file never reads the environment.
//
// Errors are Status values naming the NCCL/CUDA call and NCCL's message; nothing aborts.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

struct ncclComm;    // nccl.h: typedef struct ncclComm* ncclComm_t
struct CUstream_st; // cuda_runtime.h: typedef struct CUstream_st* cudaStream_t

namespace deepinfer::dist {

struct NcclUniqueId {
  std::array<char, 128> bytes{};  // NCCL_UNIQUE_ID_BYTES
  std::string to_hex() const;
  static StatusOr<NcclUniqueId> from_hex(const std::string& hex);
};

// Called once, on rank 0 of the group.
StatusOr<NcclUniqueId> nccl_unique_id();

enum class NcclType { kFloat32, kBFloat16, kFloat16, kInt32, kInt64, kUint8 };
size_t nccl_type_size(NcclType type);

class NcclCommunicator {
 public:
  // Sets the current CUDA device to `device`, then joins the group (blocks until all ranks join).
  static StatusOr<std::unique_ptr<NcclCommunicator>> create(const NcclUniqueId& id, int world_size,
                                                            int rank, int device);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // All-to-all-v from ncclSend/ncclRecv pairs inside one ncclGroupStart/End. Counts and offsets
  // are in elements: send_counts/send_offsets/recv_counts/recv_offsets: [world_size]. Device
  // buffers; enqueued on `stream` (nullptr = default stream). Zero-count peers are skipped.
  Status all_to_all_v(const void* send, const std::vector<int64_t>& send_counts,
                      const std::vector<int64_t>& send_offsets, void* recv,
                      const std::vector<int64_t>& recv_counts,
                      const std::vector<int64_t>& recv_offsets, NcclType type, CUstream_st* stream);

  // In-place allowed (send == recv). count in elements.
  Status all_reduce_sum(const void* send, void* recv, size_t count, NcclType type, CUstream_st* stream);

  // Blocks until the work queued on `stream` (this rank's collectives included) is done
  // (cudaStreamSynchronize on this communicator's device). See NcclBackendCommunicator's
  // wait_for_completion for why threads-as-ranks callers need it.
  Status synchronize(CUstream_st* stream);

 private:
  NcclCommunicator(ncclComm* comm, int world_size, int rank, int device)
      : comm_(comm), world_size_(world_size), rank_(rank), device_(device) {}
  ncclComm* comm_;
  int world_size_;
  int rank_;
  int device_;
};

}  // namespace deepinfer::dist
