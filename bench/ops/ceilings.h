// Ceilings measured in the same run as the ops (issue 7): what this device reaches on plain
// device-to-device copies and on a large cuBLAS bf16 GEMM. Ratios in the op table are against these.
#pragma once

#include "bench_context.h"

namespace deepinfer::bench_ops {

struct Ceilings {
  double copy_gbs = 0;          // cudaMemcpyAsync D2D, (read + write bytes) / time
  double bf16_tflops = 0;       // cublasGemmEx bf16 in/out, fp32 compute, n×n×n
  double f32_tflops = 0;        // cublasSgemm n×n×n (the backend's fp32 matmul path), informative
  // Dense FP8 peak: cuBLASLt e4m3×e4m3 n×n×n, per-tensor scales, bf16 out, fp32 compute; the faster
  // of fast accumulation on/off (fp8_cases.cpp reports the FP8 GEMM against this).
  double fp8_tflops = 0;
  int64_t copy_bytes = 0, gemm_n = 0;
};

// Also appends the three measurements to ctx.results() (phase "ceiling").
StatusOr<Ceilings> measure_ceilings(BenchContext& ctx, int64_t copy_bytes = int64_t{2} << 30,
                                    int64_t gemm_n = 8192);

}  // namespace deepinfer::bench_ops
