// Session 12's fused decode ops (issue 7: fewer kernels per decoder layer, the same bits). Each
// fused launch against the unfused launches it replaces, memcmp-equal on every output, on fresh
// random inputs:
//  - the mHC site with the sublayer's RMSNorm in its finish kernel (kernels.h hc_site with an
//    HcSiteNorm) against the site's finish kernel followed by rms_norm, for the [3]-scale site,
//    the HyperHead and the expand variant, S = 1, 3, 16, 40 in every partial-kernel mode (kTile4:
//    the unfused fallback) and S = 600 in the automatic mode, with and without PDL, for the three
//    rms_norm kernels' widths (H = 1000 / 1030 scalar, 2048 / 4096 512 threads, 8192 1024 threads),
//    hc = 1 … 4, with and without a weight, and with misaligned streams (fallback) or outputs
//    (the scalar fused kernel);
//  - rms_norm of the scalar kernel's rows and rms_norm_rope of head rows in one launch
//    (kernels.h rms_norm_and_rope) against the two kernels (q_norm + kv shapes, odd widths,
//    several heads, unweighted, in place);
//  - the expand of y + y2 (the MoE's shared and routed outputs) inside the site's first kernel
//    and inside hc_expand, against kernels::add first;
//  - the CUDA backend's hc_pre_norm / hc_expand_pre_norm (also of y + y2, and into the
//    HyperHead's site) / hc_expand_sum against hc_pre / hc_expand_pre / add / hc_expand then
//    rms_norm through the same backend, S = 1, 3, 16 and 300 (past the fused site: the default),
//    and rms_norm_and_rope against rms_norm then rms_norm_rope (1024-wide rows: one launch;
//    4096-wide: the two calls);
//  - the router's weights by lane against its serial loops (moe_route serial = true).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "device_pair.h"
#include "memset_sync.h"

namespace deepinfer::cuda {
namespace {

using backend::Tensor;
using kernels::HcSiteMode;

const char* mode_name(HcSiteMode m) {
  return m == HcSiteMode::kRows    ? "rows"
         : m == HcSiteMode::kTile1 ? "tile1"
         : m == HcSiteMode::kTile4 ? "tile4"
                                   : "auto";
}

// One site: S tokens of hc streams of width H. head: scale [1], no post/comb; expand: the
// previous site's expand first (x_new written); y2: of y + y2 (fused: in the expand; unfused:
// kernels::add first). x_off / out_off: the streams (x or x_new) / the collapsed and normed
// outputs start that many floats past a 16-byte boundary.
struct SiteCase {
  int64_t S, hc, H;
  bool head = false, expand = false, weighted = true;
  int x_off = 0, out_off = 0;
  bool y2 = false;
  std::string name() const {
    return "S=" + std::to_string(S) + " hc=" + std::to_string(hc) + " H=" + std::to_string(H) +
           (head ? " head" : "") + (expand ? " expand" : "") + (y2 ? "+y2" : "") +
           (weighted ? "" : " unweighted") + (x_off ? " x+" + std::to_string(x_off) : "") +
           (out_off ? " out+" + std::to_string(out_off) : "");
  }
};

class CudaFusion : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    std::printf("seed %u\n", seed_);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  std::vector<float> uniform(int64_t n, float lo, float hi) {
    std::vector<float> v(n);
    std::uniform_real_distribution<float> u(lo, hi);
    for (float& f : v) f = u(rng_);
    return v;
  }
  float* device_floats(int64_t n, int off = 0) { return dev_.floats(n, off); }
  float* upload(const std::vector<float>& h, int off = 0) { return dev_.upload(h, off); }
  std::vector<char> bytes_of(const void* d, int64_t n) { return testing::DeviceArena::read(d, n); }

  struct SiteIn {
    float *x = nullptr, *fn = nullptr, *base = nullptr, *scale = nullptr, *y = nullptr,
          *post_prev = nullptr, *comb_prev = nullptr, *w = nullptr, *y2 = nullptr;
  };
  SiteIn inputs(const SiteCase& c) {
    const int64_t N = c.head ? c.hc : (2 + c.hc) * c.hc;
    SiteIn in;
    in.x = upload(uniform(c.S * c.hc * c.H, -3.f, 3.f), c.expand ? 0 : c.x_off);
    in.fn = upload(uniform(N * c.hc * c.H, -0.05f, 0.05f));
    in.base = upload(uniform(N, -1.f, 1.f));
    in.scale = upload(uniform(c.head ? 1 : 3, 0.5f, 2.f));
    in.y = upload(uniform(c.S * c.H, -2.f, 2.f));
    in.post_prev = upload(uniform(c.S * c.hc, 0.f, 2.f));
    in.comb_prev = upload(uniform(c.S * c.hc * c.hc, 0.f, 1.f));
    in.w = upload(uniform(c.H, 0.5f, 1.5f));
    in.y2 = upload(uniform(c.S * c.H, -2.f, 2.f));
    return in;
  }

