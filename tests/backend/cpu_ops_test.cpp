// One op-test harness for the CPU backend: every op, in fast and in reference mode, against a
// naive scalar implementation written here (double accumulation), on fresh random inputs with
// odd sizes. Each op has its own error bound; failures print the worst element and the seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "backend/backend.h"
#include "op_test_util.h"

namespace deepinfer::backend {
namespace {

using testing::expect_close;
using testing::Rand;

std::vector<double> to_double(const Tensor& t) {
  return std::vector<double>(t.data<float>(), t.data<float>() + t.numel());
}

class CpuOps : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    CpuBackendOptions o;
    o.reference = GetParam();
    o.num_threads = 2;
    be_ = make_cpu_backend(o);
  }
  std::unique_ptr<Backend> be_;
  Rand rnd_;
};

TEST_P(CpuOps, MatmulPlainAndGrouped) {
  for (int64_t groups : {1, 3}) {
    for (int64_t M : {1, 5, 13}) {
      const int64_t K = 37 + rnd_.integer(0, 40), N = 19 + rnd_.integer(0, 70);
      Tensor x = rnd_.tensor({M, groups * K}), w = rnd_.tensor({groups * N, K});
      Tensor out = Tensor::empty(DType::kF32, {M, groups * N});
      ASSERT_TRUE(be_->matmul(x, w, out, groups).ok());
      std::vector<double> want(M * groups * N);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < groups * N; ++n) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k)
            acc += double(x.data<float>()[m * groups * K + (n / N) * K + k]) * w.data<float>()[n * K + k];
          want[m * groups * N + n] = acc;
        }
      expect_close("matmul", out, want, 1e-5, 1e-5, rnd_.seed());
    }
  }
  Tensor x = rnd_.tensor({3, 10}), w = rnd_.tensor({4, 11}), out = Tensor::empty(DType::kF32, {3, 4});
  Status st = be_->matmul(x, w, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("matmul"), std::string::npos) << st.message();
}

TEST_P(CpuOps, DequantizeBf16Fp8Fp4) {
  const int64_t N = 131, K = 160;
  // bf16
  std::vector<uint16_t> bf(N * K);
  std::vector<double> want(N * K);
  for (int64_t i = 0; i < N * K; ++i) {
    bf[i] = f32_to_bf16(rnd_.uniform(-3, 3));
    want[i] = bf16_to_f32(bf[i]);
  }
  Tensor out = Tensor::empty(DType::kF32, {N, K});
  ASSERT_TRUE(be_->dequantize(Tensor::borrow(bf.data(), DType::kBF16, {N, K}), nullptr, 1, 1, out).ok());
  expect_close("dequantize bf16", out, want, 0, 0, rnd_.seed());
  // fp8 e4m3, 128x128 ue8m0 block scales (ragged last blocks)
  std::vector<uint8_t> q(N * K), sc(2 * 2);
  for (auto& s : sc) s = static_cast<uint8_t>(120 + rnd_.integer(0, 10));
  for (int64_t i = 0; i < N * K; ++i) q[i] = f32_to_e4m3(rnd_.uniform(-400, 400));
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < K; ++c)
      want[r * K + c] = e4m3_to_f32(q[r * K + c]) * std::ldexp(1.0, sc[(r / 128) * 2 + c / 128] - 127);
  Tensor scale = Tensor::borrow(sc.data(), DType::kF8E8M0, {2, 2});
  ASSERT_TRUE(be_->dequantize(Tensor::borrow(q.data(), DType::kF8E4M3, {N, K}), &scale, 128, 128, out).ok());
  expect_close("dequantize fp8", out, want, 0, 0, rnd_.seed());
  // fp4 e2m1 packed two a byte (low nibble first), 1x32 scales
  std::vector<uint8_t> p(N * K / 2), s4(N * K / 32);
  for (auto& b : p) b = static_cast<uint8_t>(rnd_.integer(0, 255));
  for (auto& s : s4) s = static_cast<uint8_t>(124 + rnd_.integer(0, 6));
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < K; ++c) {
      const uint8_t byte = p[(r * K + c) / 2];
      want[r * K + c] = e2m1_to_f32(c % 2 ? byte >> 4 : byte & 15) * std::ldexp(1.0, s4[r * (K / 32) + c / 32] - 127);
    }
  Tensor scale4 = Tensor::borrow(s4.data(), DType::kF8E8M0, {N, K / 32});
  ASSERT_TRUE(be_->dequantize(Tensor::borrow(p.data(), DType::kU8, {N, K / 2}), &scale4, 1, 32, out).ok());
  expect_close("dequantize fp4", out, want, 0, 0, rnd_.seed());
  Tensor bad_scale = Tensor::borrow(s4.data(), DType::kF8E8M0, {N, K / 64});
  EXPECT_EQ(be_->dequantize(Tensor::borrow(p.data(), DType::kU8, {N, K / 2}), &bad_scale, 1, 32, out).code(),
            StatusCode::kInvalidArgument);
}

