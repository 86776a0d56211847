// The op harness on the GPU: every CUDA op against the CPU backend's reference mode on fresh
// random inputs with odd sizes; per-op error bound; the worst element is printed on failure.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
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

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    auto b = CudaBackend::create();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    gpu_ = std::move(b).value();
    cpu_ = backend::make_cpu_backend({.reference = true});
  }
  Tensor randn(Shape s, float scale = 1.f) {
    Tensor t = Tensor::empty(DType::kF32, std::move(s));
    std::normal_distribution<float> nd(0.f, scale);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng_);
    return t;
  }
  Tensor randint(Shape s, int lo, int hi) {
    Tensor t = Tensor::empty(DType::kI32, std::move(s));
    std::uniform_int_distribution<int> d(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = d(rng_);
    return t;
  }
  // Max |gpu - cpu| / (max |cpu| + tiny) over all elements, with the worst index reported.
  void expect_close(const char* op, const Tensor& cpu, const Pair& gpu, double bound) {
    ASSERT_TRUE(gpu_->synchronize().ok()) << op;
    Tensor g = to_host(gpu);
    ASSERT_EQ(g.numel(), cpu.numel());
    if (cpu.dtype() == DType::kI32) {
      for (int64_t i = 0; i < cpu.numel(); ++i)
        ASSERT_EQ(g.data<int32_t>()[i], cpu.data<int32_t>()[i]) << op << " index " << i << " seed " << seed_;
      return;
    }
    double scale = 1e-30, worst = 0;
    int64_t wi = -1;
    for (int64_t i = 0; i < cpu.numel(); ++i) scale = std::max(scale, std::fabs(double(cpu.data<float>()[i])));
    for (int64_t i = 0; i < cpu.numel(); ++i) {
      const float a = cpu.data<float>()[i], b = g.data<float>()[i];
      if (std::isinf(a) || std::isinf(b)) {
        ASSERT_EQ(a, b) << op << " inf mismatch at " << i << " seed " << seed_;
        continue;
      }
      const double e = std::fabs(double(a) - b) / scale;
      if (e > worst) worst = e, wi = i;
    }
    EXPECT_LE(worst, bound) << op << ": worst rel error " << worst << " at flat index " << wi
                            << " (cpu " << cpu.data<float>()[wi] << ", gpu " << g.data<float>()[wi]
                            << ") seed " << seed_;
  }
  uint32_t seed_ = 0;
  std::mt19937 rng_;
  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<backend::Backend> cpu_;
};

TEST_F(CudaOps, MatmulGrouped) {
  for (auto [M, G, N, K] : {std::array<int64_t, 4>{1, 1, 129, 77}, {37, 1, 64, 300}, {5, 4, 33, 31}}) {
    Tensor x = randn({M, G * K}), w = randn({G * N, K}), out = Tensor::empty(DType::kF32, {M, G * N});
    auto dx = on_device(x), dw = on_device(w), dout = on_device(out);
    ASSERT_TRUE(cpu_->matmul(x, w, out, G).ok());
    ASSERT_TRUE(gpu_->matmul(dx.dev, dw.dev, dout.dev, G).ok());
    expect_close("matmul", out, dout, 2e-6);
  }
}

TEST_F(CudaOps, RmsNormRopeSwiglu) {
  Tensor x = randn({13, 333}, 3.f), w = randn({333}), out = Tensor::empty(DType::kF32, {13, 333});
  auto dx = on_device(x), dw = on_device(w), dout = on_device(out);
  ASSERT_TRUE(cpu_->rms_norm(x, &w, 1e-6f, out).ok());
  ASSERT_TRUE(gpu_->rms_norm(dx.dev, &dw.dev, 1e-6f, dout.dev).ok());
  expect_close("rms_norm", out, dout, 2e-6);

  for (auto style : {backend::RopeStyle::kInterleavedTrailing, backend::RopeStyle::kHalfLeading}) {
    Tensor q = randn({9, 3, 40}), pos = randint({9}, 0, 5000), inv = randn({8}, 0.1f);
    auto dq = on_device(q), dpos = on_device(pos), dinv = on_device(inv);
    ASSERT_TRUE(cpu_->rope(q, pos, inv, style, 1.0f, false).ok());
    ASSERT_TRUE(gpu_->rope(dq.dev, dpos.dev, dinv.dev, style, 1.0f, false).ok());
    expect_close("rope", q, dq, 5e-5);  // sin/cos of large fp32 angles: a few ulp apart
  }

  Tensor gu = randn({11, 2 * 70}, 6.f), so = Tensor::empty(DType::kF32, {11, 70});
  auto dgu = on_device(gu), dso = on_device(so);
  ASSERT_TRUE(cpu_->swiglu(gu, 10.f, so).ok());
  ASSERT_TRUE(gpu_->swiglu(dgu.dev, 10.f, dso.dev).ok());
  expect_close("swiglu", so, dso, 1e-6);
}

TEST_F(CudaOps, AttentionWithSinksAndKeyLists) {
  const int64_t S = 7, nH = 4, nKV = 1, D = 72, T = 50;
  Tensor q = randn({S, nH, D}), kv = randn({T, nKV, D}), sinks = randn({nH});
  std::vector<int32_t> offs{0}, ids;
  for (int64_t s = 0; s < S; ++s) {
    const int n = static_cast<int>(rng_() % 20);  // may be 0: a query with no key
    for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(rng_() % T));
    offs.push_back(static_cast<int32_t>(ids.size()));
  }
  if (ids.empty()) ids.push_back(0);
  Tensor o = Tensor::from_i32({S + 1}, offs), kid = Tensor::from_i32({int64_t(ids.size())}, ids);
  Tensor out = Tensor::empty(DType::kF32, {S, nH, D});
  auto dq = on_device(q), dkv = on_device(kv), ds = on_device(sinks), doff = on_device(o),
       dkid = on_device(kid), dout = on_device(out);
  for (bool with_sinks : {true, false}) {
    ASSERT_TRUE(cpu_->attention(q, kv, kv, o, kid, with_sinks ? &sinks : nullptr, 0.125f, out).ok());
    ASSERT_TRUE(gpu_->attention(dq.dev, dkv.dev, dkv.dev, doff.dev, dkid.dev,
                                with_sinks ? &ds.dev : nullptr, 0.125f, dout.dev).ok());
    expect_close("attention", out, dout, 2e-6);
  }
  // A bad key id is reported by synchronize(), naming the op.
  std::vector<int32_t> bad_ids(ids.size(), 0);
  bad_ids[0] = 999;
  auto dbad = on_device(Tensor::from_i32({int64_t(bad_ids.size())}, bad_ids));
  ASSERT_TRUE(gpu_->attention(dq.dev, dkv.dev, dkv.dev, doff.dev, dbad.dev, nullptr, 0.1f, dout.dev).ok());
  Status st = gpu_->synchronize();
  if (offs.back() > 0) {
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
    EXPECT_NE(st.message().find("attention: key id"), std::string::npos) << st.message();
  }
  EXPECT_TRUE(gpu_->synchronize().ok());  // the error was cleared
}

