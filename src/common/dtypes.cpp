#include "common/dtypes.h"

#include <cmath>

namespace deepinfer {

namespace {

struct DTypeInfo {
  DType type;
  const char* name;
  int bits;
  bool is_float;
};

constexpr DTypeInfo kInfos[] = {
    {DType::kF64, "F64", 64, true},      {DType::kF32, "F32", 32, true},
    {DType::kF16, "F16", 16, true},      {DType::kBF16, "BF16", 16, true},
    {DType::kF8E4M3, "F8_E4M3", 8, true}, {DType::kF8E5M2, "F8_E5M2", 8, true},
    {DType::kF8E8M0, "F8_E8M0", 8, true}, {DType::kF4E2M1, "F4", 4, true},
    {DType::kI64, "I64", 64, false},     {DType::kI32, "I32", 32, false},
    {DType::kI16, "I16", 16, false},     {DType::kI8, "I8", 8, false},
    {DType::kU64, "U64", 64, false},     {DType::kU32, "U32", 32, false},
    {DType::kU16, "U16", 16, false},     {DType::kU8, "U8", 8, false},
    {DType::kBool, "BOOL", 8, false},
};

const DTypeInfo& info(DType t) { return kInfos[static_cast<int>(t)]; }

// A minifloat format: sign bit, `exp_bits` exponent bits with `bias`, `man_bits` mantissa bits.
struct Minifloat {
  int exp_bits;
  int man_bits;
  int bias;
  double max_finite;
};

// Round |a| (finite, >= 0) to the format's grid with round-to-nearest-even, ignoring the upper
// exponent limit. Returns the rounded magnitude as a double (exact).
double round_to_grid(double a, const Minifloat& fmt) {
  if (a == 0.0) return 0.0;
  const int emin = 1 - fmt.bias;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1) -> floor(log2 a) = e - 1
  int exp = e - 1;
  if (exp < emin) exp = emin;  // subnormal range shares the smallest normal quantum
  const double quantum = std::ldexp(1.0, exp - fmt.man_bits);
  const double q = std::nearbyint(a / quantum);  // default rounding mode: nearest-even
  return q * quantum;
}

// Encode a magnitude already on the grid and <= max_finite.
uint32_t encode_grid_value(double v, const Minifloat& fmt) {
  if (v == 0.0) return 0;
  const int emin = 1 - fmt.bias;
  int e;
  std::frexp(v, &e);
  const int exp = e - 1;
  if (exp < emin) {  // subnormal
    return static_cast<uint32_t>(v / std::ldexp(1.0, emin - fmt.man_bits));
  }
  const uint32_t mant =
      static_cast<uint32_t>(v / std::ldexp(1.0, exp - fmt.man_bits)) - (1u << fmt.man_bits);
  return (static_cast<uint32_t>(exp + fmt.bias) << fmt.man_bits) | mant;
}

double decode_minifloat(uint32_t code, const Minifloat& fmt) {
  const uint32_t mant = code & ((1u << fmt.man_bits) - 1);
  const uint32_t exp = (code >> fmt.man_bits) & ((1u << fmt.exp_bits) - 1);
  const bool neg = (code >> (fmt.man_bits + fmt.exp_bits)) & 1u;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), 1 - fmt.bias - fmt.man_bits);
  } else {
    v = std::ldexp(static_cast<double>(mant + (1u << fmt.man_bits)),
                   static_cast<int>(exp) - fmt.bias - fmt.man_bits);
  }
  return neg ? -v : v;
}

constexpr Minifloat kF16{5, 10, 15, 65504.0};
constexpr Minifloat kE4M3{4, 3, 7, 448.0};
constexpr Minifloat kE5M2{5, 2, 15, 57344.0};
constexpr Minifloat kE2M1{2, 1, 1, 6.0};

}  // namespace

