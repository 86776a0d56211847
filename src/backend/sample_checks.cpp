#include "backend/sample_checks.h"

#include <string>

#include "sample/sampler.h"

namespace deepinfer::backend {

StatusOr<SampleDims> check_sample(const Tensor& logits, std::span<const SampleRowParams> rows,
                                  const Tensor& ids) {
  DI_RETURN_IF_ERROR(check_rank("sample", "logits", logits, DType::kF32, 2));
  const int64_t S = logits.dim(0), V = logits.dim(1);
  if (V < 1) return InvalidArgument("sample: logits " + logits.describe() + " has an empty vocabulary");
  if (V > (int64_t{1} << 31) - 1)
    return InvalidArgument("sample: a vocabulary of " + std::to_string(V) + " does not fit int32 ids");
  if (static_cast<int64_t>(rows.size()) != S)
    return InvalidArgument("sample: " + std::to_string(rows.size()) + " row parameters for logits " +
                           logits.describe() + " (one per row)");
  DI_RETURN_IF_ERROR(check_tensor("sample", "ids", ids, DType::kI32, {S}));
  for (size_t r = 0; r < rows.size(); ++r) {
    const SampleRowParams& p = rows[r];
    DI_RETURN_IF_ERROR(sample::validate_plain_row(
        {p.temperature, p.top_k, p.top_p, p.min_p, p.seed, p.sequence_index, p.output_position}, r));
  }
  return SampleDims{S, V};
}

}  // namespace deepinfer::backend
