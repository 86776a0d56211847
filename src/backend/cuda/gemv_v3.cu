// Host side of the dense decode GEMV v3 (gemv_v3.cuh for the kernel, its layout and arithmetic):
// the checks, the tile geometry, the shared-memory plan (x rows per pass, ring depth) and the
// launch of one table of projections.
#include <atomic>
#include <cstring>

#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_v3.cuh"

namespace deepinfer::cuda::kernels {

namespace {

namespace g3 = gemv3;

// Two CTAs of ≤ kLowBudget fit one SM (228 KB, 1 KB reserved per CTA): this grid's and the next
// PDL kernel's, so the next weight stream starts while this one finishes.
constexpr int64_t kLowBudget = 112 * 1024;
constexpr int64_t kHighBudget = 220 * 1024;
constexpr int64_t kBarBytes = 128;

int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

struct Plan {
  bool ok = false;
  int mt = 1, stages = 2, ctas_per_sm = 1;
  int64_t stage_bytes = 0, x_off = 0, red_off = 0, smem = 0;
  g3::Geometry g;
};

Plan make_plan(int fmt, int64_t M, int64_t K, const Gemv3Options& o) {
  Plan pl;
  pl.g = g3::geometry(fmt, K);
  pl.stage_bytes = round_up(pl.g.tr * pl.g.rb, 128);
  int mt = 1;
  while (mt < 8 && mt < M) mt *= 2;
  const int64_t xs = gemv::x_stride_floats(K) * 4;
  for (; mt >= 1; mt /= 2) {
    const int64_t x_off = kBarBytes;  // ring after x: x_off + x bytes + red, then stages
    const int64_t fixed = kBarBytes + mt * xs + 2 * pl.g.ks * mt * pl.g.tr * 4;
    const int64_t low = (kLowBudget - fixed) / pl.stage_bytes;
    const int64_t high = (kHighBudget - fixed) / pl.stage_bytes;
    int stages = 0, per_sm = 1;
    if (!o.deep && low >= 4) {
      stages = static_cast<int>(low < g3::kMaxStages ? low : g3::kMaxStages);
      per_sm = o.ctas_per_sm == 2 ? 2 : 1;
    } else if (high >= 2) {
      stages = static_cast<int>(high < g3::kMaxStages ? high : g3::kMaxStages);
    } else {
      continue;
    }
    pl.ok = true;
    pl.mt = mt;
    pl.stages = stages;
    pl.ctas_per_sm = per_sm;
    pl.x_off = x_off;
    pl.red_off = x_off + mt * xs;
    pl.smem = round_up(pl.red_off + 2 * pl.g.ks * mt * pl.g.tr * 4, 128) + stages * pl.stage_bytes;
    return pl;
  }
  return pl;
}

template <int kFmt, int kMT, int kR, int kRH, int kInt>
void launch_one(const g3::Args& a, int64_t smem, int ctas_per_sm, cudaStream_t s, bool pdl) {
  auto* kernel = g3::gemv3_kernel<kFmt, kMT, kR, kRH, kInt>;
  // All the shared memory a block may have, and the largest carveout: two CTAs of ≤ 112 KB (this
  // grid's and the next PDL GEMV's) must fit one SM.
  static std::atomic<uint64_t> attr_set{0}, carve_set{0};
  opt_in_max_smem_per_device(attr_set, kernel);
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
  if ((carve_set.load(std::memory_order_relaxed) & (uint64_t{1} << (dev & 63))) == 0) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared) != cudaSuccess)
      cudaGetLastError();
    carve_set.fetch_or(uint64_t{1} << (dev & 63), std::memory_order_relaxed);
  }
  static const int sms = gemv::device_sms();
  int64_t ctas = static_cast<int64_t>(sms) * ctas_per_sm;
  ctas = ctas < a.tiles ? ctas : a.tiles;
  ctas = ctas < 1 ? 1 : ctas;
  pdl::launch(kernel, dim3(static_cast<unsigned>(ctas)), dim3(g3::kThreads), static_cast<size_t>(smem),
              s, pdl, a);
}

// kRH: at kMT ≥ 4 a warp computes its kR rows in two halves (registers); same bits.
template <int kFmt, int kR, int kInt>
void launch_mt(const g3::Args& a, const Plan& pl, cudaStream_t s, bool pdl) {
  constexpr int kHalf = kR / 2;
  switch (pl.mt) {
    case 1: launch_one<kFmt, 1, kR, kR, kInt>(a, pl.smem, pl.ctas_per_sm, s, pdl); break;
    case 2: launch_one<kFmt, 2, kR, kR, kInt>(a, pl.smem, pl.ctas_per_sm, s, pdl); break;
    case 4: launch_one<kFmt, 4, kR, kHalf, kInt>(a, pl.smem, pl.ctas_per_sm, s, pdl); break;
    default: launch_one<kFmt, 8, kR, kHalf, kInt>(a, pl.smem, pl.ctas_per_sm, s, pdl); break;
  }
}

