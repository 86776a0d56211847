#include "device_fill.h"

namespace deepinfer::bench_ops {
namespace {

__device__ __forceinline__ uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

__device__ __forceinline__ float normal_at(uint64_t seed, int64_t i, float stddev) {
  const uint64_t h = mix(seed ^ mix(static_cast<uint64_t>(i)));
  // Four 16-bit uniforms: mean 2, variance 4/12 -> (sum - 2) * sqrt(3) has variance 1.
  float sum = 0.f;
  for (int k = 0; k < 4; ++k) sum += static_cast<float>((h >> (16 * k)) & 0xffff) * (1.f / 65536.f);
  return (sum - 2.f) * 1.7320508f * stddev;
}

template <typename F>
__global__ void fill_kernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    f(i);
  }
}

template <typename F>
void launch(int64_t n, F f, cudaStream_t s) {
  if (n <= 0) return;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  fill_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), threads, 0, s>>>(n, f);
}

}  // namespace

void fill_normal_f32(float* out, int64_t n, uint64_t seed, float stddev, cudaStream_t s) {
  launch(n, [=] __device__(int64_t i) { out[i] = normal_at(seed, i, stddev); }, s);
}

void fill_normal_bf16(uint16_t* out, int64_t n, uint64_t seed, float stddev, cudaStream_t s) {
  launch(n, [=] __device__(int64_t i) {
    const float v = normal_at(seed, i, stddev);
    const uint32_t b = __float_as_uint(v);
    out[i] = static_cast<uint16_t>((b + 0x7fff + ((b >> 16) & 1)) >> 16);  // round to nearest even
  }, s);
}

void fill_uniform_i32(int32_t* out, int64_t n, uint64_t seed, int32_t lo, int32_t hi, cudaStream_t s) {
  const uint64_t span = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo);
  launch(n, [=] __device__(int64_t i) {
    out[i] = lo + static_cast<int32_t>(mix(seed ^ mix(static_cast<uint64_t>(i))) % (span ? span : 1));
  }, s);
}

void fill_fp8_codes(uint8_t* out, int64_t n, uint64_t seed, cudaStream_t s) {
  launch(n, [=] __device__(int64_t i) {
    uint8_t b = static_cast<uint8_t>(mix(seed ^ mix(static_cast<uint64_t>(i))));
    if ((b & 0x7f) == 0x7f) b -= 1;
    out[i] = b;
  }, s);
}

void fill_fp4_codes(uint8_t* out, int64_t n, uint64_t seed, cudaStream_t s) {
  launch(n, [=] __device__(int64_t i) { out[i] = static_cast<uint8_t>(mix(seed ^ mix(static_cast<uint64_t>(i)))); }, s);
}

void fill_ue8m0(uint8_t* out, int64_t n, uint64_t seed, int lo, int hi, cudaStream_t s) {
  const uint64_t span = static_cast<uint64_t>(hi - lo + 1);
  launch(n, [=] __device__(int64_t i) {
    out[i] = static_cast<uint8_t>(lo + mix(seed ^ mix(static_cast<uint64_t>(i))) % span);
  }, s);
}

}  // namespace deepinfer::bench_ops
