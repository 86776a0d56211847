// The CUDA attention kernel (src/backend/cuda/attention.cu) on DeepSeek-V4 shapes: 64 query heads
// reading one shared K=V head of width 512 (the wide, float4 path), sinks, window + sparse key
// lists of every length around the chunk (32) and super-chunk (64) sizes. Against the CPU
// backend's reference mode within a relative bound, and bitwise: a query's output does not depend
// on the batch around it, on the split vs one-block path, on the max_keys hint or on the
// alignment of its inputs. Fresh random inputs per run; the seed is printed on failure.
// Every test here forces the SIMT kernel (the fallback for every layout; the split-key kernel
// that V4's layout uses by default has its own suite, cuda_attention_fd_test). The session-5
// tensor-core kernel attention_tc.cu and its tests were removed in session 7.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

// One attention problem on the host: q [S, nH, D], k [T, nKV, D], v [T, nKV, Dv] (or k),
// key lists by offsets [S+1] and ids [nnz], sinks [nH].
struct Problem {
  int64_t S = 0, nH = 0, nKV = 0, D = 0, Dv = 0, T = 0;
  bool shared = true;
  Tensor q, k, v, sinks;
  std::vector<std::vector<int32_t>> lists;  // per query
  float scale = 0.f;
};

class CudaAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    auto b = CudaBackend::create();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    gpu_ = std::move(b).value();
    cpu_ = backend::make_cpu_backend({.reference = true});
    // These suites test the SIMT kernel (the split-key kernel, the default for V4's layout since
    // session 6, has its own: cuda_attention_fd_test).
    kernels::set_attention_kernel_override(kernels::kAttentionSimt);
  }
  void TearDown() override { kernels::set_attention_kernel_override(-1); }
  Tensor randn(Shape s, float scale = 1.f) {
    Tensor t = Tensor::empty(DType::kF32, std::move(s));
    std::normal_distribution<float> nd(0.f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng_);
    return t;
  }
  // A decode-like list of n keys for a sequence of T keys: a window of the last min(n, w) keys in
  // order, then distinct sparse keys from before the window in random order (the top-k part).
  std::vector<int32_t> v4_list(int64_t n, int64_t T, int64_t w = 128) {
    std::vector<int32_t> out;
    const int64_t win = std::min(n, w);
    for (int64_t i = T - win; i < T; ++i) out.push_back(static_cast<int32_t>(i));
    std::vector<int32_t> pool;
    for (int64_t i = 0; i < T - win; ++i) pool.push_back(static_cast<int32_t>(i));
    std::shuffle(pool.begin(), pool.end(), rng_);
    for (int64_t i = 0; static_cast<int64_t>(out.size()) < n; ++i)
      out.push_back(i < static_cast<int64_t>(pool.size())
                        ? pool[i]
                        : static_cast<int32_t>(rng_() % T));  // repeats once the pool is used
    return out;
  }
  Problem make(int64_t nH, int64_t nKV, int64_t D, int64_t Dv, int64_t T, bool shared,
               const std::vector<int64_t>& lengths) {
    Problem p;
    p.S = static_cast<int64_t>(lengths.size());
    p.nH = nH, p.nKV = nKV, p.D = D, p.Dv = Dv, p.T = T, p.shared = shared;
    p.q = randn({p.S, nH, D});
    p.k = randn({T, nKV, D});
    p.v = shared ? p.k : randn({T, nKV, Dv});
    p.sinks = randn({nH}, 2.f);
    p.scale = 1.f / std::sqrt(static_cast<float>(D));
    for (int64_t n : lengths) p.lists.push_back(v4_list(n, T));
    return p;
  }
  static void flatten(const std::vector<std::vector<int32_t>>& lists, std::vector<int32_t>& offs,
                      std::vector<int32_t>& ids) {
    offs.assign(1, 0);
    ids.clear();
    for (const auto& l : lists) {
      ids.insert(ids.end(), l.begin(), l.end());
      offs.push_back(static_cast<int32_t>(ids.size()));
    }
    if (ids.empty()) ids.push_back(0);  // a valid buffer; no list reads it
  }
  Tensor cpu_run(const Problem& p, bool with_sinks) {
    std::vector<int32_t> offs, ids;
    flatten(p.lists, offs, ids);
    Tensor o = Tensor::from_i32({p.S + 1}, offs), kid = Tensor::from_i32({int64_t(ids.size())}, ids);
    Tensor out = Tensor::empty(DType::kF32, {p.S, p.nH, p.Dv});
    EXPECT_TRUE(cpu_->attention(p.q, p.k, p.v, o, kid, with_sinks ? &p.sinks : nullptr, p.scale, out)
                    .ok());
    return out;
  }
  // The queries `which` of p (in that order) as one batch on the GPU; hint: max_keys (−2: the
  // true longest list, −1: unknown). `misalign`: q, k, v start 4 bytes past a 16-byte boundary.
  Tensor gpu_run(const Problem& p, const std::vector<int64_t>& which, bool with_sinks,
                 int64_t hint = -2, bool misalign = false) {
    const int64_t n = static_cast<int64_t>(which.size());
    std::vector<std::vector<int32_t>> lists;
    Tensor q = Tensor::empty(DType::kF32, {n, p.nH, p.D});
    int64_t longest = 0;
    for (int64_t i = 0; i < n; ++i) {
      lists.push_back(p.lists[which[i]]);
      longest = std::max<int64_t>(longest, static_cast<int64_t>(lists.back().size()));
      std::memcpy(q.data<float>() + i * p.nH * p.D, p.q.data<float>() + which[i] * p.nH * p.D,
                  sizeof(float) * p.nH * p.D);
    }
    std::vector<int32_t> offs, ids;
    flatten(lists, offs, ids);
    auto dq = on_device(pad(q, misalign)), dk = on_device(pad(p.k, misalign)),
         ds = on_device(p.sinks), doff = on_device(Tensor::from_i32({n + 1}, offs)),
         dkid = on_device(Tensor::from_i32({int64_t(ids.size())}, ids));
    Pair dv = p.shared ? Pair{} : on_device(pad(p.v, misalign));
    const int64_t skip = misalign ? 1 : 0;
    Tensor qv = Tensor::borrow(dq.dev.data<float>() + skip, DType::kF32, {n, p.nH, p.D});
    Tensor kv = Tensor::borrow(dk.dev.data<float>() + skip, DType::kF32, {p.T, p.nKV, p.D});
    Tensor vv = p.shared ? kv
                         : Tensor::borrow(dv.dev.data<float>() + skip, DType::kF32,
                                          {p.T, p.nKV, p.Dv});
    auto dout = on_device(Tensor::empty(DType::kF32, {n, p.nH, p.Dv}));
    // on_device's cudaMemcpy from pageable memory may return before its DMA lands, and the
    // backend's stream does not wait for the legacy stream: finish the copies before the launch.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    Status st = gpu_->attention(qv, kv, vv, doff.dev, dkid.dev, with_sinks ? &ds.dev : nullptr,
                                p.scale, dout.dev, hint == -2 ? longest : hint);
    EXPECT_TRUE(st.ok()) << st.to_string();
    st = gpu_->synchronize();
    EXPECT_TRUE(st.ok()) << st.to_string();
    return to_host(dout);
  }
  // A flat copy of t with one leading float when `shift` (so the data can start misaligned).
  static Tensor pad(const Tensor& t, bool shift) {
    if (!shift) return t;
    Tensor out = Tensor::empty(DType::kF32, {t.numel() + 1});
    out.data<float>()[0] = 0.f;
    std::memcpy(out.data<float>() + 1, t.data<float>(), t.nbytes());
    return out;
  }
  // Max |gpu − cpu| / max |cpu| over all elements.
  void expect_close(const std::string& what, const Tensor& want, const Tensor& got, double bound) {
    ASSERT_EQ(want.numel(), got.numel());
    double scale = 1e-30, worst = 0;
    int64_t wi = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      scale = std::max(scale, std::fabs(double(want.data<float>()[i])));
    for (int64_t i = 0; i < want.numel(); ++i) {
      const float a = want.data<float>()[i], b = got.data<float>()[i];
      ASSERT_TRUE(std::isfinite(b)) << what << " index " << i << " seed " << seed_;
      const double e = std::fabs(double(a) - b) / scale;
      if (e > worst) worst = e, wi = i;
    }
    EXPECT_LE(worst, bound) << what << ": worst rel error " << worst << " at flat index " << wi
                            << " (cpu " << want.data<float>()[wi] << ", gpu "
                            << got.data<float>()[wi] << ") seed " << seed_;
  }
  // Rows [i·row, (i+1)·row) of a equal rows [j·row, ...) of b bit for bit.
  void expect_rows_bitwise(const std::string& what, const Tensor& a, int64_t i, const Tensor& b,
                           int64_t j, int64_t row) {
    EXPECT_EQ(std::memcmp(a.data<float>() + i * row, b.data<float>() + j * row, sizeof(float) * row),
              0)
        << what << " (seed " << seed_ << ")";
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<backend::Backend> cpu_;
};