const char* dtype_name(DType t) { return info(t).name; }
int dtype_bits(DType t) { return info(t).bits; }
bool dtype_is_float(DType t) { return info(t).is_float; }
uint64_t dtype_bytes(DType t, uint64_t numel) { return (numel * dtype_bits(t) + 7) / 8; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfos) {
    if (name == i.name) return i.type;
  }
  if (name == "F8_E4M3FN") return DType::kF8E4M3;
  if (name == "FP4" || name == "F4_E2M1" || name == "F4_E2M1FN") return DType::kF4E2M1;
  if (name == "E8M0" || name == "F8_E8M0FNU") return DType::kF8E8M0;
  return std::nullopt;
}

// ---- fp16 ----
float f16_to_f32(uint16_t h) {
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  if (exp == 0x1F) {  // Inf / NaN: keep payload
    return f32_from_bits(sign | 0x7F800000u | (static_cast<uint32_t>(h & 0x3FFu) << 13));
  }
  return static_cast<float>(decode_minifloat(h, kF16));
}

uint16_t f32_to_f16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7E00);
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(f)) return static_cast<uint16_t>(sign | 0x7C00);
  const double r = round_to_grid(a, kF16);
  if (r > kF16.max_finite) return static_cast<uint16_t>(sign | 0x7C00);
  return static_cast<uint16_t>(sign | encode_grid_value(r, kF16));
}

// ---- fp8 e4m3fn ----
float e4m3_to_f32(uint8_t v) {
  if ((v & 0x7F) == 0x7F) return std::nanf("");
  return static_cast<float>(decode_minifloat(v, kE4M3));
}

uint8_t f32_to_e4m3(float f, bool saturate) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return sign | 0x7F;
  if (std::isinf(f)) return saturate ? (sign | 0x7E) : (sign | 0x7F);
  const double r = round_to_grid(std::fabs(static_cast<double>(f)), kE4M3);
  if (r > kE4M3.max_finite) return saturate ? (sign | 0x7E) : (sign | 0x7F);
  return static_cast<uint8_t>(sign | encode_grid_value(r, kE4M3));
}

// ---- fp8 e5m2 ----
float e5m2_to_f32(uint8_t v) {
  const uint32_t exp = (v >> 2) & 0x1F;
  if (exp == 0x1F) {
    if (v & 0x3) return std::nanf("");
    return (v & 0x80) ? -INFINITY : INFINITY;
  }
  return static_cast<float>(decode_minifloat(v, kE5M2));
}

uint8_t f32_to_e5m2(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return sign | 0x7E;
  if (std::isinf(f)) return sign | 0x7C;
  const double r = round_to_grid(std::fabs(static_cast<double>(f)), kE5M2);
  if (r > kE5M2.max_finite) return sign | 0x7C;
  return static_cast<uint8_t>(sign | encode_grid_value(r, kE5M2));
}

// ---- fp4 e2m1 ----
float e2m1_to_f32(uint8_t code) { return static_cast<float>(decode_minifloat(code & 0xF, kE2M1)); }

uint8_t f32_to_e2m1(float f) {
  if (std::isnan(f)) return 0x7;
  const uint8_t sign = std::signbit(f) ? 0x8 : 0;
  if (std::isinf(f)) return sign | 0x7;
  const double r = round_to_grid(std::fabs(static_cast<double>(f)), kE2M1);
  if (r > kE2M1.max_finite) return sign | 0x7;
  return static_cast<uint8_t>(sign | encode_grid_value(r, kE2M1));
}

// ---- ue8m0 ----
float ue8m0_to_f32(uint8_t e) {
  if (e == 0xFF) return std::nanf("");
  return static_cast<float>(std::ldexp(1.0, static_cast<int>(e) - 127));
}

uint8_t f32_to_ue8m0_ceil(float f) {
  if (!(f > 0.0f) || std::isinf(f)) return 0xFF;
  int e;
  const double m = std::frexp(static_cast<double>(f), &e);  // f = m * 2^e, m in [0.5,1)
  int exp = (m == 0.5) ? e - 1 : e;                         // ceil(log2 f)
  if (exp < -127) exp = -127;
  if (exp > 127) return 0xFF;
  return static_cast<uint8_t>(exp + 127);
}

}  // namespace deepinfer
