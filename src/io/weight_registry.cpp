#include "io/weight_registry.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <set>

#include "common/logging.h"
#include "io/weight_specs.h"

namespace deepinfer::io {

using detail::SpecMap;
using detail::WeightKind;
using detail::WeightSpec;

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const WeightEntry* WeightRegistry::find(std::string_view canonical) const {
  auto it = entries_.find(canonical);
  return it == entries_.end() ? nullptr : &it->second;
}

StatusOr<const WeightEntry*> WeightRegistry::get(std::string_view canonical) const {
  const WeightEntry* e = find(canonical);
  if (e == nullptr) {
    return NotFound("weight '" + std::string(canonical) + "' is not in the checkpoint registry");
  }
  return e;
}

namespace {

constexpr size_t kMaxListed = 50;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string list_str(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  std::string r;
  for (size_t i = 0; i < v.size() && i < kMaxListed; ++i) r += "\n    " + v[i];
  if (v.size() > kMaxListed) r += "\n    ... and " + std::to_string(v.size() - kMaxListed) + " more";
  return r;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

bool is_plain_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }
bool is_scale_dtype(DType t) { return t == DType::kF8E8M0 || t == DType::kF32; }

TensorView view_of(const TensorInfo& t) {
  return TensorView{t.dtype, t.shape, t.data, t.nbytes, t.name, t.file};
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

class WeightRegistryBuilder {
 public:
  WeightRegistryBuilder(const Checkpoint& ckpt, const ModelConfig& cfg) : ckpt_(ckpt), cfg_(cfg) {}

  StatusOr<std::unique_ptr<WeightRegistry>> run() {
    reg_ = std::make_unique<WeightRegistry>();
    if (cfg_.is_deepseek_v4()) {
      const DeepseekV4Config& c = cfg_.deepseek_v4();
      if (c.is_v41) {
        return Unimplemented(ckpt_.directory() + ": the weight registry does not know the "
                             "DeepSeek-V4.1 tensor layout yet (config " + cfg_.source + ")");
      }
      detail::deepseek_v4_specs(c, &required_, &optional_);
      if (!c.quantization.weight_block_size.empty()) {
        block_ = {c.quantization.weight_block_size[0], c.quantization.weight_block_size[1]};
      }
    } else {
      detail::llama_specs(cfg_.llama(), &required_, &optional_);
    }
    for (const TensorInfo* t : ckpt_.tensors()) map_tensor(*t);
    DI_RETURN_IF_ERROR(check_names());
    DI_RETURN_IF_ERROR(check_and_build());
    return std::move(reg_);
  }

 private:
  void add(std::map<std::string, TensorView>& m, const std::string& canon, TensorView v) {
    auto [it, inserted] = m.emplace(canon, v);
    if (!inserted) {
      conflicts_.push_back("'" + it->second.source + "' and '" + v.source + "' both provide " +
                           canon);
    }
  }

  void map_tensor(const TensorInfo& t) {
    std::string_view stripped = t.name;
    if (starts_with(stripped, "model.")) stripped.remove_prefix(6);
    if (cfg_.is_llama()) {
      auto canon = canonical_llama_name(t.name);
      if (!canon) {
        if (ends_with(t.name, "rotary_emb.inv_freq")) {
          reg_->skipped_.push_back(t.name);
        } else {
          unexpected_.push_back(t.name);
        }
        return;
      }
      add(weights_, *canon, view_of(t));
      return;
    }
    bool is_scale = false;
    auto canon = canonical_deepseek_v4_name(t.name, &is_scale);
    if (!canon) {
      if (starts_with(stripped, "mtp.")) {
        skip_mtp(t.name, "mtp tensor with an unknown name");
      } else {
        unexpected_.push_back(t.name);
      }
      return;
    }
    if (ends_with(*canon, "ffn.experts.*.gate_up") || ends_with(*canon, "ffn.experts.*.down")) {
      expand_stacked(t, *canon);
      return;
    }
    add(is_scale ? scales_ : weights_, *canon, view_of(t));
  }

  void skip_mtp(const std::string& name, const std::string& why) {
    log_warning(ckpt_.directory() + ": " + name + ": " + why + "; kept unused");
    reg_->skipped_.push_back(name);
  }

  // HF in-memory layout: gate_up_proj [E, 2I, H] (rows 0..I-1 = w1, I..2I-1 = w3), down_proj
  // [E, H, I]. Served as per-expert views; slices of dim 0 are contiguous.
  void expand_stacked(const TensorInfo& t, const std::string& canon) {
    const DeepseekV4Config& c = cfg_.deepseek_v4();
    const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size, H = c.hidden_size;
    const bool gate_up = ends_with(canon, ".gate_up");
    const std::string prefix = canon.substr(0, canon.find("ffn.experts.*"));  // "layers.{i}."
    std::vector<int64_t> want = gate_up ? std::vector<int64_t>{E, 2 * I, H}
                                        : std::vector<int64_t>{E, H, I};
    for (int64_t e = 0; e < E; ++e) {
      for (const char* w : gate_up ? std::vector<const char*>{"w1", "w3"}
                                   : std::vector<const char*>{"w2"}) {
        covered_.insert(prefix + "ffn.experts." + std::to_string(e) + "." + w);
      }
    }
    if (!is_plain_float(t.dtype) || t.shape != want) {
      problems_.push_back(t.name + " (" + t.file + "): " + dtype_name(t.dtype) + " " +
                          shape_str(t.shape) + ", expected F32/BF16/F16 " + shape_str(want) +
                          " (stacked experts " + prefix + "ffn.experts)");
      return;
    }
    const uint64_t es = static_cast<uint64_t>(dtype_bits(t.dtype) / 8);
    const uint64_t per_expert = static_cast<uint64_t>(want[1] * want[2]) * es;
    for (int64_t e = 0; e < E; ++e) {
      const uint8_t* base = t.data + static_cast<uint64_t>(e) * per_expert;
      const std::string ex = prefix + "ffn.experts." + std::to_string(e) + ".";
      const std::string src = t.name + "[" + std::to_string(e);
      if (gate_up) {
        const uint64_t half = static_cast<uint64_t>(I * H) * es;
        add(weights_, ex + "w1",
            TensorView{t.dtype, {I, H}, base, half, src + ", 0:" + std::to_string(I) + "]", t.file});
        add(weights_, ex + "w3",
            TensorView{t.dtype, {I, H}, base + half, half,
                       src + ", " + std::to_string(I) + ":" + std::to_string(2 * I) + "]", t.file});
      } else {
        add(weights_, ex + "w2", TensorView{t.dtype, {H, I}, base, per_expert, src + "]", t.file});
      }
    }
  }

  Status check_names() {
    std::vector<std::string> missing;
    for (const auto& [name, spec] : required_) {
      if (!weights_.count(name) && !covered_.count(name)) missing.push_back(name);
    }
    std::vector<std::string> unexpected = unexpected_;
    for (auto it = weights_.begin(); it != weights_.end();) {
      const std::string& name = it->first;
      if (required_.count(name) || optional_.count(name)) {
        ++it;
        continue;
      }
      if (starts_with(name, "mtp.")) {
        skip_mtp(it->second.source, "not part of the MTP layer this config describes");
      } else {
        unexpected.push_back(it->second.source + " (as " + name + ")");
      }
      it = weights_.erase(it);
    }
    for (const auto& [name, v] : scales_) {
      if (!weights_.count(name)) unexpected.push_back(v.source + " (a scale without weight " + name + ")");
    }
    if (missing.empty() && unexpected.empty() && conflicts_.empty()) return OkStatus();
    std::string msg = ckpt_.directory() + ": checkpoint tensors do not match the " +
                      cfg_.architecture + " config (" + cfg_.source + "):";
    if (!missing.empty()) {
      msg += "\n  " + std::to_string(missing.size()) + " missing tensor" +
             (missing.size() == 1 ? "" : "s") + " (canonical names, see io/weight_registry.h):" +
             list_str(missing);
    }
    if (!unexpected.empty()) {
      msg += "\n  " + std::to_string(unexpected.size()) + " unexpected tensor" +
             (unexpected.size() == 1 ? "" : "s") + ":" + list_str(unexpected);
    }
    if (!conflicts_.empty()) {
      msg += "\n  " + std::to_string(conflicts_.size()) + " duplicate" +
             (conflicts_.size() == 1 ? "" : "s") + ":" + list_str(conflicts_);
    }
    return InvalidArgument(msg);
  }

  // Checks one weight against its spec; fills `entry` (FP4 views get their logical dtype/shape).
  void check_weight(const std::string& name, const WeightSpec& spec, TensorView w,
                    const TensorView* scale) {
    auto problem = [&](const std::string& what) {
      problems_.push_back(w.source + " (" + w.file + ", as " + name + "): " + what);
    };
    const std::string got = std::string(dtype_name(w.dtype)) + " " + shape_str(w.shape);
    const std::string want = shape_str(spec.shape);
    auto no_scale = [&]() {
      if (scale != nullptr) problem("has a scale tensor " + scale->source + " but is not quantised");
    };
    WeightEntry entry;
    entry.name = name;
    switch (spec.kind) {
      case WeightKind::kIndex:
        if (w.dtype != DType::kI64 && w.dtype != DType::kI32) {
          return problem(got + ": expected dtype I64 or I32");
        }
        if (w.shape != spec.shape) return problem(got + ": expected shape " + want);
        no_scale();
        if (cfg_.is_deepseek_v4()) {  // tid2eid: expert ids in [0, E) (deepseek-v4.md §10.1)
          const int64_t E = cfg_.deepseek_v4().n_routed_experts;
          const int64_t cols = spec.shape.back();
          for (int64_t i = 0; i < w.numel(); ++i) {
            int64_t v = 0;
            if (w.dtype == DType::kI64) {
              std::memcpy(&v, w.data + 8 * i, 8);
            } else {
              int32_t v32 = 0;
              std::memcpy(&v32, w.data + 4 * i, 4);
              v = v32;
            }
            if (v < 0 || v >= E) {
              return problem("value " + std::to_string(v) + " at [" + std::to_string(i / cols) +
                             ", " + std::to_string(i % cols) + "]: expected an expert id in [0, " +
                             std::to_string(E) + ")");
            }
          }
        }
        break;
      case WeightKind::kParam:
        if (!is_plain_float(w.dtype)) return problem(got + ": expected dtype F32, BF16 or F16");
        if (w.shape != spec.shape) return problem(got + ": expected shape " + want);
        no_scale();
        break;
      case WeightKind::kMatrix:
      case WeightKind::kExpert: {
        const int64_t out = spec.shape[0], in = spec.shape[1];
        const bool packed_fp4 = spec.kind == WeightKind::kExpert &&
                                (w.dtype == DType::kI8 || w.dtype == DType::kU8 ||
                                 w.dtype == DType::kF4E2M1);
        if (is_plain_float(w.dtype)) {
          if (w.shape != spec.shape) return problem(got + ": expected shape " + want);
          no_scale();
        } else if (w.dtype == DType::kF8E4M3) {
          if (w.shape != spec.shape) return problem(got + ": expected shape " + want);
          std::vector<int64_t> ss = {ceil_div(out, block_[0]), ceil_div(in, block_[1])};
          if (scale == nullptr) {
            return problem(got + ": FP8 weight without its block-scale tensor (.scale or "
                           ".weight_scale_inv, F8_E8M0 " + shape_str(ss) + ")");
          }
          if (!is_scale_dtype(scale->dtype) || scale->shape != ss) {
            return problem("scale " + scale->source + " is " + dtype_name(scale->dtype) + " " +
                           shape_str(scale->shape) + ": expected F8_E8M0 or F32 " +
                           shape_str(ss) + " (one per " + std::to_string(block_[0]) + "x" +
                           std::to_string(block_[1]) + " block)");
          }
        } else if (packed_fp4) {
          std::vector<int64_t> stored = w.dtype == DType::kF4E2M1
                                            ? spec.shape
                                            : std::vector<int64_t>{out, in / 2};
          if (in % 32 != 0 || w.shape != stored) {
            return problem(got + ": expected FP4 " +
                           (w.dtype == DType::kF4E2M1 ? want
                                                      : "packed two per byte " + shape_str(stored)) +
                           " (logical " + want + ", in a multiple of 32)");
          }
          std::vector<int64_t> ss = {out, in / 32};
          if (scale == nullptr) {
            return problem(got + ": FP4 weight without its scale tensor (F8_E8M0 " +
                           shape_str(ss) + ")");
          }
          if (!is_scale_dtype(scale->dtype) || scale->shape != ss) {
            return problem("scale " + scale->source + " is " + dtype_name(scale->dtype) + " " +
                           shape_str(scale->shape) + ": expected F8_E8M0 or F32 " +
                           shape_str(ss) + " (one per 32 inputs of a row)");
          }
          w.dtype = DType::kF4E2M1;
          w.shape = spec.shape;
        } else {
          return problem(got + ": expected dtype F32, BF16, F16 or F8_E4M3 (+ block scale)" +
                         std::string(spec.kind == WeightKind::kExpert
                                         ? " or FP4 (I8/U8 packed, + group scale)" : ""));
        }
        if (scale != nullptr) entry.scale = *scale;
        break;
      }
    }
    entry.weight = std::move(w);
    reg_->entries_.emplace(name, std::move(entry));
  }

  Status check_and_build() {
    for (const auto& [name, w] : weights_) {
      auto it = required_.find(name);
      const WeightSpec& spec = it != required_.end() ? it->second : optional_.at(name);
      auto s = scales_.find(name);
      check_weight(name, spec, w, s == scales_.end() ? nullptr : &s->second);
    }
    if (!problems_.empty()) {
      return InvalidArgument(ckpt_.directory() + ": " + std::to_string(problems_.size()) +
                             " tensor" + (problems_.size() == 1 ? "" : "s") +
                             " with the wrong shape or dtype for the " + cfg_.architecture +
                             " config (" + cfg_.source + "):" + list_str(problems_));
    }
    if (cfg_.tie_word_embeddings() && reg_->find("head") == nullptr) {
      WeightEntry head = reg_->entries_.at("embed");
      head.name = "head";
      head.tied = true;
      reg_->entries_.emplace("head", std::move(head));
    }
    return OkStatus();
  }

  const Checkpoint& ckpt_;
  const ModelConfig& cfg_;
  std::unique_ptr<WeightRegistry> reg_;
  SpecMap required_, optional_;
  std::array<int64_t, 2> block_ = {128, 128};
  std::map<std::string, TensorView> weights_, scales_;
  std::set<std::string> covered_;  // per-expert names served by a (bad) stacked tensor
  std::vector<std::string> unexpected_, conflicts_, problems_;
};

StatusOr<std::unique_ptr<WeightRegistry>> WeightRegistry::build(const Checkpoint& ckpt,
                                                                const ModelConfig& cfg) {
  return WeightRegistryBuilder(ckpt, cfg).run();
}

}  // namespace deepinfer::io
