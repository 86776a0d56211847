// Rope blocks of config.json (deepseek-v4.md §1.3; HF rope_utils semantics).
#include <cmath>

#include "io/config_internal.h"

namespace deepinfer::io::detail {

using nlohmann::json;

namespace {

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

Status parse_rope_block(const json& block, const std::string& source, const std::string& prefix,
                        RopeParams* out) {
  if (!block.is_object()) {
    return InvalidArgument(source + ": " + (prefix.empty() ? "rope block" : prefix.substr(0, prefix.size() - 1)) +
                           " = " + json_brief(block) + ": expected an object");
  }
  ConfigReader r(block, source, prefix);
  std::string type;
  DI_RETURN_IF_ERROR(r.get("type", &type));       // legacy spelling
  DI_RETURN_IF_ERROR(r.get("rope_type", &type));  // wins when both are given
  if (!type.empty()) {
    if (type == "default") {
      out->type = RopeType::kDefault;
    } else if (type == "yarn") {
      out->type = RopeType::kYarn;
    } else if (type == "linear") {
      out->type = RopeType::kLinear;
    } else if (type == "llama3") {
      out->type = RopeType::kLlama3;
    } else {
      return r.bad(r.has("rope_type") ? "rope_type" : "type",
                   "one of default, yarn, linear, llama3 (other rope types are not supported)");
    }
  }
  DI_RETURN_IF_ERROR(r.get("rope_theta", &out->theta));
  DI_RETURN_IF_ERROR(r.get("partial_rotary_factor", &out->partial_rotary_factor));
  DI_RETURN_IF_ERROR(r.get("factor", &out->factor));
  DI_RETURN_IF_ERROR(r.get("original_max_position_embeddings",
                           &out->original_max_position_embeddings));
  DI_RETURN_IF_ERROR(r.get("beta_fast", &out->beta_fast));
  DI_RETURN_IF_ERROR(r.get("beta_slow", &out->beta_slow));
  DI_RETURN_IF_ERROR(r.get("truncate", &out->truncate));
  if (r.has("attention_factor")) {
    DI_RETURN_IF_ERROR(r.get("attention_factor", &out->attention_factor));
    out->attention_factor_given = true;
  }
  if (r.has("mscale")) {
    double m = 0;
    DI_RETURN_IF_ERROR(r.get("mscale", &m));
    out->mscale = m;
  }
  if (r.has("mscale_all_dim")) {
    double m = 0;
    DI_RETURN_IF_ERROR(r.get("mscale_all_dim", &m));
    out->mscale_all_dim = m;
  }
  DI_RETURN_IF_ERROR(r.get("low_freq_factor", &out->low_freq_factor));
  DI_RETURN_IF_ERROR(r.get("high_freq_factor", &out->high_freq_factor));
  r.warn_unknown_keys({});
  return OkStatus();
}

void finish_rope(int64_t head_dim, bool inject_unit_factor, RopeParams* out) {
  out->rotary_dim = static_cast<int64_t>(static_cast<double>(head_dim) * out->partial_rotary_factor);
  if (out->type != RopeType::kYarn) {
    if (!out->attention_factor_given) out->attention_factor = 1.0;
    return;
  }
  if (out->attention_factor_given) return;
  if (inject_unit_factor) {
    out->attention_factor = 1.0;
    return;
  }
  // HF default (_compute_yarn_parameters): the trap of deepseek-v4.md §1.3.
  if (out->mscale && out->mscale_all_dim) {
    out->attention_factor = yarn_get_mscale(out->factor, *out->mscale) /
                            yarn_get_mscale(out->factor, *out->mscale_all_dim);
  } else {
    out->attention_factor = yarn_get_mscale(out->factor, 1.0);
  }
}

Status validate_rope(const RopeParams& r, int64_t head_dim, const std::string& source,
                     const std::string& name) {
  auto fail = [&](const std::string& key, const std::string& value, const std::string& expected) {
    return InvalidArgument(source + ": " + name + "." + key + " = " + value + ": expected " +
                           expected);
  };
  auto num = [](double v) {
    std::string s = json(v).dump();
    return s;
  };
  if (!(r.theta > 0)) return fail("rope_theta", num(r.theta), "> 0");
  if (!(r.partial_rotary_factor > 0 && r.partial_rotary_factor <= 1.0)) {
    return fail("partial_rotary_factor", num(r.partial_rotary_factor), "a value in (0, 1]");
  }
  double exact = static_cast<double>(head_dim) * r.partial_rotary_factor;
  if (std::fabs(exact - std::round(exact)) > 1e-9 || r.rotary_dim <= 0 || r.rotary_dim % 2 != 0) {
    return fail("partial_rotary_factor", num(r.partial_rotary_factor),
                "head_dim (" + std::to_string(head_dim) +
                    ") * partial_rotary_factor to be a positive even integer rope width, got " +
                    num(exact));
  }
  if (r.type == RopeType::kYarn || r.type == RopeType::kLinear || r.type == RopeType::kLlama3) {
    if (!(r.factor >= 1.0)) return fail("factor", num(r.factor), ">= 1 for rope_type " + std::string(rope_type_name(r.type)));
  }
  if (r.type == RopeType::kYarn) {
    if (r.original_max_position_embeddings < 0) {
      return fail("original_max_position_embeddings",
                  std::to_string(r.original_max_position_embeddings), "> 0");
    }
    if (!(r.beta_fast > 0)) return fail("beta_fast", num(r.beta_fast), "> 0");
    if (!(r.beta_slow > 0)) return fail("beta_slow", num(r.beta_slow), "> 0");
    if (!(r.beta_fast > r.beta_slow)) {
      return fail("beta_fast", num(r.beta_fast), "> beta_slow (" + num(r.beta_slow) + ")");
    }
    if (!(r.attention_factor > 0)) {
      return fail("attention_factor", num(r.attention_factor), "> 0");
    }
  }
  if (r.type == RopeType::kLlama3) {
    if (r.original_max_position_embeddings <= 0) {
      return fail("original_max_position_embeddings",
                  std::to_string(r.original_max_position_embeddings), "> 0 for rope_type llama3");
    }
    if (!(r.high_freq_factor > r.low_freq_factor)) {
      return fail("high_freq_factor", num(r.high_freq_factor),
                  "> low_freq_factor (" + num(r.low_freq_factor) + ")");
    }
  }
  return OkStatus();
}

}  // namespace deepinfer::io::detail
