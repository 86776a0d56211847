// Session 20 (issue 7): experts_mma's bits on warpgroup MMA (experts_wg.h for the contract;
// docs/cuda.md "Session 20" for the numbers).
//
// Why the bits are experts_mma's (experts_mma.cuh, top of file). There, per output (weight row n,
// token, plane h) and per 32-k block: an m16n8k16 f16 MMA from zero over k-step 0, a second over
// k-step 1, where lane t's A registers of row r are the decoded word t of the row's 16-byte block
// — D0 = (n0, n4), D1 = (n1, n5) for k-step 0 at MMA k positions (2t, 2t + 1) and (2t + 8, 2t + 9),
// D2, D3 for k-step 1 — and B pairs the same k (x's plane at k 8t + 2s' + 4e at position 2t + e,
// 8t + 2s' + 1 + 4e at 2t + 8 + e); then acc = fma(partial, scale, acc), blocks in k order; the
// plane columns summed (h2 + h1) + h0, times 2^(14 − c). Here:
//  - the x split is experts_mma's (same row exponent, same split3) writing the planes in the MMA's
//    k order (emma::split_kernel<true>), so a B column's k-step is 16 consecutive f16;
//  - each warp of a warpgroup holds exactly the mma.sync A fragment of its 16 weight rows
//    (ldmatrix of the row's blocks, emma::decode_e2m1x8 — the same registers experts_mma builds);
//  - wgmma.m64n96k16 (A in registers, B 128-byte swizzled in shared memory) computes each of its
//    96 columns (plane p of token m at column 32p + m) as mma.sync does for the same operands in the
//    same k positions (the H200 gives the same bits, checked for bf16 in session 18 and by this
//    kernel's memcmp tests against experts_mma);
//  - per block: k-step 0 with scale-d = 0 (d = A·B, as experts_mma's MMA with C = +0: the sum of
//    the products plus +0 — only a −0 could differ, and fma(−0, s, acc) = fma(+0, s, acc) for the
//    acc ≠ −0 that a chain started at +0 always has), k-step 1 accumulating, then after the
//    block's wgmmas retire acc = fmaf(partial, scale, acc) with the scale decoded as experts_mma
//    decodes it (0 → 2^-127, 255 → NaN, else 2^(b − 127); the two-instruction path where a
//    stage's bytes hold neither 0x00 nor 0xFF);
//  - at the end of the tile each thread holds all three planes of its tokens (columns 32p + m sit
//    in the same thread for p = 0, 1, 2) and writes scalbnf((h2 + h1) + h0, 14 − c).
//
// Work: an item = kT tokens of one expert (moe_group's tile_off with kT-row tiles) × 128·kMT
// weight rows (two warpgroups, each kMT m64 tiles: rows 128·mt + 64·wg ..); item = tile-major,
// weight-row tile minor; a persistent grid takes items blockIdx.x, + gridDim.x, ... Per 128-k
// stage, cp.async (16 B; every thread) fills a ring slot with the tile's B (96 columns × 256 B:
// two 64-k swizzle atoms), the rows' e2m1 bytes (64 B a row, 16-byte units XOR-swizzled for
// conflict-free ldmatrix) and their 4 scale bytes; the ring runs kStages − 1 stages ahead across
// items (every block waits for its own wgmmas, so once all threads passed stage cs's barrier the
// slot of stage cs − 1 is free). Per block a warpgroup issues its two wgmmas, waits for them and
// promotes:
// the tensor core works on the other warpgroup's block while one promotes. (Two partial register
// sets with wgmma.wait_group 1 — block b issued before block b − 1's promotion — made ptxas
// serialise every wgmma, C7514: it does not track which group a wait retired.)
#include <cuda_fp16.h>

#include <atomic>

#include "backend/cuda/common.cuh"
#define DEEPINFER_EMMA_HELPERS_ONLY
#include "backend/cuda/experts_mma.cuh"
#undef DEEPINFER_EMMA_HELPERS_ONLY
#include "backend/cuda/experts_mma.h"
#include "backend/cuda/experts_wg.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/wgmma_common.cuh"

