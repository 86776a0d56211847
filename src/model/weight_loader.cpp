#include "model/weight_loader.h"

#include <cstring>

namespace deepinfer::model {

using backend::Shape;
using backend::Tensor;

StatusOr<std::unique_ptr<WeightLoader>> WeightLoader::open(const std::string& dir,
                                                           const io::ModelConfig& config,
                                                           backend::Backend* backend) {
  auto w = std::unique_ptr<WeightLoader>(new WeightLoader());
  DI_ASSIGN_OR_RETURN(w->ckpt_, io::Checkpoint::open(dir));
  DI_ASSIGN_OR_RETURN(w->registry_, io::WeightRegistry::build(*w->ckpt_, config));
  w->dir_ = dir;
  w->backend_ = backend;
  return w;
}

namespace {

bool shape_matches(const Shape& got, const Shape& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (want[i] >= 0 && want[i] != got[i]) return false;
  return true;
}

std::string where(const io::TensorView& v) { return v.file + ": tensor " + v.source; }

}  // namespace

StatusOr<Tensor> WeightLoader::convert(const io::WeightEntry& e, const Shape& shape) {
  const io::TensorView& v = e.weight;
  if (!shape_matches(v.shape, shape))
    return InvalidArgument(where(v) + " (" + e.name + "): expected shape " + backend::shape_str(shape) +
                           ", got " + dtype_name(v.dtype) + backend::shape_str(v.shape));
  // Dequantize as a 2-D [rows, last] matrix (leading dims flattened; a vector is one row).
  Shape flat = v.shape.empty() ? Shape{1, 1} : Shape{1, v.shape.back()};
  for (size_t i = 0; i + 1 < v.shape.size(); ++i) flat[0] *= v.shape[i];
  Tensor src = Tensor::borrow(v.data, v.dtype, flat);
  Tensor out = Tensor::empty(DType::kF32, flat);
  Tensor scale;
  int64_t br = 1, bc = 1;
  if (e.scale) {
    const io::TensorView& s = *e.scale;
    if (s.shape.size() != 2 || s.shape[0] <= 0 || s.shape[1] <= 0 || v.shape.size() != 2)
      return InvalidArgument(where(s) + ": scale of " + e.name + " must be 2-D for a 2-D weight, got " +
                             backend::shape_str(s.shape));
    scale = Tensor::borrow(s.data, s.dtype, s.shape);
    auto pow2_at_least = [](int64_t x) { int64_t p = 1; while (p < x) p *= 2; return p; };
    br = pow2_at_least((flat[0] + s.shape[0] - 1) / s.shape[0]);  // FP8: 128, FP4: 1
    bc = pow2_at_least((flat[1] + s.shape[1] - 1) / s.shape[1]);  // FP8: 128, FP4: 32
  }
  // Weights are dequantized on the host (exact, elementwise) and placed by the model afterwards.
  backend::Backend* be = backend_->host_memory() ? backend_ : host_backend();
  Status st = be->dequantize(src, e.scale ? &scale : nullptr, br, bc, out);
  if (!st.ok()) return st.with_context(where(v));
  return out.view(v.shape.empty() ? Shape{1} : v.shape);
}

backend::Backend* WeightLoader::host_backend() {
  if (!host_) host_ = backend::make_cpu_backend();
  return host_.get();
}

StatusOr<Tensor> WeightLoader::load(const std::string& name, const Shape& shape) {
  DI_ASSIGN_OR_RETURN(const io::WeightEntry* e, registry_->get(name));
  return convert(*e, shape);
}

StatusOr<backend::Weight> WeightLoader::load_linear(const std::string& name, const Shape& shape) {
  DI_ASSIGN_OR_RETURN(const io::WeightEntry* e, registry_->get(name));
  const io::TensorView& v = e->weight;
  const bool scale_ok = !e->scale || e->scale->dtype == DType::kF8E8M0 || e->scale->dtype == DType::kF32;
  const bool keep = !backend_->host_memory() && v.shape.size() == 2 && v.dtype != DType::kF32 &&
                    scale_ok && backend_->supports_op(backend::OpKind::kMatmul, v.dtype) &&
                    e->scale.has_value() == (v.dtype != DType::kBF16);
  if (!keep) {
    DI_ASSIGN_OR_RETURN(Tensor f32, convert(*e, shape));
    return backend::Weight::of(std::move(f32));
  }
  if (!shape_matches(v.shape, shape))
    return InvalidArgument(where(v) + " (" + e->name + "): expected shape " + backend::shape_str(shape) +
                           ", got " + dtype_name(v.dtype) + backend::shape_str(v.shape));
  backend::Weight w;
  // Straight from the mapped file into backend memory (no host copy).
  DI_ASSIGN_OR_RETURN(w.w, backend_->alloc(v.dtype, v.shape));
  DI_RETURN_IF_ERROR(backend_->upload(Tensor::borrow(v.data, v.dtype, v.shape), w.w));
  if (e->scale) {
    const io::TensorView& sv = *e->scale;
    DI_ASSIGN_OR_RETURN(w.scale, backend_->alloc(sv.dtype, sv.shape));
    DI_RETURN_IF_ERROR(backend_->upload(Tensor::borrow(sv.data, sv.dtype, sv.shape), w.scale));
    auto pow2_at_least = [](int64_t x) { int64_t p = 1; while (p < x) p *= 2; return p; };
    w.block_rows = pow2_at_least((v.shape[0] + sv.shape[0] - 1) / sv.shape[0]);
    w.block_cols = pow2_at_least((v.shape[1] + sv.shape[1] - 1) / sv.shape[1]);
  }
  return w;
}

StatusOr<Tensor> WeightLoader::load_optional(const std::string& name, const Shape& shape) {
  const io::WeightEntry* e = registry_->find(name);
  if (!e) return Tensor();
  return convert(*e, shape);
}

StatusOr<Tensor> WeightLoader::load_i32(const std::string& name, const Shape& shape) {
  DI_ASSIGN_OR_RETURN(const io::WeightEntry* e, registry_->get(name));
  const io::TensorView& v = e->weight;
  if (!shape_matches(v.shape, shape))
    return InvalidArgument(where(v) + ": expected shape " + backend::shape_str(shape) + ", got " +
                           backend::shape_str(v.shape));
  if (v.dtype != DType::kI64 && v.dtype != DType::kI32)
    return InvalidArgument(where(v) + ": expected I64 or I32, got " + dtype_name(v.dtype));
  Tensor out = Tensor::empty(DType::kI32, v.shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t x;
    if (v.dtype == DType::kI64) {
      std::memcpy(&x, v.data + 8 * i, 8);
    } else {
      int32_t x32;
      std::memcpy(&x32, v.data + 4 * i, 4);
      x = x32;
    }
    if (x < INT32_MIN || x > INT32_MAX)
      return OutOfRange(where(v) + ": value " + std::to_string(x) + " does not fit int32");
    out.data<int32_t>()[i] = static_cast<int32_t>(x);
  }
  return out;
}

}  // namespace deepinfer::model