// The decode kernel's shapes (one shared KV head read by every query head, lists longer than
// one super-chunk) and GQA with separate K and V: against the CPU, on both the split path (few
// queries) and the one-block path (many queries); a query's output is bitwise the same alone, in
// a small batch and in a large one, with and without the max_keys hint.
TEST_F(CudaOps, AttentionSplitAndWholePathsAgreeBitwise) {
  // A property of the SIMT kernel (attention.cu): its split depends on the token alone. The
  // split-key kernel (the default, attention_fd.cu) cuts by the batch outside --batch-invariant;
  // cuda_attention_fd_test checks its own invariance.
  kernels::set_attention_kernel_override(kernels::kAttentionSimt);
  struct Restore { ~Restore() { kernels::set_attention_kernel_override(-1); } } restore;
  struct Case { int64_t nH, nKV, D, Dv, T; bool shared; };
  for (const Case c : {Case{64, 1, 512, 512, 900, true}, Case{8, 2, 48, 40, 300, false},
                       Case{16, 1, 64, 64, 5000, true}}) {
    const int64_t S = 300;  // enough (query, head-group) blocks for the one-block path
    Tensor q = randn({S, c.nH, c.D}, 0.3f), k = randn({c.T, c.nKV, c.D}),
           v = c.shared ? k : randn({c.T, c.nKV, c.Dv}), sinks = randn({c.nH});
    std::vector<int32_t> offs{0}, ids;
    int64_t longest = 0;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t n = s % 7 == 0 ? 0 : static_cast<int64_t>(rng_() % (s < 3 ? 700 : 200));
      for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(rng_() % c.T));
      offs.push_back(static_cast<int32_t>(ids.size()));
      longest = std::max(longest, n);
    }
    const int64_t nnz = static_cast<int64_t>(ids.size());
    Tensor o = Tensor::from_i32({S + 1}, offs), kid = Tensor::from_i32({nnz}, ids);
    Tensor want = Tensor::empty(DType::kF32, {S, c.nH, c.Dv});
    ASSERT_TRUE(cpu_->attention(q, k, v, o, kid, &sinks, 0.07f, want).ok());
    auto dq = on_device(q), dk = on_device(k), ds = on_device(sinks), doff = on_device(o),
         dkid = on_device(kid);
    Pair dv = c.shared ? Pair{} : on_device(v);
    const Tensor& vdev = c.shared ? dk.dev : dv.dev;
    // All S queries at once (one-block path).
    auto dall = on_device(Tensor::empty(DType::kF32, {S, c.nH, c.Dv}));
    ASSERT_TRUE(gpu_->attention(dq.dev, dk.dev, vdev, doff.dev, dkid.dev, &ds.dev, 0.07f, dall.dev,
                                longest).ok());
    ASSERT_TRUE(gpu_->synchronize().ok());
    Tensor all = to_host(dall);
    expect_close("attention (batch)", want, dall, 3e-6);
    // The first three queries alone and together (split path), with and without the hint.
    for (int64_t n : {int64_t{1}, int64_t{3}}) {
      for (int64_t hint : {longest, int64_t{-1}}) {
        std::vector<int32_t> o2(offs.begin(), offs.begin() + n + 1);
        auto doff2 = on_device(Tensor::from_i32({n + 1}, o2));
        auto dq2 = on_device(q.rows(0, n).clone());
        auto dout = on_device(Tensor::empty(DType::kF32, {n, c.nH, c.Dv}));
        ASSERT_TRUE(gpu_->attention(dq2.dev, dk.dev, vdev, doff2.dev, dkid.dev, &ds.dev, 0.07f,
                                    dout.dev, hint).ok());
        ASSERT_TRUE(gpu_->synchronize().ok());
        Tensor got = to_host(dout);
        ASSERT_EQ(std::memcmp(got.raw(), all.raw(), got.nbytes()), 0)
            << "nH " << c.nH << ": queries 0.." << n << " differ from the batched run (seed "
            << seed_ << ")";
      }
    }
  }
}

TEST_F(CudaOps, IndexerScoresAndTopkWithTies) {
  const int64_t S = 6, nI = 3, cI = 24, T = 45;
  Tensor q = randn({S, nI, cI}), w = randn({S, nI}), keys = randn({T, cI});
  Tensor vis = randint({S}, 0, T), out = Tensor::empty(DType::kF32, {S, T});
  auto dq = on_device(q), dw = on_device(w), dk = on_device(keys), dv = on_device(vis),
       dout = on_device(out);
  ASSERT_TRUE(cpu_->indexer_scores(q, w, keys, vis, 0.5f, 0.2f, out).ok());
  ASSERT_TRUE(gpu_->indexer_scores(dq.dev, dw.dev, dk.dev, dv.dev, 0.5f, 0.2f, dout.dev).ok());
  expect_close("indexer_scores", out, dout, 2e-6);
  // Top-k over scores with many exact ties (incl. +0/-0) and -inf: ids must match exactly.
  Tensor sc = Tensor::empty(DType::kF32, {S, T});
  for (int64_t i = 0; i < S * T; ++i) {
    const int r = static_cast<int>(rng_() % 6);
    sc.data<float>()[i] = r == 0 ? -INFINITY : r == 1 ? 0.0f : r == 2 ? -0.0f
                                  : static_cast<float>(static_cast<int>(rng_() % 5));
  }
  auto dsc = on_device(sc);
  for (int64_t k : {1, 7, 45, 60}) {
    Tensor ids = Tensor::empty(DType::kI32, {S, k});
    auto dids = on_device(ids);
    ASSERT_TRUE(cpu_->topk(sc, k, ids).ok());
    ASSERT_TRUE(gpu_->topk(dsc.dev, k, dids.dev).ok());
    expect_close("topk", ids, dids, 0);
  }
}

TEST_F(CudaOps, MoeRouteGatherScatterPool) {
  const int64_t S = 9, E = 16, k = 3, H = 40;
  Tensor logits = randn({S, E}, 2.f), bias = randn({E}, 0.5f);
  Tensor ids = Tensor::empty(DType::kI32, {S, k}), wts = Tensor::empty(DType::kF32, {S, k});
  auto dl = on_device(logits), db = on_device(bias), dids = on_device(ids), dw = on_device(wts);
  backend::RouterParams rp;
  rp.top_k = k;
  rp.routed_scaling_factor = 1.5f;
  ASSERT_TRUE(cpu_->moe_route(logits, &bias, nullptr, rp, ids, wts).ok());
  ASSERT_TRUE(gpu_->moe_route(dl.dev, &db.dev, nullptr, rp, dids.dev, dw.dev).ok());
  expect_close("moe_route ids", ids, dids, 0);
  expect_close("moe_route weights", wts, dw, 1e-6);
  Tensor hash = randint({S, k}, 0, E - 1);
  auto dh = on_device(hash);
  ASSERT_TRUE(cpu_->moe_route(logits, nullptr, &hash, rp, ids, wts).ok());
  ASSERT_TRUE(gpu_->moe_route(dl.dev, nullptr, &dh.dev, rp, dids.dev, dw.dev).ok());
  expect_close("moe_route hash ids", ids, dids, 0);
  expect_close("moe_route hash weights", wts, dw, 1e-6);

  Tensor src = randn({25, H}), rows = randint({S * k}, 0, 24);
  Tensor g = Tensor::empty(DType::kF32, {S * k, H});
  auto dsrc = on_device(src), drows = on_device(rows), dg = on_device(g);
  ASSERT_TRUE(cpu_->gather_rows(src, rows, g).ok());
  ASSERT_TRUE(gpu_->gather_rows(dsrc.dev, drows.dev, dg.dev).ok());
  expect_close("gather_rows", g, dg, 0);
  Tensor acc = randn({25, H}), sw = randn({S * k});
  auto dacc = on_device(acc), dsw = on_device(sw);
  ASSERT_TRUE(cpu_->scatter_add_rows(g, rows, &sw, acc).ok());
  ASSERT_TRUE(gpu_->scatter_add_rows(dg.dev, drows.dev, &dsw.dev, dacc.dev).ok());
  expect_close("scatter_add_rows", acc, dacc, 1e-6);

  Tensor vals = randn({5, 8, 33}), scs = randn({5, 8, 33}, 3.f), pooled = Tensor::empty(DType::kF32, {5, 33});
  for (int i = 0; i < 33; ++i) scs.data<float>()[i] = -INFINITY;  // a -inf slot weighs 0
  auto dvals = on_device(vals), dscs = on_device(scs), dpool = on_device(pooled);
  ASSERT_TRUE(cpu_->softmax_pool(vals, scs, pooled).ok());
  ASSERT_TRUE(gpu_->softmax_pool(dvals.dev, dscs.dev, dpool.dev).ok());
  expect_close("softmax_pool", pooled, dpool, 2e-6);
}