// The V4-layout tests, parameterized by the kernel forced (only simt, attention.cu, since the
// tensor-core kernel attention_tc.cu was removed; the split-key kernel is not batch-composition
// invariant outside --batch-invariant, so these bitwise tests do not apply to it as they are).
class CudaAttentionMode : public CudaAttention, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    CudaAttention::SetUp();
    kernels::set_attention_kernel_override(GetParam());
  }
};
INSTANTIATE_TEST_SUITE_P(Kernels, CudaAttentionMode, ::testing::Values(kernels::kAttentionSimt),
                         [](const ::testing::TestParamInfo<int>&) { return std::string("simt"); });

// List lengths around the chunk and super-chunk sizes, a long one, and empty lists.
const std::vector<int64_t> kEdgeLengths{0, 1, 31, 32, 33, 64, 65, 700};

TEST_P(CudaAttentionMode, V4ShapesMatchCpu) {
  // 64 heads, one shared K=V head of width 512; every edge length, as one batch (one-block path)
  // and each query alone (split path for lists longer than 64).
  Problem p = make(64, 1, 512, 512, 1000, true, kEdgeLengths);
  for (bool with_sinks : {true, false}) {
    const Tensor want = cpu_run(p, with_sinks);
    std::vector<int64_t> all(p.S);
    for (int64_t i = 0; i < p.S; ++i) all[i] = i;
    expect_close(std::string("batch, sinks ") + (with_sinks ? "on" : "off"), want,
                 gpu_run(p, all, with_sinks), 5e-6);
    for (int64_t i = 0; i < p.S; ++i) {
      const Tensor got = gpu_run(p, {i}, with_sinks);
      expect_close("query with " + std::to_string(p.lists[i].size()) + " keys alone",
                   want.rows(i, i + 1).clone(), got, 5e-6);
      if (p.lists[i].empty()) {  // no key: zeros, with or without a sink
        for (int64_t c = 0; c < got.numel(); ++c) ASSERT_EQ(got.data<float>()[c], 0.f);
      }
    }
  }
}

