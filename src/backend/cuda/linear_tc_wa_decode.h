// The short e4m3 → bf16 decode of linear_tc_wa's "w3" variant (linear_tc_wa.cuh), as plain integer
// code shared by the kernel and the host test that proves it over all 256 codes
// (tests/cuda/linear_tc_wa_decode_test.cpp). No CUDA dependency: includable from C++ and .cu.
//
// An e4m3 code b = s eeee mmm (bias 7) has the value 2^(e−7)·(1 + m/8) (e ≥ 1) or m·2^−9 (e = 0).
// The 16-bit pattern  s << 15 | (b & 0x7F) << 4  read as bf16 (bias 127) is exactly that value
// times 2^−120: for e ≥ 1 a normal bf16 with exponent field e, mantissa m << 4; for e = 0 the bf16
// subnormal (m << 4) / 128 · 2^−126 = m·2^−129. One bf16 multiply by 2^120 (exact: a power of two,
// result ≥ 2^−9, no overflow) then gives the value, identical to linear_tc's decode
// (tc::e4m3x2_to_bf16x2: e4m3 → f16 → f32 → bf16) for the 254 non-NaN codes, ±0 included. The NaN
// codes 0x7F / 0xFF become ±480 instead of NaN (stored FP8 weights never hold NaN; the variant is
// opt-in for that reason). Cost: ~9 instructions per 4 codes (2 shifts, 3 masks, 2 byte permutes,
// 2 bf16x2 multiplies) instead of 16.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DI_WA_HD __host__ __device__ __forceinline__
#else
#define DI_WA_HD inline
#endif

namespace deepinfer::cuda::kernels::tcw {

// bf16x2 bits of 2^120 (exponent field 247), the multiplier that finishes the decode.
constexpr uint32_t kBf16x2Pow120 = 0x7B807B80u;

// Four e4m3 codes (bytes of v; byte i = code i) → the bf16 bits of code·2^−120, pairs packed
// low / high: p01 = codes 0, 1; p23 = codes 2, 3.
DI_WA_HD void e4m3x4_scaled_bf16(uint32_t v, uint32_t& p01, uint32_t& p23) {
  const uint32_t lo = (v << 4) & 0xF0F0F0F0u;                         // per byte: e0 m2 m1 m0 0000
  const uint32_t hi = ((v >> 4) & 0x07070707u) | (v & 0x80808080u);  // per byte: s 0000 e3 e2 e1
#if defined(__CUDA_ARCH__)
  p01 = __byte_perm(lo, hi, 0x5140);  // [lo0, hi0, lo1, hi1]
  p23 = __byte_perm(lo, hi, 0x7362);  // [lo2, hi2, lo3, hi3]
#else
  p01 = (lo & 0xFFu) | ((hi & 0xFFu) << 8) | ((lo & 0xFF00u) << 8) | ((hi & 0xFF00u) << 16);
  p23 = ((lo >> 16) & 0xFFu) | (((hi >> 16) & 0xFFu) << 8) | ((lo >> 24) << 16) | ((hi >> 24) << 24);
#endif
}

}  // namespace deepinfer::cuda::kernels::tcw