// combine_slots runs a direct kernel on CUDA; it must give the base implementation's bits (the
// scatter_add_rows chain with owner s = i / k) — on prefill-sized S as well as odd small ones —
// and be close to the CPU. Rope at V4 shapes (64 heads, 64 of 512 channels) and odd ones; rms_norm
// on the widths that take the vector paths (hidden 4096, hyper-connection streams 4·4096).
TEST_F(CudaOps, CombineSlotsRopeRmsNormAtModelShapes) {
  for (auto [S, k, H] : {std::array<int64_t, 3>{1, 6, 4096}, {3, 1, 7}, {2049, 6, 300}}) {
    Tensor slot_out = randn({S * k, H}), w = randn({S, k}), out = randn({S, H});
    auto ds = on_device(slot_out), dw = on_device(w), d1 = on_device(out), d2 = on_device(out);
    ASSERT_TRUE(gpu_->combine_slots(ds.dev, dw.dev, k, d1.dev).ok());
    ASSERT_TRUE(gpu_->Backend::combine_slots(ds.dev, dw.dev, k, d2.dev).ok());
    ASSERT_TRUE(gpu_->synchronize().ok());
    Tensor a = to_host(d1), b = to_host(d2);
    ASSERT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << "combine_slots S=" << S << " k=" << k
                                                            << " H=" << H << " seed " << seed_;
    ASSERT_TRUE(cpu_->combine_slots(slot_out, w, k, out).ok());
    expect_close("combine_slots", out, d1, 1e-6);
  }
  Tensor bad = randn({5, 7});
  auto dbad = on_device(bad);
  EXPECT_FALSE(gpu_->combine_slots(dbad.dev, dbad.dev, 2, dbad.dev).ok());  // slot_out rows != S·k

  for (auto [M, N] : {std::array<int64_t, 2>{1, 4096}, {7, 16384}, {3, 2048}, {2, 2052}}) {
    Tensor x = randn({M, N}, 2.f), w = randn({N}), out = Tensor::empty(DType::kF32, {M, N});
    auto dx = on_device(x), dw = on_device(w), dout = on_device(out);
    ASSERT_TRUE(cpu_->rms_norm(x, &w, 1e-6f, out).ok());
    ASSERT_TRUE(gpu_->rms_norm(dx.dev, &dw.dev, 1e-6f, dout.dev).ok());
    // The sum of squares over up to 16384 elements in another order than the CPU's (and
    // rsqrtf's own ulps): 2e-6 of the row's largest element was exceeded once on the H200
    // (2.19e-6 at N = 16384, session 6), so 4e-6.
    expect_close("rms_norm", out, dout, 4e-6);
    ASSERT_TRUE(cpu_->rms_norm(x, nullptr, 1e-6f, out).ok());
    ASSERT_TRUE(gpu_->rms_norm(dx.dev, nullptr, 1e-6f, dout.dev).ok());
    expect_close("rms_norm (no weight)", out, dout, 4e-6);
  }

  for (auto [S, nh, D, half] : {std::array<int64_t, 4>{1, 64, 512, 32}, {5, 13, 64, 8}, {3, 1, 24, 12}}) {
    Tensor x = randn({S, nh, D}), pos = randint({S}, 0, 70000), inv = Tensor::empty(DType::kF32, {half});
    for (int64_t i = 0; i < half; ++i)
      inv.data<float>()[i] = std::pow(10000.f, -2.f * float(i) / float(2 * half));
    auto dx = on_device(x), dpos = on_device(pos), dinv = on_device(inv);
    for (auto style : {backend::RopeStyle::kInterleavedTrailing, backend::RopeStyle::kHalfLeading}) {
      ASSERT_TRUE(cpu_->rope(x, pos, inv, style, 1.25f, false).ok());
      ASSERT_TRUE(gpu_->rope(dx.dev, dpos.dev, dinv.dev, style, 1.25f, false).ok());
      expect_close("rope", x, dx, 5e-5);  // as above: sin/cos a few ulp apart
    }
  }
}

// V4-Flash shapes for the latency kernels: the warp router over 256 experts (every scoring;
// ids exact), the register Sinkhorn (hc 4) next to the generic one (hc 3), the batched indexer
// (64 heads × 128, rows reading their own keys through key_start) and place_ids.
TEST_F(CudaOps, FlashShapesRouteHcIndexerPlaceIds) {
  const int64_t S = 37, E = 256, k = 6;
  Tensor logits = randn({S, E}, 2.f), bias = randn({E}, 0.3f);
  auto dl = on_device(logits), db = on_device(bias);
  for (auto scoring : {backend::RouterScoring::kSqrtSoftplus, backend::RouterScoring::kSigmoid,
                       backend::RouterScoring::kSoftmax}) {
    backend::RouterParams rp;
    rp.top_k = k;
    rp.scoring = scoring;
    rp.routed_scaling_factor = 2.5f;
    Tensor ids = Tensor::empty(DType::kI32, {S, k}), wts = Tensor::empty(DType::kF32, {S, k});
    auto dids = on_device(ids), dw = on_device(wts);
    ASSERT_TRUE(cpu_->moe_route(logits, &bias, nullptr, rp, ids, wts).ok());
    ASSERT_TRUE(gpu_->moe_route(dl.dev, &db.dev, nullptr, rp, dids.dev, dw.dev).ok());
    expect_close("moe_route ids (E=256)", ids, dids, 0);
    expect_close("moe_route weights (E=256)", wts, dw, 2e-6);
  }
  for (int64_t hc : {3, 4, 6}) {  // warp path (hc² <= 32) and thread path
    backend::HcParams p;
    p.hc = hc;
    Tensor mix = randn({S, (2 + hc) * hc}), base = randn({(2 + hc) * hc}), scale = randn({3});
    Tensor pre = Tensor::empty(DType::kF32, {S, hc}), post = Tensor::empty(DType::kF32, {S, hc}),
           comb = Tensor::empty(DType::kF32, {S, hc, hc});
    auto dm = on_device(mix), dbase = on_device(base), dsc = on_device(scale),
         dpre = on_device(pre), dpost = on_device(post), dcomb = on_device(comb);
    ASSERT_TRUE(cpu_->hc_coeffs(mix, base, scale, p, pre, &post, &comb).ok());
    ASSERT_TRUE(gpu_->hc_coeffs(dm.dev, dbase.dev, dsc.dev, p, dpre.dev, &dpost.dev, &dcomb.dev).ok());
    expect_close("hc_coeffs pre", pre, dpre, 1e-6);
    expect_close("hc_coeffs comb", comb, dcomb, 1e-5);
  }
  // Indexer: 3 sequences' keys back to back, rows of each reading their own.
  const int64_t nI = 64, cI = 128, R = 9;
  const std::vector<int64_t> Tseq{300, 17, 129};
  std::vector<int32_t> start(R), vis(R);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t sq = r % 3;
    start[r] = static_cast<int32_t>(sq == 0 ? 0 : sq == 1 ? 300 : 317);
    vis[r] = static_cast<int32_t>(rng_() % (Tseq[sq] + 1));
  }
  Tensor q = randn({R, nI, cI}, 0.2f), w = randn({R, nI}), keys = randn({446, cI});
  Tensor st = Tensor::from_i32({R}, start), vt = Tensor::from_i32({R}, vis);
  Tensor out = Tensor::empty(DType::kF32, {R, 300});
  auto dq = on_device(q), dw = on_device(w), dk = on_device(keys), dst = on_device(st),
       dvt = on_device(vt), dout = on_device(out);
  ASSERT_TRUE(cpu_->indexer_scores(q, w, keys, vt, 0.125f, 0.088f, out, &st).ok());
  ASSERT_TRUE(gpu_->indexer_scores(dq.dev, dw.dev, dk.dev, dvt.dev, 0.125f, 0.088f, dout.dev, &dst.dev).ok());
  expect_close("indexer_scores (key_start)", out, dout, 2e-6);
  // Top-k 512 on both GPU paths (bitonic in shared memory up to 4096 scores, radix sort above),
  // with exact ties and -inf tails: ids must equal the CPU's.
  for (int64_t T : {2048, 4096, 5000}) {
    Tensor sc = Tensor::empty(DType::kF32, {3, T});
    for (int64_t i = 0; i < sc.numel(); ++i) {
      const int r = static_cast<int>(rng_() % 8);
      sc.data<float>()[i] = (i % T) > T - 300 ? -INFINITY : r == 0 ? -0.0f : r == 1 ? 0.0f
                            : r < 4 ? static_cast<float>(rng_() % 7) : randn({1}).data<float>()[0];
    }
    Tensor tk = Tensor::empty(DType::kI32, {3, 512});
    auto dsc = on_device(sc), dtk = on_device(tk);
    ASSERT_TRUE(cpu_->topk(sc, 512, tk).ok());
    ASSERT_TRUE(gpu_->topk(dsc.dev, 512, dtk.dev).ok());
    expect_close("topk 512", tk, dtk, 0);
  }
  Tensor picks = Tensor::from_i32({3, 4}, {5, 1, -1, -1, -1, -1, -1, -1, 3, 0, 2, 7});
  Tensor layout = Tensor::from_i32({3, 3}, {1, 2, 10, 3, 0, 20, 4, 4, 30});
  Tensor dst_ids = Tensor::from_i32({9}, {100, 0, 0, 100, 0, 0, 0, 0, 100});
  auto dp = on_device(picks), dlay = on_device(layout), dd = on_device(dst_ids);
  ASSERT_TRUE(cpu_->place_ids(picks, layout, dst_ids).ok());
  ASSERT_TRUE(gpu_->place_ids(dp.dev, dlay.dev, dd.dev).ok());
  expect_close("place_ids", dst_ids, dd, 0);
  auto dbad = on_device(Tensor::from_i32({3, 3}, {1, 3, 10, 3, 0, 20, 4, 4, 30}));
  ASSERT_TRUE(gpu_->place_ids(dp.dev, dbad.dev, dd.dev).ok());
  const Status e = gpu_->synchronize();
  EXPECT_EQ(e.code(), StatusCode::kOutOfRange);
  EXPECT_NE(e.message().find("place_ids"), std::string::npos) << e.message();
}

