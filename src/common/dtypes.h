// Element types of deepinfer tensors and checkpoints, and exact conversions to and from fp32.
//
// Rounding on the way in is round-to-nearest-even everywhere. Overflow follows each format:
//   bf16, fp16, fp8 e5m2 : IEEE-like, overflow to ±Inf, NaN stays NaN.
//   fp8 e4m3fn           : no Inf; values that round past ±448 and Inf become NaN (0x7F/0xFF),
//                          as PyTorch and ml_dtypes do. `saturate=true` clamps to ±448 instead
//                          (what a quantizer wants after scaling).
//   fp4 e2m1             : no Inf or NaN; saturates to ±6; NaN input maps to +6 (documented choice).
//   ue8m0 (F8_E8M0)      : unsigned power-of-two scale 2^(e-127); e=255 is NaN; no zero.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace deepinfer {

enum class DType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kF8E4M3,   // float8_e4m3fn
  kF8E5M2,   // float8_e5m2
  kF8E8M0,   // ue8m0 scale
  kF4E2M1,   // fp4 e2m1, two per byte (low nibble first)
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool,
};

// Name as written in safetensors headers ("F32", "BF16", "F8_E4M3", "F4", ...).
const char* dtype_name(DType t);
// Parses a safetensors dtype name. Accepts the aliases used in the wild ("F8_E4M3FN", "FP4").
std::optional<DType> dtype_from_name(std::string_view name);
// Size in bits of one element (4 for kF4E2M1).
int dtype_bits(DType t);
bool dtype_is_float(DType t);
// Bytes needed for `numel` elements (rounded up for sub-byte types).
uint64_t dtype_bytes(DType t, uint64_t numel);

// ---- bit-cast helpers ----
inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float f32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// ---- bf16 ----
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb;  // round to nearest even; overflow carries into Inf correctly
  return static_cast<uint16_t>(u >> 16);
}

// ---- fp16 ----
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// ---- fp8 ----
float e4m3_to_f32(uint8_t v);
uint8_t f32_to_e4m3(float f, bool saturate = false);
float e5m2_to_f32(uint8_t v);
uint8_t f32_to_e5m2(float f);

// ---- fp4 e2m1 (code in the low 4 bits) ----
float e2m1_to_f32(uint8_t code);
uint8_t f32_to_e2m1(float f);

// ---- ue8m0 scales ----
float ue8m0_to_f32(uint8_t e);
// Exact for powers of two in [2^-127, 2^127]; otherwise rounds the exponent UP (the scale never
// under-covers the value), as DeepSeek's quantizer does (scale = 2^ceil(log2(x))).
// Returns 255 (NaN) for NaN, negative, zero or out-of-range input.
uint8_t f32_to_ue8m0_ceil(float f);

}  // namespace deepinfer
