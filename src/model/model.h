// The model interface: a straight-line forward pass over a batch of sequences, each with its own
// per-sequence state (KV cache and friends), returning logits.
//
//   DI_ASSIGN_OR_RETURN(auto model, load_model("tests/data/models/v4tiny_b", backend.get()));
//   auto state = model->new_sequence_state();
//   SequenceInput in{tokens, state.get(), /*all_logits=*/false};
//   DI_ASSIGN_OR_RETURN(Tensor logits, model->forward({&in, 1}));   // [1, V]
//
// One-shot prefill, chunked prefill and single-token decode are the same call: `forward` consumes
// the given tokens at positions state->num_tokens() ... + n - 1 and advances the state.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"

namespace deepinfer::model {

using backend::Tensor;

// State of one sequence. Each model family derives its own (deepseek_v4/state.h, llama/...).
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  virtual int64_t num_tokens() const = 0;  // tokens consumed so far (= next position)
};

struct SequenceInput {
  std::span<const int32_t> tokens;  // [n] token ids, n >= 1
  SequenceState* state = nullptr;   // advanced by n on success
  bool all_logits = false;          // logits for every token (else only for the last one)
  // Fed tokens (docs/engine.md "Token ids on the device"): when set, the last token is not known
  // on the host (tokens.back() is a placeholder, any value): it is element `fed_row` of `fed_ids`
  // [m] I32 in the backend's memory — the ids the previous step sampled there, not yet
  // downloaded. Every fed sequence of a batch names the same tensor. Models whose
  // accepts_fed_tokens() is false refuse it.
  const Tensor* fed_ids = nullptr;
  int64_t fed_row = -1;
};

struct ModelInfo {
  std::string family;      // "deepseek_v4", "llama"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  virtual std::unique_ptr<SequenceState> new_sequence_state() const = 0;
  // logits [R, V] F32, R = Σ over the batch of (all_logits ? n : 1), rows in batch order.
  // The whole batch is validated first: a state of the wrong family, an empty token list or an
  // out-of-vocabulary id is an error (kInvalidArgument / kOutOfRange) that leaves every state
  // untouched. (An op failure after validation — a bug, not an input error — may leave earlier
  // sequences of the batch advanced.)
  virtual StatusOr<Tensor> forward(std::span<const SequenceInput> batch) = 0;
  // Whether forward() takes fed tokens (SequenceInput::fed_ids): the engine then queues step N+1
  // before step N's sampled ids reach the host.
  virtual bool accepts_fed_tokens() const { return false; }

  // Where forward() leaves the logits: false (default) in host memory; true in the backend's
  // memory (a device backend skips the download; the engine samples there and downloads only the
  // token ids, docs/engine.md "Sampling on the device"). Host backends return host tensors either way.
  void set_logits_on_device(bool on) { logits_on_device_ = on; }
  bool logits_on_device() const { return logits_on_device_; }

 protected:
  bool logits_on_device_ = false;
};

// Loads the model in `dir` (config.json + safetensors) for `backend` (not owned; must outlive the
// model). Dispatches on the config's family (DeepSeek-V4 or Llama).
StatusOr<std::unique_ptr<Model>> load_model(const std::string& dir, backend::Backend* backend);

}  // namespace deepinfer::model