TEST_F(CudaOps, HyperConnections) {
  const int64_t S = 11, hc = 4, H = 50;
  backend::HcParams p;
  Tensor mix = randn({S, (2 + hc) * hc}), base = randn({(2 + hc) * hc}), scale = randn({3});
  Tensor pre = Tensor::empty(DType::kF32, {S, hc}), post = Tensor::empty(DType::kF32, {S, hc}),
         comb = Tensor::empty(DType::kF32, {S, hc, hc});
  auto dm = on_device(mix), dbase = on_device(base), dsc = on_device(scale), dpre = on_device(pre),
       dpost = on_device(post), dcomb = on_device(comb);
  ASSERT_TRUE(cpu_->hc_coeffs(mix, base, scale, p, pre, &post, &comb).ok());
  ASSERT_TRUE(gpu_->hc_coeffs(dm.dev, dbase.dev, dsc.dev, p, dpre.dev, &dpost.dev, &dcomb.dev).ok());
  expect_close("hc_coeffs pre", pre, dpre, 1e-6);
  expect_close("hc_coeffs post", post, dpost, 1e-6);
  expect_close("hc_coeffs comb", comb, dcomb, 1e-5);
  Tensor X = randn({S, hc, H}), y = randn({S, H});
  Tensor col = Tensor::empty(DType::kF32, {S, H}), ex = Tensor::empty(DType::kF32, {S, hc, H});
  auto dX = on_device(X), dy = on_device(y), dcol = on_device(col), dex = on_device(ex);
  ASSERT_TRUE(cpu_->hc_collapse(X, pre, col).ok());
  ASSERT_TRUE(gpu_->hc_collapse(dX.dev, dpre.dev, dcol.dev).ok());
  expect_close("hc_collapse", col, dcol, 1e-6);
  ASSERT_TRUE(cpu_->hc_expand(X, y, post, comb, ex).ok());
  ASSERT_TRUE(gpu_->hc_expand(dX.dev, dy.dev, dpost.dev, dcomb.dev, dex.dev).ok());
  expect_close("hc_expand", ex, dex, 1e-5);
}

// ---- hc_pre: one whole mHC site (the fused kernels of hc_site.cu for every S, hc <= 4) ----
// (tests/cuda/cuda_hc_test.cpp has the session-7 tests: S up to 2048, bits across S / modes.)

// The inputs of one site at a given shape; fn scaled so that mix = rms(X)·fnᵀ is O(1).
struct HcSite {
  Tensor x, fn, base, scale;
};

// max |got - want| / max |want| over all elements of two host tensors, the worst index printed.
void expect_rel_close(const char* what, const Tensor& want, const Tensor& got, double bound,
                      uint32_t seed) {
  ASSERT_EQ(want.numel(), got.numel()) << what;
  double scale = 1e-30, worst = 0;
  int64_t wi = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    scale = std::max(scale, std::fabs(double(want.data<float>()[i])));
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double e = std::fabs(double(want.data<float>()[i]) - got.data<float>()[i]) / scale;
    if (!(e <= worst)) worst = e, wi = i;  // NaN counts as worst
  }
  EXPECT_LE(worst, bound) << what << ": worst rel error " << worst << " at flat index " << wi
                          << " (want " << want.data<float>()[wi] << ", got "
                          << got.data<float>()[wi] << ") seed " << seed;
}

class CudaHcPre : public CudaOps {
 protected:
  HcSite site(int64_t S, int64_t hc, int64_t H, bool head) {
    const int64_t N = head ? hc : (2 + hc) * hc;
    return HcSite{randn({S, hc, H}, 2.f), randn({N, hc * H}, 2.f / std::sqrt(float(hc * H))),
                  randn({N}, 0.5f), randn({head ? 1 : 3}, 0.5f)};
  }
  // The site on the CPU (reference mode, the composed ops), on the GPU through hc_pre (fused when
  // supported), and on the GPU through the base implementation (the composed CUDA ops); every
  // output of the three compared pairwise against the bounds.
  void check_site(const char* what, int64_t S, int64_t hc, int64_t H, bool head) {
    SCOPED_TRACE(std::string(what) + " S=" + std::to_string(S) + " hc=" + std::to_string(hc) +
                 " H=" + std::to_string(H) + (head ? " head" : " site"));
    const HcSite in = site(S, hc, H, head);
    backend::HcParams p;
    p.hc = hc;
    const float eps = 1e-6f;
    Tensor post = Tensor::empty(DType::kF32, {S, hc}), comb = Tensor::empty(DType::kF32, {S, hc, hc}),
           col = Tensor::empty(DType::kF32, {S, H});
    ASSERT_TRUE(cpu_->hc_pre(in.x, in.fn, in.base, in.scale, p, eps, head ? nullptr : &post,
                             head ? nullptr : &comb, col).ok());
    auto dx = on_device(in.x), dfn = on_device(in.fn), dbase = on_device(in.base),
         dsc = on_device(in.scale);
    Tensor got[2][3];  // [fused, composed][post, comb, collapsed]
    for (int composed = 0; composed < 2; ++composed) {
      auto dpost = on_device(post), dcomb = on_device(comb), dcol = on_device(col);
      Tensor* pp = head ? nullptr : &dpost.dev;
      Tensor* pc = head ? nullptr : &dcomb.dev;
      const Status st =
          composed ? gpu_->backend::Backend::hc_pre(dx.dev, dfn.dev, dbase.dev, dsc.dev, p, eps,
                                                    pp, pc, dcol.dev)
                   : gpu_->hc_pre(dx.dev, dfn.dev, dbase.dev, dsc.dev, p, eps, pp, pc, dcol.dev);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(gpu_->synchronize().ok());
      got[composed][0] = to_host(dpost);
      got[composed][1] = to_host(dcomb);
      got[composed][2] = to_host(dcol);
    }
    // Bounds: mix = rms(X)·fnᵀ (|mix| ~ 2) differs by fp32 summation order over K = 16384 terms:
    // the CPU reference sums sequentially, a random walk of ~128 half-ulp steps of the partial
    // sum, ~1e-5 (3e-5 at 3σ); |scale| <~ 1.5, so post (2·sigmoid, slope <= 0.5) moves by <~ 2.3e-5
    // of its O(1) max, comb (exp of the logits, then Sinkhorn normalisations) by <~ 1e-4
    // relative, collapsed (Σ pre·X) by <~ 4·1e-5·|X|. Bounds: 1e-4, 5e-4, 1e-4 — an indexing or
    // orientation error moves them by O(1).
    const char* names[2] = {"fused vs cpu", "fused vs cuda composed"};
    for (int r = 0; r < 2; ++r) {
      const Tensor* ref = r == 0 ? nullptr : got[1];
      if (!head) {
        expect_rel_close((std::string(names[r]) + ": post").c_str(), ref ? ref[0] : post,
                         got[0][0], 1e-4, seed_);
        expect_rel_close((std::string(names[r]) + ": comb").c_str(), ref ? ref[1] : comb,
                         got[0][1], 5e-4, seed_);
      }
      expect_rel_close((std::string(names[r]) + ": collapsed").c_str(), ref ? ref[2] : col,
                       got[0][2], 1e-4, seed_);
    }
    // The composed CUDA path against the CPU too (the baseline the fused path replaces).
    if (!head) expect_rel_close("cuda composed vs cpu: comb", comb, got[1][1], 5e-4, seed_);
    expect_rel_close("cuda composed vs cpu: collapsed", col, got[1][2], 1e-4, seed_);
  }
};

TEST_F(CudaHcPre, FusedMatchesCpuAndComposedAtFlashShapes) {
  for (int64_t S : {1, 3, 16, 64}) {
    check_site("V4-Flash site", S, 4, 4096, false);
    check_site("V4-Flash head", S, 4, 4096, true);
  }
}

