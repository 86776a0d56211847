// FP8 block-scaled GEMM, DeepSeek's recipe, through cuBLASLt on Hopper (sm_90):
//   out [M, G·N] f32 = x [M, G·K] f32 · deq(w [G·N, K] e4m3, 128×128 block scales)ᵀ   per group g:
//   out[:, g·N + n] = x[:, g·K:(g+1)·K] · deq(w)[g·N + n, :]
// 1. activations are quantized per 1×128 group along K to e4m3 with one f32 scale per group
//    (amax/448, DeepSeek's act_quant; `pow2_scales` rounds the scale up to a power of two);
// 2. the weight's 128×128 scales (ue8m0 bytes or f32, [ceil(G·N/128), K/128]) are converted on
//    every call into the f32 K-major layout cuBLASLt wants (a launch over ceil(G·N/128)·L4
//    floats, ~2k for a 32768×1024 weight; not cached per weight pointer on purpose: a freed and
//    reused pointer would silently serve stale scales);
// 3. cublasLtMatmul with A = w (BLK128x128_32F scales), B = quantized x (VEC128_32F scales),
//    TN, f32 compute and output. The block-scaled path applies the scales once per 128-element
//    k-block to the tensor-core partial sum and accumulates the blocks in fp32 (it must: the
//    scales differ per block), so the reduced-precision FP8 MMA accumulation is confined to 128
//    products (see the test for the error bound this implies).
// Shapes and where each scale lives: fp8_gemm_plan.h. One Fp8Gemm per stream: its scratch
// buffers (quantized x, scales, workspace) are reused in stream order.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <map>
#include <memory>

#include "backend/tensor.h"
#include "backend/cuda/fp8_gemm_plan.h"
#include "backend/cuda/runtime.h"

namespace deepinfer::backend {
struct Weight;
}  // namespace deepinfer::backend

namespace deepinfer::cuda {

struct Fp8GemmOptions {
  bool pow2_scales = false;  // activation scales 2^ceil(log2(amax/448)) (ue8m0-representable)
  uint64_t workspace_bytes = uint64_t{32} << 20;  // cuBLASLt workspace (32 MiB: NVIDIA's Hopper advice)
};

class Fp8Gemm {
 public:
  // `lt` null: the context creates and owns its own cuBLASLt handle.
  static StatusOr<std::unique_ptr<Fp8Gemm>> create(const Fp8GemmOptions& options = {},
                                                   cublasLtHandle_t lt = nullptr);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  const Fp8GemmOptions& options() const { return options_; }

  // The whole product on raw device pointers (all asynchronous on `stream`):
  //   x [M, G·K] f32 row-major; w [G·N, K] e4m3; w_scale [ceil(G·N/128), K/128] ue8m0 bytes
  //   (w_scale_f32 = false) or f32; out [M, G·N] f32 row-major.
  // Unimplemented for shapes the path does not take (plan_fp8_gemm), so the caller can fall back.
  Status gemm(const float* x, int64_t M, const uint8_t* w, const void* w_scale, bool w_scale_f32,
              int64_t N, int64_t K, int64_t groups, float* out, cudaStream_t stream);

  // The steps of gemm(), for tests and the benchmark. prepare() sizes the scratch buffers for a
  // plan (may cudaMalloc; call before quantize/convert/matmul with that plan).
  Status prepare(const Fp8GemmPlan& plan);
  // x [M, G·K] f32 → quantized_x() [q_rows, G·K] e4m3 + act_scales() (plan.act_scale_index).
  Status quantize_activations(const float* x, const Fp8GemmPlan& plan, cudaStream_t stream);
  // w_scale → w_scales() [plan.w_scale_floats] f32 (plan.w_scale_index; padding k-blocks 0).
  Status convert_weight_scales(const void* w_scale, bool w_scale_f32, const Fp8GemmPlan& plan,
                               cudaStream_t stream);
  // The cuBLASLt products of the plan on the buffers above, into out [M, G·N].
  Status matmul(const uint8_t* w, const Fp8GemmPlan& plan, float* out, cudaStream_t stream);

  const uint8_t* quantized_x() const { return static_cast<const uint8_t*>(q_.data()); }
  const float* act_scales() const { return static_cast<const float*>(act_s_.data()); }
  const float* w_scales() const { return static_cast<const float*>(w_s_.data()); }

 private:
  Fp8Gemm(const Fp8GemmOptions& o, cublasLtHandle_t lt, bool owns) : options_(o), lt_(lt), owns_lt_(owns) {}
  Status run_part(const uint8_t* w, const Fp8GemmPlan& plan, const Fp8GemmPart& part, int64_t g,
                  float* d, int64_t ldd, cudaStream_t stream);

  Fp8GemmOptions options_;
  cublasLtHandle_t lt_ = nullptr;
  bool owns_lt_ = false;
  DeviceBuffer q_, act_s_, w_s_, scratch_, workspace_;
  // Heuristic results per (n, m, k, ldb, ldd, alignments): the query costs host time.
  std::map<std::array<int64_t, 8>, cublasLtMatmulAlgo_t> algos_;
};

// The product on backend tensors (fp8_linear.cpp), with the checks a caller (CudaBackend::linear) needs:
//   x [M, G·K] F32, w.w [G·N, K] F8_E4M3 with w.scale [ceil(G·N/128), K/128] F8_E8M0 or F32 and
//   block 128×128, out [M, G·N] F32, all on the device. InvalidArgument for inconsistent shapes
//   or dtypes, Unimplemented for what the FP8 path does not take (the caller falls back).
Status fp8_linear(Fp8Gemm& gemm, const backend::Tensor& x, const backend::Weight& w,
                  backend::Tensor& out, int64_t groups, cudaStream_t stream);

}  // namespace deepinfer::cuda
