// Helpers for model code that runs on any backend: tensors are allocated in the backend's memory
// (host for the CPU, device for CUDA), host-built index lists are uploaded, results downloaded.
//
//   DI_ALLOC(q, be, DType::kF32, {S, d.Rq});                  // Tensor q in backend memory (zeroed)
//   DI_EMPTY(q, be, DType::kF32, {S, d.Rq});                  // the same, contents undefined
//   DI_ASSIGN_OR_RETURN(Tensor ids, to_backend_i32(be, host_ids, {S}));
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace deepinfer::model {

#define DI_ALLOC(var, be, dtype, ...) \
  DI_ASSIGN_OR_RETURN(::deepinfer::backend::Tensor var, (be).alloc(dtype, __VA_ARGS__))
// Uninitialised (no fill kernel on a device): for a tensor the next op writes entirely.
#define DI_EMPTY(var, be, dtype, ...) \
  DI_ASSIGN_OR_RETURN(::deepinfer::backend::Tensor var, (be).empty(dtype, __VA_ARGS__))

// `host` in the backend's memory: itself on a host backend, else an uploaded copy.
inline StatusOr<backend::Tensor> to_backend(backend::Backend& be, const backend::Tensor& host) {
  if (be.host_memory() || host.on_device()) return host;
  DI_ASSIGN_OR_RETURN(backend::Tensor t, be.empty(host.dtype(), host.shape()));
  DI_RETURN_IF_ERROR(be.upload(host, t));
  return t;
}

// Host values (I32 or F32) as a tensor in the backend's memory.
template <typename T>
StatusOr<backend::Tensor> to_backend_values(backend::Backend& be, std::span<const T> values,
                                            DType dtype, backend::Shape shape) {
  backend::Tensor host = backend::Tensor::borrow(values.data(), dtype, std::move(shape));
  if (be.host_memory()) return host.clone();
  DI_ASSIGN_OR_RETURN(backend::Tensor t, be.empty(dtype, host.shape()));
  DI_RETURN_IF_ERROR(be.upload(host, t));
  return t;
}

inline StatusOr<backend::Tensor> to_backend_i32(backend::Backend& be,
                                                std::span<const int32_t> values,
                                                backend::Shape shape) {
  return to_backend_values(be, values, DType::kI32, std::move(shape));
}

inline StatusOr<backend::Tensor> to_backend_f32(backend::Backend& be,
                                                std::span<const float> values,
                                                backend::Shape shape) {
  return to_backend_values(be, values, DType::kF32, std::move(shape));
}

// A host copy of `t` (itself when it is already host memory).
inline StatusOr<backend::Tensor> to_host(backend::Backend& be, const backend::Tensor& t) {
  if (!t.on_device()) return t;
  backend::Tensor host = backend::Tensor::empty(t.dtype(), t.shape());
  DI_RETURN_IF_ERROR(be.download(t, host));
  return host;
}

// Moves a weight into backend memory in place (no-op for undefined tensors and host backends).
inline Status place(backend::Backend& be, backend::Tensor& t) {
  if (!t.defined() || be.host_memory() || t.on_device()) return OkStatus();
  DI_ASSIGN_OR_RETURN(t, to_backend(be, t));
  return OkStatus();
}

}  // namespace deepinfer::model
