// Exhaustive tests of the dtype conversions: every bit pattern of every small format is decoded
// against an independent per-format formula, round-trips through the encoder, and every decision
// boundary of round-to-nearest-even (the midpoint between each pair of adjacent values, and the
// fp32 neighbours on either side of it) is checked, together with the overflow rules.
#include "common/dtypes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace deepinfer {
namespace {

// Independent decoders written straight from the format definitions.
double ref_decode(uint32_t code, int exp_bits, int man_bits, int bias) {
  const uint32_t man = code & ((1u << man_bits) - 1);
  const uint32_t exp = (code >> man_bits) & ((1u << exp_bits) - 1);
  const double sign = ((code >> (exp_bits + man_bits)) & 1u) ? -1.0 : 1.0;
  if (exp == 0) return sign * std::pow(2.0, 1 - bias) * (man / std::pow(2.0, man_bits));
  return sign * std::pow(2.0, static_cast<int>(exp) - bias) * (1.0 + man / std::pow(2.0, man_bits));
}

struct Format {
  const char* name;
  int bits, exp_bits, man_bits, bias;
  std::function<float(uint32_t)> decode;
  std::function<uint32_t(float)> encode;
  std::function<bool(uint32_t)> is_nan;  // per the format
  std::function<bool(uint32_t)> is_inf;
};

std::vector<Format> formats() {
  return {
      {"bf16", 16, 8, 7, 127, [](uint32_t c) { return bf16_to_f32(static_cast<uint16_t>(c)); },
       [](float f) -> uint32_t { return f32_to_bf16(f); },
       [](uint32_t c) { return (c & 0x7F80) == 0x7F80 && (c & 0x7F); },
       [](uint32_t c) { return (c & 0x7FFF) == 0x7F80; }},
      {"f16", 16, 5, 10, 15, [](uint32_t c) { return f16_to_f32(static_cast<uint16_t>(c)); },
       [](float f) -> uint32_t { return f32_to_f16(f); },
       [](uint32_t c) { return (c & 0x7C00) == 0x7C00 && (c & 0x3FF); },
       [](uint32_t c) { return (c & 0x7FFF) == 0x7C00; }},
      {"e4m3fn", 8, 4, 3, 7, [](uint32_t c) { return e4m3_to_f32(static_cast<uint8_t>(c)); },
       [](float f) -> uint32_t { return f32_to_e4m3(f); },
       [](uint32_t c) { return (c & 0x7F) == 0x7F; }, [](uint32_t) { return false; }},
      {"e5m2", 8, 5, 2, 15, [](uint32_t c) { return e5m2_to_f32(static_cast<uint8_t>(c)); },
       [](float f) -> uint32_t { return f32_to_e5m2(f); },
       [](uint32_t c) { return (c & 0x7C) == 0x7C && (c & 0x3); },
       [](uint32_t c) { return (c & 0x7F) == 0x7C; }},
      {"e2m1", 4, 2, 1, 1, [](uint32_t c) { return e2m1_to_f32(static_cast<uint8_t>(c)); },
       [](float f) -> uint32_t { return f32_to_e2m1(f); }, [](uint32_t) { return false; },
       [](uint32_t) { return false; }},
  };
}

TEST(DTypes, DecodeEveryBitPattern) {
  for (const auto& fmt : formats()) {
    for (uint32_t c = 0; c < (1u << fmt.bits); ++c) {
      const float v = fmt.decode(c);
      if (fmt.is_nan(c)) {
        EXPECT_TRUE(std::isnan(v)) << fmt.name << " code " << c;
      } else if (fmt.is_inf(c)) {
        EXPECT_TRUE(std::isinf(v)) << fmt.name << " code " << c;
        EXPECT_EQ(std::signbit(v), ((c >> (fmt.bits - 1)) & 1u) != 0);
      } else {
        ASSERT_EQ(static_cast<double>(v), ref_decode(c, fmt.exp_bits, fmt.man_bits, fmt.bias))
            << fmt.name << " code " << c;
        EXPECT_EQ(std::signbit(v), ((c >> (fmt.bits - 1)) & 1u) != 0) << fmt.name << " " << c;
      }
    }
  }
}

TEST(DTypes, EncodeRoundTripsEveryBitPattern) {
  for (const auto& fmt : formats()) {
    for (uint32_t c = 0; c < (1u << fmt.bits); ++c) {
      const float v = fmt.decode(c);
      const uint32_t back = fmt.encode(v);
      if (fmt.is_nan(c)) {
        EXPECT_TRUE(fmt.is_nan(back) || std::isnan(fmt.decode(back))) << fmt.name << " " << c;
      } else {
        ASSERT_EQ(back, c) << fmt.name << " code " << c << " value " << v;
      }
    }
  }
}

// For every pair of adjacent non-negative finite values (lo, hi): the midpoint goes to the one
// with an even mantissa, and the fp32 neighbours of the midpoint go to the nearer value.
TEST(DTypes, RoundToNearestEvenAtEveryBoundary) {
  for (const auto& fmt : formats()) {
    std::vector<uint32_t> codes;
    for (uint32_t c = 0; c < (1u << (fmt.bits - 1)); ++c) {
      if (!fmt.is_nan(c) && !fmt.is_inf(c)) codes.push_back(c);
    }
    std::sort(codes.begin(), codes.end(),
              [&](uint32_t a, uint32_t b) { return fmt.decode(a) < fmt.decode(b); });
    for (size_t i = 0; i + 1 < codes.size(); ++i) {
      const uint32_t lo = codes[i], hi = codes[i + 1];
      const double dlo = fmt.decode(lo), dhi = fmt.decode(hi);
      const double mid = (dlo + dhi) / 2;
      const float fmid = static_cast<float>(mid);
      ASSERT_EQ(static_cast<double>(fmid), mid) << fmt.name << ": midpoint not exact in fp32";
      const uint32_t even = (lo & 1u) == 0 ? lo : hi;
      for (float sign : {1.0f, -1.0f}) {
        const uint32_t sbit = sign < 0 ? (1u << (fmt.bits - 1)) : 0u;
        ASSERT_EQ(fmt.encode(sign * fmid), even | sbit) << fmt.name << " mid of " << lo << "," << hi;
        ASSERT_EQ(fmt.encode(sign * std::nextafter(fmid, INFINITY)), hi | sbit)
            << fmt.name << " above mid of " << lo << "," << hi;
        ASSERT_EQ(fmt.encode(sign * std::nextafter(fmid, 0.0f)), lo | sbit)
            << fmt.name << " below mid of " << lo << "," << hi;
      }
    }
  }
}

TEST(DTypes, OverflowAndSpecials) {
  // bf16 / f16 / e5m2: IEEE — Inf in, Inf out; past max rounds to Inf, NaN stays NaN.
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xFF80);
  EXPECT_EQ(f32_to_bf16(3.4028235e38f), 0x7F80);  // rounds past bf16 max
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // midpoint to the next (Inf) -> even = Inf
  EXPECT_EQ(f32_to_f16(-1e6f), 0xFC00);
  EXPECT_EQ(f32_to_f16(NAN) & 0x7C00, 0x7C00);
  EXPECT_EQ(f32_to_e5m2(57344.0f), 0x7B);
  EXPECT_EQ(f32_to_e5m2(61439.0f), 0x7B);
  EXPECT_EQ(f32_to_e5m2(61440.0f), 0x7C);
  EXPECT_EQ(f32_to_e5m2(-INFINITY), 0xFC);
  // e4m3fn: no Inf. Non-saturating (PyTorch/ml_dtypes): past 464 is NaN; saturating clamps to 448.
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7E);  // tie between 448 (even) and the NaN slot
  EXPECT_EQ(f32_to_e4m3(464.01f), 0x7F);
  EXPECT_EQ(f32_to_e4m3(-1000.0f), 0xFF);
  EXPECT_EQ(f32_to_e4m3(INFINITY), 0x7F);
  EXPECT_EQ(f32_to_e4m3(1000.0f, /*saturate=*/true), 0x7E);
  EXPECT_EQ(f32_to_e4m3(-INFINITY, /*saturate=*/true), 0xFE);
  EXPECT_EQ(f32_to_e4m3(NAN, /*saturate=*/true) & 0x7F, 0x7F);
  EXPECT_EQ(f32_to_e4m3(0.0009765625f), 0x00);  // 2^-10: half the smallest subnormal -> 0 (even)
  EXPECT_EQ(f32_to_e4m3(0.00195312f), 0x01);    // just below 2^-9 rounds up to the subnormal
  // e2m1: saturates, NaN -> +6 (documented).
  EXPECT_EQ(f32_to_e2m1(6.0f), 0x7);
  EXPECT_EQ(f32_to_e2m1(100.0f), 0x7);
  EXPECT_EQ(f32_to_e2m1(-100.0f), 0xF);
  EXPECT_EQ(f32_to_e2m1(5.0f), 0x6);   // tie 4|6 -> 4 (even mantissa)
  EXPECT_EQ(f32_to_e2m1(0.25f), 0x0);  // tie 0|0.5 -> 0
  EXPECT_EQ(f32_to_e2m1(NAN), 0x7);
  // Signed zeros survive.
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e2m1(-0.0f), 0x8);
}

