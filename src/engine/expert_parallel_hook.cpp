#include "engine/expert_parallel_hook.h"

#include <cstdlib>

#include "model/deepseek_v4/model.h"

#ifdef DEEPINFER_WITH_NCCL_EP
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/runtime.h"
#include "dist/nccl_backend_comm.h"
#include "dist/nccl_comm.h"
#endif

namespace deepinfer::engine {

namespace {

// A communicator of `opt.world_size` ranks in `backend`'s memory, made here.
StatusOr<std::unique_ptr<dist::Communicator>> make_communicator(const std::string& device,
                                                                backend::Backend* backend,
                                                                const ExpertParallelOptions& opt,
                                                                ExpertParallelRuntime& rt) {
  if (backend->host_memory()) {
    if (opt.world_size != 1) {
      return InvalidArgument("expert parallel world size " + std::to_string(opt.world_size) +
                             " on " + device + ": host backends have no cross-process transport; "
                             "pass the ranks' communicator (threads over dist::InProcessGroup)");
    }
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
  dist::NcclUniqueId id;
  if (opt.world_size == 1) {
    DI_ASSIGN_OR_RETURN(id, dist::nccl_unique_id());
  } else {
    if (opt.nccl_unique_id_hex.empty()) {
      return InvalidArgument("expert parallel world size " + std::to_string(opt.world_size) +
                             " on " + device + " needs the group's NCCL unique id (the launcher's)");
    }
    auto parsed = dist::NcclUniqueId::from_hex(opt.nccl_unique_id_hex);
    if (!parsed.ok()) return parsed.status().with_context("the NCCL unique id");
    id = *parsed;
  }
  auto nccl = dist::NcclCommunicator::create(id, opt.world_size, opt.rank, gpu);
  if (!nccl.ok()) {
    return nccl.status().with_context("joining the NCCL group (rank " + std::to_string(opt.rank) +
                                      " of " + std::to_string(opt.world_size) + ") on " + device);
  }
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
                                                         backend::Backend* backend,
                                                         const ExpertParallelOptions& opt) {
  if (!config.is_deepseek_v4()) {
    return InvalidArgument(dir + " is a " +
                           (config.architecture.empty() ? std::string("non-DeepSeek-V4") : config.architecture) +
                           " model; expert parallelism needs a DeepSeek-V4 (MoE) model");
  }
  const io::DeepseekV4Config& c = config.deepseek_v4();
  if (c.is_v41)
    return Unimplemented(dir + ": DeepSeek-V4.1 models are not implemented by this model library");
  if (opt.world_size < 1 || opt.rank < 0 || opt.rank >= opt.world_size) {
    return InvalidArgument("expert parallel rank " + std::to_string(opt.rank) + " of world size " +
                           std::to_string(opt.world_size) + " (need 0 <= rank < world size)");
  }
  ExpertParallelModel out;
  out.runtime = std::make_unique<ExpertParallelRuntime>();
  ExpertParallelRuntime& rt = *out.runtime;
  if (opt.comm != nullptr) {
    if (opt.comm->world_size() != opt.world_size || opt.comm->rank() != opt.rank) {
      return InvalidArgument("the communicator is rank " + std::to_string(opt.comm->rank()) + " of " +
                             std::to_string(opt.comm->world_size()) + ", the engine rank " +
                             std::to_string(opt.rank) + " of " + std::to_string(opt.world_size));
    }
    rt.context.comm = opt.comm;
  } else {
    DI_ASSIGN_OR_RETURN(rt.comm, make_communicator(device, backend, opt, rt));
    rt.context.comm = rt.comm.get();
  }
  const int L = static_cast<int>(c.num_hidden_layers), E = static_cast<int>(c.n_routed_experts);
  if (opt.eplb) {
    if (opt.placement || opt.load_recorder)
      return InvalidArgument("expert parallel: EPLB sets the placement and the load recorder itself");
    DI_ASSIGN_OR_RETURN(rt.eplb, dist::EplbController::create(*opt.eplb, rt.context.comm, L, E));
    rt.context.placement = rt.eplb->placement();
  } else if (opt.placement) {
    rt.context.placement = *opt.placement;
  } else if (E % opt.world_size == 0) {
    DI_ASSIGN_OR_RETURN(rt.context.placement, dist::identity_placement(L, E, opt.world_size));
  } else {
    // The experts do not split evenly: round the slots up to a multiple of the world size and
    // fill the extra slots with replicas (EPLB's global policy on a uniform load: the lowest
    // experts get one more copy). Replicas hold the same weights, so results do not change.
    dist::EplbParams p;
    p.num_replicas = (E + opt.world_size - 1) / opt.world_size * opt.world_size;
    p.num_gpus = opt.world_size;
    p.policy = dist::EplbPolicy::kGlobal;
    DI_ASSIGN_OR_RETURN(rt.context.placement,
                        dist::rebalance_experts(std::vector<int64_t>(static_cast<size_t>(L) * E, 1), L, E, p));
  }
  rt.context.choice = dist::ReplicaChoice::kTokenModulo;
  rt.context.load_recorder = rt.eplb ? rt.eplb->recorder() : opt.load_recorder;
  DI_ASSIGN_OR_RETURN(auto m, model::v4::DeepseekV4Model::load(dir, config, backend, &rt.context));
  if (rt.eplb) {
    model::v4::DeepseekV4Model* v4 = m.get();  // the model dies before the runtime (ExpertParallelModel)
    rt.eplb->set_apply([v4, dir, config](const dist::ExpertPlacement& p) {
      return v4->apply_expert_placement(p, dir, config);
    });
  }
  out.model = std::move(m);
  return out;
}

StatusOr<ExpertParallelModel> load_model_expert_parallel(const std::string& dir,
                                                         const io::ModelConfig& config,
                                                         const std::string& device,
                                                         backend::Backend* backend) {
  return load_model_expert_parallel(dir, config, device, backend, ExpertParallelOptions{});
}

StatusOr<std::string> new_nccl_group_id_hex() {
#ifdef DEEPINFER_WITH_NCCL_EP
  DI_ASSIGN_OR_RETURN(dist::NcclUniqueId id, dist::nccl_unique_id());
  return id.to_hex();
#else
  return Unimplemented("this build has no NCCL (di_dist_nccl_ep is built only with CUDA and NCCL "
                       "found): expert parallelism over several GPUs needs it");
#endif
}

int visible_gpu_count() {
#ifdef DEEPINFER_WITH_NCCL_EP
  auto n = cuda::device_count();
  return n.ok() ? *n : 0;
#else
  return -1;
#endif
}

}  // namespace deepinfer::engine
