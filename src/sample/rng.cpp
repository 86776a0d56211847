#include "sample/rng.h"

namespace deepinfer::sample {
namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

inline void mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

inline PhiloxKey key_of(uint64_t seed) {
  return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
}

// 53 bits from two words, mapped to the centre of one of 2^53 equal cells: never 0, never 1.
inline double open_unit(uint32_t a, uint32_t b) {
  const uint64_t bits = (static_cast<uint64_t>(a) << 21) ^ (b >> 11);  // 53 bits
  return (static_cast<double>(bits) + 0.5) * 0x1.0p-53;
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kPhiloxM0, ctr[0], &hi0, &lo0);
    mulhilo(kPhiloxM1, ctr[2], &hi1, &lo1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

double token_uniform(uint64_t seed, uint32_t sequence_index, uint32_t output_position, uint32_t token_id) {
  const PhiloxCounter out =
      philox4x32_10({token_id >> 1, output_position, sequence_index,
                     static_cast<uint32_t>(RngStream::kTokenSampling)},
                    key_of(seed));
  return (token_id & 1u) ? open_unit(out[2], out[3]) : open_unit(out[0], out[1]);
}

uint64_t derive_request_seed(uint64_t engine_seed, uint64_t request_index) {
  const PhiloxCounter out =
      philox4x32_10({static_cast<uint32_t>(request_index), static_cast<uint32_t>(request_index >> 32), 0,
                     static_cast<uint32_t>(RngStream::kSeedDerivation)},
                    key_of(engine_seed));
  return (static_cast<uint64_t>(out[1]) << 32) | out[0];
}

}  // namespace deepinfer::sample
