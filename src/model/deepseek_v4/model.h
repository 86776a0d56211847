// DeepseekV4Model: embedding → hc copies → L decoder layers (mHC around attention and MoE) →
// HyperHead → final RMSNorm → lm_head (deepseek-v4.md §2). Sequences of a batch run one after
// the other (attention state is per sequence); every op goes through the Backend.
#pragma once

#include <memory>

#include "io/config.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"
#include "model/model.h"

namespace deepinfer::model::v4 {

class DeepseekV4Model final : public Model {
 public:
  static StatusOr<std::unique_ptr<DeepseekV4Model>> load(const std::string& dir,
                                                         const io::ModelConfig& config,
                                                         backend::Backend* backend);
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence_state() const override;
  StatusOr<Tensor> forward(std::span<const SequenceInput> batch) override;

  const Dims& dims() const { return dims_; }

 private:
  // One sequence chunk; writes logits rows into `logits` (all tokens or the last).
  Status forward_sequence(const SequenceInput& in, DeepseekV4State& state, Tensor& logits);
  // One decoder layer over streams [S, hc, H] (in place).
  Status decoder_layer(int layer, Tensor& streams, const Tensor& token_ids,
                       const Tensor& positions, DeepseekV4State& state);

  io::DeepseekV4Config config_;
  Dims dims_{};
  ModelInfo info_;
  backend::Backend* be_ = nullptr;
  std::unique_ptr<Weights> w_;
};

}  // namespace deepinfer::model::v4