TEST_P(CpuOps, RmsNorm) {
  const int64_t M = 7, N = 5 + rnd_.integer(0, 300);
  Tensor x = rnd_.tensor({M, N}, -3, 3), w = rnd_.tensor({N});
  for (bool weighted : {false, true}) {
    Tensor out = Tensor::empty(DType::kF32, {M, N});
    ASSERT_TRUE(be_->rms_norm(x, weighted ? &w : nullptr, 1e-6f, out).ok());
    std::vector<double> want(M * N);
    for (int64_t m = 0; m < M; ++m) {
      double ss = 0;
      for (int64_t i = 0; i < N; ++i) ss += double(x.data<float>()[m * N + i]) * x.data<float>()[m * N + i];
      const double inv = 1 / std::sqrt(ss / N + 1e-6);
      for (int64_t i = 0; i < N; ++i)
        want[m * N + i] = x.data<float>()[m * N + i] * inv * (weighted ? w.data<float>()[i] : 1.0);
    }
    expect_close("rms_norm", out, want, 1e-6, 1e-5, rnd_.seed());
  }
}

TEST_P(CpuOps, RopeBothStylesAndInverse) {
  const int64_t S = 9, nh = 3, D = 22, r = 8;
  Tensor inv = Tensor::empty(DType::kF32, {r / 2});
  for (int64_t i = 0; i < r / 2; ++i) inv.data<float>()[i] = std::pow(1e4f, -2.f * i / r);
  Tensor pos = Tensor::empty(DType::kI32, {S});
  for (int64_t s = 0; s < S; ++s) pos.data<int32_t>()[s] = static_cast<int32_t>(rnd_.integer(0, 5000));
  for (RopeStyle style : {RopeStyle::kInterleavedTrailing, RopeStyle::kHalfLeading}) {
    Tensor x = rnd_.tensor({S, nh, D});
    Tensor y = x.clone();
    ASSERT_TRUE(be_->rope(y, pos, inv, style, 1.25f, false).ok());
    std::vector<double> want = to_double(x);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t i = 0; i < r / 2; ++i) {
          const float ang = float(pos.data<int32_t>()[s]) * inv.data<float>()[i];
          const int64_t a = style == RopeStyle::kInterleavedTrailing ? D - r + 2 * i : i;
          const int64_t b = style == RopeStyle::kInterleavedTrailing ? a + 1 : i + r / 2;
          const double va = x.data<float>()[(s * nh + h) * D + a], vb = x.data<float>()[(s * nh + h) * D + b];
          want[(s * nh + h) * D + a] = 1.25 * (va * std::cos(ang) - vb * std::sin(ang));
          want[(s * nh + h) * D + b] = 1.25 * (va * std::sin(ang) + vb * std::cos(ang));
        }
    expect_close("rope", y, want, 1e-5, 1e-5, rnd_.seed());
    ASSERT_TRUE(be_->rope(y, pos, inv, style, 0.8f, true).ok());  // 1.25 · 0.8 = 1: round trip
    expect_close("rope inverse", y, to_double(x), 1e-5, 1e-5, rnd_.seed());
  }
}

