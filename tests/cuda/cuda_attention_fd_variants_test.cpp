// Session 8 (issue 7): the split-key attention kernels "v1" (src/backend/cuda/attention_fd_v1.cu,
// DEEPINFER_ATTENTION_KERNEL=v1|auto) and "v2" (attention_fd_v2.cu, =v2) against session 7's kernel
// "s7" (attention_fd.cu) and a double-precision reference, at DeepSeek-V4-Flash decode shapes: 64 query heads (and 128: two
// head groups) over one shared K = V head of width 512, each token's list = the sliding window
// (128 rows) + 512 selected CSA entries, + every HCA entry, or the window alone (sliding-only
// layers), at batches 1, 3, 16 and 128, on the default plan and the batch-invariant plan; random
// list lengths from 0 (tiny lists included), misaligned q / kv, an understated max_keys hint.
// v1 runs the same per-element arithmetic as s7 in the same order, so the outputs must be
// bitwise equal (memcmp); v2 scales K = V per row (other bits). Every variant within 5e-6 of the
// largest output element of the double reference (cuda_attention_fd_test's bound); v2 bitwise
// batch-invariant under --batch-invariant. Fresh random inputs per run; the seed is printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/attention_fd.h"
#include "backend/cuda/cuda_backend.h"
#include "device_pair.h"

namespace deepinfer::cuda {
namespace {

using backend::Shape;
using backend::Tensor;
using testing::on_device;
using testing::Pair;
using testing::to_host;

constexpr int64_t kD = 512;       // V4 head width (K = V)
constexpr int64_t kWindow = 128;  // sliding-window rows
constexpr double kBound = 5e-6;   // max |Δ| / max |ref| against the double reference

// q [S, nH, 512], kv [T, 1, 512], sinks [nH], key lists per token.
struct Problem {
  int64_t S = 0, nH = 0, T = 0;
  Tensor q, kv, sinks;
  std::vector<std::vector<int32_t>> lists;
  float scale = 0.f;
  int64_t id = 0;  // the reference cache's key (fresh for every problem built)
};

// A problem's inputs on the device, q / kv optionally 4 bytes past a 16-byte boundary.
struct Uploaded {
  Pair q, kv, sinks, offs, ids, out;
  Tensor qv, kvv;
  int64_t longest = 0;
};

class CudaAttentionFdVariants : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    auto b = CudaBackend::create();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    gpu_ = std::move(b).value();
    auto bi = CudaBackend::create({.batch_invariant = true});
    ASSERT_TRUE(bi.ok()) << bi.status().to_string();
    gpu_bi_ = std::move(bi).value();
    kernels::set_attention_kernel_override(kernels::kAttentionFd);
  }
  void TearDown() override {
    kernels::set_attention_kernel_override(-1);
    kernels::set_attention_fd_variant_override(-1);
  }

