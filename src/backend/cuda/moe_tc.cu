// Host side of the v2 / v3 routed-expert GEMMs (moe_tc.cuh, moe_tc_v3.cuh): the term pre-split
// and the launches.
#include "backend/cuda/moe_tc.h"

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/moe_tc.cuh"
#include "backend/cuda/moe_tc_v3.cuh"
#include "common/env.h"

namespace deepinfer::cuda::kernels {

namespace {

// 4 consecutive elements per thread (k = 8q + 4ks + 0..3 of a 32-k group), three bf16 planes out,
// each piece stored at 16ks + 4q of its group (the permuted order, moe_tc.h).
__global__ void split_terms_kernel(const float* __restrict__ x, int64_t n4, int64_t plane,
                                   uint16_t* __restrict__ terms) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  const float4 v = reinterpret_cast<const float4*>(x)[i];
  const int kk = static_cast<int>((4 * i) % 32);           // K % 32 == 0: groups never straddle rows
  const int64_t dst = (4 * i - kk + ((kk >> 2) & 1) * 16 + (kk >> 3) * 4) / 4;  // in 4-element pieces
  float r[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int t = 0; t < moe_tc::kTerms; ++t) {
    const __nv_bfloat162 h01 = __floats2bfloat162_rn(r[0], r[1]);
    const __nv_bfloat162 h23 = __floats2bfloat162_rn(r[2], r[3]);
    reinterpret_cast<uint2*>(terms + t * plane)[dst] =
        make_uint2(tc::bf16x2_bits(h01), tc::bf16x2_bits(h23));
    if (t + 1 < moe_tc::kTerms) {
      const float2 f01 = __bfloat1622float2(h01), f23 = __bfloat1622float2(h23);
      r[0] -= f01.x;
      r[1] -= f01.y;
      r[2] -= f23.x;
      r[3] -= f23.y;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (r[j] != r[j]) r[j] = 0.f;  // ±inf x: the remainder inf − inf is not a term
    }
  }
}

int64_t work_tiles(int64_t slots, int64_t E, int64_t tr) {
  return std::min<int64_t>(slots, (slots + tr - 1) / tr + E);
}

template <int BM, int WN, int kS, int kMinBlocks>
void launch(const moe_tc::Args& a, dim3 grid, cudaStream_t s) {
  using Sh = moe_tc::Shape<BM, WN, kS>;
  auto* k = moe_tc::moe_tc_kernel<BM, WN, kS, kMinBlocks>;
  // All of the unified L1 as shared memory, so that kMinBlocks CTAs fit (the kernel reads
  // global memory through cp.async.cg, which bypasses L1, and a few scale words).
  static std::atomic<uint64_t> attr_set{0};
  opt_in_smem_per_device(attr_set, k, Sh::kSmem, /*max_carveout=*/true);
  grid.x = static_cast<unsigned>((a.N + Sh::BN - 1) / Sh::BN);
  k<<<grid, Sh::kThreads, Sh::kSmem, s>>>(a);
}

// v3 (moe_tc_v3.cuh): BM 64 × BN 256, 4 stages, 1 CTA (8 warps) per SM. The shared memory it
// needs (137 KiB) and no more, so the rest of the unified L1 caches the scale words it reads.
void launch_v3(const moe_tc::Args& a, dim3 grid, cudaStream_t s) {
  namespace v3 = moe_tc_v3;
  auto* k = v3::moe_tc_v3_kernel;
  static std::atomic<uint64_t> attr_set{0};
  opt_in_smem_per_device(attr_set, k, v3::kSmem, /*max_carveout=*/false);
  grid.x = static_cast<unsigned>((a.N + v3::BN - 1) / v3::BN);
  k<<<grid, v3::kThreads, v3::kSmem, s>>>(a);
}

}  // namespace

int moe_tc_variant() {
  static const int v = [] {
    const std::string& s = env().cuda_moe_tc;
    return s == "v1" ? 0 : s == "v2" ? 1 : s == "v2n256" ? 3 : s == "v3" ? 4 : 2;
  }();
  return v;
}

int moe_tc_tile_rows(int64_t slots, int64_t num_experts) {
  return slots <= 24 * num_experts ? 32 : 64;
}

bool moe_tc_supported(int fmt, const float* x, int64_t slots, int64_t num_experts, int64_t K,
                      bool scaled, int64_t block_cols, int tile_rows) {
  if (tile_rows != 32 && tile_rows != 64) return false;
  if (fmt != 2 || !scaled || num_experts < 1 || num_experts > 1024) return false;
  if (K <= 0 || K % moe_tc::kBK != 0 || block_cols <= 0 || block_cols % 32 != 0) return false;
  if (slots >= (int64_t{1} << 31) || reinterpret_cast<uintptr_t>(x) % 16 != 0) return false;
  if (work_tiles(slots, num_experts, tile_rows) > 65535) return false;
  return true;
}

void moe_tc_split_terms(const float* x, int64_t rows, int64_t K, uint16_t* terms, cudaStream_t s) {
  const int64_t n4 = K % 32 == 0 ? rows * K / 4 : 0;  // callers check K (moe_tc_supported)
  if (n4 == 0) return;
  split_terms_kernel<<<grid_for(n4, 256), 256, 0, s>>>(x, n4, rows * K, terms);
}

void moe_tc_experts(int variant, const uint16_t* terms, int64_t x_rows, int64_t x_div,
                    const int32_t* perm, const int32_t* row_off, const int32_t* tile_off,
                    int tile_rows, int64_t slots, int64_t num_experts, const void* const* w_table,
                    const void* const* s_table, bool scale_f32, int64_t N, int64_t K,
                    int64_t block_rows, int64_t block_cols, float* out, cudaStream_t s) {
  if (slots == 0 || N == 0) return;
  moe_tc::Args a;
  a.terms = terms;
  a.plane = x_rows * K;
  a.x_div = x_div;
  a.w_table = w_table;
  a.s_table = s_table;
  a.perm = perm;
  a.row_off = row_off;
  a.tile_off = tile_off;
  a.num_experts = static_cast<int32_t>(num_experts);
  a.scale_f32 = scale_f32 ? 1 : 0;
  a.N = N;
  a.K = K;
  a.br = block_rows;
  a.bc = block_cols;
  a.scale_cols = (K + block_cols - 1) / block_cols;
  a.out = out;
  a.ldo = N;
  dim3 grid(1, static_cast<unsigned>(work_tiles(slots, num_experts, tile_rows)), 1);
  // BM 32 (decode-sized batches, weight streaming): 6 stages (5 in flight), 2 CTAs per SM.
  if (tile_rows == 32) launch<32, 4, 6, 2>(a, grid, s);
  else if (variant == 2) launch<64, 4, 3, 2>(a, grid, s);
  else if (variant == 3) launch<64, 8, 4, 1>(a, grid, s);
  else if (variant == 4) launch_v3(a, grid, s);
  else launch<64, 4, 4, 1>(a, grid, s);
}

}  // namespace deepinfer::cuda::kernels