namespace deepinfer::cuda::kernels {
namespace ewg {

using namespace wgmma;

constexpr int kThreads = 256;                    // two warpgroups
constexpr int kT = kExpertsWgTileRows;           // tokens per tile
constexpr int kCols = 3 * kT;                    // B columns: plane p of token m at 32p + m
constexpr int kStageK = 128;            // k per ring stage (4 scale blocks)
constexpr int kAtomBytes = kCols * 128;  // one 64-k swizzle atom of B (all columns)
constexpr int kBBytes = 2 * kAtomBytes;  // 24,576
constexpr int kMaxExperts = 1024;
constexpr int kTabInts = 2 * (kMaxExperts + 1) + 2 * kT;  // tile_off, row_off, token slots / exps
static_assert(kAtomBytes % 1024 == 0, "B atoms must stay 1024-byte aligned");

// kMT m64 tiles per warpgroup (1: 128 weight rows per item, 6-stage ring; 2: 256 rows, 5 stages —
// the tile's B, the dominant bytes of a stage, then feeds twice the MMAs).
// kStages0: ring stages (0: 6 for kMT = 1, 5 for 2).
template <int kMT, int kStages0 = 0>
struct Cfg {
  static constexpr int kRowsCta = 128 * kMT;                   // weight rows per item
  static constexpr int kWBytes = kRowsCta * kStageK / 2;       // 8 KB a m-tile pair
  static constexpr int kSBytes = kRowsCta * 4;
  static constexpr int kStageBytes = ((kBBytes + kWBytes + kSBytes + 1023) / 1024) * 1024;
  static constexpr int kStages = kStages0 > 0 ? kStages0 : kMT == 1 ? 6 : 5;
  static constexpr size_t kSmem = 1024 + static_cast<size_t>(kStages) * kStageBytes + kTabInts * 4;
};
static_assert(kT == 32, "the finish and the B copies assume 32-token tiles");

struct Args {
  const uint16_t* planes = nullptr;  // [3][x_rows][K] f16 bits, MMA k order (split_kernel<true>)
  const int32_t* row_exp = nullptr;  // [x_rows] c
  int64_t plane = 0;                 // x_rows · K
  int32_t x_div = 1;
  const int32_t* perm = nullptr;      // sorted position -> slot
  const int32_t* row_off = nullptr;   // [E + 1]
  const int32_t* tile_off = nullptr;  // [E + 1] kT-token tiles before e
  int32_t num_experts = 0;
  const void* const* w_table = nullptr;  // [E] e2m1 [N, K / 2]
  const void* const* s_table = nullptr;  // [E] ue8m0 [N, K / 32]
  int32_t N = 0, K = 0, scale_cols = 0;
  int32_t row_tiles = 0;  // N / (128 · kMT)
  int32_t kstages = 0;    // K / 128
  float* out = nullptr;   // [slots, N]
};

__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}

// One item: expert e, weight rows n0 .., tokens base .. base + cnt − 1 of the expert's sorted run
// starting at pos0.
struct Item {
  int e = 0, n0 = 0, pos0 = 0, base = 0, cnt = 0;
};

template <int kMT>
__device__ __forceinline__ Item item_at(const Args& p, const int32_t* s_tile, const int32_t* s_row,
                                        int64_t item) {
  const int d = static_cast<int>(item / p.row_tiles);
  Item it;
  it.n0 = static_cast<int>(item - static_cast<int64_t>(d) * p.row_tiles) * Cfg<kMT>::kRowsCta;
  int lo = 0, hi = p.num_experts - 1;  // the last e with tile_off[e] <= d
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (s_tile[mid] <= d) lo = mid;
    else hi = mid - 1;
  }
  it.e = lo;
  it.pos0 = s_row[lo];
  it.base = (d - s_tile[lo]) * kT;
  it.cnt = min(kT, s_row[lo + 1] - it.pos0 - it.base);
  return it;
}