TEST_P(CpuOps, AttentionWithSinksAndGqa) {
  const int64_t S = 5, nH = 6, nKV = 3, D = 17, Dv = 11, T = 23;
  Tensor q = rnd_.tensor({S, nH, D}), k = rnd_.tensor({T, nKV, D}), v = rnd_.tensor({T, nKV, Dv});
  Tensor sinks = rnd_.tensor({nH});
  std::vector<int32_t> off{0}, ids;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = s == 2 ? 0 : rnd_.integer(1, T);  // query 2 sees no key
    for (int64_t j = 0; j < n; ++j) ids.push_back(static_cast<int32_t>(rnd_.integer(0, T - 1)));
    off.push_back(static_cast<int32_t>(ids.size()));
  }
  Tensor offs = Tensor::from_i32({S + 1}, off), kid = Tensor::from_i32({(int64_t)ids.size()}, ids);
  for (bool with_sink : {false, true}) {
    Tensor out = Tensor::empty(DType::kF32, {S, nH, Dv});
    ASSERT_TRUE(be_->attention(q, k, v, offs, kid, with_sink ? &sinks : nullptr, 0.3f, out).ok());
    std::vector<double> want(S * nH * Dv, 0.0);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < nH; ++h) {
        const int64_t g = h / (nH / nKV);
        std::vector<double> l;
        double mx = with_sink ? sinks.data<float>()[h] : -INFINITY;
        for (int64_t j = off[s]; j < off[s + 1]; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < D; ++c)
            dot += double(q.data<float>()[(s * nH + h) * D + c]) * k.data<float>()[(ids[j] * nKV + g) * D + c];
          l.push_back(dot * 0.3);
          mx = std::max(mx, l.back());
        }
        if (l.empty()) continue;
        double den = with_sink ? std::exp(sinks.data<float>()[h] - mx) : 0;
        for (double& x : l) den += (x = std::exp(x - mx));
        for (size_t j = 0; j < l.size(); ++j)
          for (int64_t c = 0; c < Dv; ++c)
            want[(s * nH + h) * Dv + c] += l[j] / den * v.data<float>()[(ids[off[s] + j] * nKV + g) * Dv + c];
      }
    expect_close("attention", out, want, 1e-5, 1e-4, rnd_.seed());
  }
  ids.push_back(T);  // out-of-range key id
  off.back() += 1;
  Tensor bad_offs = Tensor::from_i32({S + 1}, off), bad_ids = Tensor::from_i32({(int64_t)ids.size()}, ids);
  Tensor out = Tensor::empty(DType::kF32, {S, nH, Dv});
  EXPECT_EQ(be_->attention(q, k, v, bad_offs, bad_ids, nullptr, 1.f, out).code(), StatusCode::kOutOfRange);
}

TEST_P(CpuOps, SoftmaxPool) {
  const int64_t n = 5, L = 7, d = 13;
  Tensor vals = rnd_.tensor({n, L, d}), sc = rnd_.tensor({n, L, d}, -4, 4);
  for (int64_t c = 0; c < d; ++c) sc.data<float>()[c] = -std::numeric_limits<float>::infinity();
  Tensor out = Tensor::empty(DType::kF32, {n, d});
  ASSERT_TRUE(be_->softmax_pool(vals, sc, out).ok());
  std::vector<double> want(n * d);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < d; ++c) {
      double mx = -INFINITY, den = 0, acc = 0;
      for (int64_t l = 0; l < L; ++l) mx = std::max(mx, double(sc.data<float>()[(r * L + l) * d + c]));
      for (int64_t l = 0; l < L; ++l) {
        const double e = std::exp(sc.data<float>()[(r * L + l) * d + c] - mx);
        den += e;
        acc += e * vals.data<float>()[(r * L + l) * d + c];
      }
      want[r * d + c] = acc / den;
    }
  expect_close("softmax_pool", out, want, 1e-6, 1e-5, rnd_.seed());
}

