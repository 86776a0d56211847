// Tensor: a dtype, a shape and a pointer to contiguous row-major data, owned or borrowed.
//
//   Tensor x = Tensor::empty(DType::kF32, {S, H});          // owned, zero-filled   [S, H]
//   Tensor w = Tensor::borrow(ptr, DType::kBF16, {N, K});   // view of memory owned elsewhere
//   Tensor r = x.rows(2, 5);                                 // rows 2..4 of x, shares storage
//   Tensor v = x.view({S, hc, H / hc});                      // same bytes, new shape
//
// Deliberately minimal: always contiguous (no strides), so every op can treat a tensor as a
// flat array with a shape for checking. Copies share storage (shared_ptr), like a view. Ops never
// allocate their outputs: the caller passes them in, shapes are checked, errors are Status.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "common/dtypes.h"
#include "common/status.h"

namespace deepinfer::backend {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);  // "[3, 4]"

class Tensor {
 public:
  Tensor() = default;

  // Owned storage, zero-filled.
  static Tensor empty(DType dtype, Shape shape);
  // Owned fp32 tensor filled from `values` (values.size() must equal numel).
  static Tensor from_f32(Shape shape, const std::vector<float>& values);
  static Tensor from_i32(Shape shape, const std::vector<int32_t>& values);
  // Borrowed: `data` must outlive every use of the tensor.
  static Tensor borrow(const void* data, DType dtype, Shape shape);
  // Memory owned by `owner` (any shared handle, e.g. a device allocation whose deleter frees it);
  // `on_device` marks memory the host must not dereference (only backend ops touch it).
  static Tensor adopt(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner,
                      bool on_device);

  // False for a default-constructed Tensor (no shape, no data).
  bool defined() const { return data_ != nullptr || !shape_.empty(); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
  int64_t numel() const;
  uint64_t nbytes() const { return dtype_bytes(dtype_, static_cast<uint64_t>(numel())); }
  bool owned() const { return storage_ != nullptr; }
  // True for memory only a device backend may touch (Backend::alloc of a GPU backend).
  bool on_device() const { return on_device_; }

  template <typename T>
  T* data() const { return reinterpret_cast<T*>(data_); }
  void* raw() const { return data_; }

  // Same bytes, another shape (numel must match; checked).
  Tensor view(Shape shape) const;
  // Rows [begin, end) along dim 0 (shares storage).
  Tensor rows(int64_t begin, int64_t end) const;
  // Deep copy into owned host storage (host tensors only; checked).
  Tensor clone() const;
  std::string describe() const;  // "F32[3, 4]"

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  uint8_t* data_ = nullptr;
  bool on_device_ = false;
  std::shared_ptr<void> storage_;
};

// Shape/dtype checks used at every op entry. They return kInvalidArgument naming the op and the
// argument, e.g. "matmul: w: expected shape [*, 64], got F32[32, 65]". A -1 in `expected` is a
// wildcard.
Status check_tensor(const char* op, const char* arg, const Tensor& t, DType dtype,
                    std::initializer_list<int64_t> expected);
Status check_rank(const char* op, const char* arg, const Tensor& t, DType dtype, int rank);

}  // namespace deepinfer::backend
