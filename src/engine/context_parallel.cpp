#include "engine/context_parallel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "model/deepseek_v4/context_parallel.h"
#include "model/deepseek_v4/model.h"

#ifdef DEEPINFER_WITH_NCCL_EP
#include "backend/cuda/cuda_backend.h"
#include "dist/nccl_backend_comm.h"
#include "dist/nccl_comm.h"
#endif

namespace deepinfer::engine {

namespace {

uint64_t mix(uint64_t h, uint64_t v) {  // FNV-1a over 8 bytes
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

StatusOr<std::unique_ptr<ContextParallelRuntime>> join_context_parallel_group(
    const EngineConfig& config, const ContextParallelOptions& options, backend::Backend* backend) {
  return join_lockstep_group("context parallel", config.context_parallel_size,
                             config.context_parallel_rank, config.device, options, backend);
}

StatusOr<std::unique_ptr<ContextParallelRuntime>> join_lockstep_group(
    const std::string& what, int W, int r, const std::string& device,
    const ContextParallelOptions& options, backend::Backend* backend) {
  auto rt = std::make_unique<ContextParallelRuntime>();
  if (options.comm != nullptr) {
    if (options.comm->world_size() != W || options.comm->rank() != r)
      return InvalidArgument(what + ": the communicator is rank " +
                             std::to_string(options.comm->rank()) + " of " +
                             std::to_string(options.comm->world_size()) + ", the config rank " +
                             std::to_string(r) + " of " + std::to_string(W));
    rt->comm = options.comm;
    return rt;
  }
  if (backend->host_memory())
    return InvalidArgument(what + " size " + std::to_string(W) + " on " + device +
                           ": host backends have no cross-process transport; pass the ranks' "
                           "communicator (threads over dist::InProcessGroup)");
#ifdef DEEPINFER_WITH_NCCL_EP
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(backend);
  if (cuda == nullptr)
    return Unimplemented(what + ": backend " + backend->name() +
                         " is not the CUDA backend; no communicator for it");
  if (options.nccl_unique_id_hex.empty())
    return InvalidArgument(what + " size " + std::to_string(W) + " on " + device +
                           " needs the group's NCCL unique id (the launcher's)");
  auto id = dist::NcclUniqueId::from_hex(options.nccl_unique_id_hex);
  if (!id.ok()) return id.status().with_context("the NCCL unique id");
  // device: "cuda" (GPU 0) or "cuda:N": make_backend took it
  const int gpu = device.size() > 5 ? static_cast<int>(std::strtol(device.c_str() + 5, nullptr, 10)) : 0;
  auto nccl = dist::NcclCommunicator::create(*id, W, r, gpu);
  if (!nccl.ok())
    return nccl.status().with_context(what + ": joining the NCCL group (rank " +
                                      std::to_string(r) + " of " + std::to_string(W) + ") on " + device);
  // One process per GPU: the collectives stay asynchronous (wait_for_completion is for threads).
  rt->owned.reset(new dist::NcclBackendCommunicator(std::move(nccl).value(), backend, cuda->stream()));
  rt->comm = rt->owned.get();
  return rt;
#else
  return Unimplemented(what + " on '" + device +
                       "': this build has no NCCL (di_dist_nccl_ep is built only with CUDA and NCCL found)");
#endif
}

StatusOr<int64_t> min_over_ranks(dist::Communicator& comm, int64_t value) {
  DI_ASSIGN_OR_RETURN(std::vector<int64_t> all, dist::all_gather_count(comm, value));
  int64_t m = value;
  for (int64_t v : all) m = std::min(m, v);
  return m;
}

StatusOr<std::unique_ptr<ContextParallelModel>> ContextParallelModel::wrap(
    std::unique_ptr<model::Model> inner, dist::Communicator* comm, backend::Backend* backend,
    int64_t min_tokens, int64_t block, int64_t* chunks_counter) {
  if (dynamic_cast<model::v4::DeepseekV4Model*>(inner.get()) == nullptr)
    return InvalidArgument("context parallelism needs a DeepSeek-V4 model, got family '" +
                           inner->info().family + "'");
  if (comm == nullptr || backend == nullptr) return InvalidArgument("context parallel: no communicator or backend");
  if (block < 1 || min_tokens < block * comm->world_size())
    return InvalidArgument("context parallel: min_tokens (" + std::to_string(min_tokens) +
                           ") must be >= block (" + std::to_string(block) + ") x world size (" +
                           std::to_string(comm->world_size()) + ")");
  auto m = std::unique_ptr<ContextParallelModel>(new ContextParallelModel());
  m->inner_ = std::move(inner);
  m->comm_ = comm;
  m->be_ = backend;
  m->min_tokens_ = min_tokens;
  m->block_ = block;
  m->chunks_counter_ = chunks_counter;
  return m;
}

StatusOr<backend::Tensor> ContextParallelModel::forward(std::span<const model::SequenceInput> batch) {
  using backend::Tensor;
  const int64_t call = forwards_++;
  auto* v4 = static_cast<model::v4::DeepseekV4Model*>(inner_.get());
  inner_->set_logits_on_device(logits_on_device_);
  const size_t B = batch.size();
  std::vector<bool> cp(B, false);
  std::vector<model::SequenceInput> rest;  // the sequences of the plain forward, in batch order
  int64_t num_cp = 0;
  uint64_t h = 1469598103934665603ull;
  h = mix(h, B);
  for (size_t i = 0; i < B; ++i) {
    const auto& s = batch[i];
    cp[i] = !s.all_logits && static_cast<int64_t>(s.tokens.size()) >= min_tokens_;
    num_cp += cp[i];
    h = mix(h, s.tokens.size());
    h = mix(h, s.state != nullptr ? static_cast<uint64_t>(s.state->num_tokens()) : ~0ull);
    h = mix(h, cp[i] ? 1 : 0);
    h = mix(h, s.all_logits ? 1 : 0);
    if (!s.tokens.empty()) h = mix(h, static_cast<uint32_t>(s.tokens.back()));
    if (!cp[i]) rest.push_back(s);
  }
  if (comm_->world_size() > 1) {
    // Every rank's batch must be this one: [chunks through CP, fingerprint] from every rank.
    const int W = comm_->world_size();
    const std::vector<int64_t> mine = {num_cp, static_cast<int64_t>(h >> 1)};
    std::vector<int64_t> send;
    for (int r = 0; r < W; ++r) send.insert(send.end(), mine.begin(), mine.end());
    DI_ASSIGN_OR_RETURN(std::vector<int64_t> all, comm_->exchange_counts(send, 2));
    for (int r = 0; r < W; ++r)
      if (all[2 * r] != mine[0] || all[2 * r + 1] != mine[1])
        return FailedPrecondition(
            "context parallel: the ranks' engines diverged at forward " + std::to_string(call) +
            ": rank " + std::to_string(r) + " runs another batch than rank " +
            std::to_string(comm_->rank()) + " (" + std::to_string(all[2 * r]) + " vs " +
            std::to_string(num_cp) + " context-parallel chunks). Every rank must get the same "
            "requests and config; on a GPU the replicated decode must be deterministic "
            "(--batch-invariant)");
  }
  if (num_cp == 0) return inner_->forward(batch);

  // The long chunks over the group, in batch order (the same order on every rank).
  std::vector<Tensor> cp_rows(B);  // host [1, V]
  for (size_t i = 0; i < B; ++i) {
    if (!cp[i]) continue;
    model::v4::ContextParallelInput in{batch[i].tokens, batch[i].state, /*all_logits=*/false, block_};
    auto res = v4->prefill_context_parallel(*comm_, in);
    if (!res.ok()) return res.status().with_context("context parallel prefill of a " +
                                                    std::to_string(batch[i].tokens.size()) + "-token chunk");
    cp_rows[i] = std::move(res->logits);
    if (chunks_counter_ != nullptr) ++*chunks_counter_;
  }
  Tensor rest_logits;
  if (!rest.empty()) {
    DI_ASSIGN_OR_RETURN(rest_logits, inner_->forward(rest));
  }
  // Rows in batch order: a CP chunk has one row; the others (all_logits ? n : 1).
  int64_t R = 0, vocab = 0;
  for (size_t i = 0; i < B; ++i) {
    R += cp[i] || !batch[i].all_logits ? 1 : static_cast<int64_t>(batch[i].tokens.size());
    if (cp[i]) vocab = cp_rows[i].dim(1);
  }
  const bool device = logits_on_device_ && (!rest_logits.defined() || rest_logits.on_device()) &&
                      !be_->host_memory();
  Tensor out;
  if (device) {
    DI_ASSIGN_OR_RETURN(out, be_->empty(DType::kF32, {R, vocab}));
  } else {
    out = Tensor::empty(DType::kF32, {R, vocab});
  }
  if (rest_logits.defined() && rest_logits.on_device() && !device) {  // not expected; be safe
    Tensor host = Tensor::empty(rest_logits.dtype(), rest_logits.shape());
    DI_RETURN_IF_ERROR(be_->download(rest_logits, host));
    rest_logits = std::move(host);
  }
  int64_t at = 0, rest_at = 0;
  for (size_t i = 0; i < B; ++i) {
    if (cp[i]) {
      Tensor dst = out.rows(at, at + 1);
      if (device) {
        DI_RETURN_IF_ERROR(be_->upload(cp_rows[i], dst));
      } else {
        std::memcpy(dst.data<float>(), cp_rows[i].data<float>(), sizeof(float) * vocab);
      }
      at += 1;
      continue;
    }
    const int64_t n = batch[i].all_logits ? static_cast<int64_t>(batch[i].tokens.size()) : 1;
    Tensor src = rest_logits.rows(rest_at, rest_at + n);
    Tensor dst = out.rows(at, at + n);
    if (device) {
      DI_RETURN_IF_ERROR(be_->copy(src, dst));
    } else {
      std::memcpy(dst.data<float>(), src.data<float>(), sizeof(float) * n * vocab);
    }
    at += n;
    rest_at += n;
  }
  return out;
}

}  // namespace deepinfer::engine