TEST_P(CpuOps, IndexerScoresAndTopkTieRule) {
  const int64_t S = 6, nI = 5, cI = 19, T = 29;
  Tensor q = rnd_.tensor({S, nI, cI}), w = rnd_.tensor({S, nI}), keys = rnd_.tensor({T, cI});
  std::vector<int32_t> vis(S);
  for (auto& v : vis) v = static_cast<int32_t>(rnd_.integer(0, T));
  Tensor visible = Tensor::from_i32({S}, vis);
  Tensor out = Tensor::empty(DType::kF32, {S, T});
  ASSERT_TRUE(be_->indexer_scores(q, w, keys, visible, 0.5f, 0.25f, out).ok());
  std::vector<double> want(S * T);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = 0; t < T; ++t) {
      if (t >= vis[s]) { want[s * T + t] = -INFINITY; continue; }
      double acc = 0;
      for (int64_t h = 0; h < nI; ++h) {
        double dot = 0;
        for (int64_t c = 0; c < cI; ++c) dot += double(q.data<float>()[(s * nI + h) * cI + c]) * keys.data<float>()[t * cI + c];
        acc += w.data<float>()[s * nI + h] * 0.5 * std::max(dot, 0.0) * 0.25;
      }
      want[s * T + t] = acc;
    }
  expect_close("indexer_scores", out, want, 1e-5, 1e-5, rnd_.seed());

  // top-k: rows with deliberate exact ties (values from a small set) and -inf tails.
  const int64_t k = 6;
  Tensor sc = Tensor::empty(DType::kF32, {S, T});
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = 0; t < T; ++t)
      sc.data<float>()[s * T + t] = t >= vis[s] ? -INFINITY : static_cast<float>(rnd_.integer(0, 3));
  Tensor ids = Tensor::empty(DType::kI32, {S, k});
  ASSERT_TRUE(be_->topk(sc, k, ids).ok());
  for (int64_t s = 0; s < S; ++s) {
    std::vector<int32_t> order(T);
    std::iota(order.begin(), order.end(), 0);
    const float* row = sc.data<float>() + s * T;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
    for (int64_t j = 0; j < k; ++j) {
      const int32_t want_id = std::isinf(row[order[j]]) ? -1 : order[j];
      EXPECT_EQ(ids.data<int32_t>()[s * k + j], want_id) << "row " << s << " slot " << j << " seed " << rnd_.seed();
    }
  }
}

// Rows of several sequences in one call (key_start): each row's scores equal the same row scored
// alone against its own keys, bitwise; the padding past a row's visible entries is -inf; a row
// reading past the keys is an error. place_ids puts picks into a key list and rejects a -1.
TEST_P(CpuOps, IndexerScoresKeyStartAndPlaceIds) {
  const int64_t nI = 4, cI = 12, S = 5;
  const std::vector<int64_t> T_of{7, 0, 13, 3, 13};  // keys per row's sequence
  std::vector<int32_t> start(S), vis(S);
  int64_t Tk = 0, width = 0;
  for (int64_t s = 0; s < S; ++s) {
    start[s] = static_cast<int32_t>(Tk);
    vis[s] = static_cast<int32_t>(rnd_.integer(0, T_of[s]));
    Tk += T_of[s];
    width = std::max(width, T_of[s]);
  }
  Tensor q = rnd_.tensor({S, nI, cI}), w = rnd_.tensor({S, nI}), keys = rnd_.tensor({Tk, cI});
  Tensor st = Tensor::from_i32({S}, start), visible = Tensor::from_i32({S}, vis);
  Tensor out = Tensor::empty(DType::kF32, {S, width});
  ASSERT_TRUE(be_->indexer_scores(q, w, keys, visible, 0.5f, 0.25f, out, &st).ok());
  for (int64_t s = 0; s < S; ++s) {
    const int64_t Ts = std::max<int64_t>(T_of[s], 1);
    Tensor mine = Tensor::empty(DType::kF32, {1, Ts});
    Tensor own_keys = T_of[s] ? keys.rows(start[s], start[s] + T_of[s]).clone() : rnd_.tensor({1, cI});
    Tensor v1 = Tensor::from_i32({1}, {vis[s]});
    ASSERT_TRUE(be_->indexer_scores(q.rows(s, s + 1).clone(), w.rows(s, s + 1).clone(), own_keys, v1,
                                    0.5f, 0.25f, mine).ok());
    for (int64_t t = 0; t < width; ++t) {
      const float got = out.data<float>()[s * width + t];
      if (t >= vis[s]) {
        EXPECT_EQ(got, -INFINITY) << "row " << s << " t " << t;
      } else {
        EXPECT_EQ(got, mine.data<float>()[t]) << "row " << s << " t " << t << " seed " << rnd_.seed();
      }
    }
  }
  std::vector<int32_t> bad = start;
  bad[2] = static_cast<int32_t>(Tk - 1);  // row 2 would read past the keys
  Tensor bad_t = Tensor::from_i32({S}, bad);
  if (vis[2] > 1) {
    const Status e = be_->indexer_scores(q, w, keys, visible, 0.5f, 0.25f, out, &bad_t);
    EXPECT_EQ(e.code(), StatusCode::kOutOfRange) << e.to_string();
  }

  // place_ids: rows of 4 picks, counts 2/0/4, offsets 10/20/30.
  Tensor picks = Tensor::from_i32({3, 4}, {5, 1, -1, -1, -1, -1, -1, -1, 3, 0, 2, 7});
  Tensor layout = Tensor::from_i32({3, 3}, {1, 2, 10, 3, 0, 20, 4, 4, 30});
  Tensor dst = Tensor::from_i32({9}, {100, 0, 0, 100, 0, 0, 0, 0, 100});
  ASSERT_TRUE(be_->place_ids(picks, layout, dst).ok());
  EXPECT_EQ(std::vector<int32_t>(dst.data<int32_t>(), dst.data<int32_t>() + 9),
            (std::vector<int32_t>{100, 15, 11, 100, 33, 30, 32, 37, 100}));
  Tensor layout_bad = Tensor::from_i32({3, 3}, {1, 3, 10, 3, 0, 20, 4, 4, 30});  // a -1 pick
  EXPECT_EQ(be_->place_ids(picks, layout_bad, dst).code(), StatusCode::kOutOfRange);
  Tensor layout_over = Tensor::from_i32({3, 3}, {1, 2, 10, 3, 0, 20, 6, 4, 30});  // past dst
  EXPECT_EQ(be_->place_ids(picks, layout_over, dst).code(), StatusCode::kOutOfRange);
}

