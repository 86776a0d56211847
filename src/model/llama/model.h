// Dense Llama family (GQA, RoPE in HF's rotate-half layout, SwiGLU, optionally tied embeddings)
// through the same Backend ops as DeepSeek-V4. Per-sequence state: every layer's K and V rows.
#pragma once

#include <memory>
#include <vector>

#include "io/config.h"
#include "model/model.h"
#include "model/rope.h"

namespace deepinfer::model::llama {

using backend::Tensor;

// Contiguous KV cache of one sequence: per layer K and V rows [num_tokens, nKV·hd].
// Per-sequence KV cache in the backend's memory: per layer K and V [capacity, nKV·hd], rows
// [0, num_tokens) valid, grown geometrically.
class LlamaState final : public SequenceState {
 public:
  LlamaState(int64_t num_layers, int64_t kv_width, backend::Backend* be)
      : kv_width_(kv_width), be_(be), k_(num_layers), v_(num_layers) {}
  int64_t num_tokens() const override { return num_tokens_; }
  // Makes room for `rows` rows in `layer` (keeping the valid ones).
  Status reserve(int layer, int64_t rows);
  Tensor& keys(int layer) { return k_[layer]; }
  Tensor& values(int layer) { return v_[layer]; }
  void advance(int64_t n) { num_tokens_ += n; }
  int64_t kv_width() const { return kv_width_; }

 private:
  int64_t num_tokens_ = 0;
  int64_t kv_width_;
  backend::Backend* be_;
  std::vector<Tensor> k_, v_;
};

class LlamaModel final : public Model {
 public:
  static StatusOr<std::unique_ptr<LlamaModel>> load(const std::string& dir,
                                                    const io::ModelConfig& config,
                                                    backend::Backend* backend);
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence_state() const override;
  StatusOr<Tensor> forward(std::span<const SequenceInput> batch) override;

 private:
  struct Layer {
    Tensor attn_norm;  // [H]
    Tensor wq;         // [nH·hd, H]
    Tensor wk, wv;     // [nKV·hd, H]
    Tensor wo;         // [H, nH·hd]
    Tensor ffn_norm;   // [H]
    Tensor gate_up;    // [2I, H] gate rows then up rows
    Tensor down;       // [H, I]
  };
  Status forward_sequence(const SequenceInput& in, LlamaState& state, Tensor& logits);

  io::LlamaConfig c_;
  ModelInfo info_;
  backend::Backend* be_ = nullptr;
  Tensor embed_, norm_, head_;  // [V, H], [H], [V, H] (head = embed when tied)
  std::vector<Layer> layers_;
  RopeTable rope_;
};

}  // namespace deepinfer::model::llama
