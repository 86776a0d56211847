#include "io/config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/config_internal.h"

namespace deepinfer::io {

using nlohmann::json;

const char* attention_type_name(AttentionType t) {
  switch (t) {
    case AttentionType::kSliding: return "sliding_attention";
    case AttentionType::kCompressedSparse: return "compressed_sparse_attention";
    case AttentionType::kHeavilyCompressed: return "heavily_compressed_attention";
    case AttentionType::kCompressedSparse2: return "compressed_sparse_attention_2";
  }
  return "?";
}

const char* attention_type_short(AttentionType t) {
  switch (t) {
    case AttentionType::kSliding: return "sliding";
    case AttentionType::kCompressedSparse: return "CSA";
    case AttentionType::kHeavilyCompressed: return "HCA";
    case AttentionType::kCompressedSparse2: return "CSA2";
  }
  return "?";
}

const char* mlp_type_name(MlpType t) { return t == MlpType::kMoe ? "moe" : "hash_moe"; }

const char* scoring_func_name(ScoringFunc f) {
  switch (f) {
    case ScoringFunc::kSqrtSoftplus: return "sqrtsoftplus";
    case ScoringFunc::kSoftmax: return "softmax";
    case ScoringFunc::kSigmoid: return "sigmoid";
  }
  return "?";
}

const char* rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::kDefault: return "default";
    case RopeType::kYarn: return "yarn";
    case RopeType::kLinear: return "linear";
    case RopeType::kLlama3: return "llama3";
  }
  return "?";
}

const char* model_family_name(ModelFamily f) {
  return f == ModelFamily::kDeepseekV4 ? "deepseek_v4" : "llama";
}

int64_t DeepseekV4Config::num_layers_of(AttentionType t) const {
  int64_t n = 0;
  for (AttentionType x : layer_types) n += x == t ? 1 : 0;
  return n;
}

const RopeParams& DeepseekV4Config::rope_for_layer(int64_t layer) const {
  return layer_types.at(static_cast<size_t>(layer)) == AttentionType::kSliding ? rope_main
                                                                               : rope_compress;
}

ModelFamily ModelConfig::family() const {
  return is_deepseek_v4() ? ModelFamily::kDeepseekV4 : ModelFamily::kLlama;
}

int64_t ModelConfig::vocab_size() const {
  return is_deepseek_v4() ? deepseek_v4().vocab_size : llama().vocab_size;
}
int64_t ModelConfig::hidden_size() const {
  return is_deepseek_v4() ? deepseek_v4().hidden_size : llama().hidden_size;
}
int64_t ModelConfig::num_hidden_layers() const {
  return is_deepseek_v4() ? deepseek_v4().num_hidden_layers : llama().num_hidden_layers;
}
bool ModelConfig::tie_word_embeddings() const {
  return is_deepseek_v4() ? deepseek_v4().tie_word_embeddings : llama().tie_word_embeddings;
}

std::string layer_types_summary(const DeepseekV4Config& c) {
  std::string s;
  for (size_t i = 0; i < c.layer_types.size(); ++i) {
    if (i) s += ", ";
    s += attention_type_short(c.layer_types[i]);
    if (c.layer_types[i] == AttentionType::kCompressedSparse2) {
      s += "/" + std::to_string(c.compress_ratio[i]);
    }
  }
  return s;
}

std::string mlp_layer_types_summary(const DeepseekV4Config& c) {
  std::string s;
  for (size_t i = 0; i < c.mlp_layer_types.size(); ++i) {
    if (i) s += ", ";
    s += c.mlp_layer_types[i] == MlpType::kHashMoe ? "hash" : "moe";
  }
  return s;
}

namespace {

constexpr const char* kSupported =
    "one of DeepseekV4ForCausalLM (model_type deepseek_v4), DeepseekV41ForCausalLM "
    "(deepseek_v41), LlamaForCausalLM (llama)";

}  // namespace

StatusOr<ModelConfig> parse_model_config(const json& j, const std::string& source_name) {
  if (!j.is_object()) {
    return InvalidArgument(source_name + ": expected a JSON object at the top level, got " +
                           detail::json_brief(j));
  }
  ModelConfig cfg;
  cfg.source = source_name;

  // DeepSeek's flat inference/config.json: no architectures / model_type, `dim` + `n_layers`.
  if (detail::looks_like_inference_config(j)) {
    bool v41 = false;
    DI_ASSIGN_OR_RETURN(json hf, detail::translate_inference_config(j, source_name, &v41));
    cfg.architecture = v41 ? "DeepseekV41ForCausalLM" : "DeepseekV4ForCausalLM";
    cfg.model_type = v41 ? "deepseek_v41" : "deepseek_v4";
    if (j.contains("dtype") && j["dtype"].is_string()) cfg.torch_dtype = j["dtype"];
    DI_ASSIGN_OR_RETURN(DeepseekV4Config c, detail::parse_deepseek_v4(hf, source_name, v41));
    cfg.arch = std::move(c);
    return cfg;
  }

  std::string arch;
  if (auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || !(*it)[0].is_string()) {
      return InvalidArgument(source_name + ": architectures = " + detail::json_brief(*it) +
                             ": expected a non-empty list of class names (" + kSupported + ")");
    }
    arch = (*it)[0].get<std::string>();
  }
  std::string model_type;
  if (auto it = j.find("model_type"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) {
      return InvalidArgument(source_name + ": model_type = " + detail::json_brief(*it) +
                             ": expected a string");
    }
    model_type = it->get<std::string>();
  }
  for (const char* k : {"dtype", "torch_dtype"}) {
    if (auto it = j.find(k); it != j.end() && it->is_string()) cfg.torch_dtype = *it;
  }

  auto is = [&](const char* a, const char* m) {
    return arch == a || (arch.empty() && model_type == m);
  };
  if (is("DeepseekV4ForCausalLM", "deepseek_v4") || is("DeepseekV41ForCausalLM", "deepseek_v41")) {
    const bool v41 = arch == "DeepseekV41ForCausalLM" || model_type == "deepseek_v41";
    cfg.architecture = v41 ? "DeepseekV41ForCausalLM" : "DeepseekV4ForCausalLM";
    cfg.model_type = model_type.empty() ? (v41 ? "deepseek_v41" : "deepseek_v4") : model_type;
    DI_ASSIGN_OR_RETURN(DeepseekV4Config c, detail::parse_deepseek_v4(j, source_name, v41));
    cfg.arch = std::move(c);
    return cfg;
  }
  if (is("LlamaForCausalLM", "llama")) {
    cfg.architecture = "LlamaForCausalLM";
    cfg.model_type = model_type.empty() ? "llama" : model_type;
    DI_ASSIGN_OR_RETURN(LlamaConfig c, detail::parse_llama(j, source_name));
    cfg.arch = std::move(c);
    return cfg;
  }
  if (arch.empty() && model_type.empty()) {
    return InvalidArgument(source_name +
                           ": no architectures and no model_type: expected " + kSupported);
  }
  return InvalidArgument(source_name + ": unknown architecture '" + arch + "' (model_type '" +
                         model_type + "'): expected " + kSupported);
}

StatusOr<ModelConfig> load_model_config(const std::string& config_json_path) {
  std::string path = config_json_path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) path = (std::filesystem::path(path) / "config.json").string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open config file");
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::parse_error& e) {
    return InvalidArgument(path + ": not valid JSON: " + e.what());
  }
  return parse_model_config(j, path);
}

}  // namespace deepinfer::io