// Token ids that stay on the device (backend.h scatter_ids / gather_ids; the host-memory
// defaults): random ids placed by random pairs, rows of a random table gathered, pairs and ids
// outside their tensors rejected; download_async copies at once and wait() reports it.
TEST_P(CpuOps, ScatterAndGatherIdsAndAsyncDownload) {
  const int64_t m = 5 + rnd_.integer(0, 9), d = 20 + rnd_.integer(0, 30),
                n = 1 + rnd_.integer(0, 12);
  std::vector<int32_t> src(m), dst(d), map;
  for (auto& v : src) v = static_cast<int32_t>(rnd_.integer(0, 1 << 20));
  for (auto& v : dst) v = static_cast<int32_t>(rnd_.integer(-5, 5));
  std::vector<int32_t> want = dst;
  std::vector<int64_t> targets(d);
  std::iota(targets.begin(), targets.end(), 0);
  std::shuffle(targets.begin(), targets.end(), std::mt19937(rnd_.seed()));
  for (int64_t i = 0; i < n; ++i) {  // distinct targets: the order of the pairs cannot matter
    const int32_t from = static_cast<int32_t>(rnd_.integer(0, m - 1)),
                  to = static_cast<int32_t>(targets[i]);
    map.insert(map.end(), {from, to});
    want[to] = src[from];
  }
  Tensor src_t = Tensor::from_i32({m}, src), map_t = Tensor::from_i32({n, 2}, map);
  Tensor dst_t = Tensor::from_i32({d}, dst);
  ASSERT_TRUE(be_->scatter_ids(src_t, map_t, dst_t).ok());
  EXPECT_EQ(std::vector<int32_t>(dst_t.data<int32_t>(), dst_t.data<int32_t>() + d), want)
      << "seed " << rnd_.seed();
  Tensor far = Tensor::from_i32({1, 2}, {0, static_cast<int32_t>(d)});  // past dst
  EXPECT_EQ(be_->scatter_ids(src_t, far, dst_t).code(), StatusCode::kOutOfRange);
  Tensor neg = Tensor::from_i32({1, 2}, {-1, 0});
  EXPECT_EQ(be_->scatter_ids(src_t, neg, dst_t).code(), StatusCode::kOutOfRange);
  Tensor flat_map = Tensor::from_i32({2}, {0, 0});
  EXPECT_EQ(be_->scatter_ids(src_t, flat_map, dst_t).code(), StatusCode::kInvalidArgument);

  const int64_t V = 50 + rnd_.integer(0, 50), C = 1 + rnd_.integer(0, 6),
                S = 1 + rnd_.integer(0, 9);
  std::vector<int32_t> table(V * C), ids(S);
  for (auto& v : table) v = static_cast<int32_t>(rnd_.integer(0, 255));
  for (auto& v : ids) v = static_cast<int32_t>(rnd_.integer(0, V - 1));
  Tensor table_t = Tensor::from_i32({V, C}, table), ids_t = Tensor::from_i32({S}, ids);
  Tensor out = Tensor::empty(DType::kI32, {S, C});
  ASSERT_TRUE(be_->gather_ids(table_t, ids_t, out).ok());
  for (int64_t s = 0; s < S; ++s)
    for (int64_t c = 0; c < C; ++c)
      ASSERT_EQ(out.data<int32_t>()[s * C + c], table[ids[s] * C + c]) << s << "," << c;
  ids_t.data<int32_t>()[S - 1] = static_cast<int32_t>(V);
  EXPECT_EQ(be_->gather_ids(table_t, ids_t, out).code(), StatusCode::kOutOfRange);
  Tensor wide = Tensor::empty(DType::kI32, {S, C + 1});
  EXPECT_EQ(be_->gather_ids(table_t, ids_t, wide).code(), StatusCode::kInvalidArgument);

  Tensor got = Tensor::empty(DType::kI32, {m});
  auto ticket = be_->download_async(src_t, got);
  ASSERT_TRUE(ticket.ok()) << ticket.status().to_string();
  ASSERT_TRUE((*ticket)->wait().ok());
  EXPECT_EQ(std::vector<int32_t>(got.data<int32_t>(), got.data<int32_t>() + m), src);
  Tensor big = Tensor::empty(DType::kI32, {(64 << 10) / 4 + 1}),
         big_host = Tensor::empty(DType::kI32, {(64 << 10) / 4 + 1});
  EXPECT_EQ(be_->download_async(big, big_host).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(CpuOps, MoeRouteBiasAndHash) {
  const int64_t S = 7, E = 9, k = 3;
  Tensor logits = rnd_.tensor({S, E}, -30, 30), bias = rnd_.tensor({E});
  RouterParams p;
  p.top_k = k;
  p.routed_scaling_factor = 1.5f;
  std::vector<int32_t> hash(S * k);
  for (auto& h : hash) h = static_cast<int32_t>(rnd_.integer(0, E - 1));
  Tensor hash_ids = Tensor::from_i32({S, k}, hash);
  for (bool use_hash : {false, true}) {
    Tensor ids = Tensor::empty(DType::kI32, {S, k}), w = Tensor::empty(DType::kF32, {S, k});
    ASSERT_TRUE(be_->moe_route(logits, use_hash ? nullptr : &bias, use_hash ? &hash_ids : nullptr, p, ids, w).ok());
    std::vector<double> want_w(S * k);
    for (int64_t s = 0; s < S; ++s) {
      std::vector<double> sc(E);
      for (int64_t e = 0; e < E; ++e) {
        const double l = logits.data<float>()[s * E + e];
        sc[e] = std::sqrt(l > 20 ? l : std::log1p(std::exp(l)));
      }
      std::vector<int32_t> sel(k);
      if (use_hash) {
        for (int64_t j = 0; j < k; ++j) sel[j] = hash[s * k + j];
      } else {
        std::vector<int32_t> order(E);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
          return sc[a] + bias.data<float>()[a] > sc[b] + bias.data<float>()[b];
        });
        for (int64_t j = 0; j < k; ++j) sel[j] = order[j];
      }
      double sum = 0;
      for (int32_t e : sel) sum += sc[e];
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(ids.data<int32_t>()[s * k + j], sel[j]) << "token " << s << " seed " << rnd_.seed();
        want_w[s * k + j] = sc[sel[j]] / (sum + 1e-20) * 1.5;
      }
    }
    expect_close("moe_route weights", w, want_w, 1e-6, 1e-5, rnd_.seed());
  }
}

