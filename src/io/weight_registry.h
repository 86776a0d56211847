// Weight registry: checkpoint tensor names -> one canonical naming, with typed, shape-checked
// views (no copies).
//
//   DI_ASSIGN_OR_RETURN(auto ckpt, io::Checkpoint::open(dir));
//   DI_ASSIGN_OR_RETURN(io::ModelConfig cfg, io::load_model_config(dir));
//   DI_ASSIGN_OR_RETURN(auto reg, io::WeightRegistry::build(*ckpt, cfg));
//   DI_ASSIGN_OR_RETURN(const io::WeightEntry* wq_a, reg->get(io::layer_weight(3, "attn.wq_a")));
//   // wq_a->weight: [Rq, H]; wq_a->scale: the FP8 block scales when the weight is FP8
//
// Views point into the checkpoint's mapped files: the Checkpoint must outlive the registry.
//
// ## Canonical names (DeepSeek-V4; `{i}` = layer, `{e}` = routed expert, `{j}` = MTP layer)
//
//   embed [V,H]   head [V,H]   norm [H]   hc_head.fn [hc,hc·H]   hc_head.base [hc]   hc_head.scale [1]
//   layers.{i}.attn_norm [H]            layers.{i}.ffn_norm [H]
//   layers.{i}.hc_attn.{fn,base,scale}  layers.{i}.hc_ffn.{fn,base,scale}  [(2+hc)hc, hc·H] / [(2+hc)hc] / [3]
//   layers.{i}.attn.wq_a [Rq,H]   .q_norm [Rq]   .wq_b [nH·D,Rq]   .wkv [D,H]   .kv_norm [D]
//   layers.{i}.attn.wo_a [G·Ro, nH·D/G]   .wo_b [H, G·Ro]   .sinks [nH]
//   CSA/HCA:  layers.{i}.attn.compressor.{wkv,wgate} [c·D,H]  .norm [D]  .ape [m, c·D]   (c = 2 CSA, 1 HCA)
//   CSA:      layers.{i}.attn.indexer.compressor.{wkv,wgate} [2cI,H]  .norm [cI]  .ape [m, 2cI]
//             layers.{i}.attn.indexer.wq_b [nI·cI, Rq]   layers.{i}.attn.indexer.weights_proj [nI, H]
//   layers.{i}.ffn.gate [E,H]   moe: layers.{i}.ffn.gate_bias [E]   hash: layers.{i}.ffn.tid2eid [V,k] (int)
//   layers.{i}.ffn.experts.{e}.w1 [I,H] (gate)  .w3 [I,H] (up)  .w2 [H,I] (down)
//   layers.{i}.ffn.shared.w1 [I,H]  .w3 [I,H]  .w2 [H,I]
//   MTP (optional, kept for speculative decoding): mtp.{j}.<every layer name above without
//   "layers.{i}.">, plus mtp.{j}.e_proj [H,H], .h_proj [H,H], .enorm [H], .hnorm [H], .norm [H],
//   mtp.{j}.hc_head.{fn,base,scale}.
//
// Accepted checkpoint spellings (deepseek-v4.md §8.1-§8.3), each with an optional "model." prefix:
// DeepSeek's upstream names (embed.weight, layers.{i}.attn.wq_a.weight, attn.kv_norm,
// ffn.experts.{e}.w1.weight, hc_attn_fn, ...), the save_pretrained quirks (embed_tokens,
// hc_head.hc_fn, attn.norm = attn.kv_norm), and HF's in-memory names (self_attn.q_a_proj,
// mlp.experts.gate_up_proj [E,2I,H] / down_proj [E,H,I] stacked, attn_hc.fn, ...). A stacked
// expert tensor is served as per-expert views (slice e of dim 0, and rows [0,I) / [I,2I) of it
// for w1 / w3): contiguous, no copy.
// Quantised weights: FP8 E4M3 `[out,in]` with a `*.scale` / `*.weight_scale_inv` tensor
// (F8_E8M0 or F32) of shape [ceil(out/b0), ceil(in/b1)] (b = quantization_config
// weight_block_size, default 128x128); FP4 routed experts stored I8/U8 `[out, in/2]` (or F4
// `[out,in]`) with scales [out, in/32]. FP4 views are presented as dtype kF4E2M1 with the logical
// shape [out, in].
//
// ## Canonical names (Llama)
//   embed [V,H]  head [V,H] (= embed when tie_word_embeddings and lm_head is absent)  norm [H]
//   layers.{i}.attn_norm [H]  layers.{i}.ffn_norm [H]
//   layers.{i}.attn.wq [nH·hd,H]  .wk [nKV·hd,H]  .wv [nKV·hd,H]  .wo [H,nH·hd]  (+ .bq .bk .bv .bo)
//   layers.{i}.ffn.w1 [I,H] (gate)  .w3 [I,H] (up)  .w2 [H,I] (down)                (+ .b1 .b3 .b2)
//
// Errors (kInvalidArgument): missing and unexpected tensors are listed together in one message
// (sorted, at most 50 of each, with the total counts); then wrong shapes / dtypes / scales, all
// listed; each names the checkpoint tensor, its file and what was expected.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtypes.h"
#include "common/status.h"
#include "io/config.h"
#include "io/safetensors.h"

