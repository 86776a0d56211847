// What every op benchmark shares: the CUDA backend under test, device tensors, an L2 flush and the
// timer (cudaEvents around each call, warm-up first, median of N), and the result rows.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/tensor.h"

namespace deepinfer::bench_ops {

struct TimingOptions {
  int warmup = 3;
  int iters = 20;
  bool flush_l2 = true;  // overwrite a buffer larger than L2 before every timed call
};

struct Result {
  std::string phase;  // "decode B=16", "prefill S=4096", "ceiling"
  std::string op;     // backend op, with the model tensor it stands for
  std::string shape;
  double us_median = 0, us_min = 0, us_max = 0;
  double bytes = 0;   // bytes the op must move at least (reads + writes, each element once)
  double flops = 0;   // 0 for memory-bound ops
  std::string error;  // non-empty: the op failed (Status text)
};

class BenchContext {
 public:
  static StatusOr<std::unique_ptr<BenchContext>> create(int device, const TimingOptions& t);

  cuda::CudaBackend& backend() { return *backend_; }
  cudaStream_t stream() const { return backend_->stream(); }

  // Zero-initialised device tensors (freed when the last copy goes away); *_random fill them.
  StatusOr<backend::Tensor> zeros(DType dtype, backend::Shape shape);
  StatusOr<backend::Tensor> randn(backend::Shape shape, float stddev = 1.f);     // F32
  StatusOr<backend::Tensor> randint(backend::Shape shape, int32_t lo, int32_t hi);  // I32 in [lo, hi)
  StatusOr<backend::Tensor> upload_i32(backend::Shape shape, const std::vector<int32_t>& v);

  // Times `fn` (one op call): warm-up calls, then `iters` calls each between two events, after an
  // L2 flush; records a Result. A failing call records its error instead.
  void measure(const std::string& phase, const std::string& op, const std::string& shape,
               double bytes, double flops, const std::function<Status()>& fn);
  // Median of `iters` timings of fn in microseconds (no L2 flush), for the ceilings.
  StatusOr<std::vector<float>> time_raw(const std::function<Status()>& fn, bool flush);

  std::vector<Result>& results() { return results_; }
  uint64_t next_seed() { return ++seed_ * 0x9e3779b97f4a7c15ULL; }

 private:
  BenchContext() = default;
  std::unique_ptr<cuda::CudaBackend> backend_;
  TimingOptions timing_;
  backend::Tensor flush_;  // > L2
  std::vector<Result> results_;
  uint64_t seed_ = 1;
};

double median(std::vector<float> v);

// Concatenation by appends (GCC 12's -Wrestrict misfires on chains of `"lit" + std::string`).
template <typename... A>
std::string cat(const A&... parts) {
  std::string s;
  (s.append(std::string_view(parts)), ...);
  return s;
}

}  // namespace deepinfer::bench_ops