TEST_P(CpuOps, SwigluClampGatherScatterAddCopy) {
  const int64_t M = 5, I = 21;
  Tensor gu = rnd_.tensor({M, 2 * I}, -15, 15);
  for (float lim : {0.f, 10.f}) {
    Tensor out = Tensor::empty(DType::kF32, {M, I});
    ASSERT_TRUE(be_->swiglu(gu, lim, out).ok());
    std::vector<double> want(M * I);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t i = 0; i < I; ++i) {
        double g = gu.data<float>()[m * 2 * I + i], u = gu.data<float>()[m * 2 * I + I + i];
        if (lim > 0) { g = std::min<double>(g, lim); u = std::clamp<double>(u, -lim, lim); }
        want[m * I + i] = g / (1 + std::exp(-g)) * u;
      }
    expect_close("swiglu", out, want, 1e-5, 1e-5, rnd_.seed());
  }
  const int64_t N = 8, H = 13;
  Tensor src = rnd_.tensor({N, H});
  std::vector<int32_t> idv = {3, 0, 3, 7, 1};
  Tensor ids = Tensor::from_i32({5}, idv);
  Tensor g = Tensor::empty(DType::kF32, {5, H});
  ASSERT_TRUE(be_->gather_rows(src, ids, g).ok());
  std::vector<double> want_g;
  for (int32_t i : idv) for (int64_t c = 0; c < H; ++c) want_g.push_back(src.data<float>()[i * H + c]);
  expect_close("gather_rows", g, want_g, 0, 0, rnd_.seed());
  Tensor wts = rnd_.tensor({5});
  Tensor acc = rnd_.tensor({N, H});
  std::vector<double> want_a = to_double(acc);
  for (int j = 0; j < 5; ++j)
    for (int64_t c = 0; c < H; ++c) want_a[idv[j] * H + c] += double(wts.data<float>()[j]) * g.data<float>()[j * H + c];
  ASSERT_TRUE(be_->scatter_add_rows(g, ids, &wts, acc).ok());
  expect_close("scatter_add_rows", acc, want_a, 1e-6, 1e-6, rnd_.seed());
  Tensor sum = Tensor::empty(DType::kF32, {N, H});
  ASSERT_TRUE(be_->add(src, acc, sum).ok());
  std::vector<double> want_s(N * H);
  for (int64_t i = 0; i < N * H; ++i) want_s[i] = double(src.data<float>()[i]) + acc.data<float>()[i];
  expect_close("add", sum, want_s, 1e-6, 1e-6, rnd_.seed());
  Tensor cp = Tensor::empty(DType::kF32, {N * H});
  ASSERT_TRUE(be_->copy(sum, cp).ok());
  expect_close("copy", cp, want_s, 1e-6, 1e-6, rnd_.seed());
  std::vector<int32_t> bad = {N};
  Tensor bad_ids = Tensor::from_i32({1}, bad);
  Tensor g1 = Tensor::empty(DType::kF32, {1, H});
  EXPECT_EQ(be_->gather_rows(src, bad_ids, g1).code(), StatusCode::kOutOfRange);
}