TEST_F(CudaHcPre, OddSizesAndFallbacksMatchCpu) {
  check_site("tail chunk", 5, 3, 100, false);  // K = 300: a partial 128-column chunk
  check_site("tiny H", 2, 4, 33, false);
  check_site("head tail", 7, 4, 45, true);
  check_site("hc 6 (composed fallback)", 3, 6, 64, false);
  check_site("S 65 (tile kernel)", 65, 4, 256, false);
}

TEST_F(CudaHcPre, FusedRowBitsDoNotDependOnS) {
  const int64_t hc = 4, H = 4096, Smax = 64;
  const HcSite in = site(Smax, hc, H, false);
  backend::HcParams p;
  auto dx = on_device(in.x), dfn = on_device(in.fn), dbase = on_device(in.base),
       dsc = on_device(in.scale);
  std::vector<Tensor> first;  // S = 1's outputs: post, comb, collapsed of row 0
  for (int64_t S : {1, 2, 17, 64}) {
    Tensor post = Tensor::empty(DType::kF32, {S, hc}), comb = Tensor::empty(DType::kF32, {S, hc, hc}),
           col = Tensor::empty(DType::kF32, {S, H});
    auto dpost = on_device(post), dcomb = on_device(comb), dcol = on_device(col);
    ASSERT_TRUE(gpu_->hc_pre(dx.dev.rows(0, S), dfn.dev, dbase.dev, dsc.dev, p, 1e-6f, &dpost.dev,
                             &dcomb.dev, dcol.dev).ok());
    ASSERT_TRUE(gpu_->synchronize().ok());
    std::vector<Tensor> row0{to_host(dpost.dev.rows(0, 1)), to_host(dcomb.dev.rows(0, 1)),
                             to_host(dcol.dev.rows(0, 1))};
    if (first.empty()) {
      first = row0;
      continue;
    }
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(0, std::memcmp(first[i].raw(), row0[i].raw(), first[i].nbytes()))
          << "output " << i << " of row 0 differs at S = " << S << " (seed " << seed_ << ")";
  }
}

// hc_expand_pre on the fused kernels: the new streams bitwise equal to hc_expand's, the site's
// outputs bitwise equal to hc_pre's on those streams (same kernels, same staged values), and
// within the bounds of the CPU's two composed calls.
TEST_F(CudaHcPre, ExpandPreEqualsExpandThenPre) {
  const int64_t hc = 4, H = 4096;
  for (int64_t S : {1, 16, 64}) {
    SCOPED_TRACE("S=" + std::to_string(S));
    const HcSite in = site(S, hc, H, false);
    Tensor y = randn({S, H}), post_prev = randn({S, hc}, 0.5f), comb_prev = randn({S, hc, hc}, 0.3f);
    backend::HcParams p;
    auto dprev = on_device(in.x), dfn = on_device(in.fn), dbase = on_device(in.base),
         dsc = on_device(in.scale), dy = on_device(y), dpp = on_device(post_prev),
         dcp = on_device(comb_prev);
    Tensor outs[2][4];  // [fused, two calls][streams, post, comb, collapsed]
    for (int two = 0; two < 2; ++two) {
      auto dx = on_device(Tensor::empty(DType::kF32, {S, hc, H}));
      auto dpost = on_device(Tensor::empty(DType::kF32, {S, hc}));
      auto dcomb = on_device(Tensor::empty(DType::kF32, {S, hc, hc}));
      auto dcol = on_device(Tensor::empty(DType::kF32, {S, H}));
      if (two) {
        ASSERT_TRUE(gpu_->hc_expand(dprev.dev, dy.dev, dpp.dev, dcp.dev, dx.dev).ok());
        ASSERT_TRUE(gpu_->hc_pre(dx.dev, dfn.dev, dbase.dev, dsc.dev, p, 1e-6f, &dpost.dev,
                                 &dcomb.dev, dcol.dev).ok());
      } else {
        ASSERT_TRUE(gpu_->hc_expand_pre(dprev.dev, dy.dev, dpp.dev, dcp.dev, dx.dev, dfn.dev,
                                        dbase.dev, dsc.dev, p, 1e-6f, &dpost.dev, &dcomb.dev,
                                        dcol.dev).ok());
      }
      ASSERT_TRUE(gpu_->synchronize().ok());
      outs[two][0] = to_host(dx);
      outs[two][1] = to_host(dpost);
      outs[two][2] = to_host(dcomb);
      outs[two][3] = to_host(dcol);
    }
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(0, std::memcmp(outs[0][i].raw(), outs[1][i].raw(), outs[0][i].nbytes()))
          << "output " << i << " (streams, post, comb, collapsed) differs; seed " << seed_;
    Tensor x = Tensor::empty(DType::kF32, {S, hc, H}), post = Tensor::empty(DType::kF32, {S, hc}),
           comb = Tensor::empty(DType::kF32, {S, hc, hc}), col = Tensor::empty(DType::kF32, {S, H});
    ASSERT_TRUE(cpu_->hc_expand_pre(in.x, y, post_prev, comb_prev, x, in.fn, in.base, in.scale, p,
                                    1e-6f, &post, &comb, col).ok());
    expect_rel_close("hc_expand_pre streams vs cpu", x, outs[0][0], 2e-6, seed_);
    expect_rel_close("hc_expand_pre post vs cpu", post, outs[0][1], 1e-4, seed_);
    expect_rel_close("hc_expand_pre comb vs cpu", comb, outs[0][2], 5e-4, seed_);
    expect_rel_close("hc_expand_pre collapsed vs cpu", col, outs[0][3], 1e-4, seed_);
  }
}

// Session 7: --batch-invariant runs the fused kernels too (a token's bits do not depend on S):
// the batch-invariant backend's hc_pre is bitwise the default backend's (S 3 and 200; above
// CudaBackend::kHcSiteMaxRows the default backend runs the composed path).
TEST_F(CudaHcPre, BatchInvariantBackendUsesTheFusedKernels) {
  CudaBackendOptions o;
  o.batch_invariant = true;
  auto bi = CudaBackend::create(o);
  ASSERT_TRUE(bi.ok()) << bi.status().to_string();
  const int64_t hc = 4, H = 512;
  for (int64_t S : {int64_t{3}, CudaBackend::kHcSiteMaxRows - 56}) {
    const HcSite in = site(S, hc, H, false);
    backend::HcParams p;
    auto dx = on_device(in.x), dfn = on_device(in.fn), dbase = on_device(in.base),
         dsc = on_device(in.scale);
    Tensor outs[2][3];
    for (int b = 0; b < 2; ++b) {
      CudaBackend& be = b == 0 ? **bi : *gpu_;
      auto dpost = on_device(Tensor::empty(DType::kF32, {S, hc}));
      auto dcomb = on_device(Tensor::empty(DType::kF32, {S, hc, hc}));
      auto dcol = on_device(Tensor::empty(DType::kF32, {S, H}));
      const Status st = be.hc_pre(dx.dev, dfn.dev, dbase.dev, dsc.dev, p, 1e-6f, &dpost.dev,
                                  &dcomb.dev, dcol.dev);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(be.synchronize().ok());
      outs[b][0] = to_host(dpost);
      outs[b][1] = to_host(dcomb);
      outs[b][2] = to_host(dcol);
    }
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(0, std::memcmp(outs[0][i].raw(), outs[1][i].raw(), outs[0][i].nbytes()))
          << "output " << i << " at S = " << S << " (seed " << seed_ << ")";
  }
}

TEST_F(CudaHcPre, BadArgumentsAreNamed) {
  const int64_t S = 2, hc = 4, H = 256;
  const HcSite in = site(S, hc, H, false);
  backend::HcParams p;
  auto dx = on_device(in.x), dbase = on_device(in.base), dsc = on_device(in.scale);
  auto dfn_bad = on_device(randn({24, hc * H - 4}));
  auto dpost = on_device(Tensor::empty(DType::kF32, {S, hc}));
  auto dcomb = on_device(Tensor::empty(DType::kF32, {S, hc, hc}));
  auto dcol = on_device(Tensor::empty(DType::kF32, {S, H}));
  Status st = gpu_->hc_pre(dx.dev, dfn_bad.dev, dbase.dev, dsc.dev, p, 1e-6f, &dpost.dev,
                           &dcomb.dev, dcol.dev);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("fn"), std::string::npos) << st.message();
  auto dfn = on_device(in.fn);
  st = gpu_->hc_pre(dx.dev, dfn.dev, dbase.dev, dsc.dev, p, 1e-6f, nullptr, nullptr, dcol.dev);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("post"), std::string::npos) << st.message();
}

