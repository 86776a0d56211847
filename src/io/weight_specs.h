// Internal to the weight registry: the tensors a config expects, with shapes (canonical names of
// weight_registry.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/config.h"

namespace deepinfer::io::detail {

enum class WeightKind {
  kMatrix,  // [out, in] linear weight: F32/BF16/F16, or FP8 E4M3 with block scales
  kExpert,  // routed-expert matrix: additionally FP4 (I8/U8 [out, in/2] or F4) with group scales
  kParam,   // norm weights, biases, mHC tensors, sinks, position biases: F32/BF16/F16
  kIndex,   // integer tables (tid2eid): I64/I32
};

struct WeightSpec {
  std::vector<int64_t> shape;  // logical shape
  WeightKind kind = WeightKind::kParam;
};

using SpecMap = std::map<std::string, WeightSpec>;

// `required`: every tensor the main model needs. `optional`: MTP tensors (may be absent).
void deepseek_v4_specs(const DeepseekV4Config& c, SpecMap* required, SpecMap* optional);
// `head` goes to `optional` when tie_word_embeddings.
void llama_specs(const LlamaConfig& c, SpecMap* required, SpecMap* optional);

}  // namespace deepinfer::io::detail