// One launch over a filled table (proj[].w/scale/x/out/N/ldo/srow0 set, nproj ≥ 1, N > 0 each).
void run(int fmt, g3::Args a, const Plan& pl, const Gemv3Options& o, cudaStream_t s, bool pdl) {
  int64_t t = 0;
  for (int j = 0; j < a.nproj; ++j) {
    a.proj[j].tile0 = t;
    t += (a.proj[j].N + pl.g.tr - 1) / pl.g.tr;
  }
  a.tiles = t;
  a.rb = pl.g.rb;
  a.tr = pl.g.tr;
  a.ks = pl.g.ks;
  a.stages = pl.stages;
  a.stage_bytes = static_cast<uint32_t>(pl.stage_bytes);
  a.x_off = static_cast<uint32_t>(pl.x_off);
  a.red_off = static_cast<uint32_t>(pl.red_off);
  a.ring_off = static_cast<uint32_t>(round_up(pl.red_off + 2 * pl.g.ks * pl.mt * pl.g.tr * 4, 128));
  a.x_stride = gemv::x_stride_floats(a.K);
  a.br_shift = -1;
  for (int b = 0; b < 31; ++b)
    if ((int64_t{1} << b) == a.br) a.br_shift = b;
  bool shared = fmt == 1 && a.br % pl.g.kr == 0;
  for (int j = 0; j < a.nproj; ++j) shared = shared && a.proj[j].srow0 % pl.g.kr == 0;
  a.scale_shared = shared ? 1 : 0;
  if (fmt == 0) {
    if (pl.g.kr == 4) launch_mt<0, 4, 0>(a, pl, s, pdl);
    else launch_mt<0, 2, 0>(a, pl, s, pdl);
  } else if (o.decode == 1) {
    if (pl.g.kr == 4) launch_mt<1, 4, 1>(a, pl, s, pdl);
    else launch_mt<1, 2, 1>(a, pl, s, pdl);
  } else if (o.decode == 2) {
    if (pl.g.kr == 4) launch_mt<1, 4, 2>(a, pl, s, pdl);
    else launch_mt<1, 2, 2>(a, pl, s, pdl);
  } else {
    if (pl.g.kr == 4) launch_mt<1, 4, 0>(a, pl, s, pdl);
    else launch_mt<1, 2, 0>(a, pl, s, pdl);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Common checks and the scalar fields of Args; false when refused.
bool prepare(int fmt, bool scale_f32, int64_t M, int64_t K, int64_t block_rows, int64_t block_cols,
             const Gemv3Options& o, g3::Args* a, Plan* pl) {
  const bool scaled = fmt == 1;
  if (!gemv3_supported(fmt, K, scaled, block_cols)) return false;
  if (M < 1 || M > kGemvMaxRows) return false;
  if (scaled && block_rows < 1) return false;
  *pl = make_plan(fmt, M, K, o);
  if (!pl->ok) return false;
  a->M = M;
  a->K = K;
  a->br = scaled ? block_rows : 1;
  a->scale_cols = scaled ? (K + block_cols - 1) / block_cols : 0;
  int cpb = 0;
  if (scaled)
    while ((int64_t{1} << cpb) < block_cols / 16) ++cpb;
  a->cpb_log2 = cpb;
  a->scale_f32 = scale_f32 ? 1 : 0;
  return true;
}

}  // namespace

bool gemv3_options_for(const char* name, Gemv3Options* out) {
  Gemv3Options o;
  if (std::strcmp(name, "auto") == 0 || std::strcmp(name, "b") == 0) {  // b: session 8's auto
    o.ctas_per_sm = 2;
    o.auto_pick = true;
  } else if (std::strcmp(name, "v1") == 0) {
  } else if (std::strcmp(name, "v2") == 0) {
    o.ctas_per_sm = 2;
  } else if (std::strcmp(name, "v3") == 0) {
    o.deep = true;
  } else if (std::strcmp(name, "v4") == 0) {
    o.decode = 1;
  } else if (std::strcmp(name, "a") == 0) {
    o.decode = 2;
  } else {
    return false;
  }
  if (out != nullptr) *out = o;
  return true;
}

bool gemv3_dispatch_takes(const Gemv3Options& o, int fmt, int64_t rows, int64_t K, int64_t groups) {
  if (!o.auto_pick) return true;
  const int64_t rb = fmt == 0 ? 2 * K : K;
  return groups == 1 && (K <= 1024 || (rb >= 4096 && rows * rb <= (int64_t{8} << 20)));
}

bool gemv3_supported(int fmt, int64_t K, bool scaled, int64_t block_cols) {
  if (fmt == 0) {
    if (scaled) return false;
  } else if (fmt == 1) {
    if (!scaled || block_cols < 16 || block_cols % 16 != 0) return false;
    const int64_t cpb = block_cols / 16;
    if ((cpb & (cpb - 1)) != 0) return false;
  } else {
    return false;
  }
  if (K <= 0) return false;
  const int64_t rb = fmt == 0 ? 2 * K : K;
  return rb % 16 == 0 && rb <= g3::kMaxRowBytes;
}

int gemv3_passes(int fmt, int64_t M, int64_t K, const Gemv3Options& o) {
  if (!gemv3_supported(fmt, K, fmt == 1, 16) || M < 1 || M > kGemvMaxRows) return 0;
  const Plan pl = make_plan(fmt, M, K, o);
  return pl.ok ? static_cast<int>((M + pl.mt - 1) / pl.mt) : 0;
}

bool gemv3_linear(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                  int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows, int64_t block_cols,
                  float* out, cudaStream_t s, bool pdl, const Gemv3Options& o) {
  if (G < 1 || G > g3::kMaxProj || N < 0 || !aligned16(w) || (fmt == 1 && scale == nullptr)) return false;
  if (fmt == 1 && (G * N + block_rows - 1) / (block_rows < 1 ? 1 : block_rows) *
                          ((K + block_cols - 1) / (block_cols < 1 ? 1 : block_cols)) >= (int64_t{1} << 31))
    return false;
  g3::Args a;
  Plan pl;
  Gemv3Options eo = o;
  if (o.deep_from_bytes > 0 && G * N * (fmt == 0 ? 2 * K : K) >= o.deep_from_bytes) eo.deep = true;
  if (!prepare(fmt, scale_f32, M, K, block_rows, block_cols, eo, &a, &pl)) return false;
  if (N == 0) return true;
  const int64_t rb = pl.g.rb;
  a.lda = G * K;
  a.x_vec = aligned16(x) && a.lda % 4 == 0 && K % 4 == 0;
  a.nproj = static_cast<int32_t>(G);
  for (int64_t g = 0; g < G; ++g) {
    g3::Proj& p = a.proj[g];
    p.w = static_cast<const uint8_t*>(w) + g * N * rb;
    p.scale = fmt == 1 ? scale : nullptr;
    p.x = x + g * K;
    p.out = out + g * N;
    p.N = N;
    p.ldo = G * N;
    p.srow0 = g * N;
  }
  run(fmt, a, pl, eo, s, pdl);
  return true;
}

bool gemv3_multi(int fmt, const float* x, const GemvProjection* proj, int nproj, bool scale_f32,
                 int64_t M, int64_t K, int64_t block_rows, int64_t block_cols, cudaStream_t s,
                 bool pdl, const Gemv3Options& o) {
  if (nproj < 1 || nproj > g3::kMaxProj) return false;
  g3::Args a;
  Plan pl;
  Gemv3Options eo = o;
  int64_t total = 0;
  for (int j = 0; j < nproj; ++j) total += proj[j].N > 0 ? proj[j].N : 0;
  if (o.deep_from_bytes > 0 && total * (fmt == 0 ? 2 * K : K) >= o.deep_from_bytes) eo.deep = true;
  if (!prepare(fmt, scale_f32, M, K, block_rows, block_cols, eo, &a, &pl)) return false;
  for (int j = 0; j < nproj; ++j)
    if (!aligned16(proj[j].w) || proj[j].N < 0 || (fmt == 1 && proj[j].scale == nullptr) ||
        (fmt == 1 && (proj[j].N + block_rows - 1) / block_rows * a.scale_cols >= (int64_t{1} << 31)))
      return false;
  a.lda = K;
  a.x_vec = aligned16(x) && K % 4 == 0;
  int n = 0;
  for (int j = 0; j < nproj; ++j) {
    if (proj[j].N == 0) continue;
    g3::Proj& p = a.proj[n++];
    p.w = static_cast<const uint8_t*>(proj[j].w);
    p.scale = fmt == 1 ? proj[j].scale : nullptr;
    p.x = x;
    p.out = proj[j].out;
    p.N = proj[j].N;
    p.ldo = proj[j].N;
    p.srow0 = 0;
  }
  if (n == 0) return true;
  a.nproj = n;
  run(fmt, a, pl, eo, s, pdl);
  return true;
}

}  // namespace deepinfer::cuda::kernels
