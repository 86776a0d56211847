// Host side of skinny_mma (skinny_mma.h / .cuh): the split choice, the x split launch and the
// product launch (clusters and programmatic dependent launch through cudaLaunchKernelEx).
#include "backend/cuda/skinny_mma.h"

#include <atomic>
#include <cstring>

#include "backend/cuda/skinny_mma.cuh"

namespace deepinfer::cuda::kernels {
namespace {

using skinny::Args;

int unit_k(int fmt) { return fmt == 1 ? 128 : 64; }

// S = KW·KC: the largest power of two ≤ o.max_split (8: one CTA) that divides K / unit and keeps the
// warp items (m16 tiles × S) at most about `target` (one wave of 16 warps on 132 SMs is 2,112);
// o.min_split (bench only) forces S up (smaller CTAs: the head's 1,010 CTAs of 1 MB → 2,020).
int split_of(int fmt, int64_t N, int64_t K, const SkinnyOptions& o) {
  const int64_t units = K / unit_k(fmt);
  const int64_t mtiles = (N + 15) / 16;
  const int64_t target = 1800;
  const int cap = o.max_split;
  int S = 1;
  while (2 * S <= cap && units % (2 * S) == 0 && (mtiles * S < target || S < o.min_split)) S *= 2;
  return S;
}

// m16 tiles per warp: 2 for e4m3 at ≥ 4 n-tiles (M ≥ 9: B shared by 32 rows; mid-run H200, M = 16:
// wq_b 38.8 vs 41.1 µs, wo_b 35.7 vs 39.3, shared gate_up 24.2 vs 25.4; at M = 8 one tile was
// faster: 24.5 vs 27.1), else 1; tc3: always 1.
int tiles_per_warp(int fmt, int nt, const SkinnyOptions& o) { return o.variant != 3 && fmt == 1 && nt >= 4 ? 2 : 1; }

// Dynamic shared memory of the fused split (M ≤ 2): [3M][K + 8] 16-bit planes; up to K = 8192 at
// M = 2 (98,400 B; two CTAs per SM still fit).
constexpr size_t kFusedSmemMax = 100 * 1024;
size_t fused_smem(int64_t M, int64_t K) { return static_cast<size_t>(skinny::kPlanes * M * (K + 8) * 2); }

template <bool kBf16, bool kF32, int NT, int MT, bool kFused = false>
bool launch_nt(const Args& a, unsigned grid, cudaStream_t s, bool pdl, size_t smem = 0) {
  auto kernel = skinny::product_kernel<kBf16, kF32, NT, MT, kFused>;
  if constexpr (kFused) {  // > 48 KB of dynamic shared memory: allowed once per device
    static std::atomic<uint64_t> devices_done{0};
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    const uint64_t bit = dev >= 0 && dev < 64 ? uint64_t{1} << dev : 0;
    if (bit == 0 || (devices_done.load(std::memory_order_acquire) & bit) == 0) {
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kFusedSmemMax)) != cudaSuccess)
        return false;
      devices_done.fetch_or(bit, std::memory_order_release);
    }
  }
  cudaLaunchAttribute attr[2];
  int na = 0;
  if (pdl) {
    attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[na].val.programmaticStreamSerializationAllowed = 1;
    ++na;
  }
  if (a.kc > 1) {
    attr[na].id = cudaLaunchAttributeClusterDimension;
    attr[na].val.clusterDim.x = static_cast<unsigned>(a.kc);
    attr[na].val.clusterDim.y = 1;
    attr[na].val.clusterDim.z = 1;
    ++na;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(skinny::kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = na > 0 ? attr : nullptr;
  cfg.numAttrs = na;
  return cudaLaunchKernelEx(&cfg, kernel, a) == cudaSuccess;  // sets the last error too
}

template <bool kBf16, bool kF32>
bool launch_fmt(const Args& a, int nt, int mt, unsigned grid, cudaStream_t s, bool pdl) {
  if (mt == 2) {
    switch (nt) {
      case 2: return launch_nt<kBf16, kF32, 2, 2>(a, grid, s, pdl);
      case 3: return launch_nt<kBf16, kF32, 3, 2>(a, grid, s, pdl);
      case 4: return launch_nt<kBf16, kF32, 4, 2>(a, grid, s, pdl);
      case 5: return launch_nt<kBf16, kF32, 5, 2>(a, grid, s, pdl);
      default: return launch_nt<kBf16, kF32, 6, 2>(a, grid, s, pdl);
    }
  }
  switch (nt) {
    case 1: return launch_nt<kBf16, kF32, 1, 1>(a, grid, s, pdl);
    case 2: return launch_nt<kBf16, kF32, 2, 1>(a, grid, s, pdl);
    case 3: return launch_nt<kBf16, kF32, 3, 1>(a, grid, s, pdl);
    case 4: return launch_nt<kBf16, kF32, 4, 1>(a, grid, s, pdl);
    case 5: return launch_nt<kBf16, kF32, 5, 1>(a, grid, s, pdl);
    default: return launch_nt<kBf16, kF32, 6, 1>(a, grid, s, pdl);
  }
}

}  // namespace

