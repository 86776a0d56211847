// Host side of the decode routed experts on tensor cores (experts_mma.cuh, experts_mma_v2.cuh):
// checks, the x split launch and the persistent product launch of the chosen variant.
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/experts_mma.cuh"
#include "backend/cuda/experts_mma.h"
#include "backend/cuda/experts_mma_v2.cuh"
#include "backend/cuda/experts_mma_v3.cuh"
#include "backend/cuda/experts_mma_x.cuh"
#include "backend/cuda/experts_mma_xb.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::cuda::kernels {

namespace {

// Variants 2 / 3 launch the product as a programmatic dependent of the x split (PDL); false:
// ordinary stream order (to rule PDL out when comparing).
constexpr bool kProductPdl = true;

// Variant 2 / 3 (experts_mma_v2.cuh): the full residency, cached per device (the kernel's
// resources do not change).
template <int kMinBlocks>
void launch_v2(const emma::Args& a, cudaStream_t s) {
  static std::atomic<uint64_t> attr_set{0};
  static std::atomic<int> per_sm_cache[64] = {};
  auto* kernel = emma2::experts_mma_v2_kernel<kMinBlocks>;
  opt_in_smem_per_device(attr_set, kernel, emma2::kSmem, /*max_carveout=*/true);
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
  int per_sm = per_sm_cache[dev & 63].load(std::memory_order_relaxed);
  if (per_sm <= 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, emma2::kThreads, emma2::kSmem) !=
            cudaSuccess ||
        per_sm <= 0) {
      cudaGetLastError();
      per_sm = 1;
    }
    per_sm_cache[dev & 63].store(per_sm, std::memory_order_relaxed);
  }
  const int64_t grid = static_cast<int64_t>(sms_of_current_device()) * per_sm;
  // With kProductPdl a programmatic dependent of the split kernel (experts_mma_v2.cuh): starts
  // while the split runs; the kernel waits for it before reading x.
  pdl::launch(kernel, dim3(static_cast<unsigned>(grid)), dim3(emma2::kThreads), emma2::kSmem, s,
              kProductPdl, a);
}

// Variants 4 / 5 (experts_mma_v3.cuh): the same launch as launch_v2 with the v3 kernel of
// kStages-deep rings compiled for kMinBlocks CTAs per SM.
template <int kStages, int kMinBlocks>
void launch_v3(const emma::Args& a, cudaStream_t s) {
  static std::atomic<uint64_t> attr_set{0};
  static std::atomic<int> per_sm_cache[64] = {};
  auto* kernel = emma3::experts_mma_v3_kernel<kStages, kMinBlocks>;
  constexpr int smem = emma3::smem_bytes(kStages);
  opt_in_smem_per_device(attr_set, kernel, smem, /*max_carveout=*/true);
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
  int per_sm = per_sm_cache[dev & 63].load(std::memory_order_relaxed);
  if (per_sm <= 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, emma3::kThreads, smem) != cudaSuccess ||
        per_sm <= 0) {
      cudaGetLastError();
      per_sm = 1;
    }
    per_sm_cache[dev & 63].store(per_sm, std::memory_order_relaxed);
  }
  const int64_t grid = static_cast<int64_t>(sms_of_current_device()) * per_sm;
  pdl::launch(kernel, dim3(static_cast<unsigned>(grid)), dim3(emma3::kThreads), smem, s, kProductPdl, a);
}

// The carveout preference (percent of sm_90's 228 KB) of the smallest shared-memory configuration
// of the SM (0, 8, 16, 32, 64, 100, 132, 164, 196, 228 KB) that holds `bytes` (the CTAs' dynamic
// shared memory + 1 KB reserved per CTA), rounded down to a whole percent: the rest of the 256 KB
// stays L1.
constexpr int carveout_percent(int bytes) {
  constexpr int kCfgKb[] = {0, 8, 16, 32, 64, 100, 132, 164, 196, 228};
  int kb = 228;
  for (int c : kCfgKb)
    if (c * 1024 >= bytes) {
      kb = c;
      break;
    }
  return (100 * kb) / 228;  // just below the configuration: the driver rounds up to it
}

