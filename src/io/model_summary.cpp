#include "io/model_summary.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "io/weight_registry.h"

namespace deepinfer::io {

using nlohmann::json;

const char* parameter_counting_rule() {
  return "Parameter count: logical weight elements of every floating-point tensor in the "
         "checkpoint; a packed FP4 byte holds 2 parameters (shown as dtype F4). Quantisation "
         "scale tensors (*.scale, *.weight_scale_inv, F8_E8M0) and integer tables (tid2eid) are "
         "not parameters and are reported separately. A tied lm_head is counted once. MTP "
         "(mtp.*) parameters are included and also shown on their own. Bytes are as stored; the "
         "total includes every tensor.";
}

namespace {

bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
bool is_integer(DType t) {
  return !dtype_is_float(t) && t != DType::kBool;
}

std::string grouped(uint64_t v) {
  std::string d = std::to_string(v), r;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i && (d.size() - i) % 3 == 0) r += ',';
    r += d[i];
  }
  return r;
}

std::string human(double v, const char* const* units, double base) {
  int u = 0;
  while (v >= base && units[u + 1] != nullptr) {
    v /= base;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f%s" : "%.2f %s", v, units[u]);
  return buf;
}
std::string human_count(uint64_t v) {
  static const char* const u[] = {"", "K", "M", "B", "T", nullptr};
  return human(static_cast<double>(v), u, 1000.0);
}
std::string human_bytes(uint64_t v) {
  static const char* const u[] = {" B", "KiB", "MiB", "GiB", "TiB", nullptr};
  return human(static_cast<double>(v), u, 1024.0);
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string rope_text(const RopeParams& r) {
  std::string s = std::string(rope_type_name(r.type)) + " theta " + num(r.theta) + ", rotary " +
                  std::to_string(r.rotary_dim);
  if (r.type == RopeType::kYarn) {
    s += ", factor " + num(r.factor) + ", original " +
         std::to_string(r.original_max_position_embeddings) + ", beta " + num(r.beta_fast) + "/" +
         num(r.beta_slow) + ", attention_factor " + num(r.attention_factor);
  } else if (r.type == RopeType::kLinear || r.type == RopeType::kLlama3) {
    s += ", factor " + num(r.factor);
  }
  return s;
}

json rope_json(const RopeParams& r) {
  json j = {{"type", rope_type_name(r.type)}, {"theta", r.theta},
            {"partial_rotary_factor", r.partial_rotary_factor}, {"rotary_dim", r.rotary_dim}};
  if (r.type != RopeType::kDefault) j["factor"] = r.factor;
  if (r.type == RopeType::kYarn) {
    j["original_max_position_embeddings"] = r.original_max_position_embeddings;
    j["beta_fast"] = r.beta_fast;
    j["beta_slow"] = r.beta_slow;
    j["attention_factor"] = r.attention_factor;
  }
  return j;
}

json usage_json(const DtypeUsage& u) {
  return {{"tensors", u.tensors}, {"elements", u.elements}, {"bytes", u.bytes}};
}

}  // namespace

StatusOr<ModelSummary> summarize_model(const std::string& dir) {
  ModelSummary s;
  std::error_code ec;
  auto abs = std::filesystem::absolute(dir, ec);
  s.path = ec ? dir : abs.lexically_normal().string();
  DI_ASSIGN_OR_RETURN(s.config, load_model_config(dir));
  DI_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::open(dir));
  s.num_files = static_cast<int64_t>(ckpt->files().size());

  std::set<std::string> scale_sources, fp4_sources;
  auto reg = WeightRegistry::build(*ckpt, s.config);
  if (reg.ok()) {
    s.weights_ok = true;
    s.mapped_weights = static_cast<int64_t>((*reg)->entries().size());
    for (const auto& [name, e] : (*reg)->entries()) {
      if (e.scale) scale_sources.insert(e.scale->source);
      if (e.weight.dtype == DType::kF4E2M1) fp4_sources.insert(e.weight.source);
    }
  } else {
    s.weights_error = reg.status().message();
    // Without the registry: recognise scales by dtype / name, FP4 by an I8/U8 tensor with a scale.
    for (const TensorInfo* t : ckpt->tensors()) {
      bool is_scale = false;
      if (s.config.is_deepseek_v4()) (void)canonical_deepseek_v4_name(t->name, &is_scale);
      if (is_scale || t->dtype == DType::kF8E8M0 || ends_with(t->name, ".weight_scale_inv")) {
        scale_sources.insert(t->name);
      }
    }
    for (const TensorInfo* t : ckpt->tensors()) {
      if ((t->dtype == DType::kI8 || t->dtype == DType::kU8) && ends_with(t->name, ".weight")) {
        const std::string base = t->name.substr(0, t->name.size() - 7);
        if (scale_sources.count(base + ".scale") || scale_sources.count(base + ".weight_scale_inv")) {
          fp4_sources.insert(t->name);
        }
      }
    }
  }

  for (const TensorInfo* t : ckpt->tensors()) {
    s.num_tensors++;
    s.total_bytes += t->nbytes;
    std::string_view stripped = t->name;
    if (stripped.substr(0, 6) == "model.") stripped.remove_prefix(6);
    const bool mtp = stripped.substr(0, 4) == "mtp.";
    DtypeUsage* u = nullptr;
    int64_t elements = t->numel();
    if (scale_sources.count(t->name)) {
      u = &s.scales;
    } else if (fp4_sources.count(t->name) || t->dtype == DType::kF4E2M1) {
      u = &s.params_by_dtype["F4"];
      if (t->dtype != DType::kF4E2M1) elements = static_cast<int64_t>(t->nbytes) * 2;
    } else if (is_integer(t->dtype) || t->dtype == DType::kBool) {
      u = &s.index_tables;
    } else {
      u = &s.params_by_dtype[dtype_name(t->dtype)];
    }
    u->tensors++;
    u->elements += elements;
    u->bytes += t->nbytes;
    if (u != &s.scales && u != &s.index_tables) {
      s.parameters += elements;
      if (mtp) s.mtp_parameters += elements;
    }
  }
  return s;
}