// rms_norm_rope: one kernel, bitwise the rms_norm + rope kernels at the V4 shapes (q heads
// [S, 64, 512] unweighted, kv [S, 1, 512] weighted, 64 rotated channels) and a half-leading
// layout; within rope's bound of the CPU; in place too.
TEST_F(CudaOps, RmsNormRopeFusedEqualsTheTwoKernels) {
  struct Case { int64_t S, nh, D, half; bool weighted; backend::RopeStyle style; };
  const Case cases[] = {{1, 64, 512, 32, false, backend::RopeStyle::kInterleavedTrailing},
                        {16, 64, 512, 32, false, backend::RopeStyle::kInterleavedTrailing},
                        {3, 1, 512, 32, true, backend::RopeStyle::kInterleavedTrailing},
                        {5, 3, 100, 20, true, backend::RopeStyle::kHalfLeading}};
  for (const Case& c : cases) {
    SCOPED_TRACE("S=" + std::to_string(c.S) + " nh=" + std::to_string(c.nh) + " D=" +
                 std::to_string(c.D));
    Tensor x = randn({c.S, c.nh, c.D}, 2.f), w = randn({c.D}), inv = randn({c.half}, 0.1f),
           pos = randint({c.S}, 0, 5000);
    auto dx = on_device(x), dw = on_device(w), dinv = on_device(inv), dpos = on_device(pos);
    const Tensor* pw = c.weighted ? &dw.dev : nullptr;
    // two kernels
    auto dtwo = on_device(x);
    Tensor rows = dtwo.dev.view({c.S * c.nh, c.D});
    ASSERT_TRUE(gpu_->rms_norm(rows, pw, 1e-6f, rows).ok());
    ASSERT_TRUE(gpu_->rope(dtwo.dev, dpos.dev, dinv.dev, c.style, 0.8f, false).ok());
    // fused, out of place and in place
    auto done = on_device(Tensor::empty(DType::kF32, {c.S, c.nh, c.D}));
    ASSERT_TRUE(gpu_->rms_norm_rope(dx.dev, pw, 1e-6f, dpos.dev, dinv.dev, c.style, 0.8f, done.dev).ok());
    auto dinplace = on_device(x);
    ASSERT_TRUE(gpu_->rms_norm_rope(dinplace.dev, pw, 1e-6f, dpos.dev, dinv.dev, c.style, 0.8f,
                                    dinplace.dev).ok());
    ASSERT_TRUE(gpu_->synchronize().ok());
    Tensor two = to_host(dtwo), one = to_host(done), inplace = to_host(dinplace);
    int64_t first = -1;
    for (int64_t i = 0; i < two.numel() && first < 0; ++i)
      if (std::memcmp(two.data<float>() + i, one.data<float>() + i, 4) != 0) first = i;
    EXPECT_EQ(first, -1) << "fused != rms_norm + rope at element " << first << ": "
                         << (first >= 0 ? two.data<float>()[first] : 0.f) << " vs "
                         << (first >= 0 ? one.data<float>()[first] : 0.f) << ", seed " << seed_;
    EXPECT_EQ(0, std::memcmp(two.raw(), inplace.raw(), two.nbytes())) << "in place differs";
    Tensor want = Tensor::empty(DType::kF32, {c.S, c.nh, c.D});
    ASSERT_TRUE(cpu_->rms_norm_rope(x, c.weighted ? &w : nullptr, 1e-6f, pos, inv, c.style, 0.8f,
                                    want).ok());
    expect_close("rms_norm_rope vs cpu", want, done, 5e-5);  // sin/cos of large fp32 angles
  }
}

TEST_F(CudaOps, EmbeddingDequantizeAddCopy) {
  Tensor table = randn({30, 17}), tid = randint({8}, 0, 29), emb = Tensor::empty(DType::kF32, {8, 17});
  auto dt = on_device(table), dtid = on_device(tid), demb = on_device(emb);
  ASSERT_TRUE(cpu_->embedding(table, tid, emb).ok());
  ASSERT_TRUE(gpu_->embedding(dt.dev, dtid.dev, demb.dev).ok());
  expect_close("embedding", emb, demb, 0);
  auto dbad = on_device(Tensor::from_i32({2}, {3, 30}));
  Tensor e2 = Tensor::empty(DType::kF32, {2, 17});
  auto de2 = on_device(e2);
  ASSERT_TRUE(gpu_->embedding(dt.dev, dbad.dev, de2.dev).ok());
  Status st = gpu_->synchronize();
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();

  // FP8 block-scaled with ragged blocks and F8_E8M0 scales.
  const int64_t N = 130, K = 200;
  Tensor w8 = Tensor::empty(DType::kF8E4M3, {N, K});
  for (int64_t i = 0; i < N * K; ++i) {
    uint8_t v;
    do v = static_cast<uint8_t>(rng_()); while ((v & 0x7F) == 0x7F);
    w8.data<uint8_t>()[i] = v;
  }
  Tensor s8 = Tensor::empty(DType::kF8E8M0, {2, 2});
  for (int i = 0; i < 4; ++i) s8.data<uint8_t>()[i] = static_cast<uint8_t>(120 + rng_() % 10);
  Tensor deq = Tensor::empty(DType::kF32, {N, K});
  auto dw8 = on_device(w8), ds8 = on_device(s8), ddeq = on_device(deq);
  ASSERT_TRUE(cpu_->dequantize(w8, &s8, 128, 128, deq).ok());
  ASSERT_TRUE(gpu_->dequantize(dw8.dev, &ds8.dev, 128, 128, ddeq.dev).ok());
  expect_close("dequantize fp8", deq, ddeq, 0);
  Tensor w4 = Tensor::empty(DType::kI8, {N, K / 2});
  for (int64_t i = 0; i < N * K / 2; ++i) w4.data<uint8_t>()[i] = static_cast<uint8_t>(rng_());
  Tensor s4 = Tensor::empty(DType::kF8E8M0, {N, (K + 31) / 32});
  for (int64_t i = 0; i < s4.numel(); ++i) s4.data<uint8_t>()[i] = static_cast<uint8_t>(120 + rng_() % 10);
  auto dw4 = on_device(w4), ds4 = on_device(s4);
  ASSERT_TRUE(cpu_->dequantize(w4, &s4, 1, 32, deq).ok());
  ASSERT_TRUE(gpu_->dequantize(dw4.dev, &ds4.dev, 1, 32, ddeq.dev).ok());
  expect_close("dequantize fp4", deq, ddeq, 0);

  Tensor a = randn({6, 7}), b = randn({6, 7}), c = Tensor::empty(DType::kF32, {6, 7});
  auto da = on_device(a), db = on_device(b), dc = on_device(c);
  ASSERT_TRUE(cpu_->add(a, b, c).ok());
  ASSERT_TRUE(gpu_->add(da.dev, db.dev, dc.dev).ok());
  expect_close("add", c, dc, 0);
  ASSERT_TRUE(gpu_->copy(da.dev, dc.dev).ok());
  expect_close("copy", a, dc, 0);
  // Host-side shape checks name the op and the argument.
  Tensor bad = Tensor::empty(DType::kF32, {6, 8});
  auto dbadt = on_device(bad);
  Status s2 = gpu_->add(da.dev, dbadt.dev, dc.dev);
  EXPECT_EQ(s2.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s2.message().find("add"), std::string::npos);
}

