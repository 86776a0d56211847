#include "model/deepseek_v4/state.h"

#include <cstring>

namespace deepinfer::model::v4 {

ContiguousV4State::ContiguousV4State(const StateDims& dims) : dims_(dims), layers_(dims.num_layers) {}

Status ContiguousV4State::check_layer(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(layers_.size()))
    return OutOfRange("v4 state: layer " + std::to_string(layer) + " outside [0, " +
                      std::to_string(layers_.size()) + ")");
  return OkStatus();
}

int64_t ContiguousV4State::window_rows(int layer) const {
  return static_cast<int64_t>(layers_.at(layer).window.size()) / dims_.head_dim;
}

Status ContiguousV4State::read_window(int layer, Tensor& out) const {
  DI_RETURN_IF_ERROR(check_layer(layer));
  DI_RETURN_IF_ERROR(backend::check_tensor("read_window", "out", out, DType::kF32,
                                           {window_rows(layer), dims_.head_dim}));
  const auto& w = layers_[layer].window;
  if (!w.empty()) std::memcpy(out.data<float>(), w.data(), w.size() * sizeof(float));
  return OkStatus();
}

Status ContiguousV4State::write_window(int layer, const Tensor& rows) {
  DI_RETURN_IF_ERROR(check_layer(layer));
  DI_RETURN_IF_ERROR(backend::check_tensor("write_window", "rows", rows, DType::kF32, {-1, dims_.head_dim}));
  if (rows.dim(0) > dims_.window - 1)
    return InvalidArgument("write_window: " + std::to_string(rows.dim(0)) + " rows exceed W-1 = " +
                           std::to_string(dims_.window - 1));
  layers_[layer].window.assign(rows.data<float>(), rows.data<float>() + rows.numel());
  return OkStatus();
}

int64_t ContiguousV4State::num_entries(int layer, CompressorKind kind) const {
  const int64_t d = kind == CompressorKind::kMain ? dims_.head_dim : dims_.index_head_dim;
  return static_cast<int64_t>(layers_.at(layer).entries[static_cast<int>(kind)].size()) / d;
}

Status ContiguousV4State::read_entries(int layer, CompressorKind kind, Tensor& out) const {
  DI_RETURN_IF_ERROR(check_layer(layer));
  const int64_t d = kind == CompressorKind::kMain ? dims_.head_dim : dims_.index_head_dim;
  DI_RETURN_IF_ERROR(backend::check_tensor("read_entries", "out", out, DType::kF32,
                                           {num_entries(layer, kind), d}));
  const auto& e = layers_[layer].entries[static_cast<int>(kind)];
  if (!e.empty()) std::memcpy(out.data<float>(), e.data(), e.size() * sizeof(float));
  return OkStatus();
}

Status ContiguousV4State::append_entries(int layer, CompressorKind kind, const Tensor& rows) {
  DI_RETURN_IF_ERROR(check_layer(layer));
  const int64_t d = kind == CompressorKind::kMain ? dims_.head_dim : dims_.index_head_dim;
  DI_RETURN_IF_ERROR(backend::check_tensor("append_entries", "rows", rows, DType::kF32, {-1, d}));
  auto& e = layers_[layer].entries[static_cast<int>(kind)];
  e.insert(e.end(), rows.data<float>(), rows.data<float>() + rows.numel());
  return OkStatus();
}

CompressorTail& ContiguousV4State::tail(int layer, CompressorKind kind) {
  return layers_.at(layer).tails[static_cast<int>(kind)];
}

}  // namespace deepinfer::model::v4
