// Counter-based randomness: Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11), written by hand (it is ~20 lines) and checked against the Random123
// known-answer vectors in tests/sample/rng_test.cpp.
//
// A draw is a pure function of (key, counter), so the random number used for a token never depends
// on what else is in the batch or on the order rows are processed. deepinfer keys every draw by
//   key     = the request's 64-bit seed                       (lo, hi words)
//   counter = {token_id / 2, output_position, sequence_index, stream}
// where output_position is the index of the output token being drawn and sequence_index the
// sequence within an n > 1 request. One Philox call yields two 53-bit uniforms (tokens 2j, 2j+1).
#pragma once

#include <array>
#include <cstdint>

namespace deepinfer::sample {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// The Philox-4x32 bijection with 10 rounds.
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// Separate streams, so different uses of the same (seed, position) never share numbers.
enum class RngStream : uint32_t {
  kTokenSampling = 0,  // one uniform per vocabulary entry (exponential race)
  kSeedDerivation = 1, // seeds for requests without their own seed
};

// Uniform in the open interval (0, 1) with 53 random bits for one vocabulary entry of one draw.
double token_uniform(uint64_t seed, uint32_t sequence_index, uint32_t output_position, uint32_t token_id);

// Seed of a request that did not bring its own: a function of the engine's seed and the request's
// arrival index only.
uint64_t derive_request_seed(uint64_t engine_seed, uint64_t request_index);

}  // namespace deepinfer::sample
