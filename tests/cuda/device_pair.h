// Host tensors copied to the device for the GPU op tests: the CUDA backend sees the borrowed
// device view (`dev`); `buf` owns the memory.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/cuda/runtime.h"
#include "backend/tensor.h"

namespace deepinfer::cuda::testing {

struct Pair {
  backend::Tensor host;
  DeviceBuffer buf;
  backend::Tensor dev;
};

// At least 16 bytes, so an empty tensor still has a valid, aligned pointer.
inline Pair on_device(const backend::Tensor& h) {
  Pair p{h, std::move(DeviceBuffer::allocate(std::max<uint64_t>(h.nbytes(), 16))).value(), {}};
  EXPECT_EQ(cudaMemcpy(p.buf.data(), h.raw(), h.nbytes(), cudaMemcpyHostToDevice), cudaSuccess);
  // A pageable host-to-device cudaMemcpy may return before its DMA lands, and the legacy stream
  // it runs on is not ordered with the backend's non-blocking stream: without this wait a kernel
  // launched next can read a half-uploaded input, or have its output overwritten by the late DMA
  // (seen on the H200: the last rows of a fresh output buffer read back as 0).
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  p.dev = backend::Tensor::borrow(p.buf.data(), h.dtype(), h.shape());
  return p;
}

// A host copy of a device tensor.
inline backend::Tensor to_host(const backend::Tensor& dev) {
  backend::Tensor t = backend::Tensor::empty(dev.dtype(), dev.shape());
  EXPECT_EQ(cudaMemcpy(t.raw(), dev.raw(), t.nbytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return t;
}
inline backend::Tensor to_host(const Pair& p) { return to_host(p.dev); }

// Device buffers a kernel-level test keeps until it ends (inputs and outputs it passes to
// kernels by pointer), each at least 16 bytes.
class DeviceArena {
 public:
  void* bytes(int64_t n) {
    bufs_.push_back(std::move(DeviceBuffer::allocate(std::max<int64_t>(n, 16))).value());
    return bufs_.back().data();
  }
  // n floats, starting `off` floats past the allocation (misaligned inputs).
  float* floats(int64_t n, int off = 0) { return static_cast<float*>(bytes((n + off) * 4)) + off; }
  float* upload(const std::vector<float>& h, int off = 0) {
    float* d = floats(static_cast<int64_t>(h.size()), off);
    EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    return d;
  }
  int32_t* upload(const std::vector<int32_t>& h) {
    auto* d = static_cast<int32_t*>(bytes(static_cast<int64_t>(h.size()) * 4));
    EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    return d;
  }
  static std::vector<char> read(const void* d, int64_t n) {
    std::vector<char> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

 private:
  std::vector<DeviceBuffer> bufs_;
};

}  // namespace deepinfer::cuda::testing
