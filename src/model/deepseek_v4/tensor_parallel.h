// Tensor parallelism for DeepSeek-V4 (vLLM's --tensor-parallel-size; docs/dist.md "Tensor
// parallelism"). W ranks of one Communicator each hold a 1/W shard of the big matrices and run
// every token of the step:
//
//   attention  wq_b rows by head (heads [r·nH/W, (r+1)·nH/W)), sinks by head, wo_a rows by output
//              group (groups [r·G/W, (r+1)·G/W): whole groups, W | G), wo_b columns (its input,
//              the rank's groups' Ro-wide latents) → partial y, all-reduce (sum over ranks).
//   MoE        the shared expert and every routed expert on the intermediate dim: w1/w3 rows
//              [r·I/W, (r+1)·I/W), w2 the same columns → partial y (shared + routed), one
//              all-reduce per MoE block.
//   replicated wq_a, q_norm, wkv, kv_norm, compressors, indexer, router (gate, bias, tid2eid),
//              norms, mHC, embedding, HyperHead, lm_head.
//
// Every rank computes the same replicated activations (the all-reduce hands each rank the same
// sum), so the router picks the same experts everywhere. Each rank reads only its shard of the
// sharded matrices from the checkpoint (tensor_parallel_weights.h); the quantization blocks must
// not straddle a shard boundary (FP8 128×128, FP4 1×32 along K), else the load is refused.
// The model code runs unchanged with this rank's dims (nH/W heads, G/W groups, I/W width).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "model/model.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::dist {
class Communicator;
}

namespace deepinfer::model::v4 {

struct TensorParallelContext {
  dist::Communicator* comm = nullptr;  // borrowed; rank and world size come from it
};

// InvalidArgument naming the sizes unless `world` divides num_attention_heads, o_groups and
// moe_intermediate_size (world >= 1).
Status check_tensor_parallel_dims(const Dims& d, int world);

// This rank's dims: nH/W heads, G/W groups, I/W expert width; everything else as `d`.
Dims tensor_parallel_local_dims(const Dims& d, int world);

// The half-open range [begin, end) of shard `rank` of `n` items split into `world` equal parts.
struct ShardRange {
  int64_t begin = 0, end = 0;
};
inline ShardRange shard_range(int64_t n, int rank, int world) {
  return {n / world * rank, n / world * (rank + 1)};
}

// For the engine (the tensor-parallel counterpart of model::load_model): reads dir/config.json
// and loads the DeepSeek-V4 model as rank comm->rank() of comm->world_size() (comm borrowed; it
// must outlive the model). InvalidArgument for another model family or no communicator.
StatusOr<std::unique_ptr<Model>> load_tensor_parallel_model(const std::string& dir,
                                                            backend::Backend* backend,
                                                            dist::Communicator* comm);

}  // namespace deepinfer::model::v4
