// wa: the weight-as-A tensor-core kernel with linear_tc's bits (linear_tc_wa.cuh), launched with
// the caller's (linear_tc's) split plan and finished by the in-order split reduction (PDL).
#include "backend/cuda/linear_tc_wa.h"

#include <algorithm>
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/linear_tc_small.h"
#include "backend/cuda/linear_tc_wa.cuh"

namespace deepinfer::cuda::kernels {

bool linear_tc_wa_supported(int fmt, const void* w, const float* x, int64_t M, int64_t K,
                            bool scaled, int64_t block_cols) {
  // linear_tc_small's layout rules (linear_tc_supported's), M bounded by the two token tiles.
  return M >= 1 && M <= kLinearTcWaMaxRows &&
         linear_tc_small_supported(fmt, w, x, M, K, scaled, block_cols);
}

namespace {

// Ring depth and slot size: a slot = BN weight rows × the padded 64-byte pitch + M fp32 x rows
// of the slot's k; as many slots (2..kMaxSlots) as fit in ~56 KB (4 CTAs per SM, the launch
// bounds' register budget) after the barriers and, with the shared x split, the term buffer
// [2][stages per slot][3][kRows][32] bf16.
struct RingPlan { int slots, slot_bytes, x_pitch, smem; };

template <int kFmt, bool kWide = false, bool kDeep = false>
RingPlan ring_plan(int64_t M, int kRows, int tpw, bool share) {
  using F = tcw::WFmt<kFmt>;
  using GM = tcw::WGeom<kFmt, kWide>;
  RingPlan r{};
  r.x_pitch = GM::kSK * 4 + 16;
  const int raw = tcw::kWarps * tpw * 16 * GM::kPitch + static_cast<int>(M) * r.x_pitch;
  r.slot_bytes = (raw + 127) / 128 * 128;
  const int tbytes = share ? 2 * (GM::kRowBytes / F::kSRB) * tcw::kTerms * kRows * tc::kBK * 2 : 0;
  const int fixed = tcw::kBarBytes + tbytes;
  // ~56 KB per CTA at 4 CTAs per SM (64-byte slots), ~72 KB at 3 (deep), ~110 KB at 2 (wide).
  r.slots = std::clamp(((kWide ? 110 : kDeep ? 72 : 56) * 1024 - fixed) / r.slot_bytes, 2, tcw::kMaxSlots);
  r.smem = fixed + r.slots * r.slot_bytes;
  return r;
}

template <int kFmt, int kRows, int kTPW, bool kShare, bool kFast = false, bool kWide = false, bool kDeep = false>
void launch_one(tcw::WaArgs a, int64_t M, dim3 grid, cudaStream_t s, bool pdl) {
  const RingPlan r = ring_plan<kFmt, kWide, kDeep>(M, kRows, kTPW, kShare);
  a.slots = r.slots;
  a.slot_bytes = r.slot_bytes;
  a.x_pitch = r.x_pitch;
  static std::atomic<uint64_t> attr_set{0};
  auto* kernel = tcw::wa_kernel<kFmt, kRows, kTPW, kShare, kFast, kWide, kDeep>;
  opt_in_max_smem_per_device(attr_set, kernel);
  pdl::launch(kernel, grid, dim3(tcw::kThreads), static_cast<size_t>(r.smem), s, pdl, a);
}

template <int kFmt, int kRows>
void launch_rows(const tcw::WaArgs& a, int64_t M, dim3 grid, cudaStream_t s, bool pdl, bool share, int tpw,
                 bool fast, bool wide, bool deep) {
  if constexpr (kFmt == 1) {  // 3 CTAs per SM, deeper ring: 128-row CTAs, x split per CTA only
    if (deep) {
      launch_one<kFmt, kRows, 2, true, false, false, true>(a, M, grid, s, pdl);
      return;
    }
  }
  if constexpr (kFmt == 0) {  // 256-byte slots: 128-row CTAs, x split per CTA only, 2 CTAs per SM
    if (wide && ring_plan<kFmt, true>(M, kRows, 2, true).smem <= 113 * 1024) {
      launch_one<kFmt, kRows, 2, true, false, true>(a, M, grid, s, pdl);
      return;
    }
  }
  if constexpr (kFmt == 1) {  // the short e4m3 decode: 128-row CTAs, x split per CTA only
    if (fast) {
      launch_one<kFmt, kRows, 2, true, true>(a, M, grid, s, pdl);
      return;
    }
  }
  if (tpw == 1) {
    if (share) launch_one<kFmt, kRows, 1, true>(a, M, grid, s, pdl);
    else launch_one<kFmt, kRows, 1, false>(a, M, grid, s, pdl);
  } else {
    if (share) launch_one<kFmt, kRows, 2, true>(a, M, grid, s, pdl);
    else launch_one<kFmt, kRows, 2, false>(a, M, grid, s, pdl);
  }
}

template <int kFmt>
void launch_fmt(const tcw::WaArgs& a, int64_t M, dim3 grid, cudaStream_t s, bool pdl, bool share, int tpw,
                bool fast, bool wide, bool deep) {
  if (M <= 8) launch_rows<kFmt, 8>(a, M, grid, s, pdl, share, tpw, fast, wide, deep);
  else launch_rows<kFmt, 16>(a, M, grid, s, pdl, share, tpw, fast, wide, deep);
}

// Every e4m3 code through both decoders: out[c] = linear_tc's decode of the pair (c, c),
// out[256 + c] = the short decode's (linear_tc_wa_decode.h).
__global__ void decode_table_kernel(uint32_t* out) {
  const uint32_t c = threadIdx.x;
  out[c] = tc::e4m3x2_to_bf16x2(c | c << 8);
  uint32_t p01, p23;
  tcw::e4m3x4_scaled_bf16(c | c << 8 | c << 16 | c << 24, p01, p23);
  out[256 + c] = tcw::bf16x2_mul(p01, tcw::kBf16x2Pow120);
}

}  // namespace

void linear_tc_wa(int fmt, const float* x, const void* w, const void* scale, bool scale_f32,
                  int64_t M, int64_t N, int64_t K, int64_t G, int64_t block_rows,
                  int64_t block_cols, int64_t k_split, float* out, float* workspace,
                  cudaStream_t s, bool pdl, bool share_x, int tiles_per_warp, bool fast_e4m3,
                  bool wide, bool deep) {
  if (M == 0 || N == 0 || G == 0) return;
  const int tpw = tiles_per_warp == 1 ? 1 : 2;
  const int64_t splits = (K + k_split - 1) / k_split;
  tcw::WaArgs a;
  tc::fill_linear_args(a, x, w, scale, scale_f32, M, N, K, G, block_rows, block_cols, k_split, out,
                       workspace);
  const int64_t bn = tcw::kWarps * tpw * 16;
  const dim3 grid(static_cast<unsigned>(G * ((N + bn - 1) / bn)), static_cast<unsigned>(splits));
  if (fmt == 0) launch_fmt<0>(a, M, grid, s, pdl, share_x, tpw, false, wide, false);
  else if (fmt == 1) launch_fmt<1>(a, M, grid, s, pdl, share_x, tpw, fast_e4m3, false, deep);
  else launch_fmt<2>(a, M, grid, s, pdl, share_x, tpw, false, false, false);
  if (splits > 1) {
    const int64_t n = M * G * N;
    pdl::launch(tcr::split_reduce_pdl<0>, dim3(grid_for(n, 256)), dim3(256), 0, s, pdl,
                static_cast<const float*>(workspace), splits, n, out);
  }
}

namespace {

// The transposition question on bare MMAs: per warp (one trial) x [16][16·steps], w [16][16·steps]
// bf16 bits (row-major); out_n[m][n] = the chain of `steps` m16n8k16 MMAs with A = x rows, B = w
// rows (two n8 tiles), out_t[m][n] = the same chain with A = w rows, B = x rows (two n8 tiles),
// transposed back. The same k at the same MMA positions in both (plain PTX layout, no permutation).
__global__ void mma_probe_kernel(const uint16_t* x, const uint16_t* w, int steps, float* out_n, float* out_t) {
  const int trial = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32, g = lane >> 2, q = lane & 3;
  const int64_t ld = 16 * static_cast<int64_t>(steps);
  const uint16_t* xt = x + trial * 16 * ld;
  const uint16_t* wt = w + trial * 16 * ld;
  auto pair = [&](const uint16_t* m, int row, int64_t k) {
    return static_cast<uint32_t>(m[row * ld + k]) | static_cast<uint32_t>(m[row * ld + k + 1]) << 16;
  };
  float cn[2][4] = {}, ct[2][4] = {};
  for (int s = 0; s < steps; ++s) {
    const int64_t k0 = 16 * static_cast<int64_t>(s);
    for (int t = 0; t < 2; ++t) {
      // normal: A = x rows 0..15, B = w rows 8t..8t+7
      tc::mma_bf16(cn[t], pair(xt, g, k0 + 2 * q), pair(xt, g + 8, k0 + 2 * q), pair(xt, g, k0 + 2 * q + 8),
                   pair(xt, g + 8, k0 + 2 * q + 8), pair(wt, 8 * t + g, k0 + 2 * q), pair(wt, 8 * t + g, k0 + 2 * q + 8));
      // transposed: A = w rows 0..15, B = x rows 8t..8t+7
      tc::mma_bf16(ct[t], pair(wt, g, k0 + 2 * q), pair(wt, g + 8, k0 + 2 * q), pair(wt, g, k0 + 2 * q + 8),
                   pair(wt, g + 8, k0 + 2 * q + 8), pair(xt, 8 * t + g, k0 + 2 * q), pair(xt, 8 * t + g, k0 + 2 * q + 8));
    }
  }
  float* on = out_n + trial * 256;
  float* ot = out_t + trial * 256;
  for (int t = 0; t < 2; ++t)
    for (int c = 0; c < 4; ++c) {
      const int r = g + 8 * (c >> 1), col = 8 * t + 2 * q + (c & 1);
      on[r * 16 + col] = cn[t][c];  // (x row r, w row col)
      ot[col * 16 + r] = ct[t][c];  // (w row r, x row col) → [x row][w row]
    }
}

}  // namespace

void linear_tc_wa_mma_probe(const uint16_t* x, const uint16_t* w, int trials, int steps, float* out_n,
                            float* out_t, cudaStream_t s) {
  mma_probe_kernel<<<trials / 4, 128, 0, s>>>(x, w, steps, out_n, out_t);
}

void linear_tc_wa_decode_table(uint32_t* out, cudaStream_t s) {
  decode_table_kernel<<<1, 256, 0, s>>>(out);
}

}  // namespace deepinfer::cuda::kernels
