// RAII handles for the CUDA runtime (STYLE.md 15): streams, events, cuBLAS/cuBLASLt handles,
// device memory (plain cudaMalloc; never managed memory) and a pool carved from one allocation.
#pragma once

#include <memory>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/range_allocator.h"

namespace deepinfer::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int num_sms = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  double peak_bandwidth_gbs = 0;  // from memory clock × bus width (theoretical)
};

StatusOr<int> device_count();
StatusOr<DeviceInfo> query_device(int index);

class Stream {
 public:
  static StatusOr<Stream> create();
  Stream(Stream&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Stream& operator=(Stream&& o) noexcept;
  ~Stream();
  cudaStream_t get() const { return s_; }
  Status synchronize() const;

 private:
  explicit Stream(cudaStream_t s) : s_(s) {}
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  static StatusOr<Event> create(bool timing = false);
  Event(Event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  Event& operator=(Event&& o) noexcept;
  ~Event();
  cudaEvent_t get() const { return e_; }
  Status record(cudaStream_t stream) const;
  Status synchronize() const;  // waits for the work queued before the last record()
  // Milliseconds between two recorded timing events.
  StatusOr<float> elapsed_ms_since(const Event& start) const;

 private:
  explicit Event(cudaEvent_t e) : e_(e) {}
  cudaEvent_t e_ = nullptr;
};

class CublasHandle {
 public:
  static StatusOr<CublasHandle> create(cudaStream_t stream);
  CublasHandle(CublasHandle&& o) noexcept : h_(o.h_), lt_(o.lt_) { o.h_ = nullptr; o.lt_ = nullptr; }
  CublasHandle& operator=(CublasHandle&&) = delete;
  ~CublasHandle();
  cublasHandle_t get() const { return h_; }
  cublasLtHandle_t lt() const { return lt_; }

 private:
  CublasHandle(cublasHandle_t h, cublasLtHandle_t lt) : h_(h), lt_(lt) {}
  cublasHandle_t h_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
};

// One CUDA allocation, freed on destruction: device memory (cudaMalloc, kPinned false) or
// page-locked host memory (cudaMallocHost, kPinned true; device-to-host copies into it are
// asynchronous, so several can share one stream sync). Member definitions in runtime.cpp.
template <bool kPinned>
class CudaRegion {
 public:
  static StatusOr<CudaRegion> allocate(uint64_t bytes);
  CudaRegion() = default;
  CudaRegion(CudaRegion&& o) noexcept : p_(o.p_), n_(o.n_) {
    o.p_ = nullptr;
    o.n_ = 0;
  }
  CudaRegion& operator=(CudaRegion&& o) noexcept;
  ~CudaRegion();
  void* data() const { return p_; }
  uint64_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  uint64_t n_ = 0;
};
using DeviceBuffer = CudaRegion<false>;
using PinnedBuffer = CudaRegion<true>;

// A device memory pool: one cudaMalloc at start (sized by the caller from free memory ×
// gpu_memory_utilization), sub-allocated with RangeAllocator. allocate() returns nullptr when full.
class DevicePool {
 public:
  static StatusOr<std::unique_ptr<DevicePool>> create(uint64_t bytes, uint64_t alignment = 256);
  void* allocate(uint64_t bytes);
  void free(void* p);
  uint64_t capacity() const { return ranges_.capacity(); }
  uint64_t bytes_in_use() const { return ranges_.bytes_in_use(); }

 private:
  DevicePool(DeviceBuffer buf, uint64_t alignment)
      : buf_(std::move(buf)), ranges_(buf_.size(), alignment) {}
  DeviceBuffer buf_;
  RangeAllocator ranges_;
};

}  // namespace deepinfer::cuda
