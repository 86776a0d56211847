// The collectives expert parallelism needs, over backend tensors, behind one interface:
//
//   NcclBackendCommunicator (nccl_backend_comm.h)  the transport: one process per GPU, NCCL on the
//                                                  CUDA backend's stream (CUDA + NCCL builds only)
//   InProcessGroup::communicator (inprocess_comm.h) a test double: threads as ranks, host memory
//                                                  (the CPU backend); not a serving transport
//
// Every call is collective: all ranks of the group make the same calls in the same order (each
// rank's MoE layers run in lockstep, a rank without tokens still takes part with zero rows).
// Tensors live in the memory of the backend the communicator was made for.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/tensor.h"
#include "common/status.h"

namespace deepinfer::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Rows along dim 0, contiguous per peer in rank order. send [Σ send_rows, ...]: rows
  // [Σ_{d'<d} send_rows[d'], +send_rows[d]) go to rank d; recv [Σ recv_rows, ...] receives rank
  // s's rows at Σ_{s'<s} recv_rows[s']. send_rows, recv_rows: [world_size]; recv_rows[s] must be
  // what rank s sends here, and every rank's rows have the same dtype and width.
  virtual Status all_to_all_v(const backend::Tensor& send, const std::vector<int64_t>& send_rows,
                              backend::Tensor& recv, const std::vector<int64_t>& recv_rows) = 0;

  // In place: every rank's `inout` (F32 or I32, the same shape on every rank) becomes the
  // elementwise sum over the ranks.
  virtual Status all_reduce_sum(backend::Tensor& inout) = 0;

  // Host integers, all-to-all in fixed blocks: send [world_size · n], block d goes to rank d;
  // returns [world_size · n], block s from rank s. (The counts exchange before a row all-to-all.)
  virtual StatusOr<std::vector<int64_t>> exchange_counts(const std::vector<int64_t>& send,
                                                         int64_t n) = 0;
};

// Argument checks shared by the implementations (InvalidArgument naming `who` and the argument).
Status check_all_to_all_args(const char* who, int world_size, const backend::Tensor& send,
                             const std::vector<int64_t>& send_rows, const backend::Tensor& recv,
                             const std::vector<int64_t>& recv_rows);
Status check_exchange_args(const char* who, int world_size, const std::vector<int64_t>& send,
                           int64_t n);

// Every rank's count, in rank order (an all-gather of one integer through exchange_counts).
StatusOr<std::vector<int64_t>> all_gather_count(Communicator& comm, int64_t count);

}  // namespace deepinfer::dist