  Tensor randn(Shape s, float scale = 1.f) {
    Tensor t = Tensor::empty(DType::kF32, std::move(s));
    std::normal_distribution<float> nd(0.f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng_);
    return t;
  }
  // B sequences with their own rows [b·(window + compressed), …): the window rows in order, then
  // `picks` distinct compressed entries in random order (CSA top-k; HCA: all; sliding: none).
  Problem decode(int64_t B, int64_t nH, int64_t compressed, int64_t picks) {
    Problem p;
    p.id = ++problems_;
    p.S = B, p.nH = nH, p.T = B * (kWindow + compressed);
    p.q = randn({B, nH, kD});
    p.kv = randn({p.T, 1, kD});
    p.sinks = randn({nH}, 2.f);
    p.scale = 1.f / std::sqrt(static_cast<float>(kD));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t base = b * (kWindow + compressed);
      std::vector<int32_t> l;
      for (int64_t j = 0; j < kWindow; ++j) l.push_back(static_cast<int32_t>(base + j));
      std::vector<int32_t> pool(compressed);
      for (int64_t j = 0; j < compressed; ++j) pool[j] = static_cast<int32_t>(base + kWindow + j);
      std::shuffle(pool.begin(), pool.end(), rng_);
      for (int64_t j = 0; j < std::min(picks, compressed); ++j) l.push_back(pool[j]);
      p.lists.push_back(std::move(l));
    }
    return p;
  }
  // Lists of the given lengths over T shared rows (distinct ids while they last, then repeats).
  Problem lengths(int64_t nH, int64_t T, const std::vector<int64_t>& ns) {
    Problem p;
    p.id = ++problems_;
    p.S = static_cast<int64_t>(ns.size()), p.nH = nH, p.T = T;
    p.q = randn({p.S, nH, kD});
    p.kv = randn({T, 1, kD});
    p.sinks = randn({nH}, 2.f);
    p.scale = 1.f / std::sqrt(static_cast<float>(kD));
    std::vector<int32_t> pool(T);
    for (int64_t n : ns) {
      for (int64_t i = 0; i < T; ++i) pool[i] = static_cast<int32_t>(i);
      std::shuffle(pool.begin(), pool.end(), rng_);
      std::vector<int32_t> l;
      for (int64_t i = 0; i < n; ++i) l.push_back(i < T ? pool[i] : static_cast<int32_t>(rng_() % T));
      p.lists.push_back(std::move(l));
    }
    return p;
  }

  // Double-precision reference of token i: [nH, 512].
  std::vector<double> reference(const Problem& p, int64_t i, bool sinks) {
    std::vector<double> out(p.nH * kD, 0.0), lg, acc(kD);
    const auto& l = p.lists[i];
    if (l.empty()) return out;
    for (int64_t h = 0; h < p.nH; ++h) {
      const float* q = p.q.data<float>() + (i * p.nH + h) * kD;
      lg.assign(l.size(), 0.0);
      double m = -INFINITY;
      for (size_t j = 0; j < l.size(); ++j) {
        const float* k = p.kv.data<float>() + int64_t{l[j]} * kD;
        double dot = 0;
        for (int64_t c = 0; c < kD; ++c) dot += double(q[c]) * k[c];
        lg[j] = dot * p.scale;
        m = std::max(m, lg[j]);
      }
      const double sink = p.sinks.data<float>()[h];
      if (sinks) m = std::max(m, sink);
      double den = sinks ? std::exp(sink - m) : 0.0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t j = 0; j < l.size(); ++j) {
        const double w = std::exp(lg[j] - m);
        den += w;
        const float* v = p.kv.data<float>() + int64_t{l[j]} * kD;
        for (int64_t c = 0; c < kD; ++c) acc[c] += w * v[c];
      }
      for (int64_t c = 0; c < kD; ++c) out[h * kD + c] = acc[c] / den;
    }
    return out;
  }

  Uploaded upload(const Problem& p, bool misalign = false) {
    Uploaded u;
    const int64_t skip = misalign ? 1 : 0;
    Tensor q = Tensor::empty(DType::kF32, {p.S * p.nH * kD + 1});
    std::memcpy(q.data<float>() + skip, p.q.data<float>(), p.q.nbytes());
    Tensor kvh = Tensor::empty(DType::kF32, {p.T * kD + 1});
    std::memcpy(kvh.data<float>() + skip, p.kv.data<float>(), p.kv.nbytes());
    std::vector<int32_t> offs{0}, ids;
    for (const auto& l : p.lists) {
      ids.insert(ids.end(), l.begin(), l.end());
      offs.push_back(static_cast<int32_t>(ids.size()));
      u.longest = std::max<int64_t>(u.longest, static_cast<int64_t>(l.size()));
    }
    if (ids.empty()) ids.push_back(0);
    u.q = on_device(q);
    u.kv = on_device(kvh);
    u.sinks = on_device(p.sinks);
    u.offs = on_device(Tensor::from_i32({p.S + 1}, offs));
    u.ids = on_device(Tensor::from_i32({int64_t(ids.size())}, ids));
    u.out = on_device(Tensor::empty(DType::kF32, {p.S, p.nH, kD}));
    u.qv = Tensor::borrow(u.q.dev.data<float>() + skip, DType::kF32, {p.S, p.nH, kD});
    u.kvv = Tensor::borrow(u.kv.dev.data<float>() + skip, DType::kF32, {p.T, 1, kD});
    return u;
  }
  // One call on variant `variant` (kernels::kFdVariantS7 / V1 / V2); hint: max_keys (−2: the
  // true longest list); cut > 0: the default plan's chunks per unit forced to it.
  Tensor run(CudaBackend& be, const Problem& p, Uploaded& u, int variant, bool sinks,
             int64_t hint = -2, int cut = 0) {
    kernels::set_attention_fd_variant_override(variant);
    kernels::set_attention_fd_chunks_per_unit_override(cut);
    EXPECT_EQ(cudaMemset(u.out.dev.raw(), 0xff, u.out.dev.nbytes()), cudaSuccess);  // NaNs
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    Status st = be.attention(u.qv, u.kvv, u.kvv, u.offs.dev, u.ids.dev, sinks ? &u.sinks.dev : nullptr,
                             p.scale, u.out.dev, hint == -2 ? u.longest : hint);
    EXPECT_TRUE(st.ok()) << st.to_string();
    st = be.synchronize();
    EXPECT_TRUE(st.ok()) << st.to_string();
    kernels::set_attention_fd_variant_override(-1);
    kernels::set_attention_fd_chunks_per_unit_override(0);
    return to_host(u.out);
  }
  // The cut s7's default plan makes for this call (v1 is compared with s7 bitwise on it: the
  // variants' plans may differ, their arithmetic per cut does not).
  int s7_cut(const Problem& p, const Uploaded& u, int64_t hint = -2) {
    int dev = 0, sms = 132;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      sms = 132;
    kernels::set_attention_fd_variant_override(kernels::kFdVariantS7);
    const auto plan = kernels::attention_fd_plan(p.S, p.nH, hint == -2 ? u.longest : hint, sms, false);
    kernels::set_attention_fd_variant_override(-1);
    return plan.chunks_per_unit;
  }

  // Tokens `which` of got within kBound of the double reference (max over a token's output).
  // The references are cached per (problem, token, sinks) while the same problem is checked.
  void expect_near_double(const std::string& what, const Problem& p, const Tensor& got,
                          const std::vector<int64_t>& which, bool sinks) {
    const int64_t row = p.nH * kD;
    double scale = 1e-30, worst = 0;
    int64_t wi = 0;
    if (cache_id_ != p.id) {
      cache_.clear();
      cache_id_ = p.id;
    }
    for (int64_t i : which) {
      auto& slot = cache_[{i, sinks}];
      if (slot.empty()) slot = reference(p, i, sinks);
      const auto& ref = slot;
      for (double r : ref) scale = std::max(scale, std::fabs(r));
      for (int64_t c = 0; c < row; ++c) {
        const double b = got.data<float>()[i * row + c];
        ASSERT_TRUE(std::isfinite(b)) << what << " token " << i << " index " << c << " seed " << seed_;
        const double e = std::fabs(ref[c] - b);
        if (e > worst) worst = e, wi = i * row + c;
      }
    }
    EXPECT_LE(worst / scale, kBound) << what << ": worst rel error " << worst / scale
                                     << " at flat index " << wi << " seed " << seed_;
  }
  void expect_bitwise(const std::string& what, const Tensor& a, const Tensor& b) {
    ASSERT_EQ(a.numel(), b.numel()) << what;
    int64_t diff = 0, first = -1;
    double worst = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const float x = a.data<float>()[i], y = b.data<float>()[i];
      if (std::memcmp(&x, &y, 4) != 0) {
        if (first < 0) first = i;
        ++diff;
        worst = std::max(worst, std::fabs(double(x) - y));
      }
    }
    EXPECT_EQ(diff, 0) << what << ": " << diff << " elements differ from s7 (first at " << first
                       << ", largest |Δ| " << worst << ") seed " << seed_;
  }
  // Token i of p as a problem of its own.
  Problem single(const Problem& p, int64_t i) {
    Problem one = p;
    one.id = ++problems_;
    one.S = 1;
    one.lists = {p.lists[i]};
    one.q = Tensor::empty(DType::kF32, {1, p.nH, kD});
    std::memcpy(one.q.data<float>(), p.q.data<float>() + i * p.nH * kD, sizeof(float) * p.nH * kD);
    return one;
  }
  // Up to n tokens of 0 … S−1, always the first and the last.
  std::vector<int64_t> sample(int64_t S, int64_t n) {
    std::vector<int64_t> all(S);
    for (int64_t i = 0; i < S; ++i) all[i] = i;
    if (S <= n) return all;
    std::shuffle(all.begin() + 1, all.end() - 1, rng_);
    std::vector<int64_t> out{0, S - 1};
    out.insert(out.end(), all.begin() + 1, all.begin() + (n - 1));
    return out;
  }

  std::map<std::pair<int64_t, bool>, std::vector<double>> cache_;
  int64_t cache_id_ = -1, problems_ = 0;
  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<CudaBackend> gpu_, gpu_bi_;
};

