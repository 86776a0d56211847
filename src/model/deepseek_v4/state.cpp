#include "model/deepseek_v4/state.h"

#include <algorithm>

namespace deepinfer::model::v4 {

ContiguousV4State::ContiguousV4State(const StateDims& dims, backend::Backend* be)
    : dims_(dims), be_(be), layers_(dims.num_layers) {}

Status ContiguousV4State::check_layer(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(layers_.size()))
    return OutOfRange("v4 state: layer " + std::to_string(layer) + " outside [0, " +
                      std::to_string(layers_.size()) + ")");
  return OkStatus();
}

int64_t ContiguousV4State::window_rows(int layer) const { return layers_.at(layer).window_rows; }

Status ContiguousV4State::read_window(int layer, Tensor& out) const {
  CopyList now;
  DI_RETURN_IF_ERROR(defer_read_window(layer, out, now));
  return now.flush(*be_);
}

Status ContiguousV4State::defer_read_window(int layer, Tensor& out, CopyList& later) const {
  DI_RETURN_IF_ERROR(check_layer(layer));
  const Layer& l = layers_[layer];
  DI_RETURN_IF_ERROR(backend::check_tensor("read_window", "out", out, DType::kF32,
                                           {l.window_rows, dims_.head_dim}));
  if (l.window_rows == 0) return OkStatus();
  later.add(l.window.rows(0, l.window_rows), out);
  return OkStatus();
}

Status ContiguousV4State::write_window(int layer, const Tensor& rows) {
  CopyList now;
  DI_RETURN_IF_ERROR(defer_write_window(layer, rows, now));
  return now.flush(*be_);
}

Status ContiguousV4State::defer_write_window(int layer, const Tensor& rows, CopyList& later) {
  DI_RETURN_IF_ERROR(check_layer(layer));
  DI_RETURN_IF_ERROR(backend::check_tensor("write_window", "rows", rows, DType::kF32, {-1, dims_.head_dim}));
  if (rows.dim(0) > dims_.window - 1)
    return InvalidArgument("write_window: " + std::to_string(rows.dim(0)) + " rows exceed W-1 = " +
                           std::to_string(dims_.window - 1));
  Layer& l = layers_[layer];
  if (!l.window.defined()) {
    DI_ASSIGN_OR_RETURN(l.window, be_->alloc(DType::kF32, {std::max<int64_t>(dims_.window - 1, 1),
                                                           dims_.head_dim}));
  }
  if (rows.dim(0) > 0) later.add(rows, l.window.rows(0, rows.dim(0)));
  l.window_rows = rows.dim(0);
  return OkStatus();
}

int64_t ContiguousV4State::num_entries(int layer, CompressorKind kind) const {
  return layers_.at(layer).num_entries[static_cast<int>(kind)];
}

Status ContiguousV4State::read_entries(int layer, CompressorKind kind, Tensor& out) const {
  CopyList now;
  DI_RETURN_IF_ERROR(defer_read_entries(layer, kind, out, now));
  return now.flush(*be_);
}

Status ContiguousV4State::defer_read_entries(int layer, CompressorKind kind, Tensor& out,
                                             CopyList& later) const {
  DI_RETURN_IF_ERROR(check_layer(layer));
  const int k = static_cast<int>(kind);
  const Layer& l = layers_[layer];
  DI_RETURN_IF_ERROR(backend::check_tensor("read_entries", "out", out, DType::kF32,
                                           {l.num_entries[k], width(kind)}));
  if (l.num_entries[k] == 0) return OkStatus();
  later.add(l.entries[k].rows(0, l.num_entries[k]), out);
  return OkStatus();
}

Status ContiguousV4State::append_entries(int layer, CompressorKind kind, const Tensor& rows) {
  DI_RETURN_IF_ERROR(check_layer(layer));
  const int64_t d = width(kind);
  DI_RETURN_IF_ERROR(backend::check_tensor("append_entries", "rows", rows, DType::kF32, {-1, d}));
  const int k = static_cast<int>(kind);
  Layer& l = layers_[layer];
  const int64_t have = l.num_entries[k], need = have + rows.dim(0);
  if (rows.dim(0) == 0) return OkStatus();
  const int64_t capacity = l.entries[k].defined() ? l.entries[k].dim(0) : 0;
  if (need > capacity) {  // grow geometrically; copy what is there
    DI_ASSIGN_OR_RETURN(Tensor bigger,
                        be_->alloc(DType::kF32, {std::max<int64_t>(need, 2 * capacity), d}));
    if (have > 0) {
      Tensor dst = bigger.rows(0, have);
      DI_RETURN_IF_ERROR(be_->copy(l.entries[k].rows(0, have), dst));
    }
    l.entries[k] = bigger;
  }
  Tensor dst = l.entries[k].rows(have, need);
  DI_RETURN_IF_ERROR(be_->copy(rows, dst));
  l.num_entries[k] = need;
  return OkStatus();
}

CompressorTail& ContiguousV4State::tail(int layer, CompressorKind kind) {
  return layers_.at(layer).tails[static_cast<int>(kind)];
}

}  // namespace deepinfer::model::v4
