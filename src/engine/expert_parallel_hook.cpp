#include "engine/expert_parallel_hook.h"

#include <cstdlib>

#include "dist/eplb.h"
#include "model/deepseek_v4/model.h"

#ifdef DEEPINFER_WITH_NCCL_EP
#include "backend/cuda/cuda_backend.h"
#include "dist/nccl_backend_comm.h"
#include "dist/nccl_comm.h"
#endif

namespace deepinfer::engine {

namespace {

// A one-rank communicator in `backend`'s memory.
StatusOr<std::unique_ptr<dist::Communicator>> one_rank_communicator(const std::string& device,
                                                                    backend::Backend* backend,
                                                                    ExpertParallelRuntime& rt) {
  if (backend->host_memory()) {
    rt.group = std::make_unique<dist::InProcessGroup>(1);
    return rt.group->communicator(0);
  }
#ifdef DEEPINFER_WITH_NCCL_EP
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(backend);
  if (cuda == nullptr) {
    return Unimplemented(std::string("backend ") + backend->name() +
                         " keeps device memory but is not the CUDA backend; no communicator for it");
  }
  // make_backend accepted the device string: "cuda" (GPU 0) or "cuda:N".
  const int gpu = device.size() > 5 ? static_cast<int>(std::strtol(device.c_str() + 5, nullptr, 10)) : 0;
  DI_ASSIGN_OR_RETURN(dist::NcclUniqueId id, dist::nccl_unique_id());
  auto nccl = dist::NcclCommunicator::create(id, /*world_size=*/1, /*rank=*/0, gpu);
  if (!nccl.ok()) return nccl.status().with_context("the one-rank NCCL group on " + device);
  return std::unique_ptr<dist::Communicator>(
      new dist::NcclBackendCommunicator(std::move(nccl).value(), backend, cuda->stream()));
#else
  return Unimplemented("device '" + device +
                       "': this build has no NCCL (di_dist_nccl_ep is built only with CUDA and "
                       "NCCL found); the expert-parallel path needs it on a GPU");
#endif
}

}  // namespace

StatusOr<ExpertParallelModel> load_model_expert_parallel(const std::string& dir,
                                                         const io::ModelConfig& config,
                                                         const std::string& device,
                                                         backend::Backend* backend) {
  if (!config.is_deepseek_v4()) {
    return InvalidArgument(dir + " is a " +
                           (config.architecture.empty() ? std::string("non-DeepSeek-V4") : config.architecture) +
                           " model; expert parallelism needs a DeepSeek-V4 (MoE) model");
  }
  const io::DeepseekV4Config& c = config.deepseek_v4();
  if (c.is_v41)
    return Unimplemented(dir + ": DeepSeek-V4.1 models are not implemented by this model library");
  ExpertParallelModel out;
  out.runtime = std::make_unique<ExpertParallelRuntime>();
  ExpertParallelRuntime& rt = *out.runtime;
  DI_ASSIGN_OR_RETURN(rt.comm, one_rank_communicator(device, backend, rt));
  DI_ASSIGN_OR_RETURN(rt.context.placement,
                      dist::identity_placement(static_cast<int>(c.num_hidden_layers),
                                               static_cast<int>(c.n_routed_experts), 1));
  rt.context.comm = rt.comm.get();
  rt.context.choice = dist::ReplicaChoice::kTokenModulo;
  DI_ASSIGN_OR_RETURN(auto m, model::v4::DeepseekV4Model::load(dir, config, backend, &rt.context));
  out.model = std::move(m);
  return out;
}

}  // namespace deepinfer::engine
