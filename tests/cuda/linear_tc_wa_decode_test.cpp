// The short e4m3 → bf16 decode of linear_tc_wa's w3 variant (linear_tc_wa_decode.h), proven on the
// host over all 256 codes: the 16-bit pattern it builds, read as bf16 and multiplied by 2^120
// (exact in fp32, as the device's bf16 multiply by a power of two is), equals the e4m3 value of
// common/dtypes (the value linear_tc's decode produces, exactly representable in bf16) for every
// non-NaN code, ±0 with its sign; the NaN codes give ±480. The byte → half placement is checked
// on mixed words. (The device instruction itself is checked by cuda_linear_tc_wa_test.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "backend/cuda/linear_tc_wa_decode.h"
#include "common/dtypes.h"

namespace deepinfer::cuda::kernels::tcw {
namespace {

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// bf16 bits h · 2^120 in fp32 (exact: a power-of-two scaling of a bf16 value ≥ 2^−133).
float scaled_value(uint16_t h) { return std::ldexp(bf16_to_f32(h), 120); }

TEST(LinearTcWaDecode, EveryE4m3CodeDecodesToItsValue) {
  EXPECT_EQ(kBf16x2Pow120 & 0xFFFFu, static_cast<uint32_t>(f32_to_bf16(std::ldexp(1.f, 120))));
  EXPECT_EQ(kBf16x2Pow120 >> 16, kBf16x2Pow120 & 0xFFFFu);
  int checked = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    uint32_t p01 = 0, p23 = 0;
    e4m3x4_scaled_bf16(c * 0x01010101u, p01, p23);
    ASSERT_EQ(p01, p23) << "code " << c;
    ASSERT_EQ(p01 & 0xFFFFu, p01 >> 16) << "code " << c;
    const float got = scaled_value(static_cast<uint16_t>(p01 & 0xFFFFu));
    const float want = e4m3_to_f32(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(want)) << c;
      EXPECT_EQ(got, (c & 0x80) ? -480.f : 480.f) << "NaN code " << c;
      continue;
    }
    // Same value and sign (±0 included) …
    EXPECT_EQ(f32_bits(got), f32_bits(want)) << "e4m3 code 0x" << std::hex << c << ": " << got << " vs " << want;
    // … and that value is a bf16 (what linear_tc's e4m3 → f16 → f32 → bf16 decode gives).
    EXPECT_EQ(f32_bits(want) & 0xFFFFu, 0u) << c;
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(want)), want) << c;
    ++checked;
  }
  EXPECT_EQ(checked, 254);
}

TEST(LinearTcWaDecode, BytesLandInTheirHalves) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int it = 0; it < 10000; ++it) {
    const uint32_t v = rng();
    uint32_t p01 = 0, p23 = 0;
    e4m3x4_scaled_bf16(v, p01, p23);
    const uint16_t halves[4] = {static_cast<uint16_t>(p01), static_cast<uint16_t>(p01 >> 16),
                                static_cast<uint16_t>(p23), static_cast<uint16_t>(p23 >> 16)};
    for (int i = 0; i < 4; ++i) {
      const uint8_t code = static_cast<uint8_t>(v >> (8 * i));
      const uint16_t want = static_cast<uint16_t>((code & 0x80) << 8 | (code & 0x7F) << 4);
      ASSERT_EQ(halves[i], want) << "word 0x" << std::hex << v << " byte " << i << ", seed " << std::dec << seed;
    }
  }
}

}  // namespace
}  // namespace deepinfer::cuda::kernels::tcw
