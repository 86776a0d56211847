// DeepseekV4Model: embedding → hc copies → L decoder layers (mHC around attention and MoE) →
// HyperHead → final RMSNorm → lm_head (deepseek-v4.md §2). The sequences of a batch are
// flattened into one step (step.h): row-wise ops run once over all tokens, state work per
// sequence, attention once over every sequence's key list. Every op goes through the Backend, in
// its memory (host or device).
#pragma once

#include <memory>
#include <set>
#include <vector>

#include "dist/expert_parallel_moe.h"
#include "io/config.h"
#include "model/deepseek_v4/attention.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"
#include "model/model.h"

namespace deepinfer::model::v4 {

struct ContextParallelInput;   // context_parallel.h
struct ContextParallelResult;
struct TensorParallelContext;  // tensor_parallel.h

class DeepseekV4Model final : public Model {
 public:
  static StatusOr<std::unique_ptr<DeepseekV4Model>> load(const std::string& dir,
                                                         const io::ModelConfig& config,
                                                         backend::Backend* backend);
  // Expert parallel (dist/expert_parallel_moe.h): this rank loads only its expert slots of every
  // MoE layer and runs the routed experts through `ep->comm` (borrowed; it outlives the model).
  // Every rank of the group must call forward in lockstep (the MoE layers are collectives).
  // ep = nullptr is the single-rank model.
  // Tensor parallel (tensor_parallel.h; tp non-null, not with ep): this rank loads only its
  // shard of the attention heads and of every MLP's intermediate dim, and all-reduces each
  // block's output through `tp->comm` (borrowed; outlives the model). Every rank calls forward
  // in lockstep with the same batch; each gets the full logits. InvalidArgument for a size that
  // does not divide the heads, o_groups and expert width, or whose shards cut scale blocks.
  static StatusOr<std::unique_ptr<DeepseekV4Model>> load(const std::string& dir,
                                                         const io::ModelConfig& config,
                                                         backend::Backend* backend,
                                                         const dist::ExpertParallelContext* ep,
                                                         const TensorParallelContext* tp = nullptr);
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence_state() const override;
  StatusOr<Tensor> forward(std::span<const SequenceInput> batch) override;
  // Fed tokens: placed into the step's inputs on the device (scatter_ids), the hash layers'
  // expert ids looked up there (gather_ids on a device copy of tid2eid), eager or graphed.
  bool accepts_fed_tokens() const override { return true; }

  const Dims& dims() const { return dims_; }
  // Decode steps run from captured CUDA graphs so far (replays; capture steps not counted).
  uint64_t graph_replays() const { return graph_replays_; }
  // Tensor parallel: the group's size (1 without it). Code that needs the whole weights
  // (context parallel prefill) must refuse a model loaded with size > 1.
  int tensor_parallel_size() const { return tp_comm_ != nullptr ? tp_comm_->world_size() : 1; }

  // Expert parallel: the step of a rank with no sequence this step. It takes part in every MoE
  // layer's collectives with zero tokens so the ranks that do have work stay in lockstep
  // (attention data parallel: vLLM's dummy batch). FailedPrecondition without an EP context.
  Status expert_parallel_idle_step();

  // Expert parallel, EPLB (dist/eplb_controller.h): switches every MoE layer to `placement`
  // (same layers, experts and world size as the loaded one; every rank applies the same
  // placement between the same two steps). Per layer whose local slots change: experts this rank
  // already holds are shared (no copy), the others are read again from the checkpoint (`dir`,
  // `config`: the ones the model was loaded from) and placed in the backend's memory (an upload
  // on a device backend), then the layer's expert map is swapped and the old slots are freed —
  // one layer at a time, so the extra memory is at most one layer's new experts. Not collective.
  // FailedPrecondition without an expert-parallel context; InvalidArgument for a placement that
  // does not fit. After an error some layers may have moved: the group must stop.
  Status apply_expert_placement(const dist::ExpertPlacement& placement, const std::string& dir,
                                const io::ModelConfig& config);

  // Context parallelism (context_parallel.h; defined in context_parallel.cpp): one prompt's
  // prefill split over `comm`'s ranks, each computing its own rows; every rank ends with the full
  // sequence state. Collective: every rank calls it with the same prompt.
  StatusOr<ContextParallelResult> prefill_context_parallel(dist::Communicator& comm,
                                                           const ContextParallelInput& in);