bool skinny_options_for(const char* selector, SkinnyOptions* out) {
  if (selector == nullptr) return false;
  // Session 9 default: auto = tc (the lead's choice from the final H200 run, docs/cuda.md).
  if (std::strcmp(selector, "auto") == 0) {
    if (out != nullptr) out->variant = 0;
    return true;
  }
  const char* names[] = {"tc", "tc1", "tc2", "tc3"};
  for (int v = 0; v < 4; ++v) {
    if (std::strcmp(selector, names[v]) == 0) {
      if (out != nullptr) out->variant = v;
      return true;
    }
  }
  return false;
}

bool skinny_supported(int fmt, const void* w, int64_t N, int64_t K, bool scaled, int64_t block_rows,
                      int64_t block_cols) {
  if (fmt != 0 && fmt != 1) return false;
  if (w == nullptr || (reinterpret_cast<uintptr_t>(w) & 15) != 0) return false;
  if (N < 1 || K < 1 || K > (int64_t{1} << 20) || N > (int64_t{1} << 30)) return false;
  if (K % unit_k(fmt) != 0) return false;
  if (fmt == 1) {
    if (!scaled || block_cols != 128 || block_rows < 16 || block_rows % 16 != 0) return false;
  } else if (scaled) {
    return false;
  }
  return true;
}

int skinny_split(int fmt, int64_t N, int64_t K, const SkinnyOptions& o) { return split_of(fmt, N, K, o); }

bool skinny_takes(int fmt, int64_t N, int64_t K, int64_t M, const SkinnyOptions& o) {
  if (M < 1 || M > kSkinnyMaxRows) return false;
  if (o.variant == 1) return true;
  // Second H200 run (10:00): at M = 9..16 linear_tc_wa (DEEPINFER_SMALL_LINEAR auto = w) is as fast
  // or faster on every V4 shape (M = 16: wq_b 38.9 vs 39.0, wo_b 36.5 vs 36.9, shared w2 16.3 vs
  // 17.1, wq_a 13.8 vs 20.0): tc stays at M <= 8.
  if (M > 8) return false;
  const int64_t bytes = N * (fmt == 0 ? 2 * K : K);
  const int64_t big = int64_t{8} << 20;
  // H200 mid-run (bench_ops --skinny-m 1,2,8,16, µs skinny vs the default dispatch): e4m3 >= 8 MiB
  // wins at every M (wq_b M=1 20.0 vs 26.7, M=8 24.5 vs 51.1; shared w2 M=1 10.5 vs 12.5); e4m3
  // 2-4 MiB loses at M <= 2 (wq_a 10.7-11.4 vs 9.0) and wins at M >= 8 (wq_a M=16 14.1 vs 17.0);
  // bf16 wins only at M = 8 on >= 8 MiB (head 315 vs 679, CSA compressor 14.8 vs 22.1), loses at
  // M <= 2 (head 294 vs 252) and M = 16 (head 525 vs 485, compressor 17.4 vs 15.4).
  if (fmt == 1) return bytes >= big || M >= 3;
  return bytes >= big && M >= 3 && M <= 8;
}

int skinny_cluster_size(int fmt, int64_t N, int64_t K, const SkinnyOptions& o) {
  const int S = split_of(fmt, N, K, o);
  return S > skinny::kWarps ? S / skinny::kWarps : 1;
}

size_t skinny_workspace_bytes(int64_t M, int64_t K) {
  const size_t planes = static_cast<size_t>(M) * skinny::kPlanes * static_cast<size_t>(K) * 2;
  return ((planes + 15) / 16) * 16 + ((static_cast<size_t>(M) * 4 + 15) / 16) * 16;
}

void skinny_split_x(int fmt, const float* x, int64_t M, int64_t K, void* workspace, cudaStream_t s,
                    bool pdl) {
  if (M < 1) return;
  uint16_t* planes = static_cast<uint16_t*>(workspace);
  const size_t pb = ((static_cast<size_t>(M) * skinny::kPlanes * static_cast<size_t>(K) * 2 + 15) / 16) * 16;
  int32_t* row_exp = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(workspace) + pb);
  if (fmt == 0)
    pdl::launch(skinny::split_kernel<true>, dim3(static_cast<unsigned>(M)), dim3(256), 0, s, pdl, x,
                static_cast<int>(K), planes, row_exp);
  else
    pdl::launch(skinny::split_kernel<false>, dim3(static_cast<unsigned>(M)), dim3(256), 0, s, pdl, x,
                static_cast<int>(K), planes, row_exp);
}

