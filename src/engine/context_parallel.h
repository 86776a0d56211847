// Context parallelism in the engine (EngineConfig.context_parallel_size, `deepinfer generate
// --context-parallel-size N`; docs/dist.md "Context parallelism"). Engine-internal.
//
// Design: every CP rank is a whole engine with the same requests, the same config and the same
// deterministic scheduler, so the ranks make the same steps in lockstep (no coordinator). The
// model is wrapped in ContextParallelModel: in every forward, each sequence whose chunk has at
// least `min_tokens` tokens (and wants only its last row's logits — the engine's prefill chunks)
// is prefilled through DeepseekV4Model::prefill_context_parallel over the group (its rows split
// in serpentine blocks so every rank does equal attention work; every rank ends with the whole
// state); the rest of the batch (decode steps, short chunks) runs replicated on every rank with
// the plain forward. Every rank therefore holds the same logits and samples the same tokens;
// the caller prints rank 0's outputs.
//
// Safety: each forward first exchanges a fingerprint of its batch (sequences, positions, which
// go through CP) and fails on every rank with FailedPrecondition when the ranks disagree — a
// divergence becomes an error instead of mismatched collectives (a hang on NCCL).
// context_parallel_run.h adds a per-step "has work" exchange for the same reason.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "common/status.h"
#include "deepinfer/engine.h"
#include "dist/communicator.h"
#include "model/model.h"

namespace deepinfer::engine {

// How a CP rank reaches the others (one of them).
struct ContextParallelOptions {
  dist::Communicator* comm = nullptr;  // borrowed: threads as ranks (dist::InProcessGroup, CPU)
  std::string nccl_unique_id_hex;      // CUDA, comm == nullptr: join this NCCL group on the
                                       // engine's GPU (one process per GPU, the launcher's id)
};

// What Engine::Impl keeps for context parallelism: the group's communicator (owned when this
// rank joined an NCCL group itself).
struct ContextParallelRuntime {
  std::unique_ptr<dist::Communicator> owned;
  dist::Communicator* comm = nullptr;
};

// Checks the config's CP fields against `options` and returns the rank's communicator: the
// borrowed one (rank and size must match) or a fresh NCCL group member on the backend's stream.
StatusOr<std::unique_ptr<ContextParallelRuntime>> join_context_parallel_group(
    const EngineConfig& config, const ContextParallelOptions& options, backend::Backend* backend);

// The same for any replicated lockstep group (context or tensor parallel): rank `rank` of `world`
// on `device`; `what` ("context parallel", "tensor parallel") starts the error messages.
StatusOr<std::unique_ptr<ContextParallelRuntime>> join_lockstep_group(
    const std::string& what, int world, int rank, const std::string& device,
    const ContextParallelOptions& options, backend::Backend* backend);

// The smallest of every rank's value (collective): the ranks' KV budgets must be equal, or their
// schedulers would preempt differently and leave the lockstep.
StatusOr<int64_t> min_over_ranks(dist::Communicator& comm, int64_t value);

// The model seen by the engine at context_parallel_size > 1 (see the top of this file).
class ContextParallelModel final : public model::Model {
 public:
  // `inner` must be a DeepSeek-V4 model (else InvalidArgument naming its family). `comm` and
  // `backend` are borrowed; `chunks_counter` (optional, borrowed) is raised by one per chunk
  // that went through context parallelism.
  static StatusOr<std::unique_ptr<ContextParallelModel>> wrap(std::unique_ptr<model::Model> inner,
                                                              dist::Communicator* comm,
                                                              backend::Backend* backend,
                                                              int64_t min_tokens, int64_t block,
                                                              int64_t* chunks_counter = nullptr);

  const model::ModelInfo& info() const override { return inner_->info(); }
  std::unique_ptr<model::SequenceState> new_sequence_state() const override {
    return inner_->new_sequence_state();
  }
  // logits [R, V] as model::Model::forward (rows in batch order; in backend memory when
  // logits_on_device()). Collective at world size > 1.
  StatusOr<backend::Tensor> forward(std::span<const model::SequenceInput> batch) override;

 private:
  ContextParallelModel() = default;
  std::unique_ptr<model::Model> inner_;
  dist::Communicator* comm_ = nullptr;
  backend::Backend* be_ = nullptr;
  int64_t min_tokens_ = 0;
  int64_t block_ = 1;
  int64_t* chunks_counter_ = nullptr;
  int64_t forwards_ = 0;  // forward calls so far (named in divergence errors)
};

}  // namespace deepinfer::engine