TEST(DTypes, Ue8m0EveryBitPattern) {
  for (int e = 0; e < 256; ++e) {
    const float v = ue8m0_to_f32(static_cast<uint8_t>(e));
    if (e == 255) {
      EXPECT_TRUE(std::isnan(v));
      continue;
    }
    ASSERT_EQ(static_cast<double>(v), std::ldexp(1.0, e - 127)) << e;
    ASSERT_EQ(f32_to_ue8m0_ceil(v), e) << e;  // powers of two are exact
    if (e < 254) {
      // Anything strictly between 2^(e-127) and 2^(e-126) rounds up.
      const float between = std::nextafter(v, INFINITY);
      if (std::ldexp(1.0, e - 127) < 1e-38) continue;  // fp32 subnormal spacing; covered above
      ASSERT_EQ(f32_to_ue8m0_ceil(between), e + 1) << e;
    }
  }
  EXPECT_EQ(f32_to_ue8m0_ceil(0.0f), 0xFF);
  EXPECT_EQ(f32_to_ue8m0_ceil(-1.0f), 0xFF);
  EXPECT_EQ(f32_to_ue8m0_ceil(NAN), 0xFF);
  EXPECT_EQ(f32_to_ue8m0_ceil(INFINITY), 0xFF);
  EXPECT_EQ(f32_to_ue8m0_ceil(3.0f), 129);  // ceil(log2 3) = 2
}

