#include "ceilings.h"

#include <cublas_v2.h>

#include "backend/cuda/runtime.h"
#include "device_fill.h"

namespace deepinfer::bench_ops {

using backend::Tensor;

StatusOr<Ceilings> measure_ceilings(BenchContext& ctx, int64_t copy_bytes, int64_t gemm_n) {
  Ceilings c;
  c.copy_bytes = copy_bytes;
  c.gemm_n = gemm_n;
  const cudaStream_t s = ctx.stream();
  {  // device-to-device copy: large enough that L2 does not matter
    DI_ASSIGN_OR_RETURN(Tensor src, ctx.zeros(DType::kU8, {copy_bytes}));
    DI_ASSIGN_OR_RETURN(Tensor dst, ctx.zeros(DType::kU8, {copy_bytes}));
    fill_fp4_codes(src.data<uint8_t>(), copy_bytes, ctx.next_seed(), s);
    DI_ASSIGN_OR_RETURN(auto us, ctx.time_raw([&]() -> Status {
      DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.raw(), src.raw(), copy_bytes, cudaMemcpyDeviceToDevice, s));
      return OkStatus();
    }, /*flush=*/false));
    const double t = median(us);
    c.copy_gbs = 2.0 * copy_bytes / (t * 1e-6) / 1e9;
    ctx.results().push_back({"ceiling", "cudaMemcpy D2D", std::to_string(copy_bytes >> 20) + " MiB",
                             t, 0, 0, 2.0 * copy_bytes, 0, ""});
  }
  const int n = static_cast<int>(gemm_n);
  const double flops = 2.0 * gemm_n * gemm_n * gemm_n;
  const std::string shape = std::to_string(n) + "x" + std::to_string(n) + "x" + std::to_string(n);
  DI_ASSIGN_OR_RETURN(cuda::CublasHandle blas, cuda::CublasHandle::create(s));
  {  // bf16 GEMM peak
    DI_ASSIGN_OR_RETURN(Tensor a, ctx.zeros(DType::kBF16, {gemm_n, gemm_n}));
    DI_ASSIGN_OR_RETURN(Tensor b, ctx.zeros(DType::kBF16, {gemm_n, gemm_n}));
    DI_ASSIGN_OR_RETURN(Tensor d, ctx.zeros(DType::kBF16, {gemm_n, gemm_n}));
    fill_normal_bf16(a.data<uint16_t>(), a.numel(), ctx.next_seed(), 1.f, s);
    fill_normal_bf16(b.data<uint16_t>(), b.numel(), ctx.next_seed(), 1.f, s);
    const float alpha = 1.f, beta = 0.f;
    DI_ASSIGN_OR_RETURN(auto us, ctx.time_raw([&]() -> Status {
      DI_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(blas.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha,
                                             a.raw(), CUDA_R_16BF, n, b.raw(), CUDA_R_16BF, n, &beta,
                                             d.raw(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT));
      return OkStatus();
    }, /*flush=*/false));
    const double t = median(us);
    c.bf16_tflops = flops / (t * 1e-6) / 1e12;
    ctx.results().push_back({"ceiling", "cublasGemmEx bf16", shape, t, 0, 0, 6.0 * gemm_n * gemm_n, flops, ""});
  }
  {  // fp32 SGEMM (what backend matmul runs today)
    DI_ASSIGN_OR_RETURN(Tensor a, ctx.randn({gemm_n, gemm_n}));
    DI_ASSIGN_OR_RETURN(Tensor b, ctx.randn({gemm_n, gemm_n}));
    DI_ASSIGN_OR_RETURN(Tensor d, ctx.zeros(DType::kF32, {gemm_n, gemm_n}));
    const float alpha = 1.f, beta = 0.f;
    DI_ASSIGN_OR_RETURN(auto us, ctx.time_raw([&]() -> Status {
      DI_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha,
                                            a.data<float>(), n, b.data<float>(), n, &beta,
                                            d.data<float>(), n));
      return OkStatus();
    }, /*flush=*/false));
    const double t = median(us);
    c.f32_tflops = flops / (t * 1e-6) / 1e12;
    ctx.results().push_back({"ceiling", "cublasSgemm fp32", shape, t, 0, 0, 12.0 * gemm_n * gemm_n, flops, ""});
  }
  DI_RETURN_IF_ERROR(ctx.backend().synchronize());
  return c;
}

}  // namespace deepinfer::bench_ops