std::string format_summary_text(const ModelSummary& s) {
  std::string o;
  auto line = [&](const std::string& key, const std::string& value) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%-16s", (key + ":").c_str());
    o += buf + value + "\n";
  };
  const ModelConfig& m = s.config;
  line("path", s.path);
  line("architecture", m.architecture + " (model_type " + m.model_type +
                           (m.torch_dtype.empty() ? "" : ", dtype " + m.torch_dtype) + ")");
  if (m.is_deepseek_v4()) {
    const DeepseekV4Config& c = m.deepseek_v4();
    line("layers", std::to_string(c.num_hidden_layers) + ": " + layer_types_summary(c));
    line("mlp layers", mlp_layer_types_summary(c));
    line("hidden", std::to_string(c.hidden_size) + ", heads " +
                       std::to_string(c.num_attention_heads) + " x " + std::to_string(c.head_dim) +
                       " (1 KV head), q_lora " + std::to_string(c.q_lora_rank) + ", o " +
                       std::to_string(c.o_groups) + " groups x " + std::to_string(c.o_lora_rank));
    line("experts", std::to_string(c.n_routed_experts) + " routed (top-" +
                        std::to_string(c.num_experts_per_tok) + ") + 1 shared, intermediate " +
                        std::to_string(c.moe_intermediate_size) + ", " +
                        scoring_func_name(c.scoring_func) + " x " + num(c.routed_scaling_factor) +
                        (c.expert_dtype.empty() ? "" : ", expert dtype " + c.expert_dtype));
    line("window", std::to_string(c.sliding_window));
    line("compress rates", "CSA " + std::to_string(c.compress_rate_csa) + ", HCA " +
                               std::to_string(c.compress_rate_hca) + "; indexer " +
                               std::to_string(c.index_n_heads) + " heads x " +
                               std::to_string(c.index_head_dim) + ", top-k " +
                               std::to_string(c.index_topk));
    line("mHC", std::to_string(c.hc_mult) + " streams, " + std::to_string(c.hc_sinkhorn_iters) +
                    " Sinkhorn iterations");
    line("rope main", rope_text(c.rope_main));
    line("rope compress", rope_text(c.rope_compress));
    if (!c.quantization.quant_method.empty()) {
      std::string q = c.quantization.quant_method;
      if (c.quantization.weight_block_size.size() == 2) {
        q += " blocks " + std::to_string(c.quantization.weight_block_size[0]) + "x" +
             std::to_string(c.quantization.weight_block_size[1]);
      }
      if (!c.quantization.scale_fmt.empty()) q += ", scales " + c.quantization.scale_fmt;
      line("quantization", q);
    }
    line("MTP layers", std::to_string(c.num_nextn_predict_layers));
  } else {
    const LlamaConfig& c = m.llama();
    line("layers", std::to_string(c.num_hidden_layers) + " (dense)");
    line("hidden", std::to_string(c.hidden_size) + ", heads " +
                       std::to_string(c.num_attention_heads) + " x " + std::to_string(c.head_dim) +
                       " (" + std::to_string(c.num_key_value_heads) + " KV heads), intermediate " +
                       std::to_string(c.intermediate_size));
    line("rope", rope_text(c.rope));
  }
  line("vocab", std::to_string(m.vocab_size()) +
                    (m.tie_word_embeddings() ? " (lm_head tied to the embedding)" : ""));
  line("parameters", grouped(s.parameters) + " (" + human_count(s.parameters) + ")" +
                         (s.mtp_parameters ? ", of which MTP " + grouped(s.mtp_parameters) : ""));
  bool first = true;
  for (const auto& [dt, u] : s.params_by_dtype) {
    line(first ? "by dtype" : "", dt + ": " + grouped(u.elements) + " params, " +
                                      grouped(u.bytes) + " bytes, " + std::to_string(u.tensors) +
                                      " tensors");
    first = false;
  }
  if (s.scales.tensors) {
    line("scales", std::to_string(s.scales.tensors) + " tensors, " + grouped(s.scales.elements) +
                       " elements, " + grouped(s.scales.bytes) + " bytes (not parameters)");
  }
  if (s.index_tables.tensors) {
    line("index tables", std::to_string(s.index_tables.tensors) + " tensors, " +
                             grouped(s.index_tables.elements) + " elements, " +
                             grouped(s.index_tables.bytes) + " bytes (not parameters)");
  }
  line("total bytes", grouped(s.total_bytes) + " (" + human_bytes(s.total_bytes) + ") in " +
                          std::to_string(s.num_tensors) + " tensors, " +
                          std::to_string(s.num_files) + " file(s)");
  line("weights", s.weights_ok ? "ok: every tensor mapped (" + std::to_string(s.mapped_weights) +
                                     " canonical weights)"
                               : "PROBLEM: " + s.weights_error);
  return o;
}

