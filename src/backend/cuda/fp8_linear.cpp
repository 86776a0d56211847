// fp8_linear: the FP8 GEMM on backend tensors (host code; kept out of fp8_gemm.cu so that no .cu
// file includes backend/backend.h, which is C++20).
#include <string>

#include "backend/backend.h"
#include "backend/cuda/fp8_gemm.h"

namespace deepinfer::cuda {

Status fp8_linear(Fp8Gemm& gemm, const backend::Tensor& x, const backend::Weight& w,
                  backend::Tensor& out, int64_t groups, cudaStream_t stream) {
  const std::string what = "fp8 linear: x " + (x.defined() ? x.describe() : std::string("undefined")) +
                           ", w " + (w.w.defined() ? w.w.describe() : std::string("undefined"));
  if (!x.defined() || !w.w.defined() || !out.defined() || !w.scale.defined())
    return InvalidArgument(what + ": x, w, w.scale and out must all be defined");
  if (w.w.dtype() != DType::kF8E4M3)
    return Unimplemented(what + ": weight must be F8_E4M3");
  if (x.dtype() != DType::kF32 || out.dtype() != DType::kF32)
    return InvalidArgument(what + ": x and out must be F32");
  if (x.rank() != 2 || w.w.rank() != 2 || out.rank() != 2)
    return InvalidArgument(what + ": x, w and out must be 2-D");
  if (groups < 1) return InvalidArgument(what + ": groups must be >= 1");
  const int64_t GN = w.w.dim(0), K = w.w.dim(1), M = x.dim(0);
  if (GN % groups != 0 || x.dim(1) != groups * K)
    return InvalidArgument(what + " do not form a " + std::to_string(groups) + "-group product");
  if (out.dim(0) != M || out.dim(1) != GN)
    return InvalidArgument(what + ": out is " + out.describe() + ", expected [" + std::to_string(M) +
                           ", " + std::to_string(GN) + "]");
  if (w.block_rows != kFp8Block || w.block_cols != kFp8Block)
    return Unimplemented(what + ": weight blocks must be 128x128, got " +
                         std::to_string(w.block_rows) + "x" + std::to_string(w.block_cols));
  const DType st = w.scale.dtype();
  if (st != DType::kF8E8M0 && st != DType::kF32)
    return InvalidArgument(what + ": scale must be F8_E8M0 or F32, got " + w.scale.describe());
  if (w.scale.rank() != 2 || w.scale.dim(0) != (GN + kFp8Block - 1) / kFp8Block ||
      w.scale.dim(1) != (K + kFp8Block - 1) / kFp8Block)
    return InvalidArgument(what + ": scale " + w.scale.describe() + " does not match 128x128 blocks");
  if (M == 0) return OkStatus();
  return gemm.gemm(x.data<float>(), M, w.w.data<uint8_t>(), w.scale.raw(), st == DType::kF32,
                   GN / groups, K, groups, out.data<float>(), stream);
}

}  // namespace deepinfer::cuda
