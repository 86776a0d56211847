// Host side of the multi-projection dense GEMV (gemv_multi.cuh for the layout and why its bits
// equal gemv_linear's).
#include "backend/cuda/gemv.h"

#include "backend/cuda/gemv_multi.cuh"

namespace deepinfer::cuda::kernels {

namespace {

namespace gm = gemv2;

int elems_of(int fmt) { return fmt == 0 ? 8 : 16; }
int64_t row_bytes_of(int fmt, int64_t K) { return fmt == 0 ? 2 * K : K; }

template <int kFmt, int kMT, int kR, int kU, bool kScaled, int kMinBlocks = 2>
void launch(const gm::Args& a, cudaStream_t s, bool pdl) {
  auto* kernel = gm::gemv_multi_kernel<kFmt, kMT, kR, kU, kScaled, kMinBlocks>;
  const size_t smem = static_cast<size_t>(kMT) * a.x_stride * sizeof(float);
  static std::atomic<uint64_t> attr_set{0};
  opt_in_smem_per_device(attr_set, kernel, static_cast<int>(gemv::kSmemBudget));
  static const int sms = gemv::device_sms();
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, gm::kThreads, smem) != cudaSuccess) {
    cudaGetLastError();
    per_sm = 1;
  }
  per_sm = per_sm < 1 ? 1 : per_sm;
  // Persistent: as many CTAs as fit at once, but at least one row group per warp.
  gm::Args b = a;
  int64_t rg = 0;
  for (int j = 0; j < b.nproj; ++j) {
    b.proj[j].rg0 = rg;
    rg += (b.proj[j].N + kR - 1) / kR;
    b.groups = rg;
  }
  const int64_t most = (b.groups + gm::kWarps - 1) / gm::kWarps;
  int64_t ctas = static_cast<int64_t>(sms) * per_sm;
  ctas = ctas < most ? ctas : most;
  ctas = ctas < 1 ? 1 : ctas;
  // PDL: each warp prefetches its share of the grid's budget into L2 before its wait.
  const int64_t pf_total = pdl ? gemv_pdl_prefetch_bytes() : 0;
  b.pf_bytes = pf_total > 0 ? pf_total / (ctas * gm::kWarps) / 16 * 16 : 0;
  pdl::launch(kernel, dim3(static_cast<unsigned>(ctas)), dim3(gm::kThreads), smem, s, pdl, b);
}

template <int kFmt, bool kScaled>
void launch_fmt(const gm::Args& a, int mt, bool short_rows, bool deep, cudaStream_t s, bool pdl) {
  if (deep) {  // one CTA per SM, 8 loads per lane per step
    if (mt == 1) {
      if (short_rows) launch<kFmt, 1, 4, 2, kScaled, 1>(a, s, pdl);
      else launch<kFmt, 1, 2, 4, kScaled, 1>(a, s, pdl);
    } else if (mt == 2) {
      if (short_rows) launch<kFmt, 2, 4, 2, kScaled, 1>(a, s, pdl);
      else launch<kFmt, 2, 2, 4, kScaled, 1>(a, s, pdl);
    } else if (mt == 4) {
      launch<kFmt, 4, 2, 4, kScaled, 1>(a, s, pdl);
    } else {
      launch<kFmt, 8, 2, 2, kScaled, 1>(a, s, pdl);
    }
    return;
  }
  // Default: kU·kR = 4 loads per lane per step (double-buffered: ≤ 128 registers, no spills at
  // 2 CTAs per SM; 8 staged x rows: 2 loads). Short rows (≤ 64 chunks, e.g. FP8 K = 1024): four
  // rows per warp, one chunk each, so a step does not run past the row.
  if (mt == 1) {
    if (short_rows) launch<kFmt, 1, 4, 1, kScaled>(a, s, pdl);
    else launch<kFmt, 1, 2, 2, kScaled>(a, s, pdl);
  } else if (mt == 2) {
    if (short_rows) launch<kFmt, 2, 4, 1, kScaled>(a, s, pdl);
    else launch<kFmt, 2, 2, 2, kScaled>(a, s, pdl);
  } else if (mt == 4) {
    launch<kFmt, 4, 2, 2, kScaled>(a, s, pdl);
  } else {
    launch<kFmt, 8, 2, 1, kScaled>(a, s, pdl);
  }
}

}  // namespace

bool gemv_multi_supported(int fmt, int64_t K, bool scaled, int64_t block_cols) {
  if (fmt == 0) {
    if (scaled) return false;
  } else if (fmt == 1) {
    if (!scaled) return false;
  } else {
    return false;
  }
  if (!gemv_supported(fmt, K, scaled, block_cols)) return false;
  return row_bytes_of(fmt, K) % 16 == 0;  // vector path only
}

bool gemv_multi(int fmt, const float* x, const GemvProjection* proj, int nproj, bool scale_f32,
                int64_t M, int64_t K, int64_t block_rows, int64_t block_cols, bool deep, cudaStream_t s,
                bool pdl) {
  const bool scaled = fmt == 1;
  if (nproj < 1 || nproj > kGemvMaxProjections || !gemv_multi_supported(fmt, K, scaled, block_cols))
    return false;
  // A row group (≤ 4 rows from a multiple of 4) stays inside one block row of scales.
  if (scaled && (block_rows < 4 || block_rows % 4 != 0)) return false;
  for (int j = 0; j < nproj; ++j) {
    if (reinterpret_cast<uintptr_t>(proj[j].w) % 16 != 0 || proj[j].N < 0 || proj[j].N >= (int64_t{1} << 31))
      return false;
    if (scaled && (proj[j].scale == nullptr ||
                   (proj[j].N + block_rows - 1) / block_rows * ((K + block_cols - 1) / block_cols) >= (int64_t{1} << 31)))
      return false;
  }
  if (M == 0) return true;
  gm::Args a;
  a.x = x;
  a.lda = K;
  a.M = M;
  a.K = K;
  a.br = scaled ? block_rows : 1;
  a.scale_cols = scaled ? (K + block_cols - 1) / block_cols : 0;
  int cpb = 0;
  if (scaled)
    while ((int64_t{1} << cpb) < block_cols / elems_of(fmt)) ++cpb;
  a.cpb_log2 = cpb;
  a.scale_f32 = scale_f32 ? 1 : 0;
  a.x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && K % 4 == 0;
  a.x_stride = gemv::x_stride_floats(K);
  int n = 0;
  for (int j = 0; j < nproj; ++j) {
    if (proj[j].N == 0) continue;  // nothing to write
    a.proj[n].w = static_cast<const uint8_t*>(proj[j].w);
    a.proj[n].scale = scaled ? proj[j].scale : nullptr;
    a.proj[n].out = proj[j].out;
    a.proj[n].N = proj[j].N;
    a.proj[n].ldo = proj[j].N;
    ++n;
  }
  if (n == 0) return true;
  a.nproj = n;
  const int mt = gemv_tile_rows(M, K);
  const bool short_rows = K / elems_of(fmt) <= 64;
  if (fmt == 0) launch_fmt<0, false>(a, mt, short_rows, deep, s, pdl);
  else launch_fmt<1, true>(a, mt, short_rows, deep, s, pdl);
  return true;
}

}  // namespace deepinfer::cuda::kernels