TEST_P(CpuOps, EmbeddingChecksIds) {
  Tensor table = rnd_.tensor({11, 7});
  std::vector<int32_t> idv = {10, 0, 4};
  Tensor out = Tensor::empty(DType::kF32, {3, 7});
  ASSERT_TRUE(be_->embedding(table, Tensor::from_i32({3}, idv), out).ok());
  std::vector<double> want;
  for (int32_t i : idv) for (int c = 0; c < 7; ++c) want.push_back(table.data<float>()[i * 7 + c]);
  expect_close("embedding", out, want, 0, 0, rnd_.seed());
  idv[1] = 11;
  Status st = be_->embedding(table, Tensor::from_i32({3}, idv), out);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("11"), std::string::npos) << st.message();
}

TEST_P(CpuOps, HyperConnectionsCoeffsCollapseExpand) {
  const int64_t S = 4, hc = 3, H = 29, iters = 7;
  const float eps = 1e-6f;
  HcParams p{hc, iters, eps};
  Tensor mix = rnd_.tensor({S, (2 + hc) * hc}, -2, 2), base = rnd_.tensor({(2 + hc) * hc}),
         scale = rnd_.tensor({3});
  Tensor pre = Tensor::empty(DType::kF32, {S, hc}), post = Tensor::empty(DType::kF32, {S, hc}),
         comb = Tensor::empty(DType::kF32, {S, hc, hc});
  ASSERT_TRUE(be_->hc_coeffs(mix, base, scale, p, pre, &post, &comb).ok());
  std::vector<double> wpre(S * hc), wpost(S * hc), wcomb(S * hc * hc);
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  const float* a0 = mix.data<float>();
  const float* b = base.data<float>();
  const float* sc = scale.data<float>();
  for (int64_t s = 0; s < S; ++s) {
    const float* a = a0 + s * (2 + hc) * hc;
    for (int64_t j = 0; j < hc; ++j) {
      wpre[s * hc + j] = sig(a[j] * sc[0] + b[j]) + eps;
      wpost[s * hc + j] = 2 * sig(a[hc + j] * sc[1] + b[hc + j]);
    }
    std::vector<double> C(hc * hc);
    for (int64_t j = 0; j < hc; ++j) {
      double mx = -INFINITY, den = 0;
      for (int64_t k = 0; k < hc; ++k) mx = std::max(mx, double(a[2 * hc + j * hc + k] * sc[2] + b[2 * hc + j * hc + k]));
      for (int64_t k = 0; k < hc; ++k) den += (C[j * hc + k] = std::exp(a[2 * hc + j * hc + k] * sc[2] + b[2 * hc + j * hc + k] - mx));
      for (int64_t k = 0; k < hc; ++k) C[j * hc + k] = C[j * hc + k] / den + eps;
    }
    for (int64_t it = 0; it < iters; ++it) {
      if (it > 0)
        for (int64_t j = 0; j < hc; ++j) {
          double sum = 0;
          for (int64_t k = 0; k < hc; ++k) sum += C[j * hc + k];
          for (int64_t k = 0; k < hc; ++k) C[j * hc + k] /= sum + eps;
        }
      for (int64_t k = 0; k < hc; ++k) {
        double sum = 0;
        for (int64_t j = 0; j < hc; ++j) sum += C[j * hc + k];
        for (int64_t j = 0; j < hc; ++j) C[j * hc + k] /= sum + eps;
      }
    }
    for (int64_t i = 0; i < hc * hc; ++i) wcomb[s * hc * hc + i] = C[i];
  }
  expect_close("hc_coeffs pre", pre, wpre, 1e-6, 1e-5, rnd_.seed());
  expect_close("hc_coeffs post", post, wpost, 1e-6, 1e-5, rnd_.seed());
  expect_close("hc_coeffs comb", comb, wcomb, 1e-6, 1e-5, rnd_.seed());

  Tensor X = rnd_.tensor({S, hc, H}), y = rnd_.tensor({S, H});
  Tensor col = Tensor::empty(DType::kF32, {S, H});
  ASSERT_TRUE(be_->hc_collapse(X, pre, col).ok());
  std::vector<double> wcol(S * H, 0.0), wexp(S * hc * H, 0.0);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t c = 0; c < H; ++c) {
      for (int64_t j = 0; j < hc; ++j) wcol[s * H + c] += double(pre.data<float>()[s * hc + j]) * X.data<float>()[(s * hc + j) * H + c];
      for (int64_t k = 0; k < hc; ++k) {
        double v = double(post.data<float>()[s * hc + k]) * y.data<float>()[s * H + c];
        for (int64_t j = 0; j < hc; ++j)  // Cᵀ: sum over the FIRST index
          v += double(comb.data<float>()[s * hc * hc + j * hc + k]) * X.data<float>()[(s * hc + j) * H + c];
        wexp[(s * hc + k) * H + c] = v;
      }
    }
  expect_close("hc_collapse", col, wcol, 1e-6, 1e-5, rnd_.seed());
  Tensor Xn = Tensor::empty(DType::kF32, {S, hc, H});
  ASSERT_TRUE(be_->hc_expand(X, y, post, comb, Xn).ok());
  expect_close("hc_expand", Xn, wexp, 1e-6, 1e-5, rnd_.seed());
  EXPECT_EQ(be_->hc_expand(X, y, post, comb, X).code(), StatusCode::kInvalidArgument);

  // HyperHead form: scale [1], pre only.
  Tensor hmix = rnd_.tensor({S, hc}), hbase = rnd_.tensor({hc}), hscale = rnd_.tensor({1});
  ASSERT_TRUE(be_->hc_coeffs(hmix, hbase, hscale, p, pre, nullptr, nullptr).ok());
  std::vector<double> whead(S * hc);
  for (int64_t i = 0; i < S * hc; ++i)
    whead[i] = sig(hmix.data<float>()[i] * hscale.data<float>()[0] + hbase.data<float>()[i % hc]) + eps;
  expect_close("hc_coeffs head", pre, whead, 1e-6, 1e-5, rnd_.seed());
}

TEST_P(CpuOps, SupportsOp) {
  EXPECT_TRUE(be_->supports_op(OpKind::kMatmul, DType::kF32));
  EXPECT_FALSE(be_->supports_op(OpKind::kMatmul, DType::kF8E4M3));
  EXPECT_TRUE(be_->supports_op(OpKind::kDequantize, DType::kF8E4M3));
  EXPECT_TRUE(be_->supports_op(OpKind::kDequantize, DType::kF4E2M1));
  EXPECT_FALSE(be_->supports_op(OpKind::kDequantize, DType::kI64));
}

INSTANTIATE_TEST_SUITE_P(Modes, CpuOps, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "reference" : "fast"; });

}  // namespace
}  // namespace deepinfer::backend
