#include "backend/cuda/runtime.h"

namespace deepinfer::cuda {

StatusOr<int> device_count() {
  int n = 0;
  DI_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&n));
  return n;
}

StatusOr<DeviceInfo> query_device(int index) {
  DeviceInfo d;
  d.index = index;
  cudaDeviceProp p{};
  DI_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&p, index));
  d.name = p.name;
  d.sm_major = p.major;
  d.sm_minor = p.minor;
  d.num_sms = p.multiProcessorCount;
  int clock_khz = 0, bus_bits = 0;
  DI_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, index));
  DI_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, index));
  d.peak_bandwidth_gbs = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // DDR: 2 transfers/clock
  int prev = 0;
  DI_CUDA_RETURN_IF_ERROR(cudaGetDevice(&prev));
  DI_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  size_t free_b = 0, total_b = 0;
  Status st = cuda_status(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo", __FILE__, __LINE__);
  DI_CUDA_RETURN_IF_ERROR(cudaSetDevice(prev));
  DI_RETURN_IF_ERROR(st);
  d.free_bytes = free_b;
  d.total_bytes = total_b;
  return d;
}

StatusOr<Stream> Stream::create() {
  cudaStream_t s = nullptr;
  DI_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}
Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_) cudaStreamDestroy(s_);
    s_ = o.s_;
    o.s_ = nullptr;
  }
  return *this;
}
Stream::~Stream() {
  if (s_) cudaStreamDestroy(s_);
}
Status Stream::synchronize() const {
  DI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s_));
  return OkStatus();
}

StatusOr<Event> Event::create(bool timing) {
  cudaEvent_t e = nullptr;
  DI_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, timing ? 0 : cudaEventDisableTiming));
  return Event(e);
}
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_) cudaEventDestroy(e_);
    e_ = o.e_;
    o.e_ = nullptr;
  }
  return *this;
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
Status Event::record(cudaStream_t stream) const {
  DI_CUDA_RETURN_IF_ERROR(cudaEventRecord(e_, stream));
  return OkStatus();
}
Status Event::synchronize() const {
  DI_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e_));
  return OkStatus();
}
StatusOr<float> Event::elapsed_ms_since(const Event& start) const {
  DI_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(e_));
  float ms = 0;
  DI_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

StatusOr<CublasHandle> CublasHandle::create(cudaStream_t stream) {
  cublasHandle_t h = nullptr;
  DI_CUBLAS_RETURN_IF_ERROR(cublasCreate(&h));
  cublasStatus_t st = cublasSetStream(h, stream);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(h);
    return cublas_status(st, "cublasSetStream", __FILE__, __LINE__);
  }
  cublasLtHandle_t lt = nullptr;
  st = cublasLtCreate(&lt);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(h);
    return cublas_status(st, "cublasLtCreate", __FILE__, __LINE__);
  }
  return CublasHandle(h, lt);
}
CublasHandle::~CublasHandle() {
  if (lt_) cublasLtDestroy(lt_);
  if (h_) cublasDestroy(h_);
}

namespace {
cudaError_t region_free(void* p, bool pinned) { return pinned ? cudaFreeHost(p) : cudaFree(p); }
}  // namespace

template <bool kPinned>
StatusOr<CudaRegion<kPinned>> CudaRegion<kPinned>::allocate(uint64_t bytes) {
  CudaRegion b;
  if (bytes == 0) return b;
  DI_CUDA_RETURN_IF_ERROR(kPinned ? cudaMallocHost(&b.p_, bytes) : cudaMalloc(&b.p_, bytes));
  b.n_ = bytes;
  return b;
}
template <bool kPinned>
CudaRegion<kPinned>& CudaRegion<kPinned>::operator=(CudaRegion&& o) noexcept {
  if (this != &o) {
    if (p_) region_free(p_, kPinned);
    p_ = o.p_;
    n_ = o.n_;
    o.p_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}
template <bool kPinned>
CudaRegion<kPinned>::~CudaRegion() {
  if (p_) region_free(p_, kPinned);
}
template class CudaRegion<false>;
template class CudaRegion<true>;

StatusOr<std::unique_ptr<DevicePool>> DevicePool::create(uint64_t bytes, uint64_t alignment) {
  DI_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(bytes));
  return std::unique_ptr<DevicePool>(new DevicePool(std::move(buf), alignment));
}
void* DevicePool::allocate(uint64_t bytes) {
  auto off = ranges_.allocate(bytes);
  if (!off) return nullptr;
  return static_cast<char*>(buf_.data()) + *off;
}
void DevicePool::free(void* p) {
  if (p == nullptr) return;
  const uint64_t off = static_cast<uint64_t>(static_cast<char*>(p) - static_cast<char*>(buf_.data()));
  DI_CHECK(ranges_.free(off)) << "DevicePool::free of a pointer it did not allocate";
}

}  // namespace deepinfer::cuda
