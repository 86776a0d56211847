// A random FP4 routed-expert set for the GPU expert tests: per expert gate_up [2I, H] and down
// [H, I], e2m1 codes uniform over every byte, ue8m0 scales 2^-9..2^0 per 1×32 block. `cpu_set`
// gets them dequantized to F32 by `cpu`; `gpu_set` gets the stored format on the device, the
// buffers kept alive in `keep`. Fatal gtest failures on error (callers check HasFatalFailure).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "device_pair.h"

namespace deepinfer::cuda::testing {

inline void random_fp4_experts(backend::Backend& cpu, int64_t E, int64_t H, int64_t I,
                               std::mt19937& mt, backend::ExpertSet& cpu_set,
                               backend::ExpertSet& gpu_set, std::vector<Pair>& keep) {
  for (int64_t e = 0; e < E; ++e)
    for (int proj = 0; proj < 2; ++proj) {
      const int64_t R = proj == 0 ? 2 * I : H, K = proj == 0 ? H : I;
      backend::Weight hw;
      hw.w = backend::Tensor::empty(DType::kF4E2M1, {R, K});
      for (uint64_t i = 0; i < hw.w.nbytes(); ++i) hw.w.data<uint8_t>()[i] = static_cast<uint8_t>(mt());
      hw.block_rows = 1;
      hw.block_cols = 32;
      hw.scale = backend::Tensor::empty(DType::kF8E8M0, {R, K / 32});
      for (int64_t i = 0; i < hw.scale.numel(); ++i)
        hw.scale.data<uint8_t>()[i] = static_cast<uint8_t>(118 + mt() % 10);
      backend::Tensor deq = backend::Tensor::empty(DType::kF32, {R, K});
      ASSERT_TRUE(cpu.dequantize(hw.w, &hw.scale, 1, 32, deq).ok());
      (proj == 0 ? cpu_set.gate_up : cpu_set.down).push_back(backend::Weight::of(deq));
      backend::Weight dw = hw;
      keep.push_back(on_device(hw.w));
      dw.w = keep.back().dev;
      keep.push_back(on_device(hw.scale));
      dw.scale = keep.back().dev;
      (proj == 0 ? gpu_set.gate_up : gpu_set.down).push_back(dw);
    }
}

}  // namespace deepinfer::cuda::testing
