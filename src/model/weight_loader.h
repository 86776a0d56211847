// Loads checkpoint weights as F32 host Tensors through io::WeightRegistry (canonical names,
// both DeepSeek and HF spellings, FP8/FP4 scales attached). Every weight is dequantized ONCE, at
// load time (BF16, F16, FP8 e4m3 with block scales, FP4 e2m1 with 1x32 scales → F32; see
// docs/model.md for why), with the backend's `dequantize` op.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/weight_registry.h"

namespace deepinfer::model {

class WeightLoader {
 public:
  static StatusOr<std::unique_ptr<WeightLoader>> open(const std::string& dir,
                                                      const io::ModelConfig& config,
                                                      backend::Backend* backend);

  // The weight under canonical name `name` (io/weight_registry.h), dequantized to F32 and checked
  // against `shape` (-1 = any): kNotFound / kInvalidArgument naming the tensor and its file.
  StatusOr<backend::Tensor> load(const std::string& name, const backend::Shape& shape);
  // Same, but an absent weight gives an undefined Tensor (Tensor::defined() == false).
  StatusOr<backend::Tensor> load_optional(const std::string& name, const backend::Shape& shape);
  // A linear layer's weight in the format the backend computes with: its stored format (BF16,
  // FP8 + block scales, FP4 + group scales) uploaded to the backend when
  // backend->supports_op(kMatmul, dtype), else dequantized to F32 in host memory (placed later).
  StatusOr<backend::Weight> load_linear(const std::string& name, const backend::Shape& shape);
  // Integer weight (I64 / I32, e.g. tid2eid) as I32.
  StatusOr<backend::Tensor> load_i32(const std::string& name, const backend::Shape& shape);
  bool has(const std::string& name) const { return registry_->find(name) != nullptr; }

 private:
  StatusOr<backend::Tensor> convert(const io::WeightEntry& e, const backend::Shape& shape);
  std::string dir_;
  std::unique_ptr<io::Checkpoint> ckpt_;
  std::unique_ptr<io::WeightRegistry> registry_;
  backend::Backend* host_backend();  // for dequantizing when backend_ has device memory
  backend::Backend* backend_ = nullptr;
  std::unique_ptr<backend::Backend> host_;
};

}  // namespace deepinfer::model