TEST_F(CudaOps, CompressorSlotsCsaAndHca) {
  const int64_t m = 4, d = 13;
  for (int64_t coff : {1, 2})
    for (int64_t n : {1, 3}) {
      Tensor kv = randn({n * m, coff * d}), gate = randn({n * m, coff * d}), ape = randn({m, coff * d});
      Tensor ok = randn({m, d}), og = randn({m, d});
      Tensor values = Tensor::empty(DType::kF32, {n, coff * m, d});
      Tensor scores = Tensor::empty(DType::kF32, {n, coff * m, d});
      Tensor nk = Tensor::empty(DType::kF32, {m, d}), ng = Tensor::empty(DType::kF32, {m, d});
      auto dkv = on_device(kv), dg = on_device(gate), da = on_device(ape), dok = on_device(ok),
           dog = on_device(og), dv = on_device(values), ds = on_device(scores);
      const bool csa = coff == 2;
      for (bool with_overlap : {false, true}) {
        if (with_overlap && !csa) continue;
        Tensor ok2 = ok.clone(), og2 = og.clone();
        auto dok2 = on_device(ok2), dog2 = on_device(og2);
        // The next overlap aliases the overlap input, as the model uses it.
        ASSERT_TRUE(cpu_->compressor_slots(kv, gate, ape, with_overlap ? &ok2 : nullptr,
                                           with_overlap ? &og2 : nullptr, m, values, scores,
                                           csa ? &ok2 : nullptr, csa ? &og2 : nullptr).ok());
        ASSERT_TRUE(gpu_->compressor_slots(dkv.dev, dg.dev, da.dev,
                                           with_overlap ? &dok2.dev : nullptr,
                                           with_overlap ? &dog2.dev : nullptr, m, dv.dev, ds.dev,
                                           csa ? &dok2.dev : nullptr, csa ? &dog2.dev : nullptr).ok());
        expect_close("compressor_slots values", values, dv, 0);
        expect_close("compressor_slots scores", scores, ds, 0);
        if (csa) {
          expect_close("compressor_slots next overlap kv", ok2, dok2, 0);
          expect_close("compressor_slots next overlap gate", og2, dog2, 0);
        }
      }
    }
}

TEST_F(CudaOps, BatchInvariantMatmulIsExactAcrossBatchSizes) {
  CudaBackendOptions o;
  o.batch_invariant = true;
  auto bi = CudaBackend::create(o);
  ASSERT_TRUE(bi.ok()) << bi.status().to_string();
  const int64_t N = 97, K = 301, G = 2;
  Tensor w = randn({G * N, K});
  Tensor x64 = randn({64, G * K});
  auto dw = on_device(w), dx = on_device(x64);
  std::vector<float> first_rows;  // row 0's output for every M
  for (int64_t M : {1, 7, 33, 64}) {
    Tensor out = Tensor::empty(DType::kF32, {M, G * N});
    auto dout = on_device(out);
    Tensor xm = dx.dev.rows(0, M);
    ASSERT_TRUE((*bi)->matmul(xm, dw.dev, dout.dev, G).ok());
    ASSERT_TRUE((*bi)->synchronize().ok());
    Tensor got = to_host(dout);
    if (first_rows.empty()) {
      first_rows.assign(got.data<float>(), got.data<float>() + G * N);
      Tensor ref = Tensor::empty(DType::kF32, {1, G * N});
      Tensor x1 = x64.rows(0, 1);
      ASSERT_TRUE(cpu_->matmul(x1, w, ref, G).ok());
      expect_close("matmul (batch-invariant)", ref, dout, 2e-6);
    } else {
      EXPECT_EQ(0, std::memcmp(got.data<float>(), first_rows.data(), first_rows.size() * 4))
          << "row 0 differs at M = " << M;
    }
  }
}

TEST_F(CudaOps, LinearWithStoredWeightFormats) {
  // bf16, fp8 e4m3 (128x128 ue8m0 blocks) and fp4 e2m1 (1x32 ue8m0 groups) weights read as
  // stored, against the CPU's dequantize + matmul; small M (the weight-only kernel, also with
  // --batch-invariant) and larger M (dequantize + cuBLAS); K with and without vector loads.
  CudaBackendOptions bi_opts;
  bi_opts.batch_invariant = true;
  auto bi = CudaBackend::create(bi_opts);
  ASSERT_TRUE(bi.ok());
  for (int fmt = 0; fmt < 3; ++fmt)
    for (auto [M, G, N, K] : {std::array<int64_t, 4>{1, 1, 300, 256}, {5, 2, 64, 96},
                              {17, 1, 129, 160}, {40, 1, 33, 64}, {3, 1, 7, 1056}}) {
      if (fmt == 2 && K % 32 != 0) continue;
      const int64_t R = G * N;
      backend::Weight w;
      Tensor deq = Tensor::empty(DType::kF32, {R, K});
      if (fmt == 0) {
        w.w = Tensor::empty(DType::kBF16, {R, K});
        for (int64_t i = 0; i < R * K; ++i) w.w.data<uint16_t>()[i] = static_cast<uint16_t>(0x3C00 + rng_() % 0x0800) ^ (rng_() & 0x8000);
      } else {
        w.w = Tensor::empty(fmt == 1 ? DType::kF8E4M3 : DType::kF4E2M1, {R, K});
        for (uint64_t i = 0; i < w.w.nbytes(); ++i) {
          uint8_t b = static_cast<uint8_t>(rng_());
          if (fmt == 1 && (b & 0x7F) == 0x7F) b = 0x3F;  // no NaN codes
          w.w.data<uint8_t>()[i] = b;
        }
        w.block_rows = fmt == 1 ? 128 : 1;
        w.block_cols = fmt == 1 ? 128 : 32;
        w.scale = Tensor::empty(DType::kF8E8M0, {(R + w.block_rows - 1) / w.block_rows,
                                                 (K + w.block_cols - 1) / w.block_cols});
        for (int64_t i = 0; i < w.scale.numel(); ++i) w.scale.data<uint8_t>()[i] = static_cast<uint8_t>(122 + rng_() % 8);
      }
      ASSERT_TRUE(cpu_->dequantize(w.w, w.scale.defined() ? &w.scale : nullptr, w.block_rows,
                                   w.block_cols, deq).ok());
      Tensor x = randn({M, G * K}), out = Tensor::empty(DType::kF32, {M, R});
      ASSERT_TRUE(cpu_->matmul(x, deq, out, G).ok());
      auto dx = on_device(x), dwt = on_device(w.w);
      backend::Weight dw = w;
      dw.w = dwt.dev;
      Pair dsc;
      if (w.scale.defined()) {
        dsc = on_device(w.scale);
        dw.scale = dsc.dev;
      }
      for (CudaBackend* be : {gpu_.get(), bi->get()}) {
        Tensor z = Tensor::empty(DType::kF32, {M, R});
        auto dout = on_device(z);
        Status st = be->linear(dx.dev, dw, dout.dev, G);
        ASSERT_TRUE(st.ok()) << st.to_string();
        ASSERT_TRUE(be->synchronize().ok());
        expect_close(fmt == 0 ? "linear bf16" : fmt == 1 ? "linear fp8" : "linear fp4", out, dout, 1e-5);
      }
    }
}