// The producer's per-item sources: this thread's 6 B columns (plane rows of the tile's tokens;
// tokens past cnt read the tile's last token, their outputs are never written), the expert's
// weight and scale rows.
struct Src {
  int32_t xrow[6];  // x row of each B column's token (its plane: column / kT)
  const uint8_t* w = nullptr;
  const uint8_t* s = nullptr;
  int n0 = 0;
};

__device__ __forceinline__ void set_src(const Args& p, const Item& it, int tid, Src& src) {
#pragma unroll
  for (int i = 0; i < 6; ++i) {
    const int c = (tid >> 4) + 16 * i;  // column: plane c / kT, token c % kT
    const int m = min(c % kT, it.cnt - 1);
    const int slot = __ldg(p.perm + it.pos0 + it.base + m);
    src.xrow[i] = slot / p.x_div;
  }
  src.w = static_cast<const uint8_t*>(p.w_table[it.e]);
  src.s = static_cast<const uint8_t*>(p.s_table[it.e]);
  src.n0 = it.n0;
}

// Stage ks (128 k) of the item into slot `st`.
template <int kMT>
__device__ __forceinline__ void issue(const Args& p, const Src& src, int ks, uint8_t* st, int tid) {
  using C = Cfg<kMT>;
  const uint32_t sb = emma::smem_u32(st);
#pragma unroll
  for (int i = 0; i < 6; ++i) {  // B: unit (column c, atom a, 16-byte unit v)
    const int u = tid + 256 * i, c = u >> 4, a = (u >> 3) & 1, v = u & 7;
    const uint16_t* col = p.planes + (c / kT) * p.plane + static_cast<int64_t>(src.xrow[i]) * p.K;
    emma::cp_async16(sb + a * kAtomBytes + c * 128 + ((v ^ (c & 7)) << 4),
                     col + ks * kStageK + a * 64 + v * 8);
  }
  const int64_t rb = p.K / 2;
#pragma unroll
  for (int i = 0; i < 2 * kMT; ++i) {  // weights: row r, unit v
    const int u = tid + 256 * i, r = u >> 2, v = u & 3;
    emma::cp_async16(sb + kBBytes + r * 64 + ((v ^ ((r >> 1) & 3)) << 4),
                     src.w + (src.n0 + r) * rb + ks * 64 + 16 * v);
  }
#pragma unroll
  for (int r = tid; r < C::kRowsCta; r += kThreads) {  // 4 scale bytes of row r
    const uint8_t* s = src.s + static_cast<int64_t>(src.n0 + r) * p.scale_cols + ks * 4;
    if ((reinterpret_cast<uintptr_t>(s) & 3) == 0) {
      cp_async4(sb + kBBytes + C::kWBytes + 4 * r, s);
    } else {  // unaligned scale rows: plain loads (correct, slow)
      const uint32_t v = __ldg(s) | (uint32_t{__ldg(s + 1)} << 8) | (uint32_t{__ldg(s + 2)} << 16) |
                         (uint32_t{__ldg(s + 3)} << 24);
      *reinterpret_cast<uint32_t*>(st + kBBytes + C::kWBytes + 4 * r) = v;
    }
  }
}

__device__ __forceinline__ void promote(float (&acc)[kCols / 2], const float (&part)[kCols / 2],
                                        float sg, float s8) {
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j) {
    acc[4 * j + 0] = fmaf(part[4 * j + 0], sg, acc[4 * j + 0]);
    acc[4 * j + 1] = fmaf(part[4 * j + 1], sg, acc[4 * j + 1]);
    acc[4 * j + 2] = fmaf(part[4 * j + 2], s8, acc[4 * j + 2]);
    acc[4 * j + 3] = fmaf(part[4 * j + 3], s8, acc[4 * j + 3]);
  }
}

