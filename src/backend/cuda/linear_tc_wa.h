// Small-M tensor-core product with linear_tc's bits and the weight as the MMA's A operand
// (session 9; linear_tc_wa.cuh for the arithmetic and why its bits are linear_tc's; docs/cuda.md
// "Weight-as-A products with linear_tc's bits (linear_tc_wa)"). Host-only header (C++17/20 safe).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::cuda::kernels {

// M bound: up to two n8 tiles of tokens per MMA.
constexpr int64_t kLinearTcWaMaxRows = 16;

// Whether linear_tc_wa takes the product: linear_tc_supported's layout (fmt 0 bf16, 1 e4m3,
// 2 e2m1; row bytes a multiple of 16; w and x 16-byte aligned; block_cols a multiple of 32 when
// scaled) and 1 <= M <= kLinearTcWaMaxRows.
bool linear_tc_wa_supported(int fmt, const void* w, const float* x, int64_t M, int64_t K,
                            bool scaled, int64_t block_cols);

// out [M, G·N] = x [M, G·K] · deq(w [G·N, K])ᵀ per group, meant to be bitwise equal to
// linear_tc(...) with the same arguments and the same k_split (a multiple of 32 and of
// block_cols, e.g. linear_tc_k_split(M, G·N, K, block_cols or 0, batch_invariant)). When
// k_split < K, `workspace` holds [ceil(K / k_split), M, G·N] floats, summed in split order (the
// same adds as linear_tc's reduction). scale [ceil(G·N / block_rows), ceil(K / block_cols)] ue8m0
// or f32 (fewer than 2^31 elements), null for bf16. pdl: both launches with programmatic
// dependent launch (pdl.cuh); share_x: x split into bf16 terms once per CTA (else per warp);
// tiles_per_warp: 1 or 2 m16 weight tiles per warp (CTAs of 64 or 128 weight rows). The bits are
// the same for every pdl / share_x / tiles_per_warp. fast_e4m3 (e4m3 only; then 128-row CTAs
// and x split per CTA): the short decode of linear_tc_wa_decode.h — the same bits unless the
// weight holds a NaN code (decoded as ±480 instead of NaN). wide (bf16 only; then 128-row CTAs
// and x split per CTA): ring slots of 256 bytes per weight row and 2 CTAs per SM instead of 64
// bytes and 4 (longer DRAM runs: the head). deep (e4m3 only; 128-row CTAs, x split per CTA): 3
// CTAs per SM with a deeper ring (~72 KB each) instead of 4 (~56 KB). The bits depend on neither.
void linear_tc_wa(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                  int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows,
                  int64_t block_cols, int64_t k_split, float* out, float* workspace,
                  cudaStream_t s, bool pdl = true, bool share_x = true, int tiles_per_warp = 2,
                  bool fast_e4m3 = false, bool wide = false, bool deep = false);

// For the device test: out [512] (device) ← for every e4m3 code c, out[c] = linear_tc's decode
// of the pair (c, c) (bf16x2 bits), out[256 + c] = the short decode's.
void linear_tc_wa_decode_table(uint32_t* out, cudaStream_t s);

// For the device test, the transposition question on bare MMAs: `trials` (a multiple of 4)
// independent chains of `steps` m16n8k16 bf16 MMAs; x, w [trials][16][16·steps] bf16 bits (device);
// out_n, out_t [trials][16 x rows][16 w rows] (device): x·wᵀ with x in A / w in B (linear_tc's
// roles) and with w in A / x in B (linear_tc_wa's), same k positions. Equal bits = the hypothesis.
void linear_tc_wa_mma_probe(const uint16_t* x, const uint16_t* w, int trials, int steps, float* out_n,
                            float* out_t, cudaStream_t s);

}  // namespace deepinfer::cuda::kernels