namespace deepinfer::io {

// A typed view of (part of) one checkpoint tensor.
struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;     // logical shape (FP4: [out, in], two elements per byte)
  const uint8_t* data = nullptr;  // first byte (may be unaligned: read with memcpy)
  uint64_t nbytes = 0;
  std::string source;             // checkpoint tensor name, plus "[e]" / "[e, rows a:b]" for slices
  std::string file;               // file it lives in
  int64_t numel() const;
};

struct WeightEntry {
  std::string name;                 // canonical name
  TensorView weight;
  std::optional<TensorView> scale;  // FP8 block scales / FP4 group scales
  bool tied = false;                // Llama head served by the embedding
};

class WeightRegistry {
 public:
  // Maps every tensor of `ckpt` for the model `cfg` describes and checks names, shapes, dtypes.
  static StatusOr<std::unique_ptr<WeightRegistry>> build(const Checkpoint& ckpt,
                                                         const ModelConfig& cfg);

  const WeightEntry* find(std::string_view canonical) const;  // nullptr if absent
  // NotFound naming the canonical name when absent.
  StatusOr<const WeightEntry*> get(std::string_view canonical) const;
  const std::map<std::string, WeightEntry, std::less<>>& entries() const { return entries_; }
  // Checkpoint tensors that are known but carry no parameters (e.g. rotary_emb.inv_freq), and
  // MTP tensors with names deepinfer does not know (kept as mtp.{j}.<name as stored>).
  const std::vector<std::string>& skipped() const { return skipped_; }

 private:
  friend class WeightRegistryBuilder;
  std::map<std::string, WeightEntry, std::less<>> entries_;
  std::vector<std::string> skipped_;
};

// "layers.{i}." + suffix, "mtp.{j}." + suffix, "layers.{i}.ffn.experts.{e}." + w.
std::string layer_weight(int64_t layer, std::string_view suffix);
std::string mtp_weight(int64_t mtp_layer, std::string_view suffix);
std::string expert_weight(int64_t layer, int64_t expert, std::string_view w);

// Name mapping alone (exposed for tests and tools): the canonical name of one DeepSeek-V4
// checkpoint tensor name, or nullopt. `is_scale` is set for quantisation scale tensors.
// Stacked HF expert tensors map to "layers.{i}.ffn.experts.*.gate_up" / ".down".
std::optional<std::string> canonical_deepseek_v4_name(std::string_view checkpoint_name,
                                                      bool* is_scale);
std::optional<std::string> canonical_llama_name(std::string_view checkpoint_name);

}  // namespace deepinfer::io
