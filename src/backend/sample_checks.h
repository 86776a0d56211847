// Argument checks of Backend::sample, shared by every backend (shapes, dtypes and the per-row
// parameter ranges of the host sampler, sample::validate_plain_row).
#pragma once

#include <span>

#include "backend/backend.h"

namespace deepinfer::backend {

struct SampleDims { int64_t S, V; };
// logits [S, V] F32 (1 <= V < 2^31), ids [S] I32, rows.size() == S, every row's parameters in
// range; else InvalidArgument naming the argument, or the row and the field.
StatusOr<SampleDims> check_sample(const Tensor& logits, std::span<const SampleRowParams> rows,
                                  const Tensor& ids);

}  // namespace deepinfer::backend