TEST_P(CudaAttentionMode, BatchCompositionSplitAndWholeAreBitwiseEqual) {
  // 37 queries of mixed lengths (the edge lengths, then random ones up to 700): the batch uses
  // the one-block path; each query alone (split path when its list is longer than 64), the batch
  // in reverse order, a sub-batch of 3 (split path) and the batch without the max_keys hint must
  // give every query the same bits.
  std::vector<int64_t> lengths = kEdgeLengths;
  while (lengths.size() < 37) lengths.push_back(static_cast<int64_t>(rng_() % 701));
  std::shuffle(lengths.begin(), lengths.end(), rng_);
  Problem p = make(64, 1, 512, 512, 2000, true, lengths);
  const int64_t row = p.nH * p.Dv;
  std::vector<int64_t> all(p.S), rev(p.S);
  for (int64_t i = 0; i < p.S; ++i) all[i] = i, rev[i] = p.S - 1 - i;
  for (bool with_sinks : {true, false}) {
    const Tensor batch = gpu_run(p, all, with_sinks);
    expect_close("batch of 37", cpu_run(p, with_sinks), batch, 5e-6);
    const Tensor reversed = gpu_run(p, rev, with_sinks);
    const Tensor no_hint = gpu_run(p, all, with_sinks, -1);
    const Tensor three = gpu_run(p, {5, 0, 36}, with_sinks);
    for (int64_t i = 0; i < p.S; ++i) {
      const std::string q = "query " + std::to_string(i) + " (" +
                            std::to_string(p.lists[i].size()) + " keys)";
      expect_rows_bitwise(q + " alone vs in the batch", gpu_run(p, {i}, with_sinks), 0, batch, i,
                          row);
      expect_rows_bitwise(q + " alone, no hint", gpu_run(p, {i}, with_sinks, -1), 0, batch, i,
                          row);
      expect_rows_bitwise(q + " in the reversed batch", reversed, p.S - 1 - i, batch, i, row);
      expect_rows_bitwise(q + " batch without hint", no_hint, i, batch, i, row);
    }
    expect_rows_bitwise("query 5 in a batch of 3", three, 0, batch, 5, row);
    expect_rows_bitwise("query 0 in a batch of 3", three, 1, batch, 0, row);
    expect_rows_bitwise("query 36 in a batch of 3", three, 2, batch, 36, row);
  }
}

TEST_P(CudaAttentionMode, MisalignedInputsGiveTheSameBits) {
  // q, k (= v) starting 4 bytes off a 16-byte boundary take the scalar staging path; the math is
  // chosen by shape only, so the bits are those of the aligned run.
  Problem p = make(64, 1, 512, 512, 500, true, {0, 33, 65, 300});
  const int64_t row = p.nH * p.Dv;
  for (std::vector<int64_t> which : {std::vector<int64_t>{0, 1, 2, 3}, std::vector<int64_t>{3}}) {
    const Tensor aligned = gpu_run(p, which, true);
    const Tensor shifted = gpu_run(p, which, true, -2, true);
    for (size_t i = 0; i < which.size(); ++i)
      expect_rows_bitwise("misaligned query " + std::to_string(which[i]), shifted, i, aligned, i,
                          row);
  }
}