// kSeq (kMT = 2): the m-tiles' wgmmas one after the other into one partial register set (issue,
// wait, promote per m-tile: fewer registers, no overlap of the two); else both m-tiles in flight.
// kStages0 / kMinBlocks: the ring (Cfg) and CTAs per SM (2: ≤ 128 registers a thread).
template <int kMT, bool kSeq, int kStages0 = 0, int kMinBlocks = 1>
__global__ void __launch_bounds__(kThreads, kMinBlocks) product_kernel(const Args p) {
  using C = Cfg<kMT, kStages0>;
  constexpr int kStages = C::kStages, kStageBytes = C::kStageBytes, kWBytes = C::kWBytes;
  extern __shared__ uint8_t ewg_smem_raw[];
  uint8_t* sm = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(ewg_smem_raw) + 1023) &
                                           ~uintptr_t{1023});
  int32_t* s_tile = reinterpret_cast<int32_t*>(sm + kStages * kStageBytes);
  int32_t* s_row = s_tile + kMaxExperts + 1;
  int32_t* s_slot = s_row + kMaxExperts + 1;  // [kT] output slot of each token of the item (−1)
  int32_t* s_exp = s_slot + kT;               // [kT] 14 − c
  const int tid = threadIdx.x;
  pdl::wait();  // the planes (the split) and the grouping
  const int E = p.num_experts;
  for (int i = tid; i <= E; i += kThreads) {
    s_tile[i] = __ldg(p.tile_off + i);
    s_row[i] = __ldg(p.row_off + i);
  }
  __syncthreads();
  const int64_t n_items = static_cast<int64_t>(s_tile[E]) * p.row_tiles;
  const int64_t G = gridDim.x;
  const int64_t mine = n_items > blockIdx.x ? (n_items - blockIdx.x + G - 1) / G : 0;
  if (mine == 0) return;
  const int64_t total = mine * p.kstages;  // stages this CTA streams

  // Producer: stage ps of item pi (the CTA's pi-th item), sources of that item.
  int64_t ps = 0, pi = 0;
  int pks = 0;
  Src src;
  set_src(p, item_at<kMT>(p, s_tile, s_row, blockIdx.x), tid, src);
  auto produce = [&]() {
    if (ps < total) {
      issue<kMT>(p, src, pks, sm + (ps % kStages) * kStageBytes, tid);
      ++ps;
      if (++pks == p.kstages) {
        pks = 0;
        ++pi;
        if (pi < mine) set_src(p, item_at<kMT>(p, s_tile, s_row, blockIdx.x + pi * G), tid, src);
      }
    }
    emma::cp_async_commit();
  };
#pragma unroll 1
  for (int s = 0; s < kStages - 1; ++s) produce();

  const int wgi = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
  // The warp's first weight row of m-tile mt of the item: 128·mt + rw.
  const int rw = wgi * 64 + warp * 16;
  // ldmatrix: lane L gives row 128·mt + rw + (L & 7) + 8·((L >> 3) & 1), unit 2j + (L >> 4) of
  // block pair j (the XOR swizzle of row r is (r >> 1) & 3: the same for both m-tiles).
  const int lrow = rw + (lane & 7) + ((lane >> 3) & 1) * 8;
  const uint32_t lsw = (lrow >> 1) & 3;

  constexpr int kParts = kSeq ? 1 : kMT;
  float acc[kMT][kCols / 2], part[kParts][kCols / 2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int i = 0; i < kCols / 2; ++i) acc[mt][i] = 0.f;
  Item cit{};
  int cks = 0;
  int64_t ci = 0;
