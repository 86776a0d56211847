// Rotary inverse-frequency tables from a config's RopeParams (deepseek-v4.md §1.3): default
// θ_i = base^(-2i/r) and YaRN (ramp over the r/2 pairs, corr computed from the rope width r).
#pragma once

#include "backend/tensor.h"
#include "io/config.h"

namespace deepinfer::model {

struct RopeTable {
  backend::Tensor inv_freq;  // [r/2] F32
  float mscale = 1.0f;       // cos/sin multiplier (YaRN attention_factor; 1.0 otherwise)
  int64_t rotary_dim = 0;    // r
};

// rotary_dim r must be even and > 0. kUnimplemented for rope types other than default / yarn.
StatusOr<RopeTable> make_rope_table(const io::RopeParams& p, int64_t rotary_dim);

}  // namespace deepinfer::model