namespace {
// The product launch; x_fused != null: the fused-split kernel (M ≤ 2, x read by every CTA), else
// the planes in `workspace`.
// Grouped (xg > 1): projection j is group j of one weight — x columns [j·K, j·K + K), out columns
// [j·N, j·N + N) of rows G·N apart, planes and row exponents per (token, group) — and the split
// is chosen from n_split (the whole weight's rows) so that every group has the same one.
bool product_impl(int fmt, const SkinnyProjection* proj, int nproj, bool scale_f32, int64_t M,
                  int64_t K, int64_t block_rows, const void* workspace, const float* x_fused,
                  cudaStream_t s, bool pdl, const SkinnyOptions& o, int xg = 1,
                  int64_t n_split = 0) {
  if (nproj < 1 || nproj > skinny::kMaxProj || M < 1 || M > kSkinnyMaxRows ||
      (workspace == nullptr && x_fused == nullptr) || xg < 1 || (xg > 1 && nproj != xg))
    return false;
  const auto split_n = [&](int64_t N) { return n_split > 0 ? n_split : N; };
  const int kc = skinny_cluster_size(fmt, split_n(proj[0].N), K, o);
  Args a;
  a.nproj = nproj;
  a.M = static_cast<int32_t>(M);
  a.K = static_cast<int32_t>(K);
  a.xg = xg;
  a.kc = kc;
  a.units = static_cast<int32_t>(K / unit_k(fmt));
  a.br = fmt == 1 ? static_cast<int32_t>(block_rows) : 128;
  a.scols = static_cast<int32_t>(K / 128);
  if (workspace != nullptr) {
    const size_t pb =
        ((static_cast<size_t>(M * xg) * skinny::kPlanes * static_cast<size_t>(K) * 2 + 15) / 16) *
        16;
    a.planes = static_cast<const uint16_t*>(workspace);
    a.row_exp = reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(workspace) + pb);
  }
  a.x = x_fused;
  const int nt = static_cast<int>((skinny::kPlanes * M + 7) / 8);
  const int mt = tiles_per_warp(fmt, nt, o);
  int64_t groups = 0;
  for (int j = 0; j < nproj; ++j) {
    const SkinnyProjection& p = proj[j];
    if (!skinny_supported(fmt, p.w, p.N, K, fmt == 1, block_rows, fmt == 1 ? 128 : 1) ||
        p.out == nullptr || (fmt == 1 && p.scale == nullptr) ||
        skinny_cluster_size(fmt, split_n(p.N), K, o) != kc)
      return false;
    const int S = split_of(fmt, split_n(p.N), K, o);
    const int kw = S / kc;
    const int64_t tiles = skinny::kWarps / kw * mt;  // m-tiles of a CTA group
    const int64_t mtiles = (p.N + 15) / 16;
    groups += (mtiles + tiles - 1) / tiles;
    a.proj[j].w = static_cast<const uint8_t*>(p.w);
    a.proj[j].scale = p.scale;
    a.proj[j].out = p.out;
    a.proj[j].N = static_cast<int32_t>(p.N);
    a.proj[j].kw = kw;
    a.proj[j].cta_end = static_cast<int32_t>(groups);
    a.proj[j].xslot = xg > 1 ? j : 0;
    a.proj[j].ldo = xg > 1 ? xg * p.N : p.N;
  }
  const int64_t grid = groups * kc;
  if (grid > (int64_t{1} << 31) - 1) return false;
  const bool use_pdl = pdl && o.variant != 2;
  const unsigned g = static_cast<unsigned>(grid);
  if (x_fused != nullptr) {
    const size_t smem = fused_smem(M, K);
    if (nt != 1 || mt != 1 || kc != 1 || smem > kFusedSmemMax) return false;
    if (fmt == 0) return launch_nt<true, false, 1, 1, true>(a, g, s, use_pdl, smem);
    if (scale_f32) return launch_nt<false, true, 1, 1, true>(a, g, s, use_pdl, smem);
    return launch_nt<false, false, 1, 1, true>(a, g, s, use_pdl, smem);
  }
  if (fmt == 0) return launch_fmt<true, false>(a, nt, mt, g, s, use_pdl);
  if (scale_f32) return launch_fmt<false, true>(a, nt, mt, g, s, use_pdl);
  return launch_fmt<false, false>(a, nt, mt, g, s, use_pdl);
}
}  // namespace

