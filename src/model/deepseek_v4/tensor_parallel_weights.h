// Tensor parallel (tensor_parallel.h): reads one rank's shard of the sharded DeepSeek-V4 matrices
// straight from the (memory-mapped) checkpoint — only the shard's bytes are copied, then put in
// the format the backend computes with, as WeightLoader::load_linear does for whole matrices
// (stored format uploaded when the backend has a kernel for it, else dequantized to F32 on the
// host). Slices that cut through a quantization block (FP8 128×128, FP4 1×32) are refused.
#pragma once

#include <memory>
#include <string>

#include "io/config.h"
#include "io/safetensors.h"
#include "io/weight_registry.h"
#include "model/deepseek_v4/tensor_parallel.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::model::v4 {

class TensorParallelLoader {
 public:
  static StatusOr<std::unique_ptr<TensorParallelLoader>> open(const std::string& dir,
                                                              const io::ModelConfig& config,
                                                              backend::Backend* backend, int rank,
                                                              int world);
  int rank() const { return rank_; }
  int world() const { return world_; }

  // Rows [r0, r1) × columns [c0, c1) of the linear weight `name` (checked against `shape`).
  StatusOr<Weight> load_linear_slice(const std::string& name, const backend::Shape& shape,
                                     int64_t r0, int64_t r1, int64_t c0, int64_t c1);

  // This rank's attention shard (d: the full dims): wq_b [nH·D/W, Rq], wo_a [G·Ro/W, nH·D/G],
  // wo_b [H, G·Ro/W], and a.sinks (loaded whole, [nH] F32 host) cut to [nH/W].
  // `prefix` = "layers.{i}.attn.".
  Status load_attention(const Dims& d, const std::string& prefix, AttentionWeights& a);
  // One SwiGLU MLP (routed or shared expert) sharded on its intermediate dim I (d: full dims):
  // gate_up [2I/W, H] (this rank's w1 rows, then its w3 rows), down [H, I/W] (w2 columns).
  // `prefix` names prefix + "w1" / "w3" / "w2".
  Status load_mlp(const Dims& d, const std::string& prefix, Weight& gate_up, Weight& down);

 private:
  struct Slice;  // raw bytes of one weight's slice (+ its scale's)
  StatusOr<Slice> slice(const std::string& name, const backend::Shape& shape, int64_t r0,
                        int64_t r1, int64_t c0, int64_t c1);
  StatusOr<Weight> finish(const Slice& s, bool force_f32);

  std::unique_ptr<io::Checkpoint> ckpt_;
  std::unique_ptr<io::WeightRegistry> registry_;
  backend::Backend* be_ = nullptr;
  std::unique_ptr<backend::Backend> host_;  // dequantizes when be_ is a device backend
  int rank_ = 0, world_ = 1;
};

// Checks a tensor-parallel request (a communicator, no expert parallel, sizes dividing the
// model's: check_tensor_parallel_dims) and opens this rank's loader (rank and world size of
// tp.comm). InvalidArgument / Unimplemented naming what is wrong.
StatusOr<std::unique_ptr<TensorParallelLoader>> open_tensor_parallel(
    const std::string& dir, const io::ModelConfig& config, backend::Backend* backend,
    const Dims& d, bool expert_parallel, const TensorParallelContext& tp);

}  // namespace deepinfer::model::v4
