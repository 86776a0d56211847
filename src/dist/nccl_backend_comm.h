// The NCCL transport behind dist::Communicator (built only with CUDA and NCCL): row all-to-all-v
// and all-reduce on device tensors of the CUDA backend, enqueued on the backend's stream so they
// are ordered with its ops; exchange_counts uploads the counts, exchanges them and downloads the
// result (which waits for the stream).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "dist/nccl_comm.h"

namespace deepinfer::dist {

class NcclBackendCommunicator final : public Communicator {
 public:
  // `backend` (borrowed) must be the CUDA backend whose stream is `stream`; the communicator
  // owns `nccl`.
  //
  // wait_for_completion: every collective blocks until it is done on this GPU (a stream
  // synchronize after the NCCL calls). REQUIRED when the ranks are threads of one process, one
  // GPU each (the multi-GPU tests): an NCCL kernel spins on its GPU until every peer has issued
  // its half, and a thread that meanwhile makes a CUDA call that waits for its own GPU while
  // holding a process-wide driver lock — cudaMalloc (the backend's cache misses), a download to
  // pageable memory, lazy loading of a kernel module — stops the peer threads from issuing their
  // halves (they need that lock too): a deadlock, no error. Waiting here means no rank's GPU ever
  // has an unmatched NCCL kernel queued while its thread goes on. One process per GPU (the
  // launcher) has no shared lock and leaves it off (collectives stay asynchronous).
  NcclBackendCommunicator(std::unique_ptr<NcclCommunicator> nccl, backend::Backend* backend,
                          CUstream_st* stream, bool wait_for_completion = false)
      : nccl_(std::move(nccl)), be_(backend), stream_(stream), wait_(wait_for_completion) {}

  const char* name() const override { return "nccl"; }
  int rank() const override { return nccl_->rank(); }
  int world_size() const override { return nccl_->world_size(); }
  Status all_to_all_v(const backend::Tensor& send, const std::vector<int64_t>& send_rows,
                      backend::Tensor& recv, const std::vector<int64_t>& recv_rows) override;
  Status all_reduce_sum(backend::Tensor& inout) override;
  StatusOr<std::vector<int64_t>> exchange_counts(const std::vector<int64_t>& send,
                                                 int64_t n) override;

 private:
  std::unique_ptr<NcclCommunicator> nccl_;
  backend::Backend* be_;
  CUstream_st* stream_;
  bool wait_ = false;
};

}  // namespace deepinfer::dist
