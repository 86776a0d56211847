// small: the TMA-ring tensor-core kernel with linear_tc's bits (linear_tc_small.cuh), launched
// with linear_tc's split plan and finished by the in-order split reduction (PDL launches).
#include "backend/cuda/linear_tc_small.h"

#include <algorithm>
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/linear_tc_small.cuh"

namespace deepinfer::cuda::kernels {

bool linear_tc_small_supported(int fmt, const void* w, const float* x, int64_t M, int64_t K,
                               bool scaled, int64_t block_cols) {
  if (fmt < 0 || fmt > 2 || K <= 0 || M < 1 || M > kLinearTcSmallMaxRows) return false;
  const int64_t row_bytes = fmt == 0 ? 2 * K : fmt == 1 ? K : K / 2;
  if ((fmt == 2 && K % 2 != 0) || row_bytes % 16 != 0) return false;
  if (reinterpret_cast<uintptr_t>(w) % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) return false;
  if (scaled && (block_cols <= 0 || block_cols % tc::kBK != 0)) return false;
  return true;
}

namespace {

// Ring depth and slot size for M rows: a slot = 128 weight rows × 64 bytes (padded pitch) + M x
// rows of the slot's k; as many slots (≤ kMaxSlots) as fit in the shared memory of one of the
// CTAs the registers allow per SM (tcs::kCtasPerSm: 4 / 3 / 2 → ~56 / 72 / 110 KB), ≥ 2.
// With the shared x split (kShare) the term buffer [2][stages per slot][3][kRows][32] bf16
// follows the ring; it is left out when even 2 slots and it would not fit in 220 KB.
struct RingPlan { int slots, slot_bytes, x_pitch, smem; bool share; };

int rows_bucket(int64_t M) { return M <= 8 ? 8 : M <= 16 ? 16 : M <= 32 ? 32 : 64; }

template <int kFmt, bool kWide>
RingPlan ring_plan(int64_t M, bool share) {
  using F = tcs::SFmt<kFmt>;
  using GM = tcs::SGeom<kFmt, kWide>;
  RingPlan r{};
  r.x_pitch = GM::kSK * 4 + 16;
  const int raw = tcs::kBN * GM::kPitch + static_cast<int>(M) * r.x_pitch;
  r.slot_bytes = (raw + 127) / 128 * 128;
  const int tbytes = 2 * (GM::kRowBytes / F::kSRB) * tcs::kTerms * rows_bucket(M) * tc::kBK * 2;
  r.share = share && tcs::kBarBytes + 2 * r.slot_bytes + tbytes <= 220 * 1024;
  const int fixed = tcs::kBarBytes + (r.share ? tbytes : 0);
  const int per_sm = kWide ? 2 : M <= 8 ? tcs::kCtasPerSm<kFmt, 8> : M <= 16 ? tcs::kCtasPerSm<kFmt, 16> : 2;
  const int budget = (per_sm == 4 ? 56 : per_sm == 3 ? 72 : 110) * 1024 - fixed;
  r.slots = std::clamp(budget / r.slot_bytes, 2, tcs::kMaxSlots);
  r.smem = fixed + r.slots * r.slot_bytes;
  return r;
}

template <int kFmt, int kRows, bool kBulk, bool kShare, bool kWide = false>
void launch_one(const tcs::SmallArgs& a, int smem, dim3 grid, cudaStream_t s, bool pdl) {
  static std::atomic<uint64_t> attr_set{0};
  auto* kernel = tcs::small_kernel<kFmt, kRows, kBulk, kShare, kWide>;
  opt_in_max_smem_per_device(attr_set, kernel);
  pdl::launch(kernel, grid, dim3(tcs::kThreads), static_cast<size_t>(smem), s, pdl, a);
}

template <int kFmt, int kRows>
void launch_rows(const tcs::SmallArgs& a, int smem, dim3 grid, cudaStream_t s, bool pdl, bool bulk,
                 bool share, bool wide) {
  if (wide) {  // cp.async fill, x split per warp
    launch_one<kFmt, kRows, false, false, true>(a, smem, grid, s, pdl);
  } else if (share) {
    if (bulk) launch_one<kFmt, kRows, true, true>(a, smem, grid, s, pdl);
    else launch_one<kFmt, kRows, false, true>(a, smem, grid, s, pdl);
  } else {
    if (bulk) launch_one<kFmt, kRows, true, false>(a, smem, grid, s, pdl);
    else launch_one<kFmt, kRows, false, false>(a, smem, grid, s, pdl);
  }
}

template <int kFmt>
void launch_fmt(tcs::SmallArgs a, int64_t M, dim3 grid, cudaStream_t s, bool pdl, bool bulk,
                bool share, bool wide) {
  RingPlan r = wide ? ring_plan<kFmt, true>(M, false) : ring_plan<kFmt, false>(M, share);
  if (wide && r.smem > 220 * 1024) {  // e.g. e2m1 at M > 32: the 64-byte slots
    wide = false;
    r = ring_plan<kFmt, false>(M, share);
  }
  a.slots = r.slots;
  a.slot_bytes = r.slot_bytes;
  a.x_pitch = r.x_pitch;
  if (M <= 8) launch_rows<kFmt, 8>(a, r.smem, grid, s, pdl, bulk, r.share, wide);
  else if (M <= 16) launch_rows<kFmt, 16>(a, r.smem, grid, s, pdl, bulk, r.share, wide);
  else if (M <= 32) launch_rows<kFmt, 32>(a, r.smem, grid, s, pdl, bulk, r.share, wide);
  else launch_rows<kFmt, 64>(a, r.smem, grid, s, pdl, bulk, r.share, wide);
}

}  // namespace

void linear_tc_small(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                     int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows,
                     int64_t block_cols, int64_t k_split, float* out, float* workspace,
                     cudaStream_t s, bool pdl, bool bulk, bool share_x, bool wide) {
  if (M == 0 || N == 0 || G == 0) return;
  const int64_t splits = (K + k_split - 1) / k_split;
  tcs::SmallArgs a;
  tc::fill_linear_args(a, x, w, scale, scale_f32, M, N, K, G, block_rows, block_cols, k_split, out,
                       workspace);
  const dim3 grid(static_cast<unsigned>(G * ((N + tcs::kBN - 1) / tcs::kBN)), static_cast<unsigned>(splits));
  if (fmt == 0) launch_fmt<0>(a, M, grid, s, pdl, bulk, share_x, wide);
  else if (fmt == 1) launch_fmt<1>(a, M, grid, s, pdl, bulk, share_x, wide);
  else launch_fmt<2>(a, M, grid, s, pdl, bulk, share_x, wide);
  if (splits > 1) {
    const int64_t n = M * G * N;
    tcr::launch_split_sums(static_cast<const float*>(workspace), splits, n, out, s, pdl);
  }
}

}  // namespace deepinfer::cuda::kernels
