// Routed experts on the tensor cores, grouped on the device: a one-block counting sort of the
// slots by expert (per-expert row and m-tile offsets, a slot permutation), then the grouped GEMM
// of linear_tc.cuh over (n tile, work tile) with the work-tile count bounded on the host
// (min(slots, slots / BM + E)); CTAs past the real tile count exit.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_tc.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/pdl_config.h"

namespace deepinfer::cuda::kernels {

namespace {

constexpr int kTerms = 3;
constexpr int kBN = tc::kNF * 8 * 4;  // WN = 4
constexpr int kGroupThreads = 1024;

// Exclusive scan of v over the block (thread order); returns the block total.
__device__ int block_exclusive_scan(int v, int* scratch /* [32] */, int* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += u;
  }
  if (lane == 31) scratch[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    int w = lane < static_cast<int>(blockDim.x / 32) ? scratch[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int u = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += u;
    }
    scratch[lane] = w;  // inclusive warp prefix
  }
  __syncthreads();
  const int before = warp > 0 ? scratch[warp - 1] : 0;
  *total = scratch[blockDim.x / 32 - 1];
  __syncthreads();
  return before + inc - v;
}

__global__ void __launch_bounds__(kGroupThreads)
moe_group_kernel(const int32_t* __restrict__ ids, int64_t slots, int num_experts, int tile_rows,
                 int32_t* __restrict__ perm, int32_t* __restrict__ row_off,
                 int32_t* __restrict__ tile_off, int32_t* error_flag) {
  pdl::enter();
  extern __shared__ int sh[];
  int* cnt = sh;                 // [E]
  int* scratch = sh + num_experts;  // [32]
  const int tid = threadIdx.x;
  for (int e = tid; e < num_experts; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  for (int64_t i = tid; i < slots; i += blockDim.x) {
    const int32_t e = ids[i];
    if (e >= 0 && e < num_experts) atomicAdd(&cnt[e], 1);
    else set_error(error_flag, kErrHashExpertId);
  }
  __syncthreads();
  // num_experts <= blockDim: thread e owns expert e.
  const int c = tid < num_experts ? cnt[tid] : 0;
  int rows_total = 0, tiles_total = 0;
  const int r0 = block_exclusive_scan(c, scratch, &rows_total);
  const int t0 = block_exclusive_scan((c + tile_rows - 1) / tile_rows, scratch, &tiles_total);
  if (tid < num_experts) {
    row_off[tid] = r0;
    tile_off[tid] = t0;
    cnt[tid] = r0;  // becomes the fill cursor
  }
  if (tid == 0) {
    row_off[num_experts] = rows_total;
    tile_off[num_experts] = tiles_total;
  }
  __syncthreads();
  for (int64_t i = tid; i < slots; i += blockDim.x) {
    const int32_t e = ids[i];
    if (e >= 0 && e < num_experts) perm[atomicAdd(&cnt[e], 1)] = static_cast<int32_t>(i);
  }
}

template <int kFmt>
void launch_fmt(const tc::TcArgs& a, int bm, dim3 grid, cudaStream_t s) {
  if (bm == 16) tc::launch_tc<kFmt, kTerms, 16, 1, 4, true>(a, grid, s);
  else tc::launch_tc<kFmt, kTerms, 64, 2, 4, true>(a, grid, s);
}

int64_t work_tiles(int64_t slots, int64_t E, int tile_rows) {
  return std::min<int64_t>(slots, (slots + tile_rows - 1) / tile_rows + E);
}

}  // namespace

int experts_tc_tile_rows(int64_t slots, int64_t num_experts) {
  return slots <= 24 * num_experts ? 16 : 64;
}

bool experts_tc_supported(int fmt, const float* x, int64_t slots, int64_t num_experts, int64_t K,
                          bool scaled, int64_t block_cols) {
  if (fmt < 0 || fmt > 2 || num_experts < 1 || num_experts > kGroupThreads) return false;
  if (slots >= (int64_t{1} << 31) || reinterpret_cast<uintptr_t>(x) % 16 != 0) return false;
  if (work_tiles(slots, num_experts, experts_tc_tile_rows(slots, num_experts)) > 65535) return false;
  const int64_t row_bytes = fmt == 0 ? 2 * K : fmt == 1 ? K : K / 2;
  if (K <= 0 || (fmt == 2 && K % 2 != 0) || row_bytes % 16 != 0) return false;
  if (scaled && (block_cols <= 0 || block_cols % tc::kBK != 0)) return false;
  return true;
}

void moe_group(const int32_t* ids, int64_t slots, int64_t num_experts, int tile_rows,
               int32_t* perm, int32_t* row_off, int32_t* tile_off, int32_t* error_flag,
               cudaStream_t s) {
  const size_t smem = (static_cast<size_t>(num_experts) + 32) * sizeof(int);
  pdl::launch(moe_group_kernel, 1, kGroupThreads, smem, s, pdl::small_kernels(), ids, slots,
              static_cast<int>(num_experts), tile_rows, perm, row_off, tile_off, error_flag);
}

void experts_tc(int fmt, const float* x, int64_t x_div, const int32_t* perm,
                const int32_t* row_off, const int32_t* tile_off, int tile_rows, int64_t slots,
                int64_t num_experts, const void* const* w_table, const void* const* s_table,
                bool scale_f32, int64_t N, int64_t K, int64_t block_rows, int64_t block_cols,
                float* out, cudaStream_t s) {
  if (slots == 0 || N == 0) return;
  tc::TcArgs a;
  a.x = x;
  a.lda = K;
  a.x_div = x_div;
  a.w_table = w_table;
  a.s_table = s_table;
  a.perm = perm;
  a.row_off = row_off;
  a.tile_off = tile_off;
  a.num_experts = static_cast<int32_t>(num_experts);
  a.scale_f32 = scale_f32 ? 1 : 0;
  a.M = slots;
  a.N = N;
  a.K = K;
  a.br = s_table ? block_rows : 1;
  a.bc = s_table ? block_cols : tc::kPromoteUnscaled;
  a.scale_cols = s_table ? (K + block_cols - 1) / block_cols : 0;
  a.k_split = K;
  a.out = out;
  a.ldo = N;
  dim3 grid(static_cast<unsigned>((N + kBN - 1) / kBN),
            static_cast<unsigned>(work_tiles(slots, num_experts, tile_rows)), 1);
  if (fmt == 0) launch_fmt<0>(a, tile_rows, grid, s);
  else if (fmt == 1) launch_fmt<1>(a, tile_rows, grid, s);
  else launch_fmt<2>(a, tile_rows, grid, s);
}

}  // namespace deepinfer::cuda::kernels