TEST_F(CudaOps, MoeExpertsInPlaceMatchGroupedCpu) {
  // FP4 routed experts (as in the release) run in place on the device (small batch, and always
  // with --batch-invariant) against the CPU's grouped path on the dequantized weights.
  CudaBackendOptions bi_opts;
  bi_opts.batch_invariant = true;
  auto bi = CudaBackend::create(bi_opts);
  ASSERT_TRUE(bi.ok());
  const int64_t E = 5, I = 64, H = 96, k = 2;
  auto fp4 = [&](int64_t R, int64_t K, backend::Weight* host, Tensor* deq) {
    host->w = Tensor::empty(DType::kF4E2M1, {R, K});
    for (uint64_t i = 0; i < host->w.nbytes(); ++i) host->w.data<uint8_t>()[i] = static_cast<uint8_t>(rng_());
    host->block_rows = 1;
    host->block_cols = 32;
    host->scale = Tensor::empty(DType::kF8E8M0, {R, K / 32});
    for (int64_t i = 0; i < host->scale.numel(); ++i) host->scale.data<uint8_t>()[i] = static_cast<uint8_t>(120 + rng_() % 6);
    *deq = Tensor::empty(DType::kF32, {R, K});
    ASSERT_TRUE(cpu_->dequantize(host->w, &host->scale, 1, 32, *deq).ok());
  };
  backend::ExpertSet cpu_set, gpu_set, bi_set;
  std::vector<Pair> keep;  // device copies stay alive
  for (int64_t e = 0; e < E; ++e)
    for (int proj = 0; proj < 2; ++proj) {
      backend::Weight hw;
      Tensor deq;
      fp4(proj == 0 ? 2 * I : H, proj == 0 ? H : I, &hw, &deq);
      (proj == 0 ? cpu_set.gate_up : cpu_set.down).push_back(backend::Weight::of(deq));
      keep.push_back(on_device(hw.w));
      keep.push_back(on_device(hw.scale));
      backend::Weight dw = hw;
      dw.w = keep[keep.size() - 2].dev;
      dw.scale = keep.back().dev;
      (proj == 0 ? gpu_set.gate_up : gpu_set.down).push_back(dw);
    }
  bi_set = gpu_set;
  ASSERT_TRUE(gpu_->prepare_experts(gpu_set).ok());
  ASSERT_TRUE((*bi)->prepare_experts(bi_set).ok());
  ASSERT_NE(gpu_set.prepared, nullptr);
  // S = 100: 200 slots, the default mode's host-grouping fallback on the device.
  for (int64_t S : {1, 7, 100}) {
    Tensor x = randn({S, H}), ids = randint({S, k}, 0, E - 1), w = randn({S, k});
    Tensor out = randn({S, H});
    Tensor want = out.clone();
    ASSERT_TRUE(cpu_->moe_experts(x, ids, w, cpu_set, 7.0f, want).ok());
    auto dx = on_device(x), dids = on_device(ids), dw = on_device(w);
    for (auto [be, set] : {std::pair<CudaBackend*, backend::ExpertSet*>{gpu_.get(), &gpu_set},
                           {bi->get(), &bi_set}}) {
      // Session 13, moe_experts_set: whatever out holds (random values, a NaN), the bits of
      // moe_experts into zeros; then a plain moe_experts adds again (the mode does not leak).
      Tensor zeros = Tensor::empty(DType::kF32, {S, H});
      std::memset(zeros.raw(), 0, zeros.nbytes());
      auto dzero = on_device(zeros);
      ASSERT_TRUE(be->moe_experts(dx.dev, dids.dev, dw.dev, *set, 7.0f, dzero.dev).ok());
      Tensor junk = randn({S, H});
      junk.data<float>()[S * H / 2] = std::nanf("");
      auto dset = on_device(junk);
      Status st = be->moe_experts_set(dx.dev, dids.dev, dw.dev, *set, 7.0f, dset.dev);
      ASSERT_TRUE(st.ok()) << st.to_string();
      auto dout = on_device(out);
      st = be->moe_experts(dx.dev, dids.dev, dw.dev, *set, 7.0f, dout.dev);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(be->synchronize().ok());
      expect_close("moe_experts", want, dout, 1e-5);
      const Tensor set_h = to_host(dset), zero_h = to_host(dzero);
      EXPECT_EQ(0, std::memcmp(set_h.raw(), zero_h.raw(), set_h.nbytes()))
          << "moe_experts_set vs moe_experts into zeros, S = " << S << " seed " << seed_;
    }
  }
  // A bad expert id is reported by synchronize(), naming the error.
  Tensor x = randn({1, H}), ids = Tensor::from_i32({1, k}, {0, static_cast<int32_t>(E)}), w = randn({1, k});
  auto dx = on_device(x), dids = on_device(ids), dw = on_device(w);
  Tensor z = Tensor::empty(DType::kF32, {1, H});
  auto dout = on_device(z);
  ASSERT_TRUE((*bi)->moe_experts(dx.dev, dids.dev, dw.dev, bi_set, 7.0f, dout.dev).ok());
  EXPECT_EQ((*bi)->synchronize().code(), StatusCode::kOutOfRange);
}

TEST_F(CudaOps, AllocUploadDownload) {
  Tensor h = randn({37, 5});
  auto t = gpu_->alloc(DType::kF32, {37, 5});
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->on_device());
  ASSERT_TRUE(gpu_->upload(h, *t).ok());
  Tensor back = Tensor::empty(DType::kF32, {37, 5});
  ASSERT_TRUE(gpu_->download(*t, back).ok());
  EXPECT_EQ(0, std::memcmp(back.raw(), h.raw(), h.nbytes()));
  auto z = gpu_->alloc(DType::kI32, {1000});  // zero-filled, also when a block is reused
  ASSERT_TRUE(z.ok());
  Tensor zh = Tensor::empty(DType::kI32, {1000});
  zh.data<int32_t>()[0] = 7;
  ASSERT_TRUE(gpu_->download(*z, zh).ok());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(zh.data<int32_t>()[i], 0) << i;
  EXPECT_EQ(gpu_->upload(h, zh).code(), StatusCode::kInvalidArgument);  // dtype/size mismatch
}

// Token ids that stay on the device (session 14): scatter_ids and gather_ids give the CPU
// backend's ids on random inputs; an index outside its tensor is reported by the next sync;
// download_async tickets — three in flight, waited out of order — each give their own tensor's
// ids as queued (the source is overwritten after the ticket was taken), and a ticket whose work
// before it set the error flag reports that error.
TEST_F(CudaOps, TokenIdsScatterGatherAndAsyncDownload) {
  const int64_t m = 17, d = 4 * 37 + 2 * 37;
  Tensor src = randint({m}, 0, 129279), dst = randint({d}, -9, 9);
  std::vector<int32_t> map;
  for (int64_t s = 0; s < 37; ++s) {
    const int32_t from = static_cast<int32_t>(rng_() % m);
    for (int64_t j = 0; j < 4; ++j) map.insert(map.end(), {from, static_cast<int32_t>(s * 4 + j)});
    map.insert(map.end(), {from, static_cast<int32_t>(4 * 37 + 37 + s)});
  }
  Tensor map_t = Tensor::from_i32({static_cast<int64_t>(map.size()) / 2, 2}, map);
  auto dsrc = on_device(src), dmap = on_device(map_t), ddst = on_device(dst);
  ASSERT_TRUE(cpu_->scatter_ids(src, map_t, dst).ok());
  ASSERT_TRUE(gpu_->scatter_ids(dsrc.dev, dmap.dev, ddst.dev).ok());
  expect_close("scatter_ids", dst, ddst, 0);

  const int64_t V = 1000, C = 6, S = 37;
  Tensor table = randint({V, C}, 0, 255), ids = randint({S}, 0, V - 1);
  Tensor out = Tensor::empty(DType::kI32, {S, C});
  auto dtable = on_device(table), dids = on_device(ids), dout = on_device(out);
  ASSERT_TRUE(cpu_->gather_ids(table, ids, out).ok());
  ASSERT_TRUE(gpu_->gather_ids(dtable.dev, dids.dev, dout.dev).ok());
  expect_close("gather_ids", out, dout, 0);

  Tensor bad_ids = Tensor::from_i32({2}, {3, static_cast<int32_t>(V)});
  auto dbad = on_device(bad_ids);
  Tensor out2 = Tensor::empty(DType::kI32, {2, C});
  auto dout2 = on_device(out2);
  ASSERT_TRUE(gpu_->gather_ids(dtable.dev, dbad.dev, dout2.dev).ok());
  Status st = gpu_->synchronize();
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  EXPECT_NE(st.message().find("gather_ids"), std::string::npos) << st.to_string();
  Tensor bad_map = Tensor::from_i32({1, 2}, {0, static_cast<int32_t>(d)});
  auto dbad_map = on_device(bad_map);
  ASSERT_TRUE(gpu_->scatter_ids(dsrc.dev, dbad_map.dev, ddst.dev).ok());
  EXPECT_EQ(gpu_->synchronize().code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(gpu_->synchronize().ok());  // reported once

  // Three tickets in flight; each source is overwritten right after its ticket was taken.
  std::vector<Tensor> want, got;
  std::vector<std::unique_ptr<backend::Backend::PendingDownload>> tickets;
  auto dev = gpu_->empty(DType::kI32, {m});
  ASSERT_TRUE(dev.ok());
  for (int r = 0; r < 3; ++r) {
    want.push_back(randint({m}, 0, 129279));
    got.push_back(Tensor::empty(DType::kI32, {m}));
  }
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(gpu_->upload(want[r], *dev).ok());
    auto t = gpu_->download_async(*dev, got[r]);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tickets.push_back(std::move(t).value());
  }
  for (int r : {2, 0, 1}) {
    ASSERT_TRUE(tickets[r]->wait().ok()) << r;
    EXPECT_EQ(0, std::memcmp(got[r].raw(), want[r].raw(), want[r].nbytes())) << "ticket " << r;
  }
  EXPECT_EQ(tickets[0]->wait().code(), StatusCode::kFailedPrecondition);  // once
  tickets.clear();  // slots back to the pool, reused below
  ASSERT_TRUE(gpu_->gather_ids(dtable.dev, dbad.dev, dout2.dev).ok());
  auto t = gpu_->download_async(*dev, got[0]);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->wait().code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(gpu_->synchronize().ok());  // the ticket cleared the flag
  Tensor big = Tensor::empty(DType::kI32, {(64 << 10) / 4 + 1});
  auto dbig = gpu_->empty(DType::kI32, {(64 << 10) / 4 + 1});
  ASSERT_TRUE(dbig.ok());
  EXPECT_EQ(gpu_->download_async(*dbig, big).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepinfer::cuda
