// Sampling on the device (Backend::sample; docs/engine.md "Sampling on the device"): one block per
// logits row computes the host sampler's steps 5–10 (src/sample/sampler.h) on the device:
//
//   greedy (temperature < 1e-5): argmax, ties to the lowest id (bitwise the host's answer).
//   random: s = logit · fp32(1/T) (the host's fp32 product);
//     min-p : keep s >= floor, floor = the smallest fp32 with exp(f64(floor) − m) >= min_p
//             (binary search over the fp32 order; m = max s) — the host's test, as a threshold;
//     top-k : the k-th largest value after min-p (radix select, 4 passes of 8 bits over the
//             order-preserving key of the fp32 bits), keep s >= it (boundary ties kept);
//     top-p : rank by (s desc, id asc); each token's mass q = exp(f64(s) − m) / z as 62-bit fixed
//             point (sums exact and order-free, so the result is deterministic); a radix descent
//             over (count, mass) histograms finds the token where the mass ranked above first
//             reaches top_p, ties at that value cut by id;
//     draw  : argmax over kept t of exp(f64(s_t) − m) / −log(token_uniform(seed, seq, pos, t)),
//             ties to the lowest id: the host's exponential race in f64, Philox bit-identical.
// The device's exp/log may differ from glibc's in the last ulp, so random rows match the host in
// distribution (and in practice almost always in the token); greedy rows match exactly.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda::kernels {

// Same layout as backend::SampleRowParams (checked by a static_assert in cuda_backend.cpp).
struct SampleRow {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  uint64_t seed;
  uint32_t sequence_index;
  uint32_t output_position;
};

// ids[S] = one token per row of logits[S, V] with rows[S] (device memory). scratch (device memory
// of sample_rows_scratch_bytes(S), or null): the greedy rows' argmax runs in 16 blocks per row
// first (session 12; the same ids), else in the row's one block.
size_t sample_rows_scratch_bytes(int64_t S);
void sample_rows(const float* logits, int64_t S, int64_t V, const SampleRow* rows, int32_t* ids,
                 void* scratch, cudaStream_t s);

// For tests: kept[S, V] (1 = token t survives temperature/min-p/top-k/top-p of row s, 0 = not;
// greedy rows: only the argmax) — the filter sample_rows draws from.
void sample_filter_mask(const float* logits, int64_t S, int64_t V, const SampleRow* rows,
                        uint8_t* kept, cudaStream_t s);

}  // namespace deepinfer::cuda::kernels