#pragma unroll 1
  for (int64_t cs = 0; cs < total; ++cs) {
    emma::cp_async_wait<kStages - 2>();
    fence_proxy_async();  // the cp.async writes, visible to the async proxy (wgmma)
    // Every thread's copies of stage cs landed; every wgmma of stage cs − 1 retired (each block
    // waits for its own), so its slot may be refilled now: the ring runs kStages − 1 ahead.
    __syncthreads();
    produce();
    if (cks == 0) {
      cit = item_at<kMT>(p, s_tile, s_row, blockIdx.x + ci * G);
      if (tid < kT) {
        int slot = -1, ex = 0;
        if (tid < cit.cnt) {
          slot = __ldg(p.perm + cit.pos0 + cit.base + tid);
          ex = 14 - __ldg(p.row_exp + slot / p.x_div);
        }
        s_slot[tid] = slot;
        s_exp[tid] = ex;
      }
    }
    uint8_t* st = sm + (cs % kStages) * kStageBytes;
    const uint32_t sb = emma::smem_u32(st);
    // The stage's block scales of rows g / g + 8 of each m-tile (the exact decode only when a
    // byte is 0x00 or 0xFF: the same values either way).
    float sg[kMT][4], s8[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const uint32_t wg_ = *reinterpret_cast<const uint32_t*>(st + kBBytes + kWBytes + 4 * (128 * mt + rw + g));
      const uint32_t w8 = *reinterpret_cast<const uint32_t*>(st + kBBytes + kWBytes + 4 * (128 * mt + rw + g + 8));
      // experts_mma's decode of scale bytes 0..3 (emma::stage_scale on the word's 4 bytes).
      const uint2 vg = make_uint2(wg_, 0u), v8 = make_uint2(w8, 0u);
      if (emma::has_00_or_ff(wg_) || emma::has_00_or_ff(w8)) {
#pragma unroll
        for (int b = 0; b < 4; ++b)
          sg[mt][b] = emma::stage_scale<true>(vg, b), s8[mt][b] = emma::stage_scale<true>(v8, b);
      } else {
#pragma unroll
        for (int b = 0; b < 4; ++b)
          sg[mt][b] = emma::stage_scale<false>(vg, b), s8[mt][b] = emma::stage_scale<false>(v8, b);
      }
    }
    uint32_t q[kMT][4];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      if ((b & 1) == 0)  // the block pair's A words of each m-tile
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
          emma::ldmatrix_x4(q[mt], sb + kBBytes + (128 * mt + lrow) * 64 + (((b + (lane >> 4)) ^ lsw) << 4));
      uint32_t A[kMT][8];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        uint32_t dg[4], d8[4];
        emma::decode_e2m1x8(q[mt][2 * (b & 1)], dg);
        emma::decode_e2m1x8(q[mt][2 * (b & 1) + 1], d8);
        A[mt][0] = dg[0], A[mt][1] = d8[0], A[mt][2] = dg[1], A[mt][3] = d8[1];  // k-step 0
        A[mt][4] = dg[2], A[mt][5] = d8[2], A[mt][6] = dg[3], A[mt][7] = d8[3];  // k-step 1
      }
      const uint32_t bb = sb + (b >> 1) * kAtomBytes + 64 * (b & 1);
      if constexpr (kSeq) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          wg_fence();
          mma_rs_f16<kCols>(part[0], A[mt], wg_desc(bb, 16, 1024), 0);
          mma_rs_f16<kCols>(part[0], A[mt] + 4, wg_desc(bb + 32, 16, 1024), 1);
          wg_commit();
          wg_wait<0>();
          reg_fence(part[0]);
          reg_fence(A[mt]);
          promote(acc[mt], part[0], sg[mt][b], s8[mt][b]);
        }
      } else {
        wg_fence();
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_rs_f16<kCols>(part[mt], A[mt], wg_desc(bb, 16, 1024), 0);
          mma_rs_f16<kCols>(part[mt], A[mt] + 4, wg_desc(bb + 32, 16, 1024), 1);
        }
        wg_commit();
        wg_wait<0>();
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          reg_fence(part[mt]);
          reg_fence(A[mt]);
          promote(acc[mt], part[mt], sg[mt][b], s8[mt][b]);
        }
      }
    }
    if (++cks == p.kstages) {  // the item's outputs (only acc is read: no wgmma register)
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        const int64_t row0 = cit.n0 + 128 * mt + rw + g;
#pragma unroll
        for (int mq = 0; mq < 4; ++mq)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int m = 8 * mq + 2 * t + e;
            const int slot = s_slot[m];
            if (slot < 0) continue;
            const int ex = s_exp[m];
            float* o = p.out + static_cast<int64_t>(slot) * p.N + row0;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int x = 2 * h + e;
              const float h0 = acc[mt][4 * mq + x], h1 = acc[mt][4 * (4 + mq) + x],
                          h2 = acc[mt][4 * (8 + mq) + x];
              o[8 * h] = scalbnf((h2 + h1) + h0, ex);
            }
          }