TEST(CudaAttentionFdVariantsHost, EnvironmentAndOverrideSelectTheVariant) {
  // Host only: the override wins and −1 returns to the environment's choice (auto → v1 unless
  // DEEPINFER_ATTENTION_KERNEL=s7 is set for this process).
  kernels::set_attention_fd_variant_override(kernels::kFdVariantS7);
  EXPECT_EQ(kernels::attention_fd_variant_requested(), kernels::kFdVariantS7);
  kernels::set_attention_fd_variant_override(kernels::kFdVariantV1);
  EXPECT_EQ(kernels::attention_fd_variant_requested(), kernels::kFdVariantV1);
  kernels::set_attention_fd_variant_override(kernels::kFdVariantV2);
  EXPECT_EQ(kernels::attention_fd_variant_requested(), kernels::kFdVariantV2);
  kernels::set_attention_fd_variant_override(7);  // unknown: back to the environment
  const int from_env = kernels::attention_fd_variant_requested();
  EXPECT_TRUE(from_env == kernels::kFdVariantS7 || from_env == kernels::kFdVariantV1 ||
              from_env == kernels::kFdVariantV2);
  kernels::set_attention_fd_variant_override(-1);
  EXPECT_EQ(kernels::attention_fd_variant_requested(), from_env);
}

