#include "bench_context.h"

#include <algorithm>
#include <cstdio>

#include "backend/cuda/runtime.h"
#include "device_fill.h"

namespace deepinfer::bench_ops {

using backend::Shape;
using backend::Tensor;

double median(std::vector<float> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (double(v[n / 2 - 1]) + v[n / 2]);
}

StatusOr<std::unique_ptr<BenchContext>> BenchContext::create(int device, const TimingOptions& t) {
  auto ctx = std::unique_ptr<BenchContext>(new BenchContext());
  DI_ASSIGN_OR_RETURN(ctx->backend_, cuda::CudaBackend::create({.device = device}));
  ctx->timing_ = t;
  if (t.flush_l2) {
    int l2 = 0;
    DI_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    DI_ASSIGN_OR_RETURN(ctx->flush_, ctx->zeros(DType::kU8, {std::max<int64_t>(4 * int64_t{l2}, 256 << 20)}));
  }
  return ctx;
}

StatusOr<Tensor> BenchContext::zeros(DType dtype, Shape shape) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const uint64_t bytes = std::max<uint64_t>(dtype_bytes(dtype, static_cast<uint64_t>(numel)), 16);
  DI_ASSIGN_OR_RETURN(cuda::DeviceBuffer buf, cuda::DeviceBuffer::allocate(bytes));
  DI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(buf.data(), 0, bytes, stream()));
  void* p = buf.data();
  auto owner = std::make_shared<cuda::DeviceBuffer>(std::move(buf));
  return Tensor::adopt(p, dtype, std::move(shape), std::move(owner), /*on_device=*/true);
}

StatusOr<Tensor> BenchContext::randn(Shape shape, float stddev) {
  DI_ASSIGN_OR_RETURN(Tensor t, zeros(DType::kF32, std::move(shape)));
  fill_normal_f32(t.data<float>(), t.numel(), next_seed(), stddev, stream());
  DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return t;
}

StatusOr<Tensor> BenchContext::randint(Shape shape, int32_t lo, int32_t hi) {
  DI_ASSIGN_OR_RETURN(Tensor t, zeros(DType::kI32, std::move(shape)));
  fill_uniform_i32(t.data<int32_t>(), t.numel(), next_seed(), lo, hi, stream());
  DI_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return t;
}

StatusOr<Tensor> BenchContext::upload_i32(Shape shape, const std::vector<int32_t>& v) {
  DI_ASSIGN_OR_RETURN(Tensor t, zeros(DType::kI32, std::move(shape)));
  if (static_cast<int64_t>(v.size()) != t.numel())
    return InvalidArgument("upload_i32: " + std::to_string(v.size()) + " values for " + t.describe());
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(t.raw(), v.data(), v.size() * 4, cudaMemcpyHostToDevice, stream()));
  DI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));  // `v` may go away after return
  return t;
}

StatusOr<std::vector<float>> BenchContext::time_raw(const std::function<Status()>& fn, bool flush) {
  for (int i = 0; i < timing_.warmup; ++i) DI_RETURN_IF_ERROR(fn());
  DI_RETURN_IF_ERROR(backend_->synchronize());
  DI_ASSIGN_OR_RETURN(cuda::Event start, cuda::Event::create(true));
  DI_ASSIGN_OR_RETURN(cuda::Event stop, cuda::Event::create(true));
  std::vector<float> ms;
  for (int i = 0; i < timing_.iters; ++i) {
    if (flush && flush_.defined()) {
      DI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flush_.raw(), i & 0xff, flush_.nbytes(), stream()));
    }
    DI_RETURN_IF_ERROR(start.record(stream()));
    DI_RETURN_IF_ERROR(fn());
    DI_RETURN_IF_ERROR(stop.record(stream()));
    DI_RETURN_IF_ERROR(backend_->synchronize());
    DI_ASSIGN_OR_RETURN(float t, stop.elapsed_ms_since(start));
    ms.push_back(t * 1e3f);  // µs
  }
  return ms;
}

void BenchContext::measure(const std::string& phase, const std::string& op, const std::string& shape,
                           double bytes, double flops, const std::function<Status()>& fn) {
  Result r{phase, op, shape, 0, 0, 0, bytes, flops, ""};
  auto t = time_raw(fn, timing_.flush_l2);
  if (!t.ok()) {
    r.error = t.status().to_string();
    std::fprintf(stderr, "[bench_ops] %s %s %s: %s\n", phase.c_str(), op.c_str(), shape.c_str(), r.error.c_str());
    (void)backend_->synchronize();  // clear a device-side error flag before the next op
  } else {
    r.us_median = median(*t);
    r.us_min = *std::min_element(t->begin(), t->end());
    r.us_max = *std::max_element(t->begin(), t->end());
  }
  results_.push_back(std::move(r));
}

}  // namespace deepinfer::bench_ops
