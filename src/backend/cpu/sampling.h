// Backend::sample for the host: the host sampler's own code (sample::sample_plain_rows), so the
// CPU backend's ids are the engine's host-path tokens bit for bit.
#pragma once

#include <span>

#include "backend/backend.h"

namespace deepinfer::backend::cpu {

// ids [S] I32 = sample(logits [S, V] F32, rows [S]) on host tensors (see Backend::sample).
Status sample(const Tensor& logits, std::span<const SampleRowParams> rows, Tensor& ids);

}  // namespace deepinfer::backend::cpu