  // The site's outputs (post, comb unless head, collapsed, x_new with expand, normed) as bytes,
  // from the fused launch (hc_site with the norm, y2 in the expand) or the unfused ones (add of
  // y and y2, hc_site, then rms_norm).
  std::vector<std::vector<char>> run_site(const SiteCase& c, const SiteIn& in, HcSiteMode mode,
                                          bool pdl, bool fused) {
    const int64_t S = c.S, hc = c.hc, H = c.H;
    float* part = device_floats(kernels::hc_site_scratch_floats(S, hc, H, c.head, mode));
    float* post = device_floats(S * hc);
    float* comb = device_floats(S * hc * hc);
    float* col = device_floats(S * H, c.out_off);
    float* normed = device_floats(S * H, c.out_off);
    float* xnew = device_floats(S * hc * H, c.expand ? c.x_off : 0);
    for (auto [p, n] : {std::pair<float*, int64_t>{post, S * hc},
                        {comb, S * hc * hc},
                        {col, S * H},
                        {normed, S * H},
                        {xnew, S * hc * H}})
      EXPECT_EQ(testing::memset_sync(p, 0x7F, n * 4),
                cudaSuccess);  // NaN-like: every byte must be written
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    kernels::HcExpandIn ex{in.x, in.y, in.post_prev, in.comb_prev, xnew};
    if (c.y2 && fused) {
      ex.y2 = in.y2;
    } else if (c.y2) {
      float* sum = device_floats(S * H);
      kernels::add(in.y2, in.y, S * H, sum, stream_);  // the MoE's add(routed, y)
      ex.y = sum;
    }
    const float* w = c.weighted ? in.w : nullptr;
    const kernels::HcSiteNorm nm{w, 1e-5f, normed};
    kernels::hc_site(c.expand ? nullptr : in.x, in.fn, in.base, in.scale, S, hc, H, 20, 1e-6f,
                     1e-6f, c.head, part, c.head ? nullptr : post, c.head ? nullptr : comb, col,
                     stream_, c.expand ? &ex : nullptr, pdl, mode, fused ? &nm : nullptr);
    if (!fused) kernels::rms_norm(col, w, S, H, 1e-5f, normed, stream_);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<std::vector<char>> out;
    if (!c.head) {
      out.push_back(bytes_of(post, S * hc * 4));
      out.push_back(bytes_of(comb, S * hc * hc * 4));
    }
    out.push_back(bytes_of(col, S * H * 4));
    if (c.expand) out.push_back(bytes_of(xnew, S * hc * H * 4));
    out.push_back(bytes_of(normed, S * H * 4));
    return out;
  }