TEST_F(CudaAttention, WideGqaAndOddHeadCountsMatchCpu) {
  // The wide path with separate K and V of different widths, GQA, and head counts per KV head
  // that do not fill the 8-head (one-block path) or 4-head (split path) groups: 12 (a half-empty
  // group), 3 (a warp with one live head of two), 8; widths 640 (5 float4s per lane, guarded),
  // 1024 shared; each as a batch of 140 (one-block path), 3 queries and single queries (split
  // path for lists longer than 64).
  struct Case { int64_t nH, nKV, D, Dv, T; bool shared; };
  for (const Case c : {Case{16, 2, 256, 128, 400, false}, Case{12, 1, 512, 512, 300, true},
                       Case{6, 2, 640, 384, 200, false}, Case{8, 1, 1024, 1024, 150, true}}) {
    std::vector<int64_t> lengths{0, 1, 33, 65, 150};
    while (lengths.size() < 140) lengths.push_back(static_cast<int64_t>(rng_() % 151));
    Problem p = make(c.nH, c.nKV, c.D, c.Dv, c.T, c.shared, lengths);
    const std::string name = "nH " + std::to_string(c.nH) + " nKV " + std::to_string(c.nKV) +
                             " D " + std::to_string(c.D) + " Dv " + std::to_string(c.Dv);
    const Tensor want = cpu_run(p, true);
    std::vector<int64_t> all(p.S);
    for (int64_t i = 0; i < p.S; ++i) all[i] = i;
    const Tensor batch = gpu_run(p, all, true);
    expect_close(name + " batch", want, batch, 5e-6);
    const Tensor three = gpu_run(p, {4, 1, 3}, true);
    expect_rows_bitwise(name + " query 4 in a batch of 3", three, 0, batch, 4, p.nH * p.Dv);
    expect_rows_bitwise(name + " query 3 in a batch of 3", three, 2, batch, 3, p.nH * p.Dv);
    for (int64_t i : {int64_t{3}, int64_t{4}, int64_t{0}, int64_t{2}}) {
      const Tensor one = gpu_run(p, {i}, true);
      expect_close(name + " alone", want.rows(i, i + 1).clone(), one, 5e-6);
      expect_rows_bitwise(name + " alone vs batch", one, 0, batch, i, p.nH * p.Dv);
    }
  }
}

TEST_P(CudaAttentionMode, BadKeyIdsAreReported) {
  // −1 and T in a list (on the wide path, split and one-block): synchronize() reports
  // OUT_OF_RANGE naming the op, the other queries are still computed, and the flag is cleared.
  Problem p = make(64, 1, 512, 512, 300, true, {40, 100, 5});
  const Tensor good = gpu_run(p, {0, 1, 2}, true);
  for (int32_t bad : {-1, 300}) {
    for (int64_t nq : {int64_t{1}, int64_t{40}}) {  // 1: split path; 40: one-block path
      std::vector<std::vector<int32_t>> lists;
      for (int64_t i = 0; i < nq; ++i) lists.push_back(p.lists[i % 3]);
      lists[0][17] = bad;
      std::vector<int32_t> offs, ids;
      flatten(lists, offs, ids);
      Tensor q = Tensor::empty(DType::kF32, {nq, p.nH, p.D});
      for (int64_t i = 0; i < nq; ++i)
        std::memcpy(q.data<float>() + i * p.nH * p.D, p.q.data<float>() + (i % 3) * p.nH * p.D,
                    sizeof(float) * p.nH * p.D);
      auto dq = on_device(q), dk = on_device(p.k), ds = on_device(p.sinks),
           doff = on_device(Tensor::from_i32({nq + 1}, offs)),
           dkid = on_device(Tensor::from_i32({int64_t(ids.size())}, ids)),
           dout = on_device(Tensor::empty(DType::kF32, {nq, p.nH, p.Dv}));
      ASSERT_TRUE(gpu_->attention(dq.dev, dk.dev, dk.dev, doff.dev, dkid.dev, &ds.dev, p.scale,
                                  dout.dev, 100).ok());
      const Status st = gpu_->synchronize();
      EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << "id " << bad << ": " << st.to_string();
      EXPECT_NE(st.message().find("attention: key id"), std::string::npos) << st.message();
      EXPECT_TRUE(gpu_->synchronize().ok());  // cleared
      const Tensor got = to_host(dout);
      for (int64_t c = 0; c < got.numel(); ++c)
        ASSERT_TRUE(std::isfinite(got.data<float>()[c])) << "id " << bad << " index " << c;
      if (nq > 1) expect_rows_bitwise("a query after the bad one", got, 1, good, 1, p.nH * p.Dv);
    }
  }
}

}  // namespace
}  // namespace deepinfer::cuda