 private:
  struct LayerCarry {  // what layer_first leaves for layer_core and layer_last
    Tensor post, comb;  // the attention site's hc coefficients
    Tensor xn;          // the attention input (rmsw(collapsed)); the indexer reads it too
    AttentionProjections proj;
    // Decode fusion (session 12): layer_last leaves its MoE site's expand here instead of
    // writing the streams — streams = post ⊗ (y + routed) + Cᵀ·streams_a (routed undefined: y
    // alone) — and the next site applies it inside its own first kernel (the next layer's
    // layer_first, or head_logits); undefined once applied.
    struct PendingExpand {
      Tensor streams_a, y, routed, post, comb;
    } moe_expand;
  };
  // One decoder layer over streams [S, hc, H] of the whole step (in place): layer_first,
  // layer_core, layer_last (model.cpp; the decode graphs run them apart). prev: the previous
  // layer's carry (null for layer 0), whose pending MoE expand this layer applies.
  // hash_ids: this layer's routed ids when it is a hash layer and the step's tokens are fed
  // (null: looked up from step.tokens on the host).
  Status decoder_layer(int layer, Tensor& streams, const StepBatch& step, LayerCarry* prev,
                       LayerCarry& c, const Tensor* hash_ids = nullptr);
  Status layer_first(int layer, Tensor& streams, const Tensor& positions, LayerCarry* prev,
                     LayerCarry& c);
  Status layer_core(int layer, const StepBatch& step, LayerCarry& c, Tensor& o);
  Status layer_last(int layer, Tensor& streams, const Tensor& positions,
                    std::span<const int32_t> tokens, const Tensor* hash_ids, LayerCarry& c,
                    Tensor& o);
  const RopeTable& rope_of(int layer) const;
  Status embed_streams(const Tensor& ids, const Tensor& copies, Tensor& streams);
  // prev: the last layer's carry (its pending MoE expand), or null.
  Status head_logits(Tensor& streams, const Tensor& picked, LayerCarry* prev, Tensor& logits);
  // Writes a pending MoE expand of `prev` into streams (and clears it).
  Status apply_moe_expand(LayerCarry& prev, Tensor& streams);

  // Decode steps replayed as CUDA graphs (model.cpp forward_graphed): one set of captured
  // segments per batch size S <= kMaxGraphBatch, at most kMaxGraphSets sets (least recently
  // used evicted); sizes whose capture failed stay eager.
  static constexpr int64_t kMaxGraphBatch = 128;
  static constexpr size_t kMaxGraphSets = 8;
  struct GraphSet {
    int64_t S = 0;
    bool captured = false;
    uint64_t last_used = 0;
    Tensor ids, positions, tokens, copies, picked, o;  // fixed inputs, written before each replay
    std::vector<Tensor> hash_ids;              // [L]: defined on hash layers
    // Decode fusion: ids, positions and hash_ids are views of this one I32 buffer
    // [ids | positions | tokens | hash ids of each hash layer | fed pairs], uploaded in one call
    // per step (tokens: each token once, what a fed step's hash ids are looked up from; fed
    // pairs: room for the scatter map of a fed step, S·(hc + 1) pairs).
    Tensor inputs;
    std::vector<std::shared_ptr<backend::Backend::Graph>> graphs;  // [L + 1] segments
    std::vector<LayerCarry> carry;                                 // [L]
    Tensor streams, logits;
  };
  StatusOr<Tensor> forward_graphed(StepBatch& step);
  // Fed steps: hash_ids [S, k] = tid2eid[tokens] on the backend (tokens [S] I32 there, after
  // the scatter), with tid2eid copied to the backend once per hash layer (tid2eid_on_backend_).
  Status hash_ids_on_backend(int layer, const Tensor& tokens, Tensor& hash_ids);
  std::vector<Tensor> tid2eid_on_backend_;
  std::vector<std::unique_ptr<GraphSet>> graph_sets_;
  std::set<int64_t> graph_failed_;
  uint64_t graph_clock_ = 0;
  uint64_t graph_replays_ = 0;

  io::DeepseekV4Config config_;
  Dims dims_{};
  ModelInfo info_;
  backend::Backend* be_ = nullptr;
  std::unique_ptr<Weights> w_;
  std::vector<dist::ExpertParallelMoe> ep_layers_;  // [L] when expert parallel, else empty
  // Tensor parallel (tensor_parallel.cpp): the group, and this rank's dims (nH/W heads, G/W
  // groups, I/W expert width) for the attention and MoE blocks; local_ = dims_ without it.
  dist::Communicator* tp_comm_ = nullptr;
  Dims local_{};
  Status tensor_parallel_reduce(Tensor& y);  // all-reduce a block's partial output (no-op at 1)
};

}  // namespace deepinfer::model::v4
