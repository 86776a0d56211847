// The decode routed experts on tensor cores (experts_mma.cuh) at DeepSeek-V4-Flash's expert
// shapes (gate_up 4096 -> 4096 and down 2048 -> 4096, FP4 e2m1 with 1×32 ue8m0 scales, 256
// experts, top-6; decode batches of 1, 4, 16 and 32 tokens and a crowded 128-slot batch with 16
// tokens on one expert), random routing with repeated experts and one bad id per batch:
//  - against a double reference of the dequantized weights on ~64 sampled outputs per slot, with
//    the error normalised by Σ|x·w| (the scale every fp32 summation error is relative to): the
//    new kernel's worst error is at most max(2 × the session-5 GEMV's worst error on the same
//    outputs, 16·u), u = 2^-24 (16·u ≈ 1e-6 of Σ|x·w|: the per-block fp32 promotions alone
//    allow ~K/32·u; see the header of experts_mma.cuh for the arithmetic);
//  - against the GEMV (gemv_experts_v2) on every output of every slot (|new − v2| ≤ 1e-4 of the
//    slot row's largest |v2|: any layout / permutation slip gives O(1) differences);
//  - rows of the bad-id slot left untouched (the buffer's NaN fill), every other output written;
//  - x rows of very different magnitudes (2^-60 … 2^60, a zero row) and unaligned x;
//  - session 7: the kernel variants (1 = session 6, 2 = the default, 3 = 2 with more registers)
//    give the same bits on every output (memcmp), since each output's operations are the same;
//  - session 8: v3 (variants 4, 5) equal to the others bit for bit in every check above, and
//    against a double reference and session 7's kernel for 1, 2, 8, 16 and 64 tokens;
//  - session 10: the x variants (experts_mma_x.cuh, variants 6..8) in every variant check above,
//    against a double reference and session 7's kernel (bit for bit) with v3 at V4 shapes (1..64
//    tokens, both groupings) and a small layout, and in the batch-invariance configurations below;
//  - session 12: the xb variants (experts_mma_xb.cuh, variants 9..23: B through the ring or not) in
//    every variant check above, memcmp-equal to v3 at V4 shapes and small layouts (1..64 tokens,
//    both groupings, the 2-/4-n-tile passes of a crowded expert, K = 9216), also as picked by
//    experts_mma_pick_xb / experts_mma_pick_s12 (auto, x1..x3), and in the batch-invariance
//    configs; experts_mma's zero_bad_ids writes the bad-id slot's rows as +0 and nothing else
//    differs;
//  - session 15: variant 33 (pass-balanced warp ranges) and mode x0 in the session-12 checks,
//    and variant 33 memcmp-equal to v3 at 96 / 192 / 256 tokens (up to 1,536 slots);
//  - session 13: the batch-1..8 variants (24..32) memcmp-equal to v3 at V4 shapes and small
//    layouts (1..8 tokens, both groupings, a token taking one expert twice, bad ids), also as
//    picked by experts_mma_pick_s12 modes 5..9 ("x5".."x9"; auto's pick above 8 slots except modes
//    5 and 9: 31 from 9 to 128), zero_bad_ids, and in the batch-invariance configs;
//  - session 20: experts_wg (warpgroup MMA, 32-token tiles; variants 1..4) memcmp-equal to
//    experts_mma on every
//    output at V4 shapes (1 … 700 tokens: partial and many tiles per expert, a hot expert in every
//    token, bad ids, rows of magnitudes 2^-60 … 2^60, a zero row, a 0x00 scale) and on a small
//    layout (3 experts top-2, N 128 / 256, K 256, up to 100 tokens: ~67 per expert); zero_bad_ids
//    as experts_mma's;
//  - session 7, --batch-invariant: one token's slot outputs are the same bits (memcmp) when it
//    runs alone and in batches of 16, 64 and 2048 tokens, at other positions, with its experts
//    in another order and one of them crowded by other tokens (several passes of 8 tokens), for
//    each projection on its own and through CudaBackend::moe_experts with batch_invariant.
// Fresh random inputs each run; the seed is printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/experts_mma.h"
#include "backend/cuda/experts_wg.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "common/env.h"
#include "device_pair.h"
#include "memset_sync.h"

