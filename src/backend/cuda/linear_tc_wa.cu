// wa: the weight-as-A tensor-core kernel with linear_tc's bits (linear_tc_wa.cuh), launched with
// the caller's (linear_tc's) split plan and finished by the in-order split reduction (PDL).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "backend/cuda/common.cuh"
#include "backend/cuda/linear_tc_small.h"
#include "backend/cuda/linear_tc_wa.cuh"
#include "backend/cuda/linear_tc_wa.h"
#include "backend/cuda/linear_tc_wr.cuh"

namespace deepinfer::cuda::kernels {

bool linear_tc_wa_supported(int fmt, const void* w, const float* x, int64_t M, int64_t K,
                            bool scaled, int64_t block_cols) {
  // linear_tc_small's layout rules (linear_tc_supported's), M bounded by the two token tiles.
  return M >= 1 && M <= kLinearTcWaMaxRows &&
         linear_tc_small_supported(fmt, w, x, M, K, scaled, block_cols);
}

namespace {

// Tile counters of the fused split reduction (zero at module load; each tile's last CTA resets
// its counter to 0).
constexpr int kWa2Counters = 1 << 15;
__device__ unsigned g_wa2_counters[kWa2Counters];

unsigned* wa2_counters() {
  static unsigned* addr[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (dev < 0 || dev >= 64) return nullptr;
  if (addr[dev] == nullptr) {
    void* a = nullptr;
    if (cudaGetSymbolAddress(&a, g_wa2_counters) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    addr[dev] = static_cast<unsigned*>(a);
  }
  return addr[dev];
}

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
                  int64_t block_cols, int64_t k_split, float* out, float* workspace, cudaStream_t s,
                  bool pdl, bool share_x, int tiles_per_warp, bool fast_e4m3, bool wide, bool deep,
                  bool fused_reduce) {
  if (M == 0 || N == 0 || G == 0) return;
  const int tpw = tiles_per_warp == 1 ? 1 : 2;
  const int64_t splits = (K + k_split - 1) / k_split;
  tcw::WaArgs a;
  tc::fill_linear_args(a, x, w, scale, scale_f32, M, N, K, G, block_rows, block_cols, k_split, out,
                       workspace);
  const int64_t bn = tcw::kWarps * tpw * 16;
  const dim3 grid(static_cast<unsigned>(G * ((N + bn - 1) / bn)), static_cast<unsigned>(splits));
  if (fused_reduce && splits > 1 && grid.x <= static_cast<unsigned>(kWa2Counters)) {
    a.counters = wa2_counters();  // shared with wa2: launches in stream order touch them in turn
    a.final_out = out;
  }
  if (fmt == 0) launch_fmt<0>(a, M, grid, s, pdl, share_x, tpw, false, wide, false);
  else if (fmt == 1) launch_fmt<1>(a, M, grid, s, pdl, share_x, tpw, fast_e4m3, false, deep);
  else launch_fmt<2>(a, M, grid, s, pdl, share_x, tpw, false, false, false);
  if (splits > 1 && a.counters == nullptr) {
    const int64_t n = M * G * N;
    tcr::launch_split_sums(static_cast<const float*>(workspace), splits, n, out, s, pdl);
  }
}

bool linear_tc_wr_supported(int fmt, const void* w, const float* x, int64_t M, int64_t N, int64_t K,
                            int64_t G, int64_t block_cols, int64_t k_split) {
  const auto aligned = [](const void* p, uintptr_t a) {
    return reinterpret_cast<uintptr_t>(p) % a == 0;
  };
  return fmt == 1 && M >= 1 && M <= kLinearTcWaMaxRows && G >= 1 && N >= 16 && N % 16 == 0 &&
         block_cols == tcw::kWrUnitK && K % tcw::kWrUnitK == 0 && k_split >= tcw::kWrUnitK &&
         k_split % tcw::kWrUnitK == 0 && std::min(k_split, K) <= tcw::kWrMaxSplitK &&
         w != nullptr && x != nullptr && aligned(w, 16) && aligned(x, 16);
}

namespace {

template <int NT, int R>
void wr_launch(const tcw::WaArgs& a, dim3 grid, size_t smem, cudaStream_t s, bool pdl) {
  static std::atomic<uint64_t> attr_set{0};
  auto* kernel = tcw::wr_kernel<NT, R>;
  opt_in_max_smem_per_device(attr_set, kernel);
  pdl::launch(kernel, grid, dim3(tcw::kWrThreads), smem, s, pdl, a);
}

}  // namespace

void linear_tc_wr(const float* x, const void* w, const void* scale, bool scale_f32, int64_t M,
                  int64_t N, int64_t K, int64_t G, int64_t block_rows, int64_t k_split, float* out,
                  float* workspace, cudaStream_t s, bool pdl, bool fused_reduce) {
  if (M == 0) return;
  const int64_t splits = (K + k_split - 1) / k_split;
  tcw::WaArgs a;
  tc::fill_linear_args(a, x, w, scale, scale_f32, M, N, K, G, block_rows, tcw::kWrUnitK, k_split,
                       out, workspace);
  a.x_pitch = tcw::wr_term_pitch(std::min(k_split, K));
  const dim3 grid(static_cast<unsigned>(G * ((N + tcw::kWrRows - 1) / tcw::kWrRows)),
                  static_cast<unsigned>(splits));
  if (fused_reduce && splits > 1 && grid.x <= static_cast<unsigned>(kWa2Counters)) {
    a.counters = wa2_counters();  // shared with wa / wa2: stream-ordered launches take turns
    a.final_out = out;
  }
  const size_t smem = static_cast<size_t>(M) * tcw::kTerms * a.x_pitch * 2;
  if (M <= 8)
    wr_launch<1, 4>(a, grid, smem, s, pdl);
  else
    wr_launch<2, 2>(a, grid, smem, s, pdl);
  if (splits > 1 && a.counters == nullptr) {
    const int64_t n = M * G * N;
    tcr::launch_split_sums(static_cast<const float*>(workspace), splits, n, out, s, pdl);
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


// ---- Session 10: wa2 ------------------------------------------------------------------------------

namespace {

int wa2_num_sms() {
  static int n[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return 132;
  }
  if (dev < 0 || dev >= 64) return 132;
  if (n[dev] == 0) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0) {
      cudaGetLastError();
      v = 132;
    }
    n[dev] = v;
  }
  return n[dev];
}

constexpr int kSmPerSmBytes = 233472;  // H100 / H200: 228 KB per SM, 1 KB reserved per CTA

// cuTensorMapEncodeTiled through the runtime's driver entry point (no libcuda link).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// The 2-D map of projection i's weight [G·N rows, K]: box (box_bytes of k) × bn rows.
bool encode_weight_map(int fmt, const tcw2::Proj& P, int64_t K, int box_bytes, int bn, CUtensorMap* map) {
  PFN_cuTensorMapEncodeTiled_v12000 enc = tensor_map_encoder();
  if (enc == nullptr) return false;
  const int esize = fmt == 0 ? 2 : 1;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(P.G * P.N)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(K * esize)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_bytes / esize), static_cast<cuuint32_t>(bn)};
  const cuuint32_t estr[2] = {1, 1};
  return enc(map, fmt == 0 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2,
             const_cast<uint8_t*>(P.w), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int kFmt, int kRows, int kTPW, int kWarps, int kRowBytes, int kMinCtas, bool kTma = false>
bool wa2_launch(tcw2::Args& a, int ctas_per_sm, cudaStream_t s, bool pdl) {
  constexpr int SRB = tcw2::Fmt<kFmt>::kSRB;
  constexpr int SPS = kRowBytes / SRB, SK = SPS * tc::kBK, BN = kWarps * kTPW * 16;
  a.x_pitch = SK * 4 + 16;
  const int raw = BN * kRowBytes + static_cast<int>(a.M) * a.x_pitch;
  // 16-byte granularity (cp.async, uint4 reads): the fragment reads' bank pattern depends only on
  // offsets within a slot (rows kRowBytes apart, a multiple of 128), so a slot need not start on a
  // 128-byte line — and FP8 at M = 1 gets a third 16.9 KB slot in ~56 KB.
  a.slot_bytes = kTma ? (raw + 127) / 128 * 128 : (raw + 15) / 16 * 16;  // TMA boxes: 128-byte aligned
  const int tbytes = 2 * SPS * tcr::kTerms * static_cast<int>(a.M) * tc::kBK * 2;  // M tokens' terms
  const int fixed = tcw2::kBarBytes + tbytes;
  const int budget = std::min(232448, kSmPerSmBytes / ctas_per_sm - 1024);
  a.slots = std::clamp((budget - fixed) / a.slot_bytes, 2, tcw2::kMaxSlots);
  const int smem = fixed + a.slots * a.slot_bytes;
  const int resident = std::max(1, std::min(ctas_per_sm, kSmPerSmBytes / (smem + 1024)));
  const int grid = static_cast<int>(std::min<int64_t>(a.items, int64_t{resident} * wa2_num_sms()));
  if constexpr (kTma) {  // one box = one k32 stage (SRB bytes) of BN rows
    for (int i = 0; i < a.nproj; ++i)
      if (!encode_weight_map(kFmt, a.p[i], a.K, SRB, BN, &a.tmap[i])) return false;
  }
  static std::atomic<uint64_t> attr_set{0};
  auto* kernel = tcw2::wa2_kernel<kFmt, kRows, kTPW, kWarps, kRowBytes, kMinCtas, kTma>;
  opt_in_max_smem_per_device(attr_set, kernel);
  pdl::launch(kernel, dim3(static_cast<unsigned>(grid)), dim3(kWarps * 32), static_cast<size_t>(smem), s, pdl, a);
  return true;
}

template <int kFmt, int kRows>
bool wa2_geom(tcw2::Args& a, const Wa2Options& o, cudaStream_t s) {
  if (o.geom == Wa2Geometry::kTmaSmall) return wa2_launch<kFmt, kRows, 2, 4, 128, 4, true>(a, o.ctas_per_sm, s, o.pdl);
  return wa2_launch<kFmt, kRows, 2, 4, 128, 4>(a, o.ctas_per_sm, s, o.pdl);
}

}  // namespace

int linear_tc_wa2_variant(const char* v) {
  if (v == nullptr || v[0] != 'x' || v[1] < '1' || v[1] > '4' || v[2] != '\0') return 0;
  return v[1] - '0';
}

namespace {
bool wa2_head_like(int fmt, int64_t rows, int64_t K) { return fmt == 0 && rows * K >= (int64_t{16} << 20); }
}  // namespace

bool linear_tc_wa2_takes_single(int variant, int fmt, int64_t rows, int64_t K, int64_t M) {
  if (variant < 1 || variant > 4 || variant == 3 || (fmt != 0 && fmt != 1) || M < 1 || M > kLinearTcWaMaxRows)
    return false;
  return wa2_head_like(fmt, rows, K);
}

Wa2Options linear_tc_wa2_options(int variant, int fmt, int64_t rows, int64_t K, int64_t M) {
  Wa2Options o;
  o.geom = wa2_head_like(fmt, rows, K) ? Wa2Geometry::kTmaSmall : Wa2Geometry::kSmall;
  o.fused_reduce = M == 1 && variant != 4;
  o.pdl = true;
  return o;
}

bool linear_tc_wa2_fuses_multi(int variant, int64_t M) {
  return variant >= 2 && variant <= 4 && M >= 1 && M <= kLinearTcWaMaxRows;
}

bool linear_tc_wa2_multi_member(int64_t rows, int64_t K) { return rows * K < (int64_t{16} << 20); }

bool linear_tc_wa2_supported(int fmt, const WaProjection* p, int n, int64_t M, int64_t K,
                             int64_t block_cols) {
  if (fmt != 0 && fmt != 1) return false;
  if (p == nullptr || n < 1 || n > kLinearTcWa2MaxProj || M < 1 || M > kLinearTcWaMaxRows || K < 1) return false;
  for (int i = 0; i < n; ++i) {
    const WaProjection& q = p[i];
    if (q.w == nullptr || q.x == nullptr || q.out == nullptr || q.N < 1 || q.G < 1) return false;
    if ((fmt == 1) != (q.scale != nullptr)) return false;
    if (!linear_tc_wa_supported(fmt, q.w, q.x, M, K, fmt == 1, block_cols)) return false;
    if (q.lda < q.G * K || q.lda % 4 != 0) return false;
    if (q.k_split < 1) return false;
    if (q.k_split < K && (q.k_split % 32 != 0 || (fmt == 1 && q.k_split % block_cols != 0))) return false;
    if (q.G * q.N * K >= (int64_t{1} << 40)) return false;
  }
  return true;
}

int64_t linear_tc_wa2_workspace_floats(const WaProjection* p, int n, int64_t M, int64_t K) {
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t splits = (K + p[i].k_split - 1) / p[i].k_split;
    if (splits > 1) total += splits * M * p[i].G * p[i].N;
  }
  return total;
}

bool linear_tc_wa2(int fmt, const WaProjection* p, int n, bool scale_f32, int64_t M, int64_t K,
                   int64_t block_rows, int64_t block_cols, float* workspace, cudaStream_t s,
                   const Wa2Options& o) {
  if (!linear_tc_wa2_supported(fmt, p, n, M, K, block_cols) || o.ctas_per_sm < 1 || o.ctas_per_sm > 4) return false;
  const int64_t bn = 128;  // weight rows per item (4 warps × 2 m16 tiles)
  tcw2::Args a;
  std::memset(static_cast<void*>(a.tmap), 0, sizeof a.tmap);
  a.nproj = n;
  a.M = M;
  a.K = K;
  a.br = fmt == 0 ? 1 : block_rows;
  a.bc = fmt == 0 ? tc::kPromoteUnscaled : block_cols;
  a.scale_f32 = scale_f32 ? 1 : 0;
  int64_t items = 0, counters = 0, ws_off = 0;
  tcw2::ReduceArgs r;
  int64_t blocks = 0;
  for (int i = 0; i < n; ++i) {
    const WaProjection& q = p[i];
    tcw2::Proj& P = a.p[i];
    const int64_t splits = (K + q.k_split - 1) / q.k_split;
    const int64_t ntiles = (q.N + bn - 1) / bn;
    P.w = static_cast<const uint8_t*>(q.w);
    P.scale = q.scale;
    P.x = q.x;
    P.out = q.out;
    P.N = q.N;
    P.G = q.G;
    P.lda = q.lda;
    P.ldo = q.G * q.N;
    P.plane = M * q.G * q.N;
    P.k_split = q.k_split;
    P.splits = static_cast<int32_t>(splits);
    P.ntiles = static_cast<int32_t>(ntiles);
    P.scale_cols = fmt == 0 ? 0 : static_cast<int32_t>((K + block_cols - 1) / block_cols);
    P.item0 = static_cast<int32_t>(items);
    items += splits * q.G * ntiles;
    if (splits > 1) {
      if (workspace == nullptr) return false;
      P.ws = workspace + ws_off;
      ws_off += splits * P.plane;
      P.counter0 = static_cast<int32_t>(counters);
      counters += q.G * ntiles;
      r.ws[r.count] = P.ws;
      r.out[r.count] = q.out;
      r.n[r.count] = P.plane;
      r.splits[r.count] = P.splits;
      r.b0[r.count] = static_cast<int32_t>(blocks);
      blocks += (P.plane + 255) / 256;
      ++r.count;
    }
  }
  if (items >= (int64_t{1} << 31) || blocks >= (int64_t{1} << 31)) return false;
  a.items = static_cast<int32_t>(items);
  a.counters = o.fused_reduce && counters <= kWa2Counters ? wa2_counters() : nullptr;
  a.fused = a.counters != nullptr ? 1 : 0;
  a.balanced = n == 1 && p[0].G == 1 && a.p[0].splits == 1 ? 1 : 0;
  bool ok;
  if (fmt == 0) ok = M <= 8 ? wa2_geom<0, 8>(a, o, s) : wa2_geom<0, 16>(a, o, s);
  else ok = M <= 8 ? wa2_geom<1, 8>(a, o, s) : wa2_geom<1, 16>(a, o, s);
  if (!ok) return false;  // a tensor map could not be made: nothing launched
  if (r.count > 0 && !a.fused) {
    r.b0[r.count] = static_cast<int32_t>(blocks);
    pdl::launch(tcw2::wa2_reduce_kernel<0>, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, s, o.pdl, r);
  }
  return true;
}

}  // namespace deepinfer::cuda::kernels
