// Tensor-core stored-format linear (see linear_tc.cuh for the arithmetic and fragment layouts):
// tile choice by M (all tiles give the same bits), the fixed split-K plan and its in-order
// reduction.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/linear_tc.cuh"
#include "backend/cuda/tc_ring.cuh"

namespace deepinfer::cuda::kernels {

namespace {

constexpr int kTerms = 3;  // bf16 terms of x: 3 makes the product fp32-accurate
constexpr int kBN = tc::kNF * 8 * 4;  // every instantiation below has WN = 4

int num_sms() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      return 132;
    }
    return v;
  }();
  return n;
}

int tile_rows_for(int64_t M) { return M <= 16 ? 16 : M <= 64 ? 64 : 128; }

constexpr int64_t kMaxSplits = 32;
// true: session 4's split plan (kept selectable until the new one is measured on the H200).
constexpr bool kLegacySplitPolicy = false;
constexpr int64_t kMaxWorkspaceFloats = int64_t{1} << 26;  // 256 MiB of split partials per launch

template <int kFmt>
void launch_fmt(const tc::TcArgs& a, int bm, dim3 grid, cudaStream_t s) {
  if (bm == 16) tc::launch_tc<kFmt, kTerms, 16, 1, 4, false>(a, grid, s);
  else if (bm == 64) tc::launch_tc<kFmt, kTerms, 64, 2, 4, false>(a, grid, s);
  else tc::launch_tc<kFmt, kTerms, 128, 2, 4, false>(a, grid, s);
}

}  // namespace

bool linear_tc_supported(int fmt, const void* w, const float* x, int64_t M, int64_t K,
                         bool scaled, int64_t block_cols) {
  if (fmt < 0 || fmt > 2 || K <= 0) return false;
  const int64_t row_bytes = fmt == 0 ? 2 * K : fmt == 1 ? K : K / 2;
  if ((fmt == 2 && K % 2 != 0) || row_bytes % 16 != 0) return false;
  if (reinterpret_cast<uintptr_t>(w) % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) return false;
  if (scaled && (block_cols <= 0 || block_cols % tc::kBK != 0)) return false;
  if ((M + 15) / 16 > 65535) return false;  // grid.y
  return true;
}

int64_t linear_tc_k_split(int64_t M, int64_t GN, int64_t K, int64_t block_cols,
                          bool batch_invariant) {
  const int64_t unit = block_cols > 0 ? block_cols : tc::kPromoteUnscaled;
  const int64_t tiles = (GN + kBN - 1) / kBN;  // n tiles over all groups (N ≥ 1 per group)
  if (kLegacySplitPolicy) {  // session 4: ~2 CTAs per SM, ≤ 8 splits of ≥ 4 scale blocks
    const int64_t sms = num_sms();
    if (tiles >= sms) return K;
    const int64_t bm = tile_rows_for(M);
    if (!batch_invariant && ((M + bm - 1) / bm) * tiles >= sms) return K;
    int64_t splits = std::min<int64_t>((2 * sms + tiles - 1) / tiles, 8);
    splits = std::min<int64_t>(splits, std::max<int64_t>(1, K / (4 * unit)));
    if (splits <= 1) return K;
    const int64_t per = (K + splits - 1) / splits;
    return (per + unit - 1) / unit * unit;
  }
  // Outside batch-invariant mode the split may follow M (none once the m tiles fill the GPU).
  // Under --batch-invariant it is the split that fills the GPU at one 16-row m tile (decode),
  // whatever M is: an M-dependent split would change a row's bits.
  const int64_t bm = batch_invariant ? 16 : tile_rows_for(M);
  const int64_t m_tiles = batch_invariant ? 1 : (M + bm - 1) / bm;
  // One wave of resident CTAs: 4 per SM for the 128-thread BM = 16 tile (its register limit),
  // 2 for the 256-thread BM = 64 / 128 tiles. Splits = as many as fit in that wave (a second,
  // partial wave would cost a whole CTA time), at most kMaxSplits, each at least one scale block
  // and 128 columns (4 k32 stages) wide.
  const int64_t target = (bm == 16 ? 4 : 2) * static_cast<int64_t>(num_sms());
  const int64_t min_width = (std::max<int64_t>(unit, 128) + unit - 1) / unit * unit;
  int64_t splits = target / (m_tiles * tiles);
  splits = std::min<int64_t>(splits, kMaxSplits);
  splits = std::min<int64_t>(splits, K / min_width);
  if (splits <= 1) return K;
  const int64_t per = (K + splits - 1) / splits;
  return (per + unit - 1) / unit * unit;
}

int64_t linear_tc_slab_rows(int64_t M, int64_t GN, int64_t K, int64_t k_split) {
  if (k_split >= K) return M;
  const int64_t splits = (K + k_split - 1) / k_split;
  const int64_t rows = kMaxWorkspaceFloats / std::max<int64_t>(1, splits * GN) / 128 * 128;
  return std::min<int64_t>(M, std::max<int64_t>(128, rows));
}

void linear_tc(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
               int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows,
               int64_t block_cols, int64_t k_split, float* out, float* workspace,
               cudaStream_t s) {
  if (M == 0 || N == 0 || G == 0) return;
  const int64_t splits = (K + k_split - 1) / k_split;
  tc::TcArgs a;
  tc::fill_linear_args(a, x, w, scale, scale_f32, M, N, K, G, block_rows, block_cols, k_split, out,
                       workspace);
  a.G = G;
  const int bm = tile_rows_for(M);
  dim3 grid(static_cast<unsigned>(G * ((N + kBN - 1) / kBN)), static_cast<unsigned>((M + bm - 1) / bm),
            static_cast<unsigned>(splits));
  if (fmt == 0) launch_fmt<0>(a, bm, grid, s);
  else if (fmt == 1) launch_fmt<1>(a, bm, grid, s);
  else launch_fmt<2>(a, bm, grid, s);
  if (splits > 1) {
    const int64_t n = M * G * N;
    // The fixed-order split sum (tc_ring.cuh; its griddepcontrol.wait is a no-op in a plain launch).
    tcr::split_reduce_pdl<0><<<grid_for(n, 256), 256, 0, s>>>(workspace, splits, n, out);
  }
}

}  // namespace deepinfer::cuda::kernels