namespace deepinfer::cuda {
namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24

DeviceBuffer dev_alloc(uint64_t bytes) {
  auto b = DeviceBuffer::allocate(std::max<uint64_t>(bytes, 16));
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? std::move(b).value() : DeviceBuffer();
}

class CudaExpertsMma : public ::testing::Test {
 protected:
  // P distinct weight sets; expert e uses set e % P (keeps host memory small; the kernels see E
  // distinct pointers).
  struct Set {
    int64_t P = 0, N = 0, K = 0;
    std::vector<uint8_t> w;   // [P][N][K/2] e2m1 codes (low nibble = even k)
    std::vector<uint8_t> s;   // [P][N][K/32] ue8m0
    DeviceBuffer dw, ds, tables;  // tables: [E] weight pointers, then [E] scale pointers
    int64_t wbytes() const { return N * K / 2; }
    int64_t sbytes() const { return N * (K / 32); }
  };

  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    sm_ = (uint64_t{seed_} << 32) ^ 0x5DEECE66Dull;
    std::printf("seed %u\n", seed_);
  }
  uint64_t next64() {  // splitmix64, seeded from the test's seed
    uint64_t z = (sm_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  void make_set(Set& st, int64_t E) {
    st.w.resize(st.P * st.wbytes());
    for (size_t i = 0; i < st.w.size(); i += 8) {
      const uint64_t v = next64();
      std::memcpy(st.w.data() + i, &v, std::min<size_t>(8, st.w.size() - i));
    }
    st.s.resize(st.P * st.sbytes());
    for (uint8_t& b : st.s) b = static_cast<uint8_t>(118 + next64() % 10);
    st.s[1] = 0;  // 2^-127, the smallest scale
    st.dw = dev_alloc(st.w.size());
    st.ds = dev_alloc(st.s.size());
    ASSERT_EQ(cudaMemcpy(st.dw.data(), st.w.data(), st.w.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(st.ds.data(), st.s.data(), st.s.size(), cudaMemcpyHostToDevice), cudaSuccess);
    std::vector<const void*> tab(2 * E);
    for (int64_t e = 0; e < E; ++e) {
      tab[e] = static_cast<uint8_t*>(st.dw.data()) + (e % st.P) * st.wbytes();
      tab[E + e] = static_cast<uint8_t*>(st.ds.data()) + (e % st.P) * st.sbytes();
    }
    st.tables = dev_alloc(tab.size() * sizeof(void*));
    ASSERT_EQ(cudaMemcpy(st.tables.data(), tab.data(), tab.size() * sizeof(void*), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  static double deq(const Set& st, int64_t p, int64_t n, int64_t k) {
    static const double kVal[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    const uint8_t b = st.w[p * st.wbytes() + n * (st.K / 2) + k / 2];
    const int c = (k & 1) ? b >> 4 : b & 15;
    const double s = std::ldexp(1.0, int(st.s[p * st.sbytes() + n * (st.K / 32) + k / 32]) - 127);
    return (c & 8 ? -kVal[c & 7] : kVal[c & 7]) * s;
  }
  std::vector<float> randn(int64_t rows, int64_t K, float scale) {
    std::vector<float> x(rows * K);
    std::normal_distribution<float> nd(0.f, scale);
    for (float& v : x) v = nd(rng_);
    return x;
  }
  // k distinct experts per token; `hot`: expert 5 in every token.
  std::vector<int32_t> route(int64_t B, int64_t k, int64_t E, bool hot) {
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < B; ++t) {
      std::vector<int32_t> mine;
      if (hot) mine.push_back(5);
      while (static_cast<int64_t>(mine.size()) < k) {
        const int32_t e = static_cast<int32_t>(rng_() % E);
        if (std::find(mine.begin(), mine.end(), e) == mine.end()) mine.push_back(e);
      }
      ids.insert(ids.end(), mine.begin(), mine.end());
    }
    return ids;
  }

  // out [slots, N] (host) of experts_mma variant `variant` (0: the default) when mma, else of
  // gemv_experts_v2; untouched elements keep the NaN fill (all bits set).
  std::vector<float> run(bool mma, const Set& st, const float* dx, int64_t x_rows, int64_t x_div,
                         int64_t slots, int64_t E, const int32_t* grp, int variant = 0,
                         int64_t tile_rows = 0) {
    DeviceBuffer out = dev_alloc(slots * st.N * 4);
    EXPECT_EQ(testing::memset_sync(out.data(), 0xFF, slots * st.N * 4), cudaSuccess);
    const auto* tab = static_cast<const void* const*>(st.tables.data());
    const int32_t* perm = grp;
    const int32_t* row_off = perm + slots;
    const int32_t* act_off = row_off + E + 1;
    float* o = static_cast<float*>(out.data());
    if (mma) {
      EXPECT_TRUE(kernels::experts_mma_supported(2, slots, E, true, false, true, st.N, st.K, 1, 32));
      DeviceBuffer ws = dev_alloc(kernels::experts_mma_workspace_bytes(x_rows, st.K));
      kernels::experts_mma(dx, x_rows, x_div, perm, row_off, act_off, slots, E, tab, tab + E, st.N,
                           st.K, ws.data(), o, nullptr, variant, tile_rows);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    } else {
      EXPECT_TRUE(kernels::gemv_experts_v2_supported(2, slots, E, true, true, st.N, st.K, 32));
      kernels::gemv_experts_v2(dx, x_div, perm, row_off, act_off, slots, E, tab, tab + E, false,
                               st.N, st.K, 1, 32, o, nullptr);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<float> h(slots * st.N);
    EXPECT_EQ(cudaMemcpy(h.data(), out.data(), h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

  // One projection: x [x_rows, K] (slot i reads row i / x_div), ids [slots] (may hold a bad id).
  void check(const std::string& what, const Set& st, const std::vector<float>& x, int64_t x_div,
             const std::vector<int32_t>& ids, int64_t E, int x_shift) {
    SCOPED_TRACE(what + ", seed " + std::to_string(seed_));
    const int64_t slots = static_cast<int64_t>(ids.size());
    const int64_t x_rows = static_cast<int64_t>(x.size()) / st.K;
    DeviceBuffer dids = dev_alloc(slots * 4), grp = dev_alloc((slots + 2 * (E + 1)) * 4),
                 flag = dev_alloc(16), dxb = dev_alloc(x.size() * 4 + 16);
    ASSERT_EQ(cudaMemcpy(dids.data(), ids.data(), slots * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(testing::memset_sync(flag.data(), 0, 16), cudaSuccess);
    float* dx = static_cast<float*>(dxb.data()) + x_shift;
    ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    int32_t* g = static_cast<int32_t*>(grp.data());
    kernels::moe_group(static_cast<const int32_t*>(dids.data()), slots, E,
                       static_cast<int>(std::max<int64_t>(slots, 1)), g, g + slots, g + slots + E + 1,
                       static_cast<int32_t*>(flag.data()), nullptr);
    const std::vector<float> v2 = run(false, st, dx, x_rows, x_div, slots, E, g);
    const std::vector<float> nw = run(true, st, dx, x_rows, x_div, slots, E, g);
    // Every variant, and the default on moe_group's 8-row tiles: the same bits as the default
    // on every element (written or not).
    DeviceBuffer grp8 = dev_alloc((slots + 2 * (E + 1)) * 4);
    int32_t* g8 = static_cast<int32_t*>(grp8.data());
    kernels::moe_group(static_cast<const int32_t*>(dids.data()), slots, E, kernels::kExpertsMmaTileRows, g8,
                       g8 + slots, g8 + slots + E + 1, static_cast<int32_t*>(flag.data()), nullptr);
    // Session 8: v3 (variants 4 and 5) on both groupings (-4, -5: 8-row tiles).
    // Session 10: the x variants (6..8) on both groupings too.
    for (int variant : {kernels::kExpertsMmaV1,          kernels::kExpertsMmaV2,
                        kernels::kExpertsMmaV2Regs,      -1,
                        kernels::kExpertsMmaV3,          kernels::kExpertsMmaV3w16,
                        -kernels::kExpertsMmaV3,         -kernels::kExpertsMmaV3w16,
                        kernels::kExpertsMmaX16,         kernels::kExpertsMmaX32,
                        kernels::kExpertsMmaX64,         -kernels::kExpertsMmaX16,
                        -kernels::kExpertsMmaX32,        -kernels::kExpertsMmaX64,
                        kernels::kExpertsMmaXB3,         kernels::kExpertsMmaXB2,
                        kernels::kExpertsMmaXB2L2,       -kernels::kExpertsMmaXB3,
                        -kernels::kExpertsMmaXB2,        -kernels::kExpertsMmaXB2L2,
                        kernels::kExpertsMmaXB2T16,      kernels::kExpertsMmaXB2T16L2,
                        kernels::kExpertsMmaXB3T,        -kernels::kExpertsMmaXB2T16,
                        -kernels::kExpertsMmaXB2T16L2,   -kernels::kExpertsMmaXB3T,
                        kernels::kExpertsMmaXB32w12,     kernels::kExpertsMmaXB32w8,
                        -kernels::kExpertsMmaXB32w12,    -kernels::kExpertsMmaXB32w8,
                        kernels::kExpertsMmaXB64,        kernels::kExpertsMmaXG16s4,
                        kernels::kExpertsMmaXG16s3,      -kernels::kExpertsMmaXB64,
                        -kernels::kExpertsMmaXG16s4,     -kernels::kExpertsMmaXG16s3,
                        kernels::kExpertsMmaXB32w16,     kernels::kExpertsMmaXB16s3t1,
                        -kernels::kExpertsMmaXB32w16,    -kernels::kExpertsMmaXB16s3t1,
                        kernels::kExpertsMmaXB16s4t1L2,  kernels::kExpertsMmaXB16s4t1,
                        -kernels::kExpertsMmaXB16s4t1L2, -kernels::kExpertsMmaXB16s4t1}) {
      const std::vector<float> other =
          variant == -1 ? run(true, st, dx, x_rows, x_div, slots, E, g8, 0, kernels::kExpertsMmaTileRows)
          : variant < 0 ? run(true, st, dx, x_rows, x_div, slots, E, g8, -variant, kernels::kExpertsMmaTileRows)
                        : run(true, st, dx, x_rows, x_div, slots, E, g, variant);
      int64_t first = -1;
      for (size_t i = 0; i < nw.size() && first < 0; ++i)
        if (std::memcmp(&nw[i], &other[i], 4) != 0) first = static_cast<int64_t>(i);
      EXPECT_EQ(first, -1) << "variant " << variant << " (< 0: 8-row tiles) differs from the default at slot "
                           << first / st.N << " row " << first % st.N << ": " << other[first] << " vs "
                           << nw[first];
    }
    const uint32_t kFill = 0xFFFFFFFFu;
    auto bits = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; };
    // Every output against the GEMV; bad-id rows untouched.
    int64_t n_bad_written = 0, n_unwritten = 0, n_far = 0;
    double worst_far = 0;
    for (int64_t sl = 0; sl < slots; ++sl) {
      const bool bad = ids[sl] < 0 || ids[sl] >= E;
      double row_max = 0;
      for (int64_t n = 0; n < st.N; ++n) row_max = std::max(row_max, std::fabs(double(v2[sl * st.N + n])));
      for (int64_t n = 0; n < st.N; ++n) {
        const float a = nw[sl * st.N + n], b = v2[sl * st.N + n];
        if (bad) {
          n_bad_written += bits(a) != kFill;
          continue;
        }
        if (bits(a) == kFill) {
          ++n_unwritten;
          continue;
        }
        const double d = std::fabs(double(a) - double(b));
        if (!(d <= 1e-4 * row_max)) {
          if (n_far < 5)
            ADD_FAILURE() << "slot " << sl << " (expert " << ids[sl] << ") row " << n << ": mma " << a
                          << " vs gemv " << b << " (row max " << row_max << ")";
          ++n_far;
          worst_far = std::max(worst_far, d / std::max(row_max, 1e-300));
        }
      }
    }
    EXPECT_EQ(n_bad_written, 0) << "outputs of a bad-id slot were written";
    EXPECT_EQ(n_unwritten, 0) << "outputs of grouped slots were not written";
    EXPECT_EQ(n_far, 0) << "outputs off the GEMV's by more than 1e-4 of the row max (worst " << worst_far << ")";
    // Double reference on sampled outputs: worst normalised error of each kernel.
    double err_new = 0, err_old = 0;
    int64_t worst_sl = -1, worst_n = -1;
    for (int64_t sl = 0; sl < slots; ++sl) {
      if (ids[sl] < 0 || ids[sl] >= E) continue;
      const int64_t p = ids[sl] % st.P;
      const float* xr = x.data() + (sl / x_div) * st.K;
      for (int64_t n = (sl * 7) % 61; n < st.N; n += std::max<int64_t>(1, st.N / 64)) {
        double s = 0, a = 0;
        for (int64_t k = 0; k < st.K; ++k) {
          const double pr = double(xr[k]) * deq(st, p, n, k);
          s += pr;
          a += std::fabs(pr);
        }
        if (a == 0) {
          EXPECT_EQ(nw[sl * st.N + n], 0.f) << "slot " << sl << " row " << n << ": exact zero expected";
          continue;
        }
        const double en = std::fabs(double(nw[sl * st.N + n]) - s) / a;
        const double eo = std::fabs(double(v2[sl * st.N + n]) - s) / a;
        if (!(en <= err_new)) worst_sl = sl, worst_n = n;
        err_new = std::isnan(en) ? INFINITY : std::max(err_new, en);
        err_old = std::max(err_old, eo);
      }
    }
    std::printf("%s: worst |err| / sum|x*w|: mma %.3g, gemv v2 %.3g (u = %.3g)\n", what.c_str(), err_new,
                err_old, kU);
    EXPECT_LE(err_new, std::max(2 * err_old, 16 * kU))
        << "mma error vs double above max(2 x gemv's, 16u); worst at slot " << worst_sl << " row " << worst_n;
  }

  // Uniform in [-a, a) (fast enough for the 2048-token batches).
  std::vector<float> uniform(int64_t n, float a) {
    std::vector<float> v(n);
    for (float& f : v) f = a * (static_cast<float>(next64() >> 40) * (2.f / 16777216.f) - 1.f);
    return v;
  }
  // Routing of a batch of B tokens around a probe token at `pos` whose k experts are
  // probe[order[j]]; every other token: the probe's first expert in every other token (crowded:
  // ~B/2 rows, several passes of 8), the rest random; one bad id in a token other than the probe.
  std::vector<int32_t> probe_routing(int64_t B, int64_t k, int64_t E, const std::vector<int32_t>& probe,
                                     const std::vector<int>& order, int64_t pos) {
    std::vector<int32_t> ids(B * k);
    for (int64_t t = 0; t < B; ++t) {
      if (t == pos) {
        for (int64_t j = 0; j < k; ++j) ids[t * k + j] = probe[order[j]];
        continue;
      }
      std::vector<int32_t> mine;
      if (t % 2 == 0) mine.push_back(probe[0]);
      while (static_cast<int64_t>(mine.size()) < k) {
        const int32_t e = static_cast<int32_t>(next64() % E);
        if (std::find(mine.begin(), mine.end(), e) == mine.end()) mine.push_back(e);
      }
      std::copy(mine.begin(), mine.end(), ids.begin() + t * k);
    }
    if (B > 1) ids[((pos + 1) % B) * k + k - 1] = -1;
    return ids;
  }
  // One projection of experts_mma (variant) over x [x_rows, st.K] (slot i reads row i / x_div)
  // with routing ids [slots]; returns the output rows of slots want[0..] concatenated.
  std::vector<float> probe_rows(const Set& st, const std::vector<float>& x, int64_t x_div,
                                const std::vector<int32_t>& ids, int64_t E, const std::vector<int64_t>& want,
                                int variant, int tile_rows) {
    const int64_t slots = static_cast<int64_t>(ids.size());
    const int64_t x_rows = static_cast<int64_t>(x.size()) / st.K;
    DeviceBuffer dids = dev_alloc(slots * 4), grp = dev_alloc((slots + 2 * (E + 1)) * 4), flag = dev_alloc(16),
                 dx = dev_alloc(x.size() * 4), out = dev_alloc(slots * st.N * 4),
                 ws = dev_alloc(kernels::experts_mma_workspace_bytes(x_rows, st.K));
    EXPECT_EQ(cudaMemcpy(dids.data(), ids.data(), slots * 4, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dx.data(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(testing::memset_sync(flag.data(), 0, 16), cudaSuccess);
    EXPECT_EQ(testing::memset_sync(out.data(), 0xFF, slots * st.N * 4), cudaSuccess);
    EXPECT_TRUE(kernels::experts_mma_supported(2, slots, E, true, false, true, st.N, st.K, 1, 32));
    int32_t* g = static_cast<int32_t*>(grp.data());
    const int grouping = tile_rows > 0 ? tile_rows : static_cast<int>(std::max<int64_t>(slots, 1));
    kernels::moe_group(static_cast<const int32_t*>(dids.data()), slots, E, grouping, g, g + slots,
                       g + slots + E + 1, static_cast<int32_t*>(flag.data()), nullptr);
    const auto* tab = static_cast<const void* const*>(st.tables.data());
    kernels::experts_mma(static_cast<const float*>(dx.data()), x_rows, x_div, g, g + slots, g + slots + E + 1,
                         slots, E, tab, tab + E, st.N, st.K, ws.data(), static_cast<float*>(out.data()), nullptr,
                         variant, grouping);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<float> rows(want.size() * st.N);
    for (size_t j = 0; j < want.size(); ++j)
      EXPECT_EQ(cudaMemcpy(rows.data() + j * st.N, static_cast<float*>(out.data()) + want[j] * st.N, st.N * 4,
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
    return rows;
  }

  // Device copies of ids [slots] and x, and moe_group's two groupings of the ids: one tile per
  // expert (p1) and kExpertsMmaTileRows-row tiles (p8). Fatal failures on error.
  struct Grouped {
    DeviceBuffer dids, g1, g8, flag, dx;
    const int32_t* p1 = nullptr;
    const int32_t* p8 = nullptr;
    const float* xp = nullptr;
  };
  void group_both(const std::vector<int32_t>& ids, const std::vector<float>& x, int64_t E, Grouped& gr) {
    const int64_t slots = static_cast<int64_t>(ids.size());
    gr.dids = dev_alloc(slots * 4);
    gr.g1 = dev_alloc((slots + 2 * (E + 1)) * 4);
    gr.g8 = dev_alloc((slots + 2 * (E + 1)) * 4);
    gr.flag = dev_alloc(16);
    gr.dx = dev_alloc(x.size() * 4);
    ASSERT_EQ(cudaMemcpy(gr.dids.data(), ids.data(), slots * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(gr.dx.data(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(testing::memset_sync(gr.flag.data(), 0, 16), cudaSuccess);
    auto* p1 = static_cast<int32_t*>(gr.g1.data());
    auto* p8 = static_cast<int32_t*>(gr.g8.data());
    const auto* did = static_cast<const int32_t*>(gr.dids.data());
    kernels::moe_group(did, slots, E, static_cast<int>(slots), p1, p1 + slots, p1 + slots + E + 1,
                       static_cast<int32_t*>(gr.flag.data()), nullptr);
    kernels::moe_group(did, slots, E, kernels::kExpertsMmaTileRows, p8, p8 + slots, p8 + slots + E + 1,
                       static_cast<int32_t*>(gr.flag.data()), nullptr);
    gr.p1 = p1;
    gr.p8 = p8;
    gr.xp = static_cast<const float*>(gr.dx.data());
  }

  // The variant tests' layouts: E experts top-k, gate_up [gate_n, gate_k], down [down_n,
  // down_k], run at each batch size.
  struct VariantShape {
    int64_t E, k, gate_n, gate_k, down_n, down_k;
    std::vector<int64_t> batches;
  };
  void make_variant_sets(const VariantShape& sh, Set& gate_up, Set& down) {
    gate_up.P = down.P = std::min<int64_t>(sh.E, 24);
    gate_up.N = sh.gate_n, gate_up.K = sh.gate_k;
    down.N = sh.down_n, down.K = sh.down_k;
    make_set(gate_up, sh.E);
    make_set(down, sh.E);
  }
  // One projection of a variant test: B tokens' x (gate_up: B rows read k times; down: B·k
  // rows), one float past a 16-byte boundary, grouped both ways, and v3's output on 8-row tiles.
  struct Projection {
    int64_t x_div = 1, x_rows = 0, slots = 0;
    Grouped gr;
    const float* xp = nullptr;
    std::vector<float> v3;
  };
  void prepare_projection(int proj, const Set& st, const std::vector<int32_t>& ids, int64_t B,
                          int64_t k, int64_t E, Projection& pr) {
    pr.x_div = proj == 0 ? k : 1;
    pr.x_rows = proj == 0 ? B : B * k;
    pr.slots = B * k;
    const std::vector<float> x = randn(pr.x_rows, st.K, proj == 0 ? 1.f : 0.3f);
    std::vector<float> xs(x.size() + 1);  // the split kernel reads any alignment
    std::copy(x.begin(), x.end(), xs.begin() + 1);
    group_both(ids, xs, E, pr.gr);
    if (HasFatalFailure()) return;
    pr.xp = pr.gr.xp + 1;
    pr.v3 = run(true, st, pr.xp, pr.x_rows, pr.x_div, pr.slots, E, pr.gr.p8, kernels::kExpertsMmaV3,
                kernels::kExpertsMmaTileRows);
  }

  // out equal to v3 on every element (memcmp; N outputs per slot, for the message).
  void expect_v3_bits(const std::vector<float>& v3, const std::vector<float>& out, int64_t N,
                      const std::string& what) {
    int64_t first = -1, n_diff = 0;
    for (size_t i = 0; i < v3.size(); ++i)
      if (std::memcmp(&v3[i], &out[i], 4) != 0) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++n_diff;
      }
    EXPECT_EQ(first, -1) << what << ": " << n_diff << " elements differ from v3, first at slot "
                         << first / N << " row " << first % N << ": "
                         << (first >= 0 ? out[first] : 0.f) << " vs "
                         << (first >= 0 ? v3[first] : 0.f);
  }

  // zero_bad_ids with `variant` on 8-row tiles: the bad-id slot's rows +0 (over the NaN fill),
  // every other element v3's bits; exactly one bad id in `ids`.
  void expect_zero_bad_ids(int variant, const Set& st, const float* xp, int64_t x_rows,
                           int64_t x_div, int64_t E, const Grouped& gr,
                           const std::vector<int32_t>& ids, const std::vector<float>& v3) {
    const int64_t slots = static_cast<int64_t>(ids.size());
    DeviceBuffer out = dev_alloc(slots * st.N * 4);
    DeviceBuffer ws = dev_alloc(kernels::experts_mma_workspace_bytes(x_rows, st.K));
    ASSERT_EQ(testing::memset_sync(out.data(), 0xFF, slots * st.N * 4), cudaSuccess);
    const auto* tab = static_cast<const void* const*>(st.tables.data());
    kernels::experts_mma(xp, x_rows, x_div, gr.p8, gr.p8 + slots, gr.p8 + slots + E + 1, slots, E,
                         tab, tab + E, st.N, st.K, ws.data(), static_cast<float*>(out.data()),
                         nullptr, variant, kernels::kExpertsMmaTileRows,
                         static_cast<const int32_t*>(gr.dids.data()));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> h(slots * st.N);
    ASSERT_EQ(cudaMemcpy(h.data(), out.data(), h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    int64_t wrong = 0, bad_rows = 0;
    for (int64_t sl = 0; sl < slots; ++sl) {
      const bool bad = ids[sl] < 0 || ids[sl] >= E;
      bad_rows += bad;
      for (int64_t n = 0; n < st.N; ++n) {
        const size_t i = static_cast<size_t>(sl * st.N + n);
        uint32_t u;
        std::memcpy(&u, &h[i], 4);
        wrong += bad ? u != 0u : std::memcmp(&h[i], &v3[i], 4) != 0;
      }
    }
    EXPECT_EQ(bad_rows, 1);
    EXPECT_EQ(wrong, 0) << "zero_bad_ids, variant " << variant
                        << ": elements not +0 (bad-id rows) or not v3's";
  }

  // v3 wrote every grouped slot (finite) and left the bad-id slot's NaN fill.
  void expect_v3_skips_bad_ids(const std::vector<float>& v3, const std::vector<int32_t>& ids,
                               int64_t N, int64_t E) {
    int64_t unwritten = 0, bad_written = 0;
    for (size_t sl = 0; sl < ids.size(); ++sl) {
      const bool bad = ids[sl] < 0 || ids[sl] >= E;
      for (int64_t n = 0; n < N; ++n) {
        const bool fin = std::isfinite(v3[sl * N + n]);
        unwritten += !bad && !fin;
        bad_written += bad && fin;
      }
    }
    EXPECT_EQ(unwritten, 0);
    EXPECT_EQ(bad_written, 0);
  }

  unsigned seed_ = 0;
  std::mt19937 rng_;
  uint64_t sm_ = 0;
};

TEST_F(CudaExpertsMma, MatchesDoubleAndGemvAtV4ShapesForDecodeBatches) {
  const int64_t E = 256, k = 6, H = 4096, I = 2048;
  Set gate_up, down;
  gate_up.P = down.P = 40;
  gate_up.N = 2 * I, gate_up.K = H;
  down.N = H, down.K = I;
  make_set(gate_up, E);
  make_set(down, E);
  for (int64_t B : {1, 4, 16, 32}) {
    std::vector<int32_t> ids = route(B, k, E, B >= 4);
    ids[(B * k) / 2] = B % 2 ? -1 : static_cast<int32_t>(E + 3);  // one bad id
    const std::string tag = "B=" + std::to_string(B);
    check("gate_up " + tag, gate_up, randn(B, H, 1.f), k, ids, E, 0);
    check("down " + tag, down, randn(B * k, I, 0.3f), 1, ids, E, B == 4 ? 1 : 0);
  }
}

// Session 8: v3 (experts_mma_v3.cuh, variants 4 and 5) at V4 shapes for 1, 2, 8, 16 and 64
// tokens (6 … 384 slots; expert 5 in every token from 2 on, so one expert has up to 64 rows:
// several 8-row tiles; one bad id), each projection: against a double reference (worst error /
// Σ|x·w| at most max(2 × session 7's, 16u)), against session 7's 12-warp kernel (within 1e-5 of
// the row max, then bit for bit: the same operations), every grouped output written and the
// bad-id rows untouched. Session 10: the same for experts_mma_x.cuh's variants 6..8 (16-, 32- and
// 64-row warp items) on both groupings, and for a small layout too (8 experts, top-2, gate_up
// N = 96: not a multiple of 64, so variant 8 falls back to 7; K = 512; down 512 × 512).
TEST_F(CudaExpertsMma, V3AndXVariantsMatchDoubleAndSession7) {
  struct Shape {
    int64_t E, k, gate_n, gate_k, down_n, down_k;
    std::vector<int64_t> batches;
  };
  const Shape shapes[] = {{256, 6, 4096, 4096, 4096, 2048, {1, 2, 8, 16, 64}},
                          {8, 2, 96, 512, 512, 512, {1, 4, 9}}};
  for (const Shape& sh : shapes) {
    const int64_t E = sh.E, k = sh.k;
    Set gate_up, down;
    gate_up.P = down.P = std::min<int64_t>(E, 40);
    gate_up.N = sh.gate_n, gate_up.K = sh.gate_k;
    down.N = sh.down_n, down.K = sh.down_k;
    make_set(gate_up, E);
    make_set(down, E);
    if (HasFatalFailure()) return;
    for (int64_t B : sh.batches) {
      std::vector<int32_t> ids = route(B, k, E, B >= 2);
      ids[(B * k) / 2 + (B > 1 ? 1 : 0)] = B % 2 ? static_cast<int32_t>(E + 1) : -1;  // one bad id
      for (int proj = 0; proj < 2; ++proj) {
        const Set& st = proj == 0 ? gate_up : down;
        const int64_t x_div = proj == 0 ? k : 1;
        const std::vector<float> x = proj == 0 ? randn(B, st.K, 1.f) : randn(B * k, st.K, 0.3f);
        const std::string what = std::string(proj == 0 ? "gate_up" : "down") +
                                 " E=" + std::to_string(E) + " B=" + std::to_string(B);
        SCOPED_TRACE(what + ", seed " + std::to_string(seed_));
        const int64_t slots = B * k, x_rows = static_cast<int64_t>(x.size()) / st.K;
        Grouped gr;
        group_both(ids, x, E, gr);
        if (HasFatalFailure()) return;
        const float* xp = gr.xp;
        const int32_t *p1 = gr.p1, *p8 = gr.p8;
        const int t8 = kernels::kExpertsMmaTileRows;
        const std::vector<float> s7 =
            run(true, st, xp, x_rows, x_div, slots, E, p8, kernels::kExpertsMmaV2Regs, t8);
        struct Run {
          const char* name;
          std::vector<float> out;
        };
        const Run runs[] = {
            {"v3 12w, 8-row tiles",
             run(true, st, xp, x_rows, x_div, slots, E, p8, kernels::kExpertsMmaV3, t8)},
            {"v3 16w, 8-row tiles",
             run(true, st, xp, x_rows, x_div, slots, E, p8, kernels::kExpertsMmaV3w16, t8)},
            {"v3 12w, one tile per expert",
             run(true, st, xp, x_rows, x_div, slots, E, p1, kernels::kExpertsMmaV3)},
            {"x 16-row, 8-row tiles",
             run(true, st, xp, x_rows, x_div, slots, E, p8, kernels::kExpertsMmaX16, t8)},
            {"x 16-row, one tile per expert",
             run(true, st, xp, x_rows, x_div, slots, E, p1, kernels::kExpertsMmaX16)},
            {"x 32-row, 8-row tiles",
             run(true, st, xp, x_rows, x_div, slots, E, p8, kernels::kExpertsMmaX32, t8)},
            {"x 32-row, one tile per expert",
             run(true, st, xp, x_rows, x_div, slots, E, p1, kernels::kExpertsMmaX32)},
            {"x 64-row, 8-row tiles",
             run(true, st, xp, x_rows, x_div, slots, E, p8, kernels::kExpertsMmaX64, t8)},
            {"x 64-row, one tile per expert",
             run(true, st, xp, x_rows, x_div, slots, E, p1, kernels::kExpertsMmaX64)},
        };
        const uint32_t kFill = 0xFFFFFFFFu;
        auto bits = [](float f) {
          uint32_t u;
          std::memcpy(&u, &f, 4);
          return u;
        };
        for (const Run& r : runs) {
          SCOPED_TRACE(r.name);
          int64_t n_bad_written = 0, n_unwritten = 0, n_far = 0, n_bits = 0;
          for (int64_t sl = 0; sl < slots; ++sl) {
            const bool bad = ids[sl] < 0 || ids[sl] >= E;
            double row_max = 0;
            for (int64_t n = 0; n < st.N; ++n)
              row_max = std::max(row_max, std::fabs(double(s7[sl * st.N + n])));
            for (int64_t n = 0; n < st.N; ++n) {
              const float a = r.out[sl * st.N + n], b = s7[sl * st.N + n];
              if (bad) {
                n_bad_written += bits(a) != kFill;
                continue;
              }
              if (bits(a) == kFill) {
                ++n_unwritten;
                continue;
              }
              if (!(std::fabs(double(a) - double(b)) <= 1e-5 * row_max)) {
                if (n_far < 3)
                  ADD_FAILURE() << "slot " << sl << " (expert " << ids[sl] << ") row " << n
                                << ": v3 " << a << " vs s7 " << b << " (row max " << row_max << ")";
                ++n_far;
              }
              n_bits += bits(a) != bits(b);
            }
          }
          EXPECT_EQ(n_bad_written, 0) << "outputs of a bad-id slot were written";
          EXPECT_EQ(n_unwritten, 0) << "outputs of grouped slots were not written";
          EXPECT_EQ(n_far, 0) << "outputs off session 7's by more than 1e-5 of the row max";
          EXPECT_EQ(n_bits, 0)
              << "outputs not bitwise equal to session 7's (same operations expected)";
          // Double reference on sampled outputs.
          double err_v3 = 0, err_s7 = 0;
          for (int64_t sl = 0; sl < slots; ++sl) {
            if (ids[sl] < 0 || ids[sl] >= E) continue;
            const int64_t pset = ids[sl] % st.P;
            const float* xr = x.data() + (sl / x_div) * st.K;
            for (int64_t n = (sl * 5) % 37; n < st.N; n += st.N / 32) {
              double sum = 0, mag = 0;
              for (int64_t kk = 0; kk < st.K; ++kk) {
                const double pr = double(xr[kk]) * deq(st, pset, n, kk);
                sum += pr;
                mag += std::fabs(pr);
              }
              if (mag == 0) continue;
              const double e3 = std::fabs(double(r.out[sl * st.N + n]) - sum) / mag;
              err_v3 = std::isnan(e3) ? INFINITY : std::max(err_v3, e3);
              err_s7 = std::max(err_s7, std::fabs(double(s7[sl * st.N + n]) - sum) / mag);
            }
          }
          std::printf("%s %s: worst |err| / sum|x*w|: v3 %.3g, s7 %.3g\n", what.c_str(), r.name,
                      err_v3, err_s7);
          EXPECT_LE(err_v3, std::max(2 * err_s7, 16 * kU))
              << "v3 error vs double above max(2 x s7's, 16u)";
        }
      }
    }
  }
}

// Session 12: the xb variants (experts_mma_xb.cuh, 9..23: 16-, 32- or 64-row items; B through
// the warp's ring or from global memory; passes of 8, 2 or 1 tokens; rings of 2-4 stages; 8, 12
// or 16 warps per SM), directly and as experts_mma_pick_xb picks them, and the picks of
// experts_mma_pick_s12 (auto, x1..x3) on the grouping the backend uses, equal to v3 (variant 4 on
// 8-row tiles) on every output element (memcmp, the NaN fill of unwritten elements included) — at
// V4 shapes for 1, 2, 8, 16 and 64 tokens (6 … 384 slots; expert 5 in every token from 2 tokens
// on: passes of 3–8 tokens, the 2- and 4-n-tile paths) and small layouts (8 experts top-2, gate_up
// N = 96 (not a multiple of 64), K = 512; 4 experts top-3 with gate_up K = 9216 / down 3072 ×
// 4608: stage counts that are not powers of two), on both groupings (one tile per expert and
// 8-row tiles), with one bad id per batch and unaligned x. And experts_mma's zero_bad_ids: the
// bad-id slot's rows written as +0, every other element v3's.
TEST_F(CudaExpertsMma, Session12VariantsEqualV3BitForBit) {
  const VariantShape shapes[] = {{256, 6, 4096, 4096, 4096, 2048, {1, 2, 8, 16, 64}},
                                 {8, 2, 96, 512, 512, 512, {1, 4, 9}},
                                 {4, 3, 64, 9216, 3072, 4608, {1, 3, 10}}};
  int64_t compared = 0;
  for (const VariantShape& sh : shapes) {
    const int64_t E = sh.E, k = sh.k;
    Set gate_up, down;
    make_variant_sets(sh, gate_up, down);
    if (HasFatalFailure()) return;
    for (int64_t B : sh.batches) {
      std::vector<int32_t> ids = route(B, k, E, B >= 2 && E > 5);
      ids[(B * k) / 2 + (B > 1 ? 1 : 0)] = B % 2 ? static_cast<int32_t>(E + 2) : -1;  // one bad id
      for (int proj = 0; proj < 2; ++proj) {
        const Set& st = proj == 0 ? gate_up : down;
        SCOPED_TRACE(std::string(proj == 0 ? "gate_up" : "down") + " E=" + std::to_string(E) +
                     " B=" + std::to_string(B) + ", seed " + std::to_string(seed_));
        Projection pj;
        prepare_projection(proj, st, ids, B, k, E, pj);
        if (HasFatalFailure()) return;
        const int64_t x_div = pj.x_div, x_rows = pj.x_rows, slots = pj.slots;
        const Grouped& gr = pj.gr;
        const float* xp = pj.xp;
        const int t8 = kernels::kExpertsMmaTileRows;
        const std::vector<float>& v3 = pj.v3;
        for (int xb : {kernels::kExpertsMmaXB3,
                       kernels::kExpertsMmaXB2,
                       kernels::kExpertsMmaXB2L2,
                       kernels::kExpertsMmaXB2T16,
                       kernels::kExpertsMmaXB2T16L2,
                       kernels::kExpertsMmaXB3T,
                       kernels::kExpertsMmaXB32w12,
                       kernels::kExpertsMmaXB32w8,
                       kernels::kExpertsMmaXB64,
                       kernels::kExpertsMmaXG16s4,
                       kernels::kExpertsMmaXG16s3,
                       kernels::kExpertsMmaXB32w16,
                       kernels::kExpertsMmaXB16s3t1,
                       kernels::kExpertsMmaXB16s4t1L2,
                       kernels::kExpertsMmaXB16s4t1,
                       kernels::kExpertsMmaXB32C,
                       -1,
                       -2,
                       -3,
                       -4,
                       -11}) {
          // xb < 0: the pick of experts_mma_pick_s12 mode −xb − 1 (auto, x1, x2, x3; session 15:
          // 10 = x0), on its grouping. 33 (session 15): pass-balanced warp ranges — the crowded
          // expert 5 (every token from 2 tokens on: several 8-row tiles of 4 passes) is the case.
          const int picked = xb < 0 ? kernels::experts_mma_pick_s12(slots, st.K, -xb - 1)
                                    : kernels::experts_mma_pick_xb(slots, xb);
          if (xb > 0)
            EXPECT_EQ(picked, slots <= 128 ? xb : kernels::kExpertsMmaV1)
                << "experts_mma_pick_xb(" << slots << ")";
          else if (slots <= 128)
            EXPECT_GE(picked, kernels::kExpertsMmaX16)
                << "experts_mma_pick_s12(" << slots << ", mode " << -xb - 1 << ") = " << picked;
          else  // session 15: auto keeps 33 up to kExpertsMmaDecodeMaxSlots, the rest session 6's
            EXPECT_EQ(picked, xb == -1 && slots <= kernels::kExpertsMmaDecodeMaxSlots
                                  ? kernels::kExpertsMmaXB32C
                                  : kernels::kExpertsMmaV1)
                << "experts_mma_pick_s12(" << slots << ", mode " << -xb - 1 << ")";
          for (int grouping = xb < 0 ? 2 : 0; grouping < 3; ++grouping) {
            // 0: 8-row tiles, 1: one tile per expert, 2: the pick on the grouping the backend uses.
            const bool tiles8 =
                grouping == 0 || (grouping == 2 && picked != kernels::kExpertsMmaV1);
            const int v = grouping == 2 ? picked : xb;
            const std::vector<float> out =
                tiles8 ? run(true, st, xp, x_rows, x_div, slots, E, gr.p8, v, t8)
                       : run(true, st, xp, x_rows, x_div, slots, E, gr.p1, v);
            expect_v3_bits(
                v3, out, st.N,
                "variant " + std::to_string(v) + " grouping " + std::to_string(grouping));
            ++compared;
          }
        }
        // zero_bad_ids (the backend's down projection since session 12): the bad-id slot's rows
        // +0 (over the NaN fill), every other element v3's bits; with the default variant and xb.
        for (int v : {0, kernels::kExpertsMmaXB2T16}) {
          expect_zero_bad_ids(v, st, xp, x_rows, x_div, E, gr, ids, v3);
          if (HasFatalFailure()) return;
        }
        // v3 wrote every grouped slot (finite) and left the bad-id slot's NaN fill.
        expect_v3_skips_bad_ids(v3, ids, st.N, E);
      }
    }
  }
  std::printf("session 12 variants: %lld runs memcmp-compared with v3\n",
              static_cast<long long>(compared));
}

// Session 13 (helper experts1, batch 1..8): the new variants (experts_mma.h, 24..), directly on
// both groupings (8-row tiles and one tile per expert), and experts_mma_pick_s12's modes 5..9
// ("x5".."x9") on the grouping the backend uses, equal to v3 (variant 4 on 8-row tiles) on every
// output element (memcmp, the NaN fill of unwritten elements included) — at V4 shapes for 1, 2, 6
// and 8 tokens (6 … 48 slots: the modes' own variants up to 8 slots, auto's above) and small
// layouts (8 experts top-2 with gate_up N = 96, K = 512; 4 experts top-3 with K = 9216 / 4608),
// with random routing (expert 5 in every token from 2 tokens on: several tokens on one expert, up
// to 8 rows of a tile), at 1 token one expert taken twice by the token (two slots of one expert),
// one bad id per batch (−1 or ≥ E, left unwritten) and unaligned x. The modes pick their variant
// at ≤ 8 slots and auto's (mode 0) above (modes 5 and 9: 31 from 9 to 128 slots). And zero_bad_ids
// with each new variant: the bad-id slot's rows +0, every other element v3's.
TEST_F(CudaExpertsMma, Session13VariantsEqualV3BitForBit) {
  const VariantShape shapes[] = {{256, 6, 4096, 4096, 4096, 2048, {1, 2, 6, 8}},
                                 {8, 2, 96, 512, 512, 512, {1, 3, 4}},
                                 {4, 3, 64, 9216, 3072, 4608, {1, 2}}};
  const int variants[] = {
      kernels::kExpertsMmaXI3,  kernels::kExpertsMmaXW3,   kernels::kExpertsMmaXW2,
      kernels::kExpertsMmaXW3E, kernels::kExpertsMmaXE3,   kernels::kExpertsMmaXC3,
      kernels::kExpertsMmaXIC3, kernels::kExpertsMmaXB32Q, kernels::kExpertsMmaXC2};
  // mode → the variant it runs at ≤ 8 slots, and from 9 to 128 slots (0: auto's, mode 0's pick).
  struct Mode {
    int mode, small, mid;
  };
  const Mode modes[] = {{5, kernels::kExpertsMmaXB32Q, kernels::kExpertsMmaXB32Q},
                        {6, kernels::kExpertsMmaXB32Q, 0},
                        {7, kernels::kExpertsMmaXC3, 0},
                        {8, kernels::kExpertsMmaXC2, 0},
                        {9, kernels::kExpertsMmaXC3, kernels::kExpertsMmaXB32Q}};
  int64_t compared = 0;
  for (const VariantShape& sh : shapes) {
    const int64_t E = sh.E, k = sh.k;
    Set gate_up, down;
    make_variant_sets(sh, gate_up, down);
    if (HasFatalFailure()) return;
    for (int64_t B : sh.batches) {
      std::vector<int32_t> ids = route(B, k, E, B >= 2 && E > 5);
      if (B == 1)
        ids[k - 1] = ids[0];  // one expert twice in the token (k ≥ 3: slot 1 is the bad one)
      ids[B == 1 ? 1 : (B * k) / 2] = B % 2 ? static_cast<int32_t>(E + 2) : -1;  // one bad id
      for (int proj = 0; proj < 2; ++proj) {
        const Set& st = proj == 0 ? gate_up : down;
        SCOPED_TRACE(std::string(proj == 0 ? "gate_up" : "down") + " E=" + std::to_string(E) +
                     " B=" + std::to_string(B) + ", seed " + std::to_string(seed_));
        Projection pj;
        prepare_projection(proj, st, ids, B, k, E, pj);
        if (HasFatalFailure()) return;
        const int64_t x_div = pj.x_div, x_rows = pj.x_rows, slots = pj.slots;
        const Grouped& gr = pj.gr;
        const float* xp = pj.xp;
        const int t8 = kernels::kExpertsMmaTileRows;
        const std::vector<float>& v3 = pj.v3;
        auto expect_v3 = [&](const std::vector<float>& out, const std::string& what) {
          expect_v3_bits(v3, out, st.N, what);
          ++compared;
        };
        for (int v : variants) {
          expect_v3(run(true, st, xp, x_rows, x_div, slots, E, gr.p8, v, t8),
                    "variant " + std::to_string(v) + " on 8-row tiles");
          expect_v3(run(true, st, xp, x_rows, x_div, slots, E, gr.p1, v),
                    "variant " + std::to_string(v) + " on one tile per expert");
        }
        for (const Mode& md : modes) {
          const int mode = md.mode;
          const int picked = kernels::experts_mma_pick_s12(slots, st.K, mode);
          const int auto_pick = kernels::experts_mma_pick_s12(slots, st.K, 0);
          EXPECT_EQ(picked, slots <= 8                    ? md.small
                            : slots <= 128 && md.mid != 0 ? md.mid
                                                          : auto_pick)
              << "experts_mma_pick_s12(" << slots << ", mode " << mode << ")";
          const bool tiles8 = picked != kernels::kExpertsMmaV1;
          expect_v3(tiles8 ? run(true, st, xp, x_rows, x_div, slots, E, gr.p8, picked, t8)
                           : run(true, st, xp, x_rows, x_div, slots, E, gr.p1, picked),
                    "mode " + std::to_string(mode) + " (variant " + std::to_string(picked) + ")");
        }
        // zero_bad_ids: the bad-id slot's rows +0 (over the NaN fill), every other element v3's.
        for (int v : variants) {
          expect_zero_bad_ids(v, st, xp, x_rows, x_div, E, gr, ids, v3);
          if (HasFatalFailure()) return;
        }
        // v3 wrote every grouped slot (finite) and left the bad-id slot's NaN fill.
        expect_v3_skips_bad_ids(v3, ids, st.N, E);
      }
    }
  }
  std::printf("session 13 variants: %lld runs memcmp-compared with v3\n",
              static_cast<long long>(compared));
}

// 128 slots: 16 tokens × top-8, expert 5 in every token (16 rows: two passes of 8 tokens, the
// 4-tile path), expert 9 in half of them, the rest random; one bad id; rows of 2^-60 … 2^60 and
// a zero row.
TEST_F(CudaExpertsMma, CrowdedExpertsWideRowMagnitudesAndUnalignedX) {
  const int64_t E = 256, k = 8, B = 16, H = 4096, I = 2048;
  Set gate_up, down;
  gate_up.P = down.P = 12;
  gate_up.N = 2 * I, gate_up.K = H;
  down.N = H, down.K = I;
  make_set(gate_up, E);
  make_set(down, E);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < B; ++t) {
    std::vector<int32_t> mine{5};
    if (t % 2 == 0) mine.push_back(9);
    while (static_cast<int64_t>(mine.size()) < k) {
      const int32_t e = static_cast<int32_t>(rng_() % E);
      if (std::find(mine.begin(), mine.end(), e) == mine.end()) mine.push_back(e);
    }
    ids.insert(ids.end(), mine.begin(), mine.end());
  }
  ids[37] = static_cast<int32_t>(E);  // bad
  std::vector<float> xg = randn(B, H, 1.f);
  for (int64_t t = 0; t < B; ++t) {
    const float f = std::ldexp(1.f, static_cast<int>(t * 8) - 60);  // 2^-60 … 2^60
    for (int64_t i = 0; i < H; ++i) xg[t * H + i] *= f;
  }
  std::fill(xg.begin() + 3 * H, xg.begin() + 4 * H, 0.f);  // token 3: a zero row
  check("gate_up crowded", gate_up, xg, k, ids, E, 1);
  std::vector<float> xd = randn(B * k, I, 0.3f);
  for (int64_t i = 0; i < I; ++i) xd[7 * I + i] *= 1e-30f;
  check("down crowded", down, xd, 1, ids, E, 0);
}

// Session 15: the default mode runs variant 33 (pass-balanced warp ranges) on decode steps of up
// to kExpertsMmaDecodeMaxSlots slots: at V4 shapes for 96, 192 and 256 tokens (576 … 1,536 slots,
// expert 5 in every token: tiles of 8 tokens, 4 passes each), both projections, on 8-row tiles,
// equal to v3 on every element (memcmp), as auto picks it, with a bad id left unwritten.
TEST_F(CudaExpertsMma, PassBalancedRangesAtLargeDecodeBatches) {
  const VariantShape sh{256, 6, 4096, 4096, 4096, 2048, {96, 192, 256}};
  Set gate_up, down;
  make_variant_sets(sh, gate_up, down);
  if (HasFatalFailure()) return;
  int64_t compared = 0;
  for (int64_t B : sh.batches) {
    std::vector<int32_t> ids = route(B, sh.k, sh.E, true);
    ids[(B * sh.k) / 2 + 1] = static_cast<int32_t>(sh.E + 2);  // one bad id
    for (int proj = 0; proj < 2; ++proj) {
      const Set& st = proj == 0 ? gate_up : down;
      SCOPED_TRACE(std::string(proj == 0 ? "gate_up" : "down") + " B=" + std::to_string(B) +
                   ", seed " + std::to_string(seed_));
      Projection pj;
      prepare_projection(proj, st, ids, B, sh.k, sh.E, pj);
      if (HasFatalFailure()) return;
      const int picked = kernels::experts_mma_pick_s12(pj.slots, st.K, 0);
      EXPECT_EQ(picked, pj.slots <= kernels::kExpertsMmaDecodeMaxSlots ? kernels::kExpertsMmaXB32C
                                                                       : kernels::kExpertsMmaV1);
      expect_v3_bits(pj.v3,
                     run(true, st, pj.xp, pj.x_rows, pj.x_div, pj.slots, sh.E, pj.gr.p8,
                         kernels::kExpertsMmaXB32C, kernels::kExpertsMmaTileRows),
                     st.N, "variant 33");
      expect_v3_skips_bad_ids(pj.v3, ids, st.N, sh.E);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6);
}

// --batch-invariant (session 7): a probe token's slot outputs of each projection are the same
// bits in batches of 1, 16, 64 and 2048 tokens, at other positions, with its experts in other
// orders, its first expert crowded by every other token, and with every kernel variant.
TEST_F(CudaExpertsMma, SlotBitsDoNotDependOnTheBatch) {
  const int64_t E = 256, k = 6, H = 4096, I = 2048;
  Set gate_up, down;
  gate_up.P = down.P = 24;
  gate_up.N = 2 * I, gate_up.K = H;
  down.N = H, down.K = I;
  make_set(gate_up, E);
  make_set(down, E);
  if (HasFatalFailure()) return;
  std::vector<int32_t> probe;
  while (static_cast<int64_t>(probe.size()) < k) {
    const int32_t e = static_cast<int32_t>(next64() % E);
    if (std::find(probe.begin(), probe.end(), e) == probe.end()) probe.push_back(e);
  }
  const std::vector<float> px = uniform(H, 2.f);      // the probe token's row
  const std::vector<float> pact = uniform(k * I, 0.5f);  // its SwiGLU rows, one per expert
  struct Config {
    int64_t B, pos;
    std::vector<int> order;
    int variant, tile_rows;  // tile_rows 0: one tile per expert (≥ slots)
  };
  const int t8 = kernels::kExpertsMmaTileRows;
  const std::vector<int> ident{0, 1, 2, 3, 4, 5}, rev{5, 4, 3, 2, 1, 0}, rot{2, 3, 4, 5, 0, 1};
  const std::vector<Config> configs = {
      {1, 0, ident, 0, 0},
      {1, 0, rev, 0, t8},
      {16, 5, ident, 0, t8},
      {16, 15, rot, kernels::kExpertsMmaV2Regs, 0},
      {64, 63, rot, 0, t8},
      {64, 0, rev, kernels::kExpertsMmaV1, 0},
      {2048, 1000, rev, 0, t8},
      {2048, 0, ident, kernels::kExpertsMmaV1, 0},
      {2048, 2047, rot, kernels::kExpertsMmaV2Regs, t8},
      // session 8: v3 (both builds, both groupings)
      {1, 0, rot, kernels::kExpertsMmaV3, t8},
      {16, 3, ident, kernels::kExpertsMmaV3, t8},
      {64, 31, rev, kernels::kExpertsMmaV3w16, t8},
      {2048, 7, rot, kernels::kExpertsMmaV3, t8},
      {2048, 2047, ident, kernels::kExpertsMmaV3w16, 0},
      // session 10: the x variants (experts_mma_x.cuh)
      {1, 0, ident, kernels::kExpertsMmaX16, t8},
      {1, 0, rev, kernels::kExpertsMmaX32, t8},
      {16, 3, rot, kernels::kExpertsMmaX32, t8},
      {64, 31, rev, kernels::kExpertsMmaX16, 0},
      {2048, 7, rot, kernels::kExpertsMmaX64, t8},
      {2048, 2047, ident, kernels::kExpertsMmaX32, 0},
      // session 12: the xb variants (experts_mma_xb.cuh)
      {1, 0, rot, kernels::kExpertsMmaXB3, t8},
      {16, 3, rev, kernels::kExpertsMmaXB2, t8},
      {64, 31, ident, kernels::kExpertsMmaXB2L2, 0},
      {2048, 7, rev, kernels::kExpertsMmaXB3, t8},
      {2048, 2047, rot, kernels::kExpertsMmaXB2, 0},
      {1, 0, rev, kernels::kExpertsMmaXB2T16, t8},
      {64, 0, rot, kernels::kExpertsMmaXB3T, 0},
      {2048, 1000, ident, kernels::kExpertsMmaXB2T16L2, t8},
      {2048, 3, rev, kernels::kExpertsMmaXB2T16, 0},
      {1, 0, ident, kernels::kExpertsMmaXB32w12, t8},
      {16, 3, rot, kernels::kExpertsMmaXB32w8, 0},
      {2048, 7, rev, kernels::kExpertsMmaXB32w12, 0},
      {2048, 2047, ident, kernels::kExpertsMmaXB32w8, t8},
      {1, 0, rot, kernels::kExpertsMmaXB64, t8},
      {16, 3, ident, kernels::kExpertsMmaXG16s4, t8},
      {64, 31, rot, kernels::kExpertsMmaXG16s3, 0},
      {2048, 7, ident, kernels::kExpertsMmaXB64, 0},
      {2048, 1000, rot, kernels::kExpertsMmaXG16s4, 0},
      {16, 3, rev, kernels::kExpertsMmaXB32w16, t8},
      {2048, 2047, rot, kernels::kExpertsMmaXB32w16, 0},
      {64, 31, ident, kernels::kExpertsMmaXB16s3t1, t8},
      {1, 0, rev, kernels::kExpertsMmaXB16s4t1L2, 0},
      {2048, 7, rot, kernels::kExpertsMmaXB16s4t1, t8},
      // session 13: more independent work per stage (variant 6's kernel)
      {1, 0, rot, kernels::kExpertsMmaXI3, t8},
      {1, 0, ident, kernels::kExpertsMmaXW3, 0},
      {16, 3, rev, kernels::kExpertsMmaXW2, t8},
      {2048, 7, ident, kernels::kExpertsMmaXW3, 0},
      {64, 31, rot, kernels::kExpertsMmaXW2, 0},
      {1, 0, rev, kernels::kExpertsMmaXW3E, t8},
      {2048, 2047, rot, kernels::kExpertsMmaXW3E, t8},
      {1, 0, ident, kernels::kExpertsMmaXE3, t8},
      {16, 3, rot, kernels::kExpertsMmaXC3, 0},
      {1, 0, rev, kernels::kExpertsMmaXIC3, 0},
      {64, 31, ident, kernels::kExpertsMmaXC3, t8},
      {1, 0, rot, kernels::kExpertsMmaXB32Q, t8},
      {16, 3, rev, kernels::kExpertsMmaXB32Q, 0},
      {2048, 1000, ident, kernels::kExpertsMmaXB32Q, t8},
      {1, 0, rot, kernels::kExpertsMmaXC2, 0},
      {64, 0, rev, kernels::kExpertsMmaXC2, t8},
  };
  std::vector<float> ref_gu, ref_dn;  // [k][N] in probe order, from configs[0]
  for (const Config& c : configs) {
    SCOPED_TRACE("B=" + std::to_string(c.B) + " pos " + std::to_string(c.pos) + " variant " +
                 std::to_string(c.variant) + " tile rows " + std::to_string(c.tile_rows) + ", seed " +
                 std::to_string(seed_));
    const std::vector<int32_t> ids = probe_routing(c.B, k, E, probe, c.order, c.pos);
    std::vector<int64_t> want(k);  // slot of probe expert j
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < k; ++i)
        if (c.order[i] == j) want[j] = c.pos * k + i;
    std::vector<float> xg = uniform(c.B * H, 2.f);
    std::copy(px.begin(), px.end(), xg.begin() + c.pos * H);
    std::vector<float> xd = uniform(c.B * k * I, 0.5f);
    for (int64_t j = 0; j < k; ++j) std::copy(pact.begin() + j * I, pact.begin() + (j + 1) * I, xd.begin() + want[j] * I);
    const std::vector<float> gu = probe_rows(gate_up, xg, k, ids, E, want, c.variant, c.tile_rows);
    const std::vector<float> dn = probe_rows(down, xd, 1, ids, E, want, c.variant, c.tile_rows);
    if (ref_gu.empty()) {
      ref_gu = gu;
      ref_dn = dn;
      for (float v : gu) ASSERT_TRUE(std::isfinite(v)) << "gate_up output not written / not finite";
      for (float v : dn) ASSERT_TRUE(std::isfinite(v)) << "down output not written / not finite";
      continue;
    }
    auto first_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
      for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], 4) != 0) return static_cast<int64_t>(i);
      return int64_t{-1};
    };
    const int64_t dg = first_diff(gu, ref_gu), dd = first_diff(dn, ref_dn);
    EXPECT_EQ(dg, -1) << "gate_up: expert " << probe[dg / gate_up.N] << " row " << dg % gate_up.N << ": "
                      << gu[dg] << " vs alone " << ref_gu[dg];
    EXPECT_EQ(dd, -1) << "down: expert " << probe[dd / down.N] << " row " << dd % down.N << ": " << dn[dd]
                      << " vs alone " << ref_dn[dd];
  }
}

// The same through CudaBackend::moe_experts with batch_invariant (DEEPINFER_BI_EXPERTS=mma, the
// default: the tensor-core kernel for every slot count): the probe token's output row is the
// same bits at 1, 16, 64 and 2048 tokens and at any position (its experts and weights in one
// order: combine_slots sums a token's slots in its own order). With the defaults it also equals
// the plain backend's row at 1 token (both run experts_mma there; the GEMV's bits differ), which
// shows the batch-invariant mode took the tensor-core kernel.
TEST_F(CudaExpertsMma, BackendBatchInvariantExpertsKeepATokensBits) {
  const int64_t E = 256, k = 6, H = 4096, I = 2048;
  Set gate_up, down;
  gate_up.P = down.P = 16;
  gate_up.N = 2 * I, gate_up.K = H;
  down.N = H, down.K = I;
  make_set(gate_up, E);
  make_set(down, E);
  if (HasFatalFailure()) return;
  CudaBackendOptions bo;
  bo.batch_invariant = true;
  auto b = CudaBackend::create(bo);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto g = CudaBackend::create();
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  std::unique_ptr<CudaBackend> bi = std::move(b).value(), plain = std::move(g).value();
  backend::ExpertSet set;
  for (int64_t e = 0; e < E; ++e)
    for (const Set* st : {&gate_up, &down}) {
      backend::Weight w;
      w.w = backend::Tensor::borrow(static_cast<const uint8_t*>(st->dw.data()) + (e % st->P) * st->wbytes(),
                                    DType::kF4E2M1, {st->N, st->K});
      w.scale = backend::Tensor::borrow(static_cast<const uint8_t*>(st->ds.data()) + (e % st->P) * st->sbytes(),
                                        DType::kF8E8M0, {st->N, st->K / 32});
      w.block_rows = 1;
      w.block_cols = 32;
      (st == &gate_up ? set.gate_up : set.down).push_back(w);
    }
  backend::ExpertSet plain_set = set;
  ASSERT_TRUE(bi->prepare_experts(set).ok());
  ASSERT_TRUE(plain->prepare_experts(plain_set).ok());
  ASSERT_NE(set.prepared, nullptr);
  std::vector<int32_t> probe;
  while (static_cast<int64_t>(probe.size()) < k) {
    const int32_t e = static_cast<int32_t>(next64() % E);
    if (std::find(probe.begin(), probe.end(), e) == probe.end()) probe.push_back(e);
  }
  const std::vector<float> px = uniform(H, 2.f), pw = uniform(k, 1.f);
  const std::vector<int> ident{0, 1, 2, 3, 4, 5};
  std::vector<float> ref;
  for (auto [B, pos] : {std::pair<int64_t, int64_t>{1, 0}, {16, 7}, {64, 0}, {64, 63}, {2048, 1234}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " pos " + std::to_string(pos) + ", seed " + std::to_string(seed_));
    std::vector<int32_t> ids = probe_routing(B, k, E, probe, ident, pos);
    if (B > 1) ids[((pos + 1) % B) * k + k - 1] = static_cast<int32_t>(next64() % E);  // no bad id here
    std::vector<float> xs = uniform(B * H, 2.f), ws = uniform(B * k, 1.f);
    std::copy(px.begin(), px.end(), xs.begin() + pos * H);
    std::copy(pw.begin(), pw.end(), ws.begin() + pos * k);
    backend::Tensor x = backend::Tensor::empty(DType::kF32, {B, H}), w = backend::Tensor::empty(DType::kF32, {B, k});
    backend::Tensor id = backend::Tensor::empty(DType::kI32, {B, k}), o = backend::Tensor::empty(DType::kF32, {B, H});
    std::memcpy(x.raw(), xs.data(), xs.size() * 4);
    std::memcpy(w.raw(), ws.data(), ws.size() * 4);
    std::memcpy(id.raw(), ids.data(), ids.size() * 4);
    std::memset(o.raw(), 0, o.nbytes());
    auto dx = testing::on_device(x), dw = testing::on_device(w), did = testing::on_device(id);
    auto dout = testing::on_device(o);
    Status st = bi->moe_experts(dx.dev, did.dev, dw.dev, set, 7.0f, dout.dev);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(bi->synchronize().ok());
    std::vector<float> row(H);
    ASSERT_EQ(cudaMemcpy(row.data(), static_cast<const float*>(dout.dev.raw()) + pos * H, H * 4,
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    if (ref.empty()) {
      ref = row;
      double mx = 0;
      for (float v : row) {
        ASSERT_TRUE(std::isfinite(v));
        mx = std::max(mx, double(std::fabs(v)));
      }
      EXPECT_GT(mx, 0.0) << "the probe's output row is all zeros";
      if (env().bi_experts == "mma" && env().experts_mma) {  // the plain backend runs experts_mma at 6 slots
        auto dout2 = testing::on_device(o);
        Status st2 = plain->moe_experts(dx.dev, did.dev, dw.dev, plain_set, 7.0f, dout2.dev);
        ASSERT_TRUE(st2.ok()) << st2.to_string();
        ASSERT_TRUE(plain->synchronize().ok());
        std::vector<float> prow(H);
        ASSERT_EQ(cudaMemcpy(prow.data(), dout2.dev.raw(), H * 4, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(std::memcmp(prow.data(), row.data(), H * 4), 0)
            << "batch-invariant experts at 1 token differ from the plain backend's experts_mma";
      }
      continue;
    }
    int64_t first = -1;
    for (int64_t i = 0; i < H && first < 0; ++i)
      if (std::memcmp(&row[i], &ref[i], 4) != 0) first = i;
    EXPECT_EQ(first, -1) << "column " << first << ": " << row[first] << " vs alone " << ref[first];
  }
}

// Session 20: experts_wg gives experts_mma's bits on every output (and leaves the same rows alone).
TEST_F(CudaExpertsMma, WgEqualsExpertsMmaBitForBit) {
  if (!kernels::experts_wg_device_ok()) GTEST_SKIP() << "experts_wg needs an sm_90 device";
  struct Case {
    const char* name;
    int64_t E, k, gate_n, gate_k, down_n, down_k;
    std::vector<int64_t> batches;
  };
  const Case cases[] = {{"V4", 256, 6, 4096, 4096, 4096, 2048, {1, 7, 64, 700}},
                        {"small", 3, 2, 128, 256, 256, 128 * 2, {1, 5, 100}}};
  int64_t compared = 0;
  for (const Case& cs : cases) {
    Set gate_up, down;
    gate_up.P = down.P = std::min<int64_t>(cs.E, 24);
    gate_up.N = cs.gate_n, gate_up.K = cs.gate_k;
    down.N = cs.down_n, down.K = cs.down_k;
    make_set(gate_up, cs.E);
    make_set(down, cs.E);
    if (HasFatalFailure()) return;
    for (int64_t B : cs.batches) {
      std::vector<int32_t> ids = route(B, cs.k, cs.E, /*hot=*/B >= 5 && cs.E > 5);
      const int64_t slots = B * cs.k;
      if (slots > 3) ids[slots / 2] = -1, ids[slots - 2] = static_cast<int32_t>(cs.E);  // bad ids
      for (int proj = 0; proj < 2; ++proj) {
        const Set& st = proj == 0 ? gate_up : down;
        SCOPED_TRACE(std::string(cs.name) + " B=" + std::to_string(B) + (proj ? " down" : " gate_up") +
                     ", seed " + std::to_string(seed_));
        const int64_t x_div = proj == 0 ? cs.k : 1, x_rows = proj == 0 ? B : slots;
        std::vector<float> x = randn(x_rows, st.K, proj == 0 ? 1.f : 0.3f);
        for (int64_t r = 0; r < x_rows; r += 3) {  // wide row magnitudes, one zero row
          const float f = std::ldexp(1.f, static_cast<int>(next64() % 121) - 60);
          for (int64_t kk = 0; kk < st.K; ++kk) x[r * st.K + kk] *= f;
        }
        if (x_rows > 2) std::fill(x.begin() + st.K, x.begin() + 2 * st.K, 0.f);
        DeviceBuffer dids = dev_alloc(slots * 4), g1 = dev_alloc((slots + 2 * (cs.E + 1)) * 4),
                     g32 = dev_alloc((slots + 2 * (cs.E + 1)) * 4), flag = dev_alloc(16),
                     dx = dev_alloc(x.size() * 4), out = dev_alloc(slots * st.N * 4),
                     ws = dev_alloc(kernels::experts_wg_workspace_bytes(x_rows, st.K));
        ASSERT_EQ(cudaMemcpy(dids.data(), ids.data(), slots * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(dx.data(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(testing::memset_sync(flag.data(), 0, 16), cudaSuccess);
        const auto* did = static_cast<const int32_t*>(dids.data());
        auto* p1 = static_cast<int32_t*>(g1.data());
        auto* p32 = static_cast<int32_t*>(g32.data());
        kernels::moe_group(did, slots, cs.E, static_cast<int>(slots), p1, p1 + slots, p1 + slots + cs.E + 1,
                           static_cast<int32_t*>(flag.data()), nullptr);
        kernels::moe_group(did, slots, cs.E, kernels::kExpertsWgTileRows, p32, p32 + slots,
                           p32 + slots + cs.E + 1, static_cast<int32_t*>(flag.data()), nullptr);
        const auto* xp = static_cast<const float*>(dx.data());
        const std::vector<float> ref =
            run(true, st, xp, x_rows, x_div, slots, cs.E, p1, kernels::kExpertsMmaV1);
        ASSERT_TRUE(kernels::experts_wg_supported(2, slots, cs.E, true, false, true, st.N, st.K, 1, 32));
        const auto* tab = static_cast<const void* const*>(st.tables.data());
        for (int run_i = 0; run_i < 8; ++run_i) {  // variants 1..4, each without / with zero_bad_ids
          const int variant = 1 + run_i / 2;
          const bool zero_bad = run_i % 2 == 1;
          ASSERT_EQ(testing::memset_sync(out.data(), 0xFF, slots * st.N * 4), cudaSuccess);
          kernels::experts_wg(xp, x_rows, x_div, p32, p32 + slots, p32 + slots + cs.E + 1, slots, cs.E, tab,
                              tab + cs.E, st.N, st.K, ws.data(), static_cast<float*>(out.data()), nullptr,
                              zero_bad ? did : nullptr, variant);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          ASSERT_EQ(cudaGetLastError(), cudaSuccess);
          std::vector<float> h(slots * st.N);
          ASSERT_EQ(cudaMemcpy(h.data(), out.data(), h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
          int64_t first = -1, n_diff = 0;
          for (int64_t sl = 0; sl < slots; ++sl) {
            const bool bad = ids[sl] < 0 || ids[sl] >= cs.E;
            for (int64_t n = 0; n < st.N; ++n) {
              const size_t i = static_cast<size_t>(sl * st.N + n);
              uint32_t u;
              std::memcpy(&u, &h[i], 4);
              const bool same = bad && zero_bad ? u == 0u : std::memcmp(&h[i], &ref[i], 4) == 0;
              if (!same) {
                if (first < 0) first = static_cast<int64_t>(i);
                ++n_diff;
              }
            }
          }
          compared += slots * st.N;
          EXPECT_EQ(n_diff, 0) << "variant " << variant << (zero_bad ? ", zero_bad_ids: " : ": ") << n_diff
                               << " outputs differ from experts_mma, first at slot " << first / st.N
                               << " row " << first % st.N << ": " << (first >= 0 ? h[first] : 0.f)
                               << " vs " << (first >= 0 ? ref[first] : 0.f);
        }
      }
    }
  }
  std::printf("experts_wg: %lld outputs compared with experts_mma bit for bit\n",
              static_cast<long long>(compared));
}

// Host-side check: runs without a device.
TEST(CudaExpertsMmaLayouts, TakesOnlyTheLayoutsItImplements) {
  EXPECT_TRUE(kernels::experts_mma_supported(2, 6, 256, true, false, true, 4096, 4096, 1, 32));
  EXPECT_TRUE(kernels::experts_mma_supported(2, 128, 256, true, false, true, 4096, 2048, 1, 32));
  EXPECT_TRUE(kernels::experts_mma_supported(2, 1, 1024, true, false, true, 32, 256, 1, 32));
  EXPECT_FALSE(kernels::experts_mma_supported(1, 6, 256, true, false, true, 4096, 4096, 1, 32));   // FP8
  EXPECT_FALSE(kernels::experts_mma_supported(2, 6, 256, false, false, true, 4096, 4096, 1, 32));  // no scales
  EXPECT_FALSE(kernels::experts_mma_supported(2, 6, 256, true, true, true, 4096, 4096, 1, 32));    // f32 scales
  EXPECT_FALSE(kernels::experts_mma_supported(2, 6, 256, true, false, false, 4096, 4096, 1, 32));  // unaligned rows
  EXPECT_FALSE(kernels::experts_mma_supported(2, 6, 256, true, false, true, 4080, 4096, 1, 32));   // N % 32
  EXPECT_FALSE(kernels::experts_mma_supported(2, 6, 256, true, false, true, 4096, 4000, 1, 32));   // K % 256
  EXPECT_FALSE(kernels::experts_mma_supported(2, 6, 256, true, false, true, 4096, 4096, 1, 64));   // 1×64 blocks
  EXPECT_FALSE(kernels::experts_mma_supported(2, 6, 256, true, false, true, 4096, 4096, 128, 128)); // 128×128
  EXPECT_FALSE(kernels::experts_mma_supported(2, 6, 2048, true, false, true, 4096, 4096, 1, 32));  // > 1024 experts
  EXPECT_TRUE(kernels::experts_wg_supported(2, 6, 256, true, false, true, 4096, 4096, 1, 32));
  EXPECT_TRUE(kernels::experts_wg_supported(2, 6, 256, true, false, true, 4096, 2048, 1, 32));
  EXPECT_FALSE(kernels::experts_wg_supported(2, 6, 256, true, false, true, 4064, 4096, 1, 32));  // N % 128
  EXPECT_FALSE(kernels::experts_wg_supported(2, 6, 256, true, false, true, 4096, 4000, 1, 32));  // K % 256
  EXPECT_FALSE(kernels::experts_wg_supported(2, 6, 256, true, true, true, 4096, 4096, 1, 32));   // f32 scales
}

}  // namespace
}  // namespace deepinfer::cuda