bool skinny_product(int fmt, const SkinnyProjection* proj, int nproj, bool scale_f32, int64_t M,
                    int64_t K, int64_t block_rows, const void* workspace, cudaStream_t s, bool pdl,
                    const SkinnyOptions& o) {
  if (workspace == nullptr) return false;
  return product_impl(fmt, proj, nproj, scale_f32, M, K, block_rows, workspace, nullptr, s, pdl, o);
}

namespace {
// M ≤ 2 without a cluster: one launch, the split done by every CTA (the same bits).
bool linear_fuses_split(int fmt, int64_t N, int64_t M, int64_t K, const SkinnyOptions& o) {
  return skinny::kPlanes * M <= 8 && fused_smem(M, K) <= kFusedSmemMax && skinny_cluster_size(fmt, N, K, o) == 1;
}
}  // namespace

size_t skinny_linear_workspace_bytes(int fmt, int64_t N, int64_t M, int64_t K, const SkinnyOptions& o) {
  return linear_fuses_split(fmt, N, M, K, o) ? 0 : skinny_workspace_bytes(M, K);
}

bool skinny_linear(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                   int64_t M, int64_t N, int64_t K, int64_t block_rows, int64_t block_cols,
                   float* out, void* workspace, cudaStream_t s, bool pdl, const SkinnyOptions& o) {
  if (M < 1 || M > kSkinnyMaxRows || x == nullptr ||
      !skinny_supported(fmt, w, N, K, fmt == 1, block_rows, block_cols))
    return false;
  const bool use_pdl = pdl && o.variant != 2;
  const SkinnyProjection p{w, scale, out, N};
  if (linear_fuses_split(fmt, N, M, K, o))
    return product_impl(fmt, &p, 1, scale_f32, M, K, block_rows, nullptr, x, s, use_pdl, o);
  if (workspace == nullptr) return false;
  skinny_split_x(fmt, x, M, K, workspace, s, use_pdl);
  return skinny_product(fmt, &p, 1, scale_f32, M, K, block_rows, workspace, s, use_pdl, o);
}

bool skinny_grouped_supported(int fmt, const void* w, int64_t G, int64_t N, int64_t K, bool scaled,
                              int64_t block_rows, int64_t block_cols) {
  if (G < 2 || G > kSkinnyMaxProjections || N < 1) return false;
  if (!skinny_supported(fmt, w, G * N, K, scaled, block_rows, block_cols)) return false;
  return fmt == 0 || N % block_rows == 0;  // each group starts on a scale block row
}

size_t skinny_grouped_workspace_bytes(int fmt, int64_t G, int64_t N, int64_t M, int64_t K,
                                      const SkinnyOptions& o) {
  return linear_fuses_split(fmt, G * N, M, K, o) ? 0 : skinny_workspace_bytes(M * G, K);
}

bool skinny_grouped_linear(int fmt, const float* x, const void* w, const void* scale,
                           bool scale_f32, int64_t M, int64_t G, int64_t N, int64_t K,
                           int64_t block_rows, int64_t block_cols, float* out, void* workspace,
                           cudaStream_t s, bool pdl, const SkinnyOptions& o) {
  if (M < 1 || M > kSkinnyMaxRows || x == nullptr || out == nullptr ||
      !skinny_grouped_supported(fmt, w, G, N, K, fmt == 1, block_rows, block_cols))
    return false;
  const bool use_pdl = pdl && o.variant != 2;
  const int64_t row_bytes = fmt == 0 ? 2 * K : K;
  SkinnyProjection p[kSkinnyMaxProjections];
  for (int64_t j = 0; j < G; ++j) {
    p[j].w = static_cast<const uint8_t*>(w) + j * N * row_bytes;
    p[j].scale = fmt == 0 ? nullptr
                          : static_cast<const uint8_t*>(scale) +
                                (j * N / block_rows) * (K / 128) * (scale_f32 ? 4 : 1);
    p[j].out = out + j * N;
    p[j].N = N;
  }
  const int g = static_cast<int>(G);
  if (linear_fuses_split(fmt, G * N, M, K, o))
    return product_impl(fmt, p, g, scale_f32, M, K, block_rows, nullptr, x, s, use_pdl, o, g,
                        G * N);
  if (workspace == nullptr) return false;
  skinny_split_x(fmt, x, M * G, K, workspace, s, use_pdl);  // x [M, G·K] = [M·G, K] rows
  return product_impl(fmt, p, g, scale_f32, M, K, block_rows, workspace, nullptr, s, use_pdl, o, g,
                      G * N);
}

}  // namespace deepinfer::cuda::kernels
