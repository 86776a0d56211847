// Backend by name, for the engine and the tools:
//
//   DI_ASSIGN_OR_RETURN(auto backend, backend::make_backend("cuda:0"));
//
// "cpu" (fast CPU backend), "cpu-reference" (the scalar oracle), "cuda" / "cuda:N" (the CUDA
// backend on device N; an error in a build without CUDA or on a machine without a GPU).
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace deepinfer::backend {

struct BackendOptions {
  // Kernels whose result for a row does not depend on the other rows of the batch (fixed
  // tiling, no batch-size-dependent split-K): `--batch-invariant`.
  bool batch_invariant = false;
  // FP8 weights at large M: quantize activations per 1×128 group to e4m3 and run cuBLASLt's
  // block-scaled FP8 GEMM (DeepSeek's recipe, backend/cuda/fp8_gemm.h) instead of dequantizing
  // the weight. CUDA backend only (an error elsewhere). Changes numerics (activation rounding).
  bool fp8_activations = false;
  // CUDA backend: decode steps may be captured and replayed as CUDA graphs (Backend::
  // begin_capture); false = every op launched one by one (`--enforce-eager`, or
  // DEEPINFER_CUDA_GRAPHS=0).
  bool graphs = true;
  // CUDA backend: a second stream for Backend::begin_side (the MoE's shared expert runs beside
  // the routed experts; same kernels, same bits). false, or DEEPINFER_SIDE_STREAM=0: one stream.
  bool side_stream = true;
};

StatusOr<std::unique_ptr<Backend>> make_backend(const std::string& device,
                                                const BackendOptions& options = {});

}  // namespace deepinfer::backend
