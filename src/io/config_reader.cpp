#include "io/config_reader.h"

#include <cmath>
#include <mutex>

#include "common/logging.h"

namespace deepinfer::io::detail {

using nlohmann::json;

std::string json_brief(const json& v) {
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

ConfigReader::ConfigReader(const json& obj, std::string source, std::string prefix)
    : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

std::string ConfigReader::field(const std::string& key) const {
  return source_ + ": " + prefix_ + key;
}

Status ConfigReader::bad(const std::string& key, const std::string& expected) const {
  std::string value = "<absent>";
  if (obj_.is_object()) {
    auto it = obj_.find(key);
    if (it != obj_.end()) value = json_brief(*it);
  }
  return InvalidArgument(field(key) + " = " + value + ": expected " + expected);
}

bool ConfigReader::present(const std::string& key) const {
  return obj_.is_object() && obj_.contains(key);
}

bool ConfigReader::has(const std::string& key) const {
  if (!obj_.is_object()) return false;
  auto it = obj_.find(key);
  return it != obj_.end() && !it->is_null();
}

const json* ConfigReader::raw(const std::string& key) {
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(key);
  if (it == obj_.end()) return nullptr;
  used_.insert(key);
  return &*it;
}

namespace {
bool as_int(const json& v, int64_t* out) {
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
      *out = static_cast<int64_t>(d);
      return true;
    }
  }
  return false;
}
}  // namespace

Status ConfigReader::get(const std::string& key, int64_t* out) {
  const json* v = raw(key);
  if (v == nullptr || v->is_null()) return OkStatus();
  if (!as_int(*v, out)) return bad(key, "an integer");
  return OkStatus();
}

Status ConfigReader::get(const std::string& key, std::optional<int64_t>* out) {
  const json* v = raw(key);
  if (v == nullptr) return OkStatus();
  if (v->is_null()) {
    out->reset();
    return OkStatus();
  }
  int64_t x = 0;
  if (!as_int(*v, &x)) return bad(key, "an integer or null");
  *out = x;
  return OkStatus();
}

Status ConfigReader::get(const std::string& key, double* out) {
  const json* v = raw(key);
  if (v == nullptr || v->is_null()) return OkStatus();
  if (!v->is_number()) return bad(key, "a number");
  *out = v->get<double>();
  if (!std::isfinite(*out)) return bad(key, "a finite number");
  return OkStatus();
}

Status ConfigReader::get(const std::string& key, bool* out) {
  const json* v = raw(key);
  if (v == nullptr || v->is_null()) return OkStatus();
  if (!v->is_boolean()) return bad(key, "true or false");
  *out = v->get<bool>();
  return OkStatus();
}

Status ConfigReader::get(const std::string& key, std::string* out) {
  const json* v = raw(key);
  if (v == nullptr || v->is_null()) return OkStatus();
  if (!v->is_string()) return bad(key, "a string");
  *out = v->get<std::string>();
  return OkStatus();
}

Status ConfigReader::get(const std::string& key, std::vector<int64_t>* out) {
  const json* v = raw(key);
  if (v == nullptr || v->is_null()) return OkStatus();
  if (!v->is_array()) return bad(key, "a list of integers");
  std::vector<int64_t> r;
  for (size_t i = 0; i < v->size(); ++i) {
    int64_t x = 0;
    if (!as_int((*v)[i], &x)) {
      return InvalidArgument(field(key) + "[" + std::to_string(i) + "] = " +
                             json_brief((*v)[i]) + ": expected an integer");
    }
    r.push_back(x);
  }
  *out = std::move(r);
  return OkStatus();
}

Status ConfigReader::get_int_or_list(const std::string& key, std::vector<int64_t>* out) {
  const json* v = raw(key);
  if (v == nullptr || v->is_null()) return OkStatus();
  int64_t x = 0;
  if (as_int(*v, &x)) {
    *out = {x};
    return OkStatus();
  }
  if (v->is_array()) return get(key, out);
  return bad(key, "an integer or a list of integers");
}

void ConfigReader::warn_unknown_keys(const std::set<std::string>& harmless) const {
  if (!obj_.is_object()) return;
  static std::mutex mu;
  static std::set<std::string> warned;
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    const std::string& k = it.key();
    if (used_.count(k) || harmless.count(k)) continue;
    std::string id = source_ + "\n" + prefix_ + k;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!warned.insert(id).second) continue;
    }
    log_warning(field(k) + ": unknown config key ignored (value " + json_brief(*it) + ")");
  }
}

const std::set<std::string>& hf_bookkeeping_keys() {
  static const std::set<std::string> keys = {
      "transformers_version", "dtype", "torch_dtype", "architectures", "model_type",
      "_name_or_path", "auto_map", "initializer_range", "use_cache", "output_attentions",
      "output_hidden_states", "return_dict", "torchscript", "pruned_heads", "tie_encoder_decoder",
      "is_encoder_decoder", "chunk_size_feed_forward", "problem_type", "id2label", "label2id",
      "tokenizer_class", "attention_dropout", "pretraining_tp", "_attn_implementation",
      "_commit_hash", "use_return_dict", "return_dict_in_generate", "output_scores",
      "finetuning_task", "task_specific_params", "prefix", "cross_attention_hidden_size",
      "add_cross_attention", "is_decoder", "bad_words_ids", "decoder_start_token_id",
      "sep_token_id", "num_labels"};
  return keys;
}

}  // namespace deepinfer::io::detail