// Random fp32 inputs against a brute-force nearest-value search (ties to even) for the 8- and
// 4-bit formats, and a double-precision oracle for bf16.
TEST(DTypes, RandomInputsMatchBruteForce) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> bits;
  for (const auto& fmt : formats()) {
    if (fmt.bits > 8) continue;
    std::vector<std::pair<double, uint32_t>> finite;
    for (uint32_t c = 0; c < (1u << fmt.bits); ++c) {
      if (!fmt.is_nan(c) && !fmt.is_inf(c)) finite.push_back({fmt.decode(c), c});
    }
    const double maxv = std::max_element(finite.begin(), finite.end())->first;
    std::uniform_real_distribution<float> mag(0.0f, static_cast<float>(maxv) * 1.05f);
    for (int i = 0; i < 200000; ++i) {
      float x = mag(rng) * (i % 3 == 0 ? 1e-3f : 1.0f) * ((i & 1) ? -1.0f : 1.0f);
      if (std::fabs(x) > maxv) continue;  // overflow rules tested elsewhere
      uint32_t best = 0;
      double best_d = INFINITY;
      for (auto [v, c] : finite) {
        if ((v < 0) != std::signbit(x) && v != 0) continue;
        if (v == 0 && (((c >> (fmt.bits - 1)) & 1u) != 0) != std::signbit(x)) continue;
        const double d = std::fabs(v - x);
        if (d < best_d || (d == best_d && (c & 1u) == 0)) best = c, best_d = d;
      }
      ASSERT_EQ(fmt.encode(x), best) << fmt.name << " x=" << x;
    }
  }
  for (int i = 0; i < 2000000; ++i) {
    const float x = f32_from_bits(bits(rng));
    if (std::isnan(x)) continue;
    const uint16_t got = f32_to_bf16(x);
    const uint32_t trunc = f32_bits(x) & 0xFFFF0000u;
    const double lo = f32_from_bits(trunc);
    const double hi = (trunc & 0x7FFFFFFFu) == 0x7F7F0000u
                          ? std::copysign(std::ldexp(1.0, 128), x)
                          : static_cast<double>(f32_from_bits(trunc + 0x10000u));
    const double dx = x;
    uint16_t want;
    if (std::fabs(dx - lo) < std::fabs(hi - dx)) want = trunc >> 16;
    else if (std::fabs(dx - lo) > std::fabs(hi - dx)) want = (trunc + 0x10000u) >> 16;
    else want = ((trunc >> 16) & 1u) ? (trunc + 0x10000u) >> 16 : trunc >> 16;
    if (std::isinf(x)) want = trunc >> 16;
    ASSERT_EQ(got, want) << "x bits " << std::hex << f32_bits(x);
  }
}

TEST(DTypes, Names) {
  for (const char* n : {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "I64",
                        "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL"}) {
    auto t = dtype_from_name(n);
    ASSERT_TRUE(t.has_value()) << n;
    EXPECT_STREQ(dtype_name(*t), n);
  }
  EXPECT_EQ(dtype_from_name("F8_E4M3FN"), DType::kF8E4M3);
  EXPECT_FALSE(dtype_from_name("F33").has_value());
  EXPECT_EQ(dtype_bytes(DType::kF4E2M1, 7), 4u);
  EXPECT_EQ(dtype_bytes(DType::kBF16, 7), 14u);
}

}  // namespace
}  // namespace deepinfer
