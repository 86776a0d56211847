#include "model/deepseek_v4/tensor_parallel.h"

#include <string>

#include "dist/communicator.h"
#include "model/deepseek_v4/model.h"

namespace deepinfer::model::v4 {

Status check_tensor_parallel_dims(const Dims& d, int world) {
  if (world < 1)
    return InvalidArgument("tensor parallel: size must be >= 1, got " + std::to_string(world));
  auto need = [&](int64_t n, const char* what) -> Status {
    if (n % world == 0) return OkStatus();
    return InvalidArgument("tensor parallel size " + std::to_string(world) + " does not divide " +
                           what + " " + std::to_string(n) + " (num_attention_heads " +
                           std::to_string(d.nH) + ", o_groups " + std::to_string(d.G) +
                           ", moe_intermediate_size " + std::to_string(d.I) +
                           "); use a size that divides all three");
  };
  DI_RETURN_IF_ERROR(need(d.nH, "num_attention_heads"));
  DI_RETURN_IF_ERROR(need(d.G, "o_groups"));
  return need(d.I, "moe_intermediate_size");
}

Dims tensor_parallel_local_dims(const Dims& d, int world) {
  Dims l = d;
  l.nH = d.nH / world;
  l.G = d.G / world;
  l.I = d.I / world;
  return l;
}

// Sums the rank-partial block output y [S, H] over the tensor-parallel group (in place).
Status DeepseekV4Model::tensor_parallel_reduce(Tensor& y) {
  if (tp_comm_ == nullptr) return OkStatus();
  return tp_comm_->all_reduce_sum(y);
}

StatusOr<std::unique_ptr<Model>> load_tensor_parallel_model(const std::string& dir,
                                                            backend::Backend* backend,
                                                            dist::Communicator* comm) {
  if (comm == nullptr) return InvalidArgument("tensor parallel: no communicator");
  DI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(dir + "/config.json"));
  if (!cfg.is_deepseek_v4())
    return InvalidArgument(dir + ": tensor parallelism is implemented for DeepSeek-V4 only, not " +
                           cfg.architecture);
  const TensorParallelContext tp{comm};
  DI_ASSIGN_OR_RETURN(auto m, DeepseekV4Model::load(dir, cfg, backend, nullptr, &tp));
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace deepinfer::model::v4
