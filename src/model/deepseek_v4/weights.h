// DeepSeek-V4 parameters (names and shapes: deepseek-v4.md §8), plus the derived dimensions every
// block uses. Linear layers are `Weight`s in the format the backend computes with (the stored
// BF16/FP8/FP4 on the GPU, F32 on the CPU); norms, biases and the like are F32 tensors. Loaded by
// load_weights() (weights.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "io/config.h"
#include "model/rope.h"
#include "model/weight_loader.h"

namespace deepinfer::dist {
struct ExpertParallelContext;
}

namespace deepinfer::model::v4 {

class TensorParallelLoader;  // tensor_parallel_weights.h

using backend::Tensor;
using backend::Weight;

struct Dims {
  int64_t H, V, L, nH, D, r, Rq, G, Ro, W, nI, cI, topk, hc, sinkhorn_iters, E, k, I;
  float eps, hc_eps, swiglu_limit, routed_scaling;
};
Dims dims_from_config(const io::DeepseekV4Config& c);

struct HcSiteWeights {
  Tensor fn;     // [(2+hc)·hc, hc·H] (HyperHead: [hc, hc·H])
  Tensor base;   // [(2+hc)·hc]       (HyperHead: [hc])
  Tensor scale;  // [3]               (HyperHead: [1])
};

struct CompressorWeights {
  int64_t m = 0;        // compression rate
  int64_t coff = 1;     // 2 = overlapping (CSA), 1 = HCA
  int64_t d = 0;        // entry width (D, or cI for the indexer)
  Weight wkv;           // [coff·d, H]
  Weight wgate;         // [coff·d, H]
  Tensor ape;           // [m, coff·d] position bias
  Tensor norm;          // [d]
};

struct IndexerWeights {
  CompressorWeights compressor;  // d = cI, overlapping
  Weight wq_b;                   // [nI·cI, Rq]
  Weight weights_proj;           // [nI, H]
};

struct AttentionWeights {
  io::AttentionType type = io::AttentionType::kSliding;
  Weight wq_a;    // [Rq, H]
  Tensor q_norm;  // [Rq]
  Weight wq_b;    // [nH·D, Rq]
  Weight wkv;     // [D, H]
  Tensor kv_norm; // [D]
  Weight wo_a;    // [G·Ro, nH·D/G]
  Weight wo_b;    // [H, G·Ro]
  Tensor sinks;   // [nH]
  std::unique_ptr<CompressorWeights> compressor;  // CSA / HCA
  std::unique_ptr<IndexerWeights> indexer;        // CSA
};

struct MoeWeights {
  bool hash = false;
  Weight gate;            // [E, H]
  Tensor bias;            // [E] (moe layers)
  Tensor tid2eid;         // [V, k] I32 (hash layers)
  backend::ExpertSet experts;  // E × gate_up [2I, H] (w1 rows, then w3 rows), E × down [H, I] (w2)
  Weight shared_gate_up;  // [2I, H]
  Weight shared_down;     // [H, I]
};

struct LayerWeights {
  HcSiteWeights attn_hc, ffn_hc;
  Tensor attn_norm;  // [H] input_layernorm
  Tensor ffn_norm;   // [H] post_attention_layernorm
  AttentionWeights attn;
  MoeWeights moe;
};

struct Weights {
  Tensor embed;    // [V, H]
  std::vector<LayerWeights> layers;
  HcSiteWeights hc_head;
  Tensor norm;     // [H]
  Weight head;     // [V, H]
  RopeTable rope_main, rope_compress;
};

// Loads every weight: linear layers through WeightLoader::load_linear (stored format in backend
// memory when the backend computes with it), the rest as F32 on the host (see place_weights).
// With `ep` (expert parallel), each MoE layer's `experts` holds only this rank's slots, in local
// slot order (ep->local_experts(layer); a replicated expert's slots share one loaded copy).
// With `tp` (tensor parallel), the attention heads' matrices and every MLP come from it: this
// rank's shard only (tensor_parallel.h); `d` stays the full dims.
StatusOr<std::unique_ptr<Weights>> load_weights(const io::DeepseekV4Config& c, const Dims& d,
                                                WeightLoader& loader, backend::Backend& be,
                                                const dist::ExpertParallelContext* ep = nullptr,
                                                TensorParallelLoader* tp = nullptr);
// EPLB (DeepseekV4Model::apply_expert_placement): one MoE layer's local slots for `experts`
// (logical expert of each local slot). A slot whose expert this rank already holds in `current`
// (slots named by `current_experts`) shares that weight — no copy; every other expert is read
// from the checkpoint through `loader` once (replicas share it) and placed in `be`'s memory.
// Runs prepare_experts on the result. num_loaded (optional): experts read from the checkpoint.
StatusOr<backend::ExpertSet> reload_expert_slots(const Dims& d, WeightLoader& loader,
                                                 backend::Backend& be, int64_t layer,
                                                 const std::vector<int32_t>& experts,
                                                 const backend::ExpertSet& current,
                                                 const std::vector<int32_t>& current_experts,
                                                 int* num_loaded = nullptr);
// Moves the weights into `be`'s memory (a no-op on host backends); tid2eid stays on the host.
Status place_weights(backend::Backend& be, Weights& w);

}  // namespace deepinfer::model::v4
