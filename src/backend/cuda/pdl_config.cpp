#include "backend/cuda/pdl_config.h"

#include "common/env.h"

namespace deepinfer::cuda::pdl {

bool small_kernels() {
  static const bool on = env().small_pdl;
  return on;
}

}  // namespace deepinfer::cuda::pdl
