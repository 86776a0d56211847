#include "model/deepseek_v4/tensor_parallel_weights.h"

#include <cstring>
#include <vector>

#include "dist/communicator.h"

namespace deepinfer::model::v4 {

using backend::Shape;

namespace {

int64_t pow2_at_least(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

std::string range_str(int64_t a, int64_t b) {
  std::string s = std::to_string(a);  // (GCC 12 warns on "[" + std::string: a false positive)
  s.insert(s.begin(), '[');
  return s + ", " + std::to_string(b) + ")";
}

// Copies rows [r0, r1) × columns [c0, c1) of the row-major [N, K] matrix at `data` (`bits` per
// element; c0, c1 whole bytes) into `out`.
void copy_block(const uint8_t* data, int bits, int64_t K, int64_t r0, int64_t r1, int64_t c0,
                int64_t c1, std::vector<uint8_t>& out) {
  const int64_t row_bytes = K * bits / 8, b0 = c0 * bits / 8, nb = (c1 - c0) * bits / 8;
  out.resize(static_cast<size_t>((r1 - r0) * nb));
  for (int64_t r = r0; r < r1; ++r)
    std::memcpy(out.data() + (r - r0) * nb, data + r * row_bytes + b0, static_cast<size_t>(nb));
}

}  // namespace

struct TensorParallelLoader::Slice {
  std::string where;           // "file: tensor name rows [a, b) cols [c, d)"
  DType dtype = DType::kF32;   // stored dtype (FP4: kF4E2M1, logical shape)
  Shape shape;                 // [rows, cols] of the slice
  std::vector<uint8_t> bytes;
  bool scaled = false;
  DType scale_dtype = DType::kF32;
  Shape scale_shape;
  std::vector<uint8_t> scale_bytes;
  int64_t block_rows = 1, block_cols = 1;
};

StatusOr<std::unique_ptr<TensorParallelLoader>> TensorParallelLoader::open(
    const std::string& dir, const io::ModelConfig& config, backend::Backend* backend, int rank,
    int world) {
  if (backend == nullptr) return InvalidArgument("tensor parallel loader: no backend");
  if (world < 1 || rank < 0 || rank >= world)
    return InvalidArgument("tensor parallel loader: rank " + std::to_string(rank) +
                           " outside a world of " + std::to_string(world));
  auto l = std::unique_ptr<TensorParallelLoader>(new TensorParallelLoader());
  DI_ASSIGN_OR_RETURN(l->ckpt_, io::Checkpoint::open(dir));
  DI_ASSIGN_OR_RETURN(l->registry_, io::WeightRegistry::build(*l->ckpt_, config));
  l->be_ = backend;
  l->rank_ = rank;
  l->world_ = world;
  return l;
}

StatusOr<TensorParallelLoader::Slice> TensorParallelLoader::slice(const std::string& name,
                                                                  const Shape& shape, int64_t r0,
                                                                  int64_t r1, int64_t c0,
                                                                  int64_t c1) {
  DI_ASSIGN_OR_RETURN(const io::WeightEntry* e, registry_->get(name));
  const io::TensorView& v = e->weight;
  const std::string where = v.file + ": tensor " + v.source + " (" + name + ")";
  if (v.shape.size() != 2 || shape.size() != 2 || v.shape[0] != shape[0] || v.shape[1] != shape[1])
    return InvalidArgument(where + ": expected shape " + backend::shape_str(shape) + ", got " +
                           dtype_name(v.dtype) + backend::shape_str(v.shape));
  const int64_t N = v.shape[0], K = v.shape[1];
  if (!(0 <= r0 && r0 < r1 && r1 <= N && 0 <= c0 && c0 < c1 && c1 <= K))
    return OutOfRange(where + ": slice rows " + range_str(r0, r1) + " cols " + range_str(c0, c1) +
                      " outside " + backend::shape_str(v.shape));
  Slice s;
  s.where = where + " rows " + range_str(r0, r1) + " cols " + range_str(c0, c1);
  s.dtype = v.dtype;
  s.shape = {r1 - r0, c1 - c0};
  const int bits = dtype_bits(v.dtype);
  if ((c0 * bits) % 8 != 0 || (c1 * bits) % 8 != 0)
    return InvalidArgument(s.where + ": the columns cut a byte of " + dtype_name(v.dtype));
  if (e->scale) {
    const io::TensorView& sv = *e->scale;
    if (sv.shape.size() != 2 || sv.shape[0] <= 0 || sv.shape[1] <= 0)
      return InvalidArgument(where + ": scale must be 2-D, got " + backend::shape_str(sv.shape));
    s.scaled = true;
    s.block_rows = pow2_at_least((N + sv.shape[0] - 1) / sv.shape[0]);  // FP8: 128, FP4: 1
    s.block_cols = pow2_at_least((K + sv.shape[1] - 1) / sv.shape[1]);  // FP8: 128, FP4: 32
    auto aligned = [](int64_t a, int64_t b, int64_t n, int64_t blk) {
      return a % blk == 0 && (b % blk == 0 || b == n);
    };
    if (!aligned(r0, r1, N, s.block_rows) || !aligned(c0, c1, K, s.block_cols))
      return InvalidArgument(
          s.where + ": the tensor-parallel shard (size " + std::to_string(world_) +
          ") cuts through the " + dtype_name(v.dtype) + " scale blocks of " +
          std::to_string(s.block_rows) + "x" + std::to_string(s.block_cols) +
          "; choose a tensor-parallel size whose shards are whole blocks");
    const int64_t sr0 = r0 / s.block_rows, sr1 = (r1 + s.block_rows - 1) / s.block_rows;
    const int64_t sc0 = c0 / s.block_cols, sc1 = (c1 + s.block_cols - 1) / s.block_cols;
    s.scale_dtype = sv.dtype;
    s.scale_shape = {sr1 - sr0, sc1 - sc0};
    copy_block(sv.data, dtype_bits(sv.dtype), sv.shape[1], sr0, sr1, sc0, sc1, s.scale_bytes);
  }
  copy_block(v.data, bits, K, r0, r1, c0, c1, s.bytes);
  return s;
}

// The slice in the format the backend computes with (WeightLoader::load_linear's rule).
StatusOr<Weight> TensorParallelLoader::finish(const Slice& s, bool force_f32) {
  const bool scale_ok =
      !s.scaled || s.scale_dtype == DType::kF8E8M0 || s.scale_dtype == DType::kF32;
  const bool keep = !force_f32 && !be_->host_memory() && s.dtype != DType::kF32 && scale_ok &&
                    be_->supports_op(backend::OpKind::kMatmul, s.dtype) &&
                    s.scaled == (s.dtype != DType::kBF16);
  const backend::Tensor src = backend::Tensor::borrow(s.bytes.data(), s.dtype, s.shape);
  const backend::Tensor scale =
      s.scaled ? backend::Tensor::borrow(s.scale_bytes.data(), s.scale_dtype, s.scale_shape)
               : backend::Tensor();
  if (keep) {
    Weight w;
    DI_ASSIGN_OR_RETURN(w.w, be_->alloc(s.dtype, s.shape));
    DI_RETURN_IF_ERROR(be_->upload(src, w.w));
    if (s.scaled) {
      DI_ASSIGN_OR_RETURN(w.scale, be_->alloc(s.scale_dtype, s.scale_shape));
      DI_RETURN_IF_ERROR(be_->upload(scale, w.scale));
      w.block_rows = s.block_rows;
      w.block_cols = s.block_cols;
    }
    return w;
  }
  backend::Backend* host = be_;
  if (!be_->host_memory()) {
    if (!host_) host_ = backend::make_cpu_backend();
    host = host_.get();
  }
  backend::Tensor out = backend::Tensor::empty(DType::kF32, s.shape);
  Status st = host->dequantize(src, s.scaled ? &scale : nullptr, s.block_rows, s.block_cols, out);
  if (!st.ok()) return st.with_context(s.where);
  return Weight::of(std::move(out));
}

StatusOr<Weight> TensorParallelLoader::load_linear_slice(const std::string& name,
                                                         const Shape& shape, int64_t r0,
                                                         int64_t r1, int64_t c0, int64_t c1) {
  DI_ASSIGN_OR_RETURN(Slice s, slice(name, shape, r0, r1, c0, c1));
  return finish(s, false);
}

Status TensorParallelLoader::load_attention(const Dims& d, const std::string& prefix,
                                            AttentionWeights& a) {
  DI_RETURN_IF_ERROR(check_tensor_parallel_dims(d, world_));
  const ShardRange q = shard_range(d.nH * d.D, rank_, world_);   // this rank's heads' q rows
  const ShardRange o = shard_range(d.G * d.Ro, rank_, world_);   // its groups' latent rows
  DI_ASSIGN_OR_RETURN(a.wq_b, load_linear_slice(prefix + "wq_b", {d.nH * d.D, d.Rq}, q.begin,
                                                q.end, 0, d.Rq));
  const int64_t group_in = d.nH * d.D / d.G;
  DI_ASSIGN_OR_RETURN(a.wo_a, load_linear_slice(prefix + "wo_a", {d.G * d.Ro, group_in}, o.begin,
                                                o.end, 0, group_in));
  DI_ASSIGN_OR_RETURN(a.wo_b, load_linear_slice(prefix + "wo_b", {d.H, d.G * d.Ro}, 0, d.H,
                                                o.begin, o.end));
  // The sinks: `a.sinks` arrives whole ([nH] F32 on the host, a tiny vector); keep this rank's.
  if (!a.sinks.defined() || a.sinks.on_device() || a.sinks.dtype() != DType::kF32 ||
      a.sinks.numel() != d.nH)
    return InvalidArgument(prefix + "sinks: expected the whole [" + std::to_string(d.nH) +
                           "] F32 host vector before sharding");
  const ShardRange h = shard_range(d.nH, rank_, world_);
  backend::Tensor sinks = backend::Tensor::empty(DType::kF32, {h.end - h.begin});
  std::memcpy(sinks.data<float>(), a.sinks.data<float>() + h.begin, sinks.nbytes());
  a.sinks = std::move(sinks);
  return OkStatus();
}

Status TensorParallelLoader::load_mlp(const Dims& d, const std::string& prefix, Weight& gate_up,
                                      Weight& down) {
  DI_RETURN_IF_ERROR(check_tensor_parallel_dims(d, world_));
  const ShardRange i = shard_range(d.I, rank_, world_);
  DI_ASSIGN_OR_RETURN(Slice g, slice(prefix + "w1", {d.I, d.H}, i.begin, i.end, 0, d.H));
  DI_ASSIGN_OR_RETURN(Slice u, slice(prefix + "w3", {d.I, d.H}, i.begin, i.end, 0, d.H));
  // Fused [gate rows; up rows] in the stored format when both share it and no scale block
  // straddles the seam (as weights.cpp's load_fused), else both as F32.
  const bool same = g.dtype == u.dtype && g.scaled == u.scaled &&
                    g.block_rows == u.block_rows && g.block_cols == u.block_cols &&
                    (!g.scaled || (g.scale_dtype == u.scale_dtype &&
                                   g.shape[0] % g.block_rows == 0));
  if (same) {
    Slice f = g;
    f.shape[0] += u.shape[0];
    f.bytes.insert(f.bytes.end(), u.bytes.begin(), u.bytes.end());
    if (f.scaled) {
      f.scale_shape[0] += u.scale_shape[0];
      f.scale_bytes.insert(f.scale_bytes.end(), u.scale_bytes.begin(), u.scale_bytes.end());
    }
    DI_ASSIGN_OR_RETURN(gate_up, finish(f, false));
  } else {
    DI_ASSIGN_OR_RETURN(Weight a, finish(g, true));
    DI_ASSIGN_OR_RETURN(Weight b, finish(u, true));
    backend::Tensor cat = backend::Tensor::empty(DType::kF32, {a.rows() + b.rows(), d.H});
    std::memcpy(cat.data<float>(), a.w.data<float>(), a.w.nbytes());
    std::memcpy(cat.data<float>() + a.w.numel(), b.w.data<float>(), b.w.nbytes());
    gate_up = Weight::of(std::move(cat));
  }
  DI_ASSIGN_OR_RETURN(down, load_linear_slice(prefix + "w2", {d.H, d.I}, 0, d.H, i.begin, i.end));
  return OkStatus();
}

StatusOr<std::unique_ptr<TensorParallelLoader>> open_tensor_parallel(
    const std::string& dir, const io::ModelConfig& config, backend::Backend* backend,
    const Dims& d, bool expert_parallel, const TensorParallelContext& tp) {
  if (tp.comm == nullptr) return InvalidArgument("deepseek_v4: tensor-parallel context without a communicator");
  if (expert_parallel)
    return Unimplemented("deepseek_v4: tensor parallel together with expert parallel is not "
                         "implemented; use --tensor-parallel-size with the routed experts "
                         "sharded on their width, or expert parallel over data-parallel ranks");
  const int world = tp.comm->world_size();
  DI_RETURN_IF_ERROR(check_tensor_parallel_dims(d, world));
  return TensorParallelLoader::open(dir, config, backend, tp.comm->rank(), world);
}

}  // namespace deepinfer::model::v4