// Variants 6..8 (experts_mma_x.cuh): items of kMT m-tiles, kStages-deep rings, kMinBlocks CTAs
// per SM; the carveout asks for the shared memory of kMinBlocks CTAs only (the rest stays L1).
template <int kMT, int kStages, int kMinBlocks, bool kCoop, int kF>
void launch_x(const emma::Args& a, cudaStream_t s) {
  static std::atomic<uint64_t> attr_set{0};
  static std::atomic<int> per_sm_cache[64] = {};
  auto* kernel = emmx::experts_mma_x_kernel<kMT, kStages, kMinBlocks, kCoop, kF>;
  constexpr int smem = emmx::smem_bytes(kMT, kStages, kCoop);
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if ((attr_set.load(std::memory_order_relaxed) & bit) == 0) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                         carveout_percent(kMinBlocks * (smem + 1024)));
    cudaGetLastError();
    attr_set.fetch_or(bit, std::memory_order_relaxed);
  }
  int per_sm = per_sm_cache[dev & 63].load(std::memory_order_relaxed);
  if (per_sm <= 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, emmx::kThreads, smem) != cudaSuccess ||
        per_sm <= 0) {
      cudaGetLastError();
      per_sm = 1;
    }
    per_sm_cache[dev & 63].store(per_sm, std::memory_order_relaxed);
  }
  const int64_t grid = static_cast<int64_t>(sms_of_current_device()) * per_sm;
  pdl::launch(kernel, dim3(static_cast<unsigned>(grid)), dim3(emmx::kThreads), smem, s, kProductPdl, a);
}

// Variants 9..16 (experts_mma_xb.cuh): items of kMT m-tiles with B through the ring, kStages-deep
// rings, kMinBlocks CTAs per SM, options kF, passes of kPT tokens; the carveout as launch_x's.
template <int kMT, int kStages, int kMinBlocks, int kF, int kPT>
void launch_xb(const emma::Args& a, cudaStream_t s) {
  static std::atomic<uint64_t> attr_set{0};
  static std::atomic<int> per_sm_cache[64] = {};
  auto* kernel = emmxb::experts_mma_xb_kernel<kMT, kStages, kMinBlocks, kF, kPT>;
  constexpr int smem = emmxb::smem_bytes(kMT, kStages, kF, kPT);
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if ((attr_set.load(std::memory_order_relaxed) & bit) == 0) {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                         carveout_percent(kMinBlocks * (smem + 1024)));
    cudaGetLastError();
    attr_set.fetch_or(bit, std::memory_order_relaxed);
  }
  int per_sm = per_sm_cache[dev & 63].load(std::memory_order_relaxed);
  if (per_sm <= 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, emmx::kThreads, smem) !=
            cudaSuccess ||
        per_sm <= 0) {
      cudaGetLastError();
      per_sm = 1;
    }
    per_sm_cache[dev & 63].store(per_sm, std::memory_order_relaxed);
  }
  const int64_t grid = static_cast<int64_t>(sms_of_current_device()) * per_sm;
  pdl::launch(kernel, dim3(static_cast<unsigned>(grid)), dim3(emmx::kThreads), smem, s, kProductPdl,
              a);
}