TEST_F(CudaAttentionFdVariants, V4DecodeShapesMatchS7BitwiseAndDoubleAtBatch1_3_16_128) {
  // CSA = window + top-512 of 1024 entries (640 keys), HCA = window + all 64 entries (192 keys),
  // sliding-only = the window (128 keys). Each batch takes its own plan (CSA: 40 units per token
  // at batch 1 … 1 at 128) and the batch-invariant plan (8 chunks per unit).
  struct Kind { const char* name; int64_t compressed, picks; };
  for (const Kind k : {Kind{"CSA", 1024, 512}, Kind{"HCA", 64, 64}, Kind{"sliding", 0, 0}}) {
    for (int64_t B : {1, 3, 16, 128}) {
      Problem p = decode(B, 64, k.compressed, k.picks);
      Uploaded u = upload(p);
      const bool sinks = B != 16;
      const std::string tag = std::string(k.name) + " batch " + std::to_string(B);
      const int cut = s7_cut(p, u);
      const Tensor s7 = run(*gpu_, p, u, kernels::kFdVariantS7, sinks);
      const Tensor v1_cut = run(*gpu_, p, u, kernels::kFdVariantV1, sinks, -2, cut);
      expect_bitwise(tag + " v1 vs s7", v1_cut, s7);
      const auto which = sample(B, 12);
      const Tensor v1 = run(*gpu_, p, u, kernels::kFdVariantV1, sinks);  // v1's own plan
      expect_near_double(tag + " v1 vs double", p, v1, which, sinks);
      const Tensor s7_bi = run(*gpu_bi_, p, u, kernels::kFdVariantS7, sinks);
      const Tensor v1_bi = run(*gpu_bi_, p, u, kernels::kFdVariantV1, sinks);
      expect_bitwise(tag + " batch-invariant v1 vs s7", v1_bi, s7_bi);
      expect_near_double(tag + " batch-invariant v1 vs double", p, v1_bi, which, sinks);
      expect_near_double(tag + " v2 vs double", p, run(*gpu_, p, u, kernels::kFdVariantV2, sinks),
                         which, sinks);
      expect_near_double(tag + " batch-invariant v2 vs double", p,
                         run(*gpu_bi_, p, u, kernels::kFdVariantV2, sinks), which, sinks);
    }
  }
}