json summary_to_json(const ModelSummary& s) {
  const ModelConfig& m = s.config;
  json cfg = {{"vocab_size", m.vocab_size()}, {"hidden_size", m.hidden_size()},
              {"num_hidden_layers", m.num_hidden_layers()},
              {"tie_word_embeddings", m.tie_word_embeddings()}};
  if (m.is_deepseek_v4()) {
    const DeepseekV4Config& c = m.deepseek_v4();
    json lt = json::array(), mt = json::array();
    for (AttentionType t : c.layer_types) lt.push_back(attention_type_name(t));
    for (MlpType t : c.mlp_layer_types) mt.push_back(mlp_type_name(t));
    cfg.update({{"layer_types", lt}, {"mlp_layer_types", mt}, {"compress_ratios", c.compress_ratio},
                {"num_attention_heads", c.num_attention_heads}, {"head_dim", c.head_dim},
                {"qk_rope_head_dim", c.qk_rope_head_dim}, {"q_lora_rank", c.q_lora_rank},
                {"o_groups", c.o_groups}, {"o_lora_rank", c.o_lora_rank},
                {"sliding_window", c.sliding_window},
                {"compress_rates", {{"compressed_sparse_attention", c.compress_rate_csa},
                                    {"heavily_compressed_attention", c.compress_rate_hca}}},
                {"index_n_heads", c.index_n_heads}, {"index_head_dim", c.index_head_dim},
                {"index_topk", c.index_topk}, {"n_routed_experts", c.n_routed_experts},
                {"num_experts_per_tok", c.num_experts_per_tok},
                {"moe_intermediate_size", c.moe_intermediate_size}, {"hc_mult", c.hc_mult},
                {"num_nextn_predict_layers", c.num_nextn_predict_layers},
                {"rope", {{"main", rope_json(c.rope_main)}, {"compress", rope_json(c.rope_compress)}}}});
  } else {
    const LlamaConfig& c = m.llama();
    cfg.update({{"num_attention_heads", c.num_attention_heads},
                {"num_key_value_heads", c.num_key_value_heads}, {"head_dim", c.head_dim},
                {"intermediate_size", c.intermediate_size}, {"rope", rope_json(c.rope)}});
  }
  json by_dtype = json::object();
  for (const auto& [dt, u] : s.params_by_dtype) by_dtype[dt] = usage_json(u);
  json j = {{"path", s.path},
            {"architecture", m.architecture},
            {"model_type", m.model_type},
            {"config", cfg},
            {"parameters", s.parameters},
            {"mtp_parameters", s.mtp_parameters},
            {"parameters_by_dtype", by_dtype},
            {"scales", usage_json(s.scales)},
            {"index_tables", usage_json(s.index_tables)},
            {"num_tensors", s.num_tensors},
            {"num_files", s.num_files},
            {"total_bytes", s.total_bytes},
            {"weights_ok", s.weights_ok}};
  if (!s.weights_ok) j["weights_error"] = s.weights_error;
  return j;
}

}  // namespace deepinfer::io