// The Args of a product launch but the x planes' fields (planes, row_exp, plane, x_div): rows =
// the rows of a warp item (work unit), tile_rows as experts_mma's (≤ 0 or ≥ slots: one tile per
// expert).
emma::Args weight_args(const int32_t* perm, const int32_t* row_off, const int32_t* act_off, int64_t slots,
                       int64_t num_experts, const void* const* w_table, const void* const* s_table, int64_t N,
                       int64_t K, int rows, float* out, int64_t tile_rows) {
  emma::Args a;
  a.perm = perm;
  a.row_off = row_off;
  a.act_off = act_off;
  a.num_experts = static_cast<int32_t>(num_experts);
  a.w_table = w_table;
  a.s_table = s_table;
  a.N = static_cast<int32_t>(N);
  a.K = static_cast<int32_t>(K);
  a.scale_cols = static_cast<int32_t>(K / 32);
  a.groups = static_cast<int32_t>(N / rows);
  a.chunks = static_cast<int32_t>(K / emma::kChunkK);
  a.out = out;
  a.tile_rows = static_cast<int32_t>(tile_rows > 0 && tile_rows < slots ? tile_rows : (slots > 0 ? slots : 1));
  return a;
}

}  // namespace

void experts_mma_memonly(int memonly, const int32_t* perm, const int32_t* row_off, const int32_t* act_off,
                         int64_t slots, int64_t num_experts, const void* const* w_table,
                         const void* const* s_table, int64_t N, int64_t K, float* out, cudaStream_t s,
                         int64_t tile_rows) {
  if (slots == 0 || N == 0 || num_experts == 0) return;
  // Both builds count 16-row units (variant 7 balances its ranges in them).
  const emma::Args a = weight_args(perm, row_off, act_off, slots, num_experts, w_table, s_table, N, K, 16, out,
                                   tile_rows);
  if (memonly == 2) launch_x<2, 4, 2, true, emmx::kBalanced | emmx::kMemOnly>(a, s);
  else if (memonly == 3)
    launch_x<1, 3, 3, false, emmx::kMemOnly | emmx::kTiled>(a, s);
  else launch_x<1, 3, 3, false, emmx::kMemOnly>(a, s);
}

int experts_mma_pick_x(int64_t slots, int64_t K) {
  if (slots > 128) return kExpertsMmaV1;  // batch 32+ and the --batch-invariant prefill: session 6's
  if (K <= 2048 || slots <= 40) return kExpertsMmaX16;
  return slots <= 64 ? kExpertsMmaX64 : kExpertsMmaX32;
}

int experts_mma_pick_xb(int64_t slots, int xb) {
  if (slots > 128) return kExpertsMmaV1;
  return xb >= kExpertsMmaXB3 && xb <= kExpertsMmaLast ? xb : kExpertsMmaXB3;
}

int experts_mma_pick_s12(int64_t slots, int64_t K, int mode) {
  if (slots > 128)
    return mode == 0 && slots <= kExpertsMmaDecodeMaxSlots ? kExpertsMmaXB32C : kExpertsMmaV1;
  if (slots <= 8) {
    switch (mode) {
      case 1:
        return kExpertsMmaXB16s4t1L2;
      case 2:
        return kExpertsMmaXB16s3t1;
      case 3:
        return kExpertsMmaXG16s3;
      case 5:
      case 6:
        return kExpertsMmaXB32Q;
      case 7:
        return kExpertsMmaXC3;
      case 8:
        return kExpertsMmaXC2;
      case 9:
        return kExpertsMmaXC3;
      default:
        return kExpertsMmaX16;
    }
  }
  if (mode == 10) return kExpertsMmaXB32w12;
  return mode == 5 || mode == 9 ? kExpertsMmaXB32Q : kExpertsMmaXB32C;
}

bool experts_mma_supported(int fmt, int64_t slots, int64_t num_experts, bool scaled, bool scale_f32,
                           bool w_vec, int64_t N, int64_t K, int64_t block_rows, int64_t block_cols) {
  if (fmt != 2 || !scaled || scale_f32 || !w_vec) return false;
  if (block_rows != 1 || block_cols != 32) return false;
  if (N <= 0 || N % emma::kRows != 0 || K <= 0 || K % emma::kChunkK != 0 || K > 16384) return false;
  if (num_experts <= 0 || num_experts > 1024 || slots < 0) return false;
  const int64_t lim = int64_t{1} << 31;
  return slots * N < lim && slots * K < lim && N * (K / 2) < lim;
}