TEST_F(CudaAttentionFdVariants, RandomAndTinyListsTwoHeadGroupsMisalignedAndHintMatchS7) {
  // Random list lengths (tiny ones 0 … 40 and long ones up to 2000: every chunk / unit edge
  // shows up over runs), 64 and 128 heads, with and without sinks, aligned and misaligned, with
  // the true longest list and an understated max_keys hint (later units restart the pipeline).
  for (int64_t nH : {64, 128}) {
    std::vector<int64_t> ns{0, 1, 2, 15, 16, 17};
    for (int i = 0; i < 10; ++i) ns.push_back(static_cast<int64_t>(rng_() % 41));
    for (int i = 0; i < 6; ++i) ns.push_back(static_cast<int64_t>(rng_() % 2001));
    std::shuffle(ns.begin(), ns.end(), rng_);
    Problem p = lengths(nH, 2500, ns);
    std::vector<int64_t> all(p.S);
    for (int64_t i = 0; i < p.S; ++i) all[i] = i;
    for (bool misalign : {false, true}) {
      Uploaded u = upload(p, misalign);
      for (bool sinks : {true, false}) {
        for (int64_t hint : {int64_t{-2}, int64_t{20}}) {
          const std::string tag = std::to_string(nH) + " heads" + (misalign ? " misaligned" : "") +
                                  (sinks ? "" : " no sinks") + (hint == 20 ? " hint 20" : "");
          const Tensor s7 = run(*gpu_, p, u, kernels::kFdVariantS7, sinks, hint);
          expect_bitwise(tag + " v1 vs s7", run(*gpu_, p, u, kernels::kFdVariantV1, sinks, hint,
                                                s7_cut(p, u, hint)), s7);
          const Tensor v1 = run(*gpu_, p, u, kernels::kFdVariantV1, sinks, hint);
          expect_near_double(tag + " v1 vs double", p, v1, all, sinks);
          expect_near_double(tag + " v2 vs double", p,
                             run(*gpu_, p, u, kernels::kFdVariantV2, sinks, hint), all, sinks);
        }
      }
      const Tensor v1_bi = run(*gpu_bi_, p, u, kernels::kFdVariantV1, true);
      expect_bitwise("batch-invariant v1 vs s7" + std::string(misalign ? " misaligned" : ""),
                     v1_bi, run(*gpu_bi_, p, u, kernels::kFdVariantS7, true));
    }
    // Each tiny list alone (one block, most units) and empty lists give zeros.
    for (int64_t i = 0; i < p.S; ++i) {
      if (ns[i] > 40) continue;
      const Problem one = single(p, i);
      Uploaded u = upload(one);
      const Tensor v1 = run(*gpu_, one, u, kernels::kFdVariantV1, true);
      expect_bitwise(std::to_string(ns[i]) + " keys alone v1 vs s7",
                     run(*gpu_, one, u, kernels::kFdVariantV1, true, -2, s7_cut(one, u)),
                     run(*gpu_, one, u, kernels::kFdVariantS7, true));
      expect_near_double(std::to_string(ns[i]) + " keys alone v1 vs double", one, v1, {0}, true);
      const Tensor v2 = run(*gpu_, one, u, kernels::kFdVariantV2, true);
      expect_near_double(std::to_string(ns[i]) + " keys alone v2 vs double", one, v2, {0}, true);
      if (ns[i] == 0) {
        for (int64_t c = 0; c < v1.numel(); ++c) ASSERT_EQ(v1.data<float>()[c], 0.f);
        for (int64_t c = 0; c < v2.numel(); ++c) ASSERT_EQ(v2.data<float>()[c], 0.f);
      }
    }
  }
}

TEST_F(CudaAttentionFdVariants, V1AndV2BatchInvariantModeIsBitwiseAcrossBatches) {
  // --batch-invariant on v1 and on v2: a token alone, in a batch of 24 and in the reversed batch
  // has the same bits.
  std::vector<int64_t> ns{0, 1, 17, 128, 129, 640};
  while (ns.size() < 24) ns.push_back(static_cast<int64_t>(rng_() % 1200));
  Problem p = lengths(64, 1500, ns);
  Uploaded u = upload(p);
  Problem rev = p;
  rev.id = ++problems_;
  std::reverse(rev.lists.begin(), rev.lists.end());
  rev.q = Tensor::empty(DType::kF32, {p.S, p.nH, kD});  // its own storage
  for (int64_t i = 0; i < p.S; ++i)
    std::memcpy(rev.q.data<float>() + i * p.nH * kD, p.q.data<float>() + (p.S - 1 - i) * p.nH * kD,
                sizeof(float) * p.nH * kD);
  Uploaded ur = upload(rev);
  const int64_t row = p.nH * kD;
  for (int variant : {kernels::kFdVariantV1, kernels::kFdVariantV2}) {
    const std::string v = variant == kernels::kFdVariantV1 ? "v1" : "v2";
    const Tensor batch = run(*gpu_bi_, p, u, variant, true);
    expect_near_double(v + " batch-invariant batch vs double", p, batch, sample(p.S, 24), true);
    const Tensor reversed = run(*gpu_bi_, rev, ur, variant, true);
    for (int64_t i = 0; i < p.S; ++i) {
      const Problem one = single(p, i);
      Uploaded uo = upload(one);
      const Tensor alone = run(*gpu_bi_, one, uo, variant, true);
      EXPECT_EQ(std::memcmp(alone.data<float>(), batch.data<float>() + i * row, sizeof(float) * row), 0)
          << v << " token " << i << " (" << ns[i] << " keys) alone vs batch, seed " << seed_;
      EXPECT_EQ(std::memcmp(reversed.data<float>() + (p.S - 1 - i) * row,
                            batch.data<float>() + i * row, sizeof(float) * row), 0)
          << v << " token " << i << " reversed vs batch, seed " << seed_;
    }
  }
}

}  // namespace
}  // namespace deepinfer::cuda
