#include "backend/cpu/sampling.h"

#include <vector>

#include "backend/sample_checks.h"
#include "sample/sampler.h"

namespace deepinfer::backend::cpu {

Status sample(const Tensor& logits, std::span<const SampleRowParams> rows, Tensor& ids) {
  DI_ASSIGN_OR_RETURN(const SampleDims d, check_sample(logits, rows, ids));
  if (logits.on_device() || ids.on_device())
    return InvalidArgument("sample (cpu): logits " + logits.describe() + " and ids " +
                           ids.describe() + " must be host tensors");
  std::vector<sample::PlainSampleRow> plain;
  plain.reserve(rows.size());
  for (const SampleRowParams& p : rows)
    plain.push_back({p.temperature, p.top_k, p.top_p, p.min_p, p.seed, p.sequence_index,
                     p.output_position});
  return sample::sample_plain_rows(
      std::span<const float>(logits.data<float>(), static_cast<size_t>(d.S * d.V)), d.V, plain,
      std::span<int32_t>(ids.data<int32_t>(), static_cast<size_t>(d.S)));
}

}  // namespace deepinfer::backend::cpu