size_t experts_mma_workspace_bytes(int64_t x_rows, int64_t K) {
  const size_t planes = static_cast<size_t>(emma::kPlanes) * x_rows * K * 2;  // K % 8: 16-byte multiple
  return planes + ((static_cast<size_t>(x_rows) * 4 + 15) / 16) * 16;
}

void experts_mma(const float* x, int64_t x_rows, int64_t x_div, const int32_t* perm,
                 const int32_t* row_off, const int32_t* act_off, int64_t slots, int64_t num_experts,
                 const void* const* w_table, const void* const* s_table, int64_t N, int64_t K,
                 void* workspace, float* out, cudaStream_t s, int variant, int64_t tile_rows,
                 const int32_t* zero_bad_ids) {
  if (slots == 0 || N == 0 || num_experts == 0 || x_rows == 0) return;
  if (variant < kExpertsMmaV1 || variant > kExpertsMmaLast) variant = kExpertsMmaDefault;
  // Session 13: the kChain / kQuick variants launch the split as a PDL dependent (it waits for
  // every earlier kernel before letting the product start; see split_kernel).
  const bool split_pdl = variant == kExpertsMmaXC3 || variant == kExpertsMmaXIC3 ||
                         variant == kExpertsMmaXB32Q || variant == kExpertsMmaXC2;
  const emma::SplitOut so = emma::launch_split<false>(x, x_rows, x_div, K, slots, num_experts, N,
                                                      zero_bad_ids, out, workspace, s, split_pdl);
  if (variant == kExpertsMmaX64 && N % 64 != 0) variant = kExpertsMmaX32;  // 64-row items need N % 64
  if (variant == kExpertsMmaXB64 && N % 64 != 0) variant = kExpertsMmaXB32w12;
  // Rows of a warp item (of a work unit: variants 7, 15, 16, 20 cut the warps' ranges in 16-row
  // units).
  const int rows = variant == kExpertsMmaV1                                    ? 32
                   : (variant == kExpertsMmaX64 || variant == kExpertsMmaXB64) ? 64
                                                                               : 16;
  emma::Args a = weight_args(perm, row_off, act_off, slots, num_experts, w_table, s_table, N, K, rows, out,
                             tile_rows);
  a.planes = so.planes;
  a.row_exp = so.row_exp;
  a.plane = x_rows * K;
  a.x_div = static_cast<int32_t>(x_div);
  if (variant == kExpertsMmaV2) {
    launch_v2<4>(a, s);
    return;
  }
  if (variant == kExpertsMmaV2Regs) {
    launch_v2<3>(a, s);
    return;
  }
  if (variant == kExpertsMmaV3) {
    launch_v3<8, 3>(a, s);
    return;
  }
  if (variant == kExpertsMmaV3w16) {
    launch_v3<6, 4>(a, s);
    return;
  }
  if (variant == kExpertsMmaX16) {
    launch_x<1, 3, 3, false, 0>(a, s);
    return;
  }
  if (variant == kExpertsMmaX32) {
    launch_x<2, 4, 2, true, emmx::kBalanced>(a, s);
    return;
  }
  if (variant == kExpertsMmaX64) {
    launch_x<4, 2, 2, true, 0>(a, s);
    return;
  }
  if (variant == kExpertsMmaXI3) {
    launch_x<1, 3, 3, false, emmx::kIlp>(a, s);
    return;
  }
  if (variant == kExpertsMmaXW3) {
    launch_x<1, 3, 3, false, emmx::kIlpW>(a, s);
    return;
  }
  if (variant == kExpertsMmaXW2) {
    launch_x<1, 2, 3, false, emmx::kIlpW>(a, s);
    return;
  }
  if (variant == kExpertsMmaXW3E) {
    launch_x<1, 3, 3, false, emmx::kIlpW | emmx::kEarly>(a, s);
    return;
  }
  if (variant == kExpertsMmaXE3) {
    launch_x<1, 3, 3, false, emmx::kEarly>(a, s);
    return;
  }
  if (variant == kExpertsMmaXC3) {
    launch_x<1, 3, 3, false, emmx::kEarly | emmx::kChain>(a, s);
    return;
  }
  if (variant == kExpertsMmaXC2) {
    launch_x<1, 2, 3, false, emmx::kEarly | emmx::kChain>(a, s);
    return;
  }
  if (variant == kExpertsMmaXIC3) {
    launch_x<1, 3, 3, false, emmx::kIlp | emmx::kEarly | emmx::kChain>(a, s);
    return;
  }
  constexpr int kP8 = emma::kPassTokens;
  switch (variant) {
    case kExpertsMmaXB3:
      launch_xb<1, 3, 3, 0, kP8>(a, s);
      return;
    case kExpertsMmaXB2:
      launch_xb<1, 2, 3, 0, kP8>(a, s);
      return;
    case kExpertsMmaXB2L2:
      launch_xb<1, 2, 3, emmxb::kL2, kP8>(a, s);
      return;
    case kExpertsMmaXB2T16:
      launch_xb<1, 2, 4, 0, 2>(a, s);
      return;
    case kExpertsMmaXB2T16L2:
      launch_xb<1, 2, 4, emmxb::kL2, 2>(a, s);
      return;
    case kExpertsMmaXB3T:
      launch_xb<1, 3, 3, 0, 2>(a, s);
      return;
    case kExpertsMmaXB32w12:
      launch_xb<2, 2, 3, emmxb::kBal, 2>(a, s);
      return;
    case kExpertsMmaXB32Q:
      launch_xb<2, 2, 3, emmxb::kBal | emmxb::kQuick, 2>(a, s);
      return;
    case kExpertsMmaXB32C:
      launch_xb<2, 2, 3, emmxb::kBal | emmxb::kCost, 2>(a, s);
      return;
    case kExpertsMmaXB32w8:
      launch_xb<2, 3, 2, emmxb::kBal, 2>(a, s);
      return;
    case kExpertsMmaXB64:
      launch_xb<4, 2, 2, 0, 2>(a, s);
      return;
    case kExpertsMmaXG16s4:
      launch_xb<1, 4, 4, emmxb::kGB, 2>(a, s);
      return;
    case kExpertsMmaXG16s3:
      launch_xb<1, 3, 4, emmxb::kGB, 2>(a, s);
      return;
    case kExpertsMmaXB32w16:
      launch_xb<2, 2, 4, emmxb::kBal, 1>(a, s);
      return;
    case kExpertsMmaXB16s3t1:
      launch_xb<1, 3, 4, 0, 1>(a, s);
      return;
    case kExpertsMmaXB16s4t1L2:
      launch_xb<1, 4, 3, emmxb::kL2, 1>(a, s);
      return;
    case kExpertsMmaXB16s4t1:
      launch_xb<1, 4, 3, 0, 1>(a, s);
      return;
    default:
      break;
  }
  static std::atomic<uint64_t> attr_set{0};
  opt_in_smem_per_device(attr_set, emma::experts_mma_kernel, emma::kSmem, /*max_carveout=*/false);
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, emma::experts_mma_kernel, emma::kThreads,
                                                    emma::kSmem) != cudaSuccess) {
    cudaGetLastError();
    per_sm = 1;
  }
  per_sm = per_sm < 1 ? 1 : per_sm;
  // Items: at most min(slots, E) active experts × N / 32 row groups; no more CTAs than warps need.
  const int64_t items = (slots < num_experts ? slots : num_experts) * a.groups;
  int64_t grid = static_cast<int64_t>(sms_of_current_device()) * per_sm;
  const int64_t need = (items + emma::kWarps - 1) / emma::kWarps;
  if (need < grid) grid = need;
  emma::experts_mma_kernel<<<static_cast<unsigned>(grid), emma::kThreads, emma::kSmem, s>>>(a);
}

}  // namespace deepinfer::cuda::kernels
