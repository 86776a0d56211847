#include "ceilings.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>

#include "backend/cuda/runtime.h"
#include "device_fill.h"

namespace deepinfer::bench_ops {

using backend::Tensor;

namespace {

// cuBLASLt e4m3 × e4m3 → bf16, n×n×n, TN (A = [n, n] read transposed), per-tensor scales 1.0 on
// the device, fp32 compute, the heuristic's first algorithm with a 32 MiB workspace. Appends a
// ceiling row; returns TFLOP/s.
StatusOr<double> measure_fp8_peak(BenchContext& ctx, cublasLtHandle_t lt, int64_t n, bool fast_accum) {
  const cudaStream_t s = ctx.stream();
  DI_ASSIGN_OR_RETURN(Tensor a, ctx.zeros(DType::kF8E4M3, {n, n}));
  DI_ASSIGN_OR_RETURN(Tensor b, ctx.zeros(DType::kF8E4M3, {n, n}));
  DI_ASSIGN_OR_RETURN(Tensor d, ctx.zeros(DType::kBF16, {n, n}));
  DI_ASSIGN_OR_RETURN(Tensor one, ctx.randn({4}));
  DI_ASSIGN_OR_RETURN(Tensor ws, ctx.zeros(DType::kU8, {int64_t{32} << 20}));
  fill_fp8_codes(a.data<uint8_t>(), n * n, ctx.next_seed(), s);
  fill_fp8_codes(b.data<uint8_t>(), n * n, ctx.next_seed(), s);
  const float ones[4] = {1.f, 1.f, 1.f, 1.f};
  DI_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(one.raw(), ones, sizeof(ones), cudaMemcpyHostToDevice, s));
  DI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  struct Lt {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~Lt() {
      if (pref) cublasLtMatmulPreferenceDestroy(pref);
      if (ld) cublasLtMatrixLayoutDestroy(ld);
      if (lb) cublasLtMatrixLayoutDestroy(lb);
      if (la) cublasLtMatrixLayoutDestroy(la);
      if (op) cublasLtMatmulDescDestroy(op);
    }
  } lt_objs;
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&lt_objs.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const int8_t fast = fast_accum ? 1 : 0;
  const void* scale = one.raw();
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(lt_objs.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(lt_objs.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(lt_objs.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(lt_objs.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof(scale)));
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(lt_objs.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale, sizeof(scale)));
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&lt_objs.la, CUDA_R_8F_E4M3, n, n, n));
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&lt_objs.lb, CUDA_R_8F_E4M3, n, n, n));
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&lt_objs.ld, CUDA_R_16BF, n, n, n));
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&lt_objs.pref));
  const uint64_t ws_bytes = ws.nbytes();
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      lt_objs.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(lt, lt_objs.op, lt_objs.la, lt_objs.lb, lt_objs.ld,
                                                           lt_objs.ld, lt_objs.pref, 1, &heur, &found));
  if (found == 0) return Unimplemented("cuBLASLt has no FP8 algorithm on this device");
  const float alpha = 1.f, beta = 0.f;
  DI_ASSIGN_OR_RETURN(auto us, ctx.time_raw([&]() -> Status {
    DI_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(lt, lt_objs.op, &alpha, a.raw(), lt_objs.la, b.raw(), lt_objs.lb,
                                             &beta, d.raw(), lt_objs.ld, d.raw(), lt_objs.ld, &heur.algo,
                                             ws.raw(), ws_bytes, s));
    return OkStatus();
  }, /*flush=*/false));
  const double t = median(us), flops = 2.0 * n * n * n;
  const std::string shape = std::to_string(n) + "x" + std::to_string(n) + "x" + std::to_string(n);
  ctx.results().push_back({"ceiling", fast_accum ? "cublasLt fp8 e4m3 (fast accum)" : "cublasLt fp8 e4m3",
                           shape, t, 0, 0, 4.0 * n * n, flops, ""});
  return flops / (t * 1e-6) / 1e12;
}

}  // namespace

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
  for (int8_t fast : {int8_t{0}, int8_t{1}}) {  // dense FP8 peak (cuBLASLt, TN, per-tensor scales)
    DI_ASSIGN_OR_RETURN(double tf, measure_fp8_peak(ctx, blas.lt(), gemm_n, fast != 0));
    c.fp8_tflops = std::max(c.fp8_tflops, tf);
  }
  DI_RETURN_IF_ERROR(ctx.backend().synchronize());
  return c;
}

}  // namespace deepinfer::bench_ops