  // Fused and unfused launches of one case in one mode: every output memcmp-equal.
  void expect_same(const SiteCase& c, HcSiteMode mode, bool pdl) {
    SCOPED_TRACE(c.name() + " mode " + mode_name(mode) + (pdl ? " pdl" : ""));
    const SiteIn in = inputs(c);
    const auto want = run_site(c, in, mode, pdl, false);
    const auto got = run_site(c, in, mode, pdl, true);
    ASSERT_EQ(want.size(), got.size());
    const char* names_site[] = {"post", "comb", "collapsed", "x_new", "normed"};
    for (size_t i = 0; i < want.size(); ++i) {
      // name of output i: post/comb only for sites, x_new only with expand
      size_t k = c.head ? i + 2 : i;
      if (!c.expand && k >= 3) ++k;
      const std::string what = names_site[k];
      ASSERT_EQ(want[i].size(), got[i].size()) << what;
      if (std::memcmp(want[i].data(), got[i].data(), want[i].size()) != 0) {
        const auto* a = reinterpret_cast<const float*>(want[i].data());
        const auto* b = reinterpret_cast<const float*>(got[i].data());
        int64_t first = 0, n = static_cast<int64_t>(want[i].size() / 4), bad = 0;
        for (int64_t j = n - 1; j >= 0; --j)
          if (std::memcmp(a + j, b + j, 4) != 0) first = j, ++bad;
        ADD_FAILURE() << what << ": " << bad << " of " << n << " floats differ, first at " << first
                      << " (unfused " << a[first] << ", fused " << b[first] << "), seed " << seed_;
      }
    }
    // a fused site must not have left any output unwritten (0x7F bytes are a finite pattern;
    // the unfused run wrote the same regions, so equality above already covers it)
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  cudaStream_t stream_ = nullptr;
  testing::DeviceArena dev_;
};

TEST_F(CudaFusion, SiteNormEqualsFinishThenRmsNormAtDecodeShapes) {
  // V4-Flash: hc 4, H 4096 (rms_norm's 512-thread kernel).
  for (int v = 0; v < 5; ++v) {  // site, head, expand, expand of y + y2, head expand of y + y2
    for (int64_t S : {1, 3, 16, 40}) {
      SiteCase c{S, 4, 4096};
      c.head = v == 1 || v == 4;
      c.expand = v >= 2;
      c.y2 = v >= 3;
      for (HcSiteMode mode : {HcSiteMode::kRows, HcSiteMode::kTile1, HcSiteMode::kTile4})
        for (bool pdl : {true, false}) {
          if (!pdl && S != 3) continue;
          expect_same(c, mode, pdl);
        }
    }
  }
  // Past the decode sizes the automatic mode is kTile4: the unfused fallback.
  SiteCase big{600, 4, 4096};
  expect_same(big, HcSiteMode::kAuto, true);
  big.expand = true;
  expect_same(big, HcSiteMode::kAuto, true);
  big.y2 = true;
  expect_same(big, HcSiteMode::kAuto, true);
}

// hc_expand of y + y2 in one kernel against add then hc_expand (the MoE tail).
TEST_F(CudaFusion, ExpandOfSumEqualsAddThenExpand) {
  for (int64_t S : {1, 3, 16}) {
    for (int64_t H : {4096, 1000}) {
      SCOPED_TRACE("S=" + std::to_string(S) + " H=" + std::to_string(H));
      const int64_t hc = 4, n = S * hc * H;
      float* x = upload(uniform(n, -3, 3));
      float* y = upload(uniform(S * H, -2, 2));
      float* y2 = upload(uniform(S * H, -2, 2));
      float* post = upload(uniform(S * hc, 0, 2));
      float* comb = upload(uniform(S * hc * hc, 0, 1));
      float* sum = device_floats(S * H);
      float* want = device_floats(n);
      float* got = device_floats(n);
      ASSERT_EQ(testing::memset_sync(got, 0x7F, n * 4), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      kernels::add(y2, y, S * H, sum, stream_);
      kernels::hc_expand(x, sum, post, comb, S, hc, H, want, stream_);
      kernels::hc_expand(x, y, post, comb, S, hc, H, got, stream_, y2);
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      EXPECT_TRUE(bytes_of(want, n * 4) == bytes_of(got, n * 4)) << "seed " << seed_;
    }
  }
}

TEST_F(CudaFusion, SiteNormEqualsFinishThenRmsNormAtOtherWidths) {
  std::vector<SiteCase> cases;
  for (int64_t S : {1, 3}) cases.push_back({S, 4, 8192});  // 1024 threads
  for (int64_t S : {1, 3, 16}) {
    cases.push_back({S, 3, 1000});               // scalar 256 threads (H < 2048)
    cases.push_back({S, 3, 1000, false, true});  // the same with expand
    cases.push_back({S, 4, 2048, true});         // 512 threads at the boundary, head
  }
  cases.push_back({3, 2, 1030});  // H % 4 != 0: scalar
  SiteCase y2s{3, 3, 1000, false, true};
  y2s.y2 = true;
  cases.push_back(y2s);                        // scalar, expand of y + y2
  cases.push_back({5, 1, 4096});               // hc 1
  cases.push_back({5, 2, 4096, false, true});  // hc 2, expand
  SiteCase unw{3, 4, 4096};
  unw.weighted = false;
  cases.push_back(unw);
  SiteCase xmis{3, 4, 4096};
  xmis.x_off = 1;  // float4 rows, misaligned streams: fallback
  cases.push_back(xmis);
  xmis.expand = true;
  cases.push_back(xmis);
  SiteCase omis{3, 4, 4096};
  omis.out_off = 1;  // misaligned outputs: rms_norm's scalar kernel, fused
  cases.push_back(omis);
  omis.head = true;
  cases.push_back(omis);
  for (const SiteCase& c : cases) {
    expect_same(c, HcSiteMode::kRows, true);
    expect_same(c, HcSiteMode::kTile1, true);
  }
}

// rms_norm of a [M, Na] (the scalar kernel's rows) and rms_norm_rope of b [S, nh, D] in one
// launch against the two kernels: the attention's q_norm (1024 wide) and kv (1 head of 512,
// rope on the trailing 64), odd widths, several heads, no weights, in place.
TEST_F(CudaFusion, NormAndNormRopeEqualTheTwoKernels) {
  struct Case {
    int64_t S, Na, nh, D, half;
    bool weighted, in_place;
  };
  const std::vector<Case> cases = {
      {1, 1024, 1, 512, 32, true, false},
      {3, 1024, 1, 512, 32, true, false},
      {16, 1024, 1, 512, 32, true, false},
      {16, 1024, 1, 512, 32, true, true},
      {3, 1030, 4, 128, 16, false, false},
      {5, 4096, 2, 96, 48, true, false}};  // a: scalar (misaligned below)
  for (const Case& c : cases) {
    SCOPED_TRACE("S=" + std::to_string(c.S) + " Na=" + std::to_string(c.Na) +
                 " nh=" + std::to_string(c.nh) + " D=" + std::to_string(c.D));
    const int off = c.Na == 4096 ? 1 : 0;  // 4096 wide rows take the scalar kernel only misaligned
    const int64_t M = c.S, nb = c.S * c.nh * c.D;
    const std::vector<float> ha = uniform(M * c.Na, -3, 3), hb = uniform(nb, -3, 3);
    float* wa = c.weighted ? upload(uniform(c.Na, 0.5f, 1.5f)) : nullptr;
    float* wb = c.weighted ? upload(uniform(c.D, 0.5f, 1.5f)) : nullptr;
    std::vector<float> inv(c.half);
    for (int64_t i = 0; i < c.half; ++i)
      inv[i] = std::pow(10000.f, -static_cast<float>(i) / c.half);
    float* inv_freq = upload(inv);
    std::vector<int32_t> pos(c.S);
    for (int64_t s = 0; s < c.S; ++s) pos[s] = static_cast<int32_t>(rng_() % 100000);
    auto* positions = static_cast<int32_t*>(dev_.bytes(c.S * 4 + 16));
    ASSERT_EQ(cudaMemcpy(positions, pos.data(), c.S * 4, cudaMemcpyHostToDevice), cudaSuccess);
    std::vector<std::vector<char>> outs[2];
    for (int fused = 0; fused < 2; ++fused) {
      float* a = upload(ha, off);
      float* b = upload(hb);
      float* ya = c.in_place ? a : device_floats(M * c.Na, off);
      float* yb = c.in_place ? b : device_floats(nb);
      if (!c.in_place) {
        ASSERT_EQ(testing::memset_sync(ya, 0x7F, M * c.Na * 4), cudaSuccess);
        ASSERT_EQ(testing::memset_sync(yb, 0x7F, nb * 4), cudaSuccess);
      }
      ASSERT_TRUE(kernels::rms_norm_scalar_rows(a, wa, ya, c.Na));
      ASSERT_TRUE(kernels::rms_norm_rope_supported(c.D));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      if (fused) {
        kernels::rms_norm_and_rope(a, wa, M, c.Na, ya, b, wb, positions, inv_freq, c.S, c.nh, c.D,
                                   c.half, 1e-6f, true, 0.8f, yb, stream_);
      } else {
        kernels::rms_norm(a, wa, M, c.Na, 1e-6f, ya, stream_);
        kernels::rms_norm_rope(b, wb, positions, inv_freq, c.S, c.nh, c.D, c.half, 1e-6f, true,
                               0.8f, yb, stream_);
      }
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      outs[fused].push_back(bytes_of(ya, M * c.Na * 4));
      outs[fused].push_back(bytes_of(yb, nb * 4));
    }
    EXPECT_TRUE(outs[0][0] == outs[1][0]) << "rms_norm rows differ, seed " << seed_;
    EXPECT_TRUE(outs[0][1] == outs[1][1]) << "rms_norm_rope rows differ, seed " << seed_;
  }
}

// Through the backend: hc_pre_norm / hc_expand_pre_norm against the separate calls.
TEST_F(CudaFusion, BackendSiteNormOpsEqualTheSeparateCalls) {
  auto be_or = CudaBackend::create();
  ASSERT_TRUE(be_or.ok()) << be_or.status().message();
  auto& be = **be_or;
  using testing::on_device;
  using testing::to_host;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto host = [&](backend::Shape shape, float lo, float hi) {
    Tensor t = Tensor::empty(DType::kF32, shape);
    std::uniform_real_distribution<float> d(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng_);
    return t;
  };
  auto same = [&](const char* what, const Tensor& a, const Tensor& b) {
    // to_host's cudaMemcpy is not ordered after the backend's (non-blocking) stream: wait first.
    ASSERT_TRUE(be.synchronize().ok());
    const Tensor ha = to_host(a), hb = to_host(b);
    EXPECT_EQ(std::memcmp(ha.raw(), hb.raw(), ha.nbytes()), 0) << what << ", seed " << seed_;
  };
  const int64_t hc = 4, H = 4096, N = (2 + hc) * hc;
  const backend::HcParams p{hc, 20, 1e-6f};
  for (int64_t S : {1, 3, 16, 300}) {
    SCOPED_TRACE("S=" + std::to_string(S));
    auto x = on_device(host({S, hc, H}, -3, 3)), fn = on_device(host({N, hc * H}, -0.05f, 0.05f)),
         base = on_device(host({N}, -1, 1)), scale = on_device(host({3}, 0.5f, 2)),
         w = on_device(host({H}, 0.5f, 1.5f)), y = on_device(host({S, H}, -2, 2)),
         pp = on_device(host({S, hc}, 0, 2)), cp = on_device(host({S, hc, hc}, 0, 1)),
         hfn = on_device(host({hc, hc * H}, -0.05f, 0.05f)), hbase = on_device(host({hc}, -1, 1)),
         hscale = on_device(host({1}, 0.5f, 2));
    auto empty = [&](backend::Shape s) { return *be.empty(DType::kF32, s); };
    // site
    Tensor post_w = empty({S, hc}), comb_w = empty({S, hc, hc}), col_w = empty({S, H}),
           xn_w = empty({S, H});
    ASSERT_TRUE(
        be.hc_pre(x.dev, fn.dev, base.dev, scale.dev, p, 1e-6f, &post_w, &comb_w, col_w).ok());
    ASSERT_TRUE(be.rms_norm(col_w, &w.dev, 1e-6f, xn_w).ok());
    Tensor post = empty({S, hc}), comb = empty({S, hc, hc}), col = empty({S, H}),
           xn = empty({S, H});
    ASSERT_TRUE(be.hc_pre_norm(x.dev, fn.dev, base.dev, scale.dev, p, 1e-6f, &post, &comb, col,
                               &w.dev, 1e-6f, xn)
                    .ok());
    same("site post", post, post_w);
    same("site comb", comb, comb_w);
    same("site collapsed", col, col_w);
    same("site normed", xn, xn_w);
    // head
    Tensor h_w = empty({S, H}), hn_w = empty({S, H}), h = empty({S, H}), hn = empty({S, H});
    ASSERT_TRUE(
        be.hc_pre(x.dev, hfn.dev, hbase.dev, hscale.dev, p, 1e-6f, nullptr, nullptr, h_w).ok());
    ASSERT_TRUE(be.rms_norm(h_w, &w.dev, 1e-6f, hn_w).ok());
    ASSERT_TRUE(be.hc_pre_norm(x.dev, hfn.dev, hbase.dev, hscale.dev, p, 1e-6f, nullptr, nullptr, h,
                               &w.dev, 1e-6f, hn)
                    .ok());
    same("head collapsed", h, h_w);
    same("head normed", hn, hn_w);
    // expand
    Tensor xs_w = empty({S, hc, H}), xs = empty({S, hc, H});
    ASSERT_TRUE(be.hc_expand_pre(x.dev, y.dev, pp.dev, cp.dev, xs_w, fn.dev, base.dev, scale.dev, p,
                                 1e-6f, &post_w, &comb_w, col_w)
                    .ok());
    ASSERT_TRUE(be.rms_norm(col_w, &w.dev, 1e-6f, xn_w).ok());
    ASSERT_TRUE(be.hc_expand_pre_norm(x.dev, y.dev, nullptr, pp.dev, cp.dev, xs, fn.dev, base.dev,
                                      scale.dev, p, 1e-6f, &post, &comb, col, &w.dev, 1e-6f, xn)
                    .ok());
    same("expand streams", xs, xs_w);
    same("expand post", post, post_w);
    same("expand comb", comb, comb_w);
    same("expand collapsed", col, col_w);
    same("expand normed", xn, xn_w);
    // expand of y + y2 (the MoE tail: add(routed, y), then the next site)
    auto y2 = on_device(host({S, H}, -2, 2));
    Tensor ysum = empty({S, H});
    ASSERT_TRUE(be.add(y2.dev, y.dev, ysum).ok());
    ASSERT_TRUE(be.hc_expand_pre(x.dev, ysum, pp.dev, cp.dev, xs_w, fn.dev, base.dev, scale.dev, p,
                                 1e-6f, &post_w, &comb_w, col_w)
                    .ok());
    ASSERT_TRUE(be.rms_norm(col_w, &w.dev, 1e-6f, xn_w).ok());
    ASSERT_TRUE(be.hc_expand_pre_norm(x.dev, y.dev, &y2.dev, pp.dev, cp.dev, xs, fn.dev, base.dev,
                                      scale.dev, p, 1e-6f, &post, &comb, col, &w.dev, 1e-6f, xn)
                    .ok());
    same("expand+y2 streams", xs, xs_w);
    same("expand+y2 post", post, post_w);
    same("expand+y2 comb", comb, comb_w);
    same("expand+y2 collapsed", col, col_w);
    same("expand+y2 normed", xn, xn_w);
    // the same into the HyperHead's site (the last layer's expand)
    ASSERT_TRUE(be.hc_expand(x.dev, ysum, pp.dev, cp.dev, xs_w).ok());
    ASSERT_TRUE(
        be.hc_pre(xs_w, hfn.dev, hbase.dev, hscale.dev, p, 1e-6f, nullptr, nullptr, h_w).ok());
    ASSERT_TRUE(be.rms_norm(h_w, &w.dev, 1e-6f, hn_w).ok());
    ASSERT_TRUE(be.hc_expand_pre_norm(x.dev, y.dev, &y2.dev, pp.dev, cp.dev, xs, hfn.dev, hbase.dev,
                                      hscale.dev, p, 1e-6f, nullptr, nullptr, h, &w.dev, 1e-6f, hn)
                    .ok());
    same("head expand+y2 streams", xs, xs_w);
    same("head expand+y2 collapsed", h, h_w);
    same("head expand+y2 normed", hn, hn_w);
    // hc_expand_sum against add then hc_expand
    ASSERT_TRUE(be.hc_expand(x.dev, ysum, pp.dev, cp.dev, xs_w).ok());
    ASSERT_TRUE(be.hc_expand_sum(x.dev, y.dev, y2.dev, pp.dev, cp.dev, xs).ok());
    same("hc_expand_sum", xs, xs_w);
    ASSERT_TRUE(be.synchronize().ok());
  }
  // rms_norm_and_rope: q_a-like rows (one launch) and 4096-wide rows (rms_norm's vector kernel:
  // the two calls) against rms_norm then rms_norm_rope.
  for (int64_t Na : {1024, 4096}) {
    for (int64_t S : {1, 3, 16}) {
      SCOPED_TRACE("rms_norm_and_rope Na=" + std::to_string(Na) + " S=" + std::to_string(S));
      const int64_t D = 512;
      auto a = on_device(host({S, Na}, -3, 3)), wa = on_device(host({Na}, 0.5f, 1.5f)),
           b = on_device(host({S, 1, D}, -3, 3)), wb = on_device(host({D}, 0.5f, 1.5f)),
           inv = on_device(host({32}, 0.f, 1.f));
      std::vector<int32_t> pos(S);
      for (int64_t s = 0; s < S; ++s) pos[s] = static_cast<int32_t>(rng_() % 5000);
      auto positions = on_device(Tensor::from_i32({S}, pos));
      auto empty = [&](backend::Shape sh) { return *be.empty(DType::kF32, sh); };
      Tensor ya_w = empty({S, Na}), yb_w = empty({S, 1, D}), ya = empty({S, Na}),
             yb = empty({S, 1, D});
      ASSERT_TRUE(be.rms_norm(a.dev, &wa.dev, 1e-6f, ya_w).ok());
      ASSERT_TRUE(be.rms_norm_rope(b.dev, &wb.dev, 1e-6f, positions.dev, inv.dev,
                                   backend::RopeStyle::kInterleavedTrailing, 0.9f, yb_w)
                      .ok());
      ASSERT_TRUE(be.rms_norm_and_rope(a.dev, &wa.dev, ya, b.dev, &wb.dev, 1e-6f, positions.dev,
                                       inv.dev, backend::RopeStyle::kInterleavedTrailing, 0.9f, yb)
                      .ok());
      same("q rows", ya, ya_w);
      same("kv rows", yb, yb_w);
    }
  }
  // A norm weight of the wrong width is refused, naming it.
  const int64_t S = 2;
  auto x = on_device(host({S, hc, H}, -3, 3)), fn = on_device(host({N, hc * H}, -0.05f, 0.05f)),
       base = on_device(host({N}, -1, 1)), scale = on_device(host({3}, 0.5f, 2)),
       wbad = on_device(host({H + 4}, 0.5f, 1.5f));
  Tensor post = *be.empty(DType::kF32, {S, hc}), comb = *be.empty(DType::kF32, {S, hc, hc}),
         col = *be.empty(DType::kF32, {S, H}), xn = *be.empty(DType::kF32, {S, H});
  const Status st = be.hc_pre_norm(x.dev, fn.dev, base.dev, scale.dev, p, 1e-6f, &post, &comb, col,
                                   &wbad.dev, 1e-6f, xn);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("weight"), std::string::npos) << st.message();
  (void)u;
}

// The router's weights written by lane (k <= 32) against the serial lane-0 loops: ids and
// weights memcmp-equal for every scoring, with and without a bias, hash layers, E = 256 (V4) and
// E = 300 (the wide instantiation), k = 1, 6, 8, 32 and 33 (serial either way).
TEST_F(CudaFusion, RouterWeightsByLaneEqualTheSerialLoops) {
  auto* err = static_cast<int32_t*>(dev_.bytes(16));
  ASSERT_EQ(testing::memset_sync(err, 0, 16), cudaSuccess);
  for (int64_t E : {256, 300}) {
    for (int64_t k : {1, 6, 8, 32, 33}) {
      for (int64_t S : {1, 3, 16}) {
        for (int scoring : {0, 1, 2}) {
          for (int variant = 0; variant < 3; ++variant) {  // bias, no bias, hash ids
            SCOPED_TRACE("E=" + std::to_string(E) + " k=" + std::to_string(k) +
                         " S=" + std::to_string(S) + " scoring=" + std::to_string(scoring) +
                         " variant=" + std::to_string(variant));
            float* logits = upload(uniform(S * E, -4.f, 4.f));
            float* bias = variant == 0 ? upload(uniform(E, -0.5f, 0.5f)) : nullptr;
            int32_t* hash = nullptr;
            if (variant == 2) {
              std::vector<int32_t> h(S * k);
              std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(E - 1));
              for (int32_t& v : h) v = id(rng_);
              hash = static_cast<int32_t*>(dev_.bytes(S * k * 4));
              ASSERT_EQ(cudaMemcpy(hash, h.data(), S * k * 4, cudaMemcpyHostToDevice), cudaSuccess);
            }
            std::vector<std::vector<char>> got[2];
            for (int serial = 0; serial < 2; ++serial) {
              float* w = device_floats(S * k);
              auto* ids = static_cast<int32_t*>(dev_.bytes(S * k * 4));
              ASSERT_EQ(testing::memset_sync(w, 0x7F, S * k * 4), cudaSuccess);
              ASSERT_EQ(testing::memset_sync(ids, 0x7F, S * k * 4), cudaSuccess);
              ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
              kernels::moe_route(logits, bias, hash, S, E, k, scoring, 1.7f, scoring != 1, ids, w,
                                 err, stream_, serial == 1);
              ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
              ASSERT_EQ(cudaGetLastError(), cudaSuccess);
              got[serial].push_back(bytes_of(ids, S * k * 4));
              got[serial].push_back(bytes_of(w, S * k * 4));
            }
            EXPECT_TRUE(got[0][0] == got[1][0]) << "ids differ, seed " << seed_;
            EXPECT_TRUE(got[0][1] == got[1][1]) << "weights differ, seed " << seed_;
          }
        }
      }
    }
  }
  int32_t flag = -1;
  ASSERT_EQ(cudaMemcpy(&flag, err, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(flag, 0);
}

}  // namespace
}  // namespace deepinfer::cuda
