// Random fills of device buffers for the op benchmark (never zeros: timing of some kernels, e.g.
// top-k, depends on the data). Counter-based (hash of seed and index), so a fill of a few GB takes
// milliseconds and is the same for a given seed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::bench_ops {

// out[i] ~ approximately N(0, stddev²) (sum of four uniforms, rescaled).
void fill_normal_f32(float* out, int64_t n, uint64_t seed, float stddev, cudaStream_t s);
// bf16 bits of N(0, stddev²) values.
void fill_normal_bf16(uint16_t* out, int64_t n, uint64_t seed, float stddev, cudaStream_t s);
// out[i] uniform in [lo, hi).
void fill_uniform_i32(int32_t* out, int64_t n, uint64_t seed, int32_t lo, int32_t hi, cudaStream_t s);
// Random E4M3 codes without NaN (0x7f/0xff become 0x7e/0xfe) or packed E2M1 pairs (any byte).
void fill_fp8_codes(uint8_t* out, int64_t n, uint64_t seed, cudaStream_t s);
void fill_fp4_codes(uint8_t* out, int64_t n, uint64_t seed, cudaStream_t s);
// UE8M0 scales: exponents in [lo, hi] (127 = 2^0).
void fill_ue8m0(uint8_t* out, int64_t n, uint64_t seed, int lo, int hi, cudaStream_t s);

}  // namespace deepinfer::bench_ops