#pragma unroll
        for (int i = 0; i < kCols / 2; ++i) acc[mt][i] = 0.f;
      }
      cks = 0;
      ++ci;
    }
  }
  emma::cp_async_wait<0>();
}

}  // namespace ewg

bool experts_wg_supported(int fmt, int64_t slots, int64_t num_experts, bool scaled, bool scale_f32,
                          bool w_vec, int64_t N, int64_t K, int64_t block_rows, int64_t block_cols) {
  return N % 128 == 0 &&
         experts_mma_supported(fmt, slots, num_experts, scaled, scale_f32, w_vec, N, K, block_rows,
                               block_cols);
}

bool experts_wg_device_ok() {
  static std::atomic<int> cache[64] = {};  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  std::atomic<int>& slot = cache[dev & 63];
  int v = slot.load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0, minor = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess;
    if (!ok) cudaGetLastError();
    v = ok && major == 9 && minor == 0 ? 1 : 2;
    slot.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

size_t experts_wg_workspace_bytes(int64_t x_rows, int64_t K) {
  return experts_mma_workspace_bytes(x_rows, K);
}

void experts_wg(const float* x, int64_t x_rows, int64_t x_div, const int32_t* perm,
                const int32_t* row_off, const int32_t* tile_off, int64_t slots, int64_t num_experts,
                const void* const* w_table, const void* const* s_table, int64_t N, int64_t K,
                void* workspace, float* out, cudaStream_t s, const int32_t* zero_bad_ids,
                int variant) {
  if (slots == 0 || N == 0 || num_experts == 0 || x_rows == 0) return;
  const emma::SplitOut so = emma::launch_split<true>(x, x_rows, x_div, K, slots, num_experts, N,
                                                     zero_bad_ids, out, workspace, s, false);
  ewg::Args a;
  a.planes = so.planes;
  a.row_exp = so.row_exp;
  a.plane = x_rows * K;
  a.x_div = static_cast<int32_t>(x_div);
  a.perm = perm;
  a.row_off = row_off;
  a.tile_off = tile_off;
  a.num_experts = static_cast<int32_t>(num_experts);
  a.w_table = w_table;
  a.s_table = s_table;
  a.N = static_cast<int32_t>(N);
  a.K = static_cast<int32_t>(K);
  a.scale_cols = static_cast<int32_t>(K / 32);
  a.kstages = static_cast<int32_t>(K / ewg::kStageK);
  a.out = out;
  const int sms = sms_of_current_device();
  // Variant 0: 3 (H200, session 20, bench_ops at 2,048 tokens: gate_up 6.49 / down 3.03 ms vs
  // variant 1's 6.71 / 3.62; variant 2 spills: 10.3 / 5.3).
  if (variant < 1 || variant > 4) variant = 3;
  if (N % 256 != 0 && (variant == 2 || variant == 3)) variant = 1;
  const int mt = variant == 1 || variant == 4 ? 1 : 2;
  a.row_tiles = static_cast<int32_t>(N / (128 * mt));
  auto go = [&](auto kernel, size_t smem, std::atomic<uint64_t>& attr_done, int per_sm = 1) {
    opt_in_smem_per_device(attr_done, kernel, static_cast<int>(smem), true);
    pdl::launch(kernel, dim3(static_cast<unsigned>(sms * per_sm)), dim3(ewg::kThreads), smem, s, true, a);
  };
  static std::atomic<uint64_t> done1{0}, done2{0}, done3{0}, done4{0};
  if (variant == 1) go(ewg::product_kernel<1, false>, ewg::Cfg<1>::kSmem, done1);
  else if (variant == 2) go(ewg::product_kernel<2, false>, ewg::Cfg<2>::kSmem, done2);
  else if (variant == 3) go(ewg::product_kernel<2, true>, ewg::Cfg<2>::kSmem, done3);
  else go(ewg::product_kernel<1, false, 3, 2>, ewg::Cfg<1, 3>::kSmem, done4, 2);
}

}  // namespace deepinfer::cuda::kernels
