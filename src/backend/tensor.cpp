#include "backend/tensor.h"

#include <cstring>
#include <sstream>

#include "common/check.h"

namespace deepinfer::backend {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  for (int64_t d : t.shape_) DI_CHECK(d >= 0) << "negative dimension in " << shape_str(t.shape_);
  uint64_t bytes = t.nbytes();
  // Over-allocate to a multiple of 64 bytes so vector loops may read a whole cache line.
  auto storage = std::shared_ptr<uint8_t[]>(new uint8_t[(bytes + 63) / 64 * 64 + 64]());
  t.data_ = storage.get();
  t.storage_ = std::move(storage);
  return t;
}

Tensor Tensor::from_f32(Shape shape, const std::vector<float>& values) {
  Tensor t = empty(DType::kF32, std::move(shape));
  DI_CHECK_EQ(static_cast<int64_t>(values.size()), t.numel());
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_i32(Shape shape, const std::vector<int32_t>& values) {
  Tensor t = empty(DType::kI32, std::move(shape));
  DI_CHECK_EQ(static_cast<int64_t>(values.size()), t.numel());
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * sizeof(int32_t));
  return t;
}

Tensor Tensor::borrow(const void* data, DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = const_cast<uint8_t*>(static_cast<const uint8_t*>(data));
  return t;
}

Tensor Tensor::adopt(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner,
                     bool on_device) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = static_cast<uint8_t*>(data);
  t.storage_ = std::move(owner);
  t.on_device_ = on_device;
  return t;
}

Tensor Tensor::view(Shape shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  DI_CHECK_EQ(t.numel(), numel()) << "view " << shape_str(t.shape_) << " of " << describe();
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  DI_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0])
      << "rows(" << begin << ", " << end << ") of " << describe();
  int64_t row = numel() / (shape_[0] ? shape_[0] : 1);
  DI_CHECK(dtype_bits(dtype_) % 8 == 0 || row % 2 == 0) << "odd fp4 row";
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = data_ + dtype_bytes(dtype_, static_cast<uint64_t>(begin * row));
  return t;
}

Tensor Tensor::clone() const {
  DI_CHECK(!on_device_) << "clone() of device tensor " << describe() << " (download it first)";
  Tensor t = empty(dtype_, shape_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

std::string Tensor::describe() const {
  return std::string(dtype_name(dtype_)) + shape_str(shape_) + (on_device_ ? "@device" : "");
}

Status check_tensor(const char* op, const char* arg, const Tensor& t, DType dtype,
                    std::initializer_list<int64_t> expected) {
  Shape exp(expected);
  bool ok = t.dtype() == dtype && t.rank() == static_cast<int>(exp.size());
  for (size_t i = 0; ok && i < exp.size(); ++i) ok = exp[i] < 0 || exp[i] == t.shape()[i];
  if (ok && t.numel() > 0 && t.raw() == nullptr) ok = false;
  if (ok) return OkStatus();
  std::string e = "[";
  for (size_t i = 0; i < exp.size(); ++i) e += (i ? ", " : "") + (exp[i] < 0 ? std::string("*") : std::to_string(exp[i]));
  e += "]";
  return InvalidArgument(std::string(op) + ": " + arg + ": expected " + dtype_name(dtype) + e +
                         ", got " + t.describe() + (t.raw() == nullptr ? " (no data)" : ""));
}

Status check_rank(const char* op, const char* arg, const Tensor& t, DType dtype, int rank) {
  if (t.dtype() == dtype && t.rank() == rank && (t.numel() == 0 || t.raw())) return OkStatus();
  return InvalidArgument(std::string(op) + ": " + arg + ": expected " + dtype_name(dtype) +
                         " of rank " + std::to_string(rank) + ", got " + t.describe());
}

}  // namespace deepinfer::backend
