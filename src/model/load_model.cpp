// load_model: reads config.json and builds the model of its family.
#include "io/config.h"
#include "model/deepseek_v4/model.h"
#include "model/llama/model.h"
#include "model/model.h"

namespace deepinfer::model {

StatusOr<std::unique_ptr<Model>> load_model(const std::string& dir, backend::Backend* backend) {
  DI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(dir + "/config.json"));
  if (cfg.is_deepseek_v4()) {
    if (cfg.deepseek_v4().is_v41)
      return Unimplemented(dir + ": DeepSeek-V4.1 models are not implemented by this model library");
    DI_ASSIGN_OR_RETURN(auto m, v4::DeepseekV4Model::load(dir, cfg, backend));
    return std::unique_ptr<Model>(std::move(m));
  }
  if (cfg.is_llama()) {
    DI_ASSIGN_OR_RETURN(auto m, llama::LlamaModel::load(dir, cfg, backend));
    return std::unique_ptr<Model>(std::move(m));
  }
  return Unimplemented(dir + ": unsupported model architecture " + cfg.architecture);
}

}  // namespace deepinfer::model
