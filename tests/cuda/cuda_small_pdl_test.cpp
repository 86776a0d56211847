// The small decode kernels launched with programmatic dependent launch (session 11; pdl.cuh
// enter(), pdl_config.h small_kernels(), DEEPINFER_SMALL_PDL): norms, rope, swiglu, add, the MoE
// router / gather / combine, copy_many, top-k, softmax pooling and the mHC expand; and (session
// 12) the mHC site with its RMSNorm fused into the finish kernel.
//
// For each op: the reference is the op run after its inputs are complete (stream order plus a
// synchronize: nothing to overlap). Then, many times, a producer kernel that lets the next kernel
// start at once, spins ~40 µs and only then writes the op's input (over a stale random copy) and,
// for ops that do not accumulate into their output, poisons that output with NaN; the op follows
// immediately. An op that read its input before griddepcontrol.wait (stale values) or wrote its
// output before it (overwritten by the NaN) would differ from the reference; the test demands the
// same bits (memcmp). With DEEPINFER_SMALL_PDL=0 the same checks run on plain launches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl_config.h"
#include "backend/cuda/runtime.h"
#include "device_pair.h"
#include "memset_sync.h"
#include "pdl_producer.h"

namespace deepinfer::cuda {
namespace {

class CudaSmallPdl : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    std::printf("seed %u, small kernels with PDL: %s\n", seed_,
                pdl::small_kernels() ? "yes" : "no");
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  std::vector<float> randn(int64_t n, float scale = 1.f) {
    std::vector<float> v(n);
    std::normal_distribution<float> nd(0.f, scale);
    for (float& f : v) f = nd(rng_);
    return v;
  }
  void* device_bytes(int64_t bytes) { return dev_.bytes(bytes); }
  float* device_floats(const std::vector<float>& h) { return dev_.upload(h); }
  int32_t* device_ints(const std::vector<int32_t>& h) { return dev_.upload(h); }
  std::vector<char> bytes_of(const void* d, int64_t n) { return testing::DeviceArena::read(d, n); }

  // One op: `in` (n_in floats) is the input the producer writes late, `outs` the (pointer, bytes)
  // regions the op writes (compared bitwise); out_init (if not empty) is the content of outs[0]
  // before the op (an op that accumulates); poison: the producer NaN-fills outs[0] late.
  struct Out {
    void* p;
    int64_t bytes;
  };
  void check(const std::string& name, float* in, int64_t n_in, std::vector<Out> outs,
             const std::vector<float>& out_init, bool poison, const std::function<void()>& op) {
    SCOPED_TRACE(name);
    const std::vector<float> fresh = randn(n_in), stale = randn(n_in, 3.f);
    float* src = device_floats(fresh);
    auto reset = [&](const std::vector<float>& input) {
      ASSERT_EQ(cudaMemcpy(in, input.data(), n_in * 4, cudaMemcpyHostToDevice), cudaSuccess);
      for (const Out& o : outs) {  // (an op in place reads its output: that one keeps the input)
        if (o.p != in) {
          ASSERT_EQ(testing::memset_sync(o.p, 0x7F, o.bytes), cudaSuccess);
        }
      }
      if (!out_init.empty()) {
        ASSERT_EQ(
            cudaMemcpy(outs[0].p, out_init.data(), out_init.size() * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    };
    reset(fresh);
    op();
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<std::vector<char>> want;
    for (const Out& o : outs) want.push_back(bytes_of(o.p, o.bytes));
    constexpr int kRuns = 6;
    int differ = 0;
    for (int run = 0; run < kRuns; ++run) {
      reset(stale);
      const int64_t n_poison = poison && out_init.empty() ? outs[0].bytes / 4 : 0;
      testing::slow_producer(in, src, n_in, static_cast<float*>(outs[0].p), n_poison, 40000, 2,
                             stream_);
      op();
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      for (size_t i = 0; i < outs.size(); ++i)
        if (std::memcmp(bytes_of(outs[i].p, outs[i].bytes).data(), want[i].data(), outs[i].bytes) !=
            0)
          ++differ;
    }
    EXPECT_EQ(differ, 0) << name << ": " << differ
                         << " output regions differ from the reference over " << kRuns << " runs";
  }

  uint32_t seed_ = 0;
  std::mt19937 rng_;
  cudaStream_t stream_ = nullptr;
  testing::DeviceArena dev_;
};

TEST_F(CudaSmallPdl, NormsRopeAndElementwiseWaitForTheirInputs) {
  for (int64_t N : {1024, 4096, 8192}) {  // the three rms_norm kernels (scalar, 512, 1024 threads)
    for (int64_t M : {1, 16}) {
      float* x = device_floats(randn(M * N));
      float* w = device_floats(randn(N));
      float* y = static_cast<float*>(device_bytes(M * N * 4));
      check("rms_norm N=" + std::to_string(N) + " M=" + std::to_string(M), x, M * N,
            {{y, M * N * 4}}, {}, true, [&] { kernels::rms_norm(x, w, M, N, 1e-6f, y, stream_); });
    }
  }
  // q rows of 64 heads x 512 (rope on the trailing 64) and the kv row, batch 1 and 4.
  for (int64_t S : {1, 4}) {
    const int64_t nh = 64, D = 512, half = 32;
    std::vector<int32_t> pos(S);
    for (int64_t s = 0; s < S; ++s) pos[s] = static_cast<int32_t>(100 + 37 * s);
    int32_t* positions = device_ints(pos);
    std::vector<float> f(half);
    for (int64_t i = 0; i < half; ++i) f[i] = std::pow(10000.f, -2.f * i / (2.f * half));
    float* inv_freq = device_floats(f);
    float* x = device_floats(randn(S * nh * D));
    float* w = device_floats(randn(D));
    float* y = static_cast<float*>(device_bytes(S * nh * D * 4));
    check("rms_norm_rope S=" + std::to_string(S), x, S * nh * D, {{y, S * nh * D * 4}}, {}, true,
          [&] {
            kernels::rms_norm_rope(x, w, positions, inv_freq, S, nh, D, half, 1e-6f, true, 1.f, y,
                                   stream_);
          });
    // Session 12: q_norm rows (1024) and these heads' norm + rope in one launch, each input late.
    {
      const int64_t Na = 1024;
      float* a = device_floats(randn(S * Na));
      float* wa = device_floats(randn(Na));
      float* ya = static_cast<float*>(device_bytes(S * Na * 4));
      for (int late = 0; late < 2; ++late) {
        check(
            std::string("rms_norm_and_rope late ") + (late ? "b" : "a") + " S=" + std::to_string(S),
            late ? x : a, late ? S * nh * D : S * Na,
            late ? std::vector<Out>{{y, S * nh * D * 4}, {ya, S * Na * 4}}
                 : std::vector<Out>{{ya, S * Na * 4}, {y, S * nh * D * 4}},
            {}, true, [&] {
              kernels::rms_norm_and_rope(a, wa, S, Na, ya, x, w, positions, inv_freq, S, nh, D,
                                         half, 1e-6f, true, 1.f, y, stream_);
            });
      }
    }
    // rope works in place: its input is its output (no poison).
    check("rope S=" + std::to_string(S), x, S * nh * D, {{x, S * nh * D * 4}}, {}, false, [&] {
      kernels::rope(x, positions, inv_freq, S, nh, D, half, true, 1.f, false, stream_);
    });
  }
  for (int64_t M : {1, 16}) {
    const int64_t I = 2048;
    float* gu = device_floats(randn(M * 2 * I));
    float* act = static_cast<float*>(device_bytes(M * I * 4));
    check("swiglu M=" + std::to_string(M), gu, M * 2 * I, {{act, M * I * 4}}, {}, true,
          [&] { kernels::swiglu(gu, M, I, 10.f, act, stream_); });
    const int64_t n = M * 4096;
    float* a = device_floats(randn(n));
    float* b = device_floats(randn(n));
    float* sum = static_cast<float*>(device_bytes(n * 4));
    check("add n=" + std::to_string(n), a, n, {{sum, n * 4}}, {}, true,
          [&] { kernels::add(a, b, n, sum, stream_); });
  }
}

TEST_F(CudaSmallPdl, MoeCopiesTopkPoolAndHcExpandWaitForTheirInputs) {
  const int64_t E = 256, k = 6, H = 4096;
  int32_t* err = static_cast<int32_t*>(device_bytes(16));
  ASSERT_EQ(testing::memset_sync(err, 0, 16), cudaSuccess);
  for (int64_t S : {1, 16}) {
    const std::string at = " S=" + std::to_string(S);
    // Router: sigmoid scoring with a bias; ids and weights compared.
    float* logits = device_floats(randn(S * E));
    float* bias = device_floats(randn(E, 0.1f));
    int32_t* ids = static_cast<int32_t*>(device_bytes(S * k * 4));
    float* wts = static_cast<float*>(device_bytes(S * k * 4));
    check("moe_route" + at, logits, S * E, {{wts, S * k * 4}, {ids, S * k * 4}}, {}, true, [&] {
      kernels::moe_route(logits, bias, nullptr, S, E, k, 1, 1.5f, true, ids, wts, err, stream_);
    });
    // Combine of k slot rows per token into out (accumulates: out starts as random rows).
    float* slots = device_floats(randn(S * k * H));
    float* sw = device_floats(randn(S * k));
    float* out = static_cast<float*>(device_bytes(S * H * 4));
    check("combine_slots" + at, slots, S * k * H, {{out, S * H * 4}}, randn(S * H), false,
          [&] { kernels::combine_slots(slots, sw, S, k, H, out, stream_); });
    // Gather rows of a table (the hc copies of the embedding).
    std::vector<int32_t> g(S * 4);
    for (int64_t i = 0; i < S * 4; ++i) g[i] = static_cast<int32_t>(i / 4);
    int32_t* gid = device_ints(g);
    float* table = device_floats(randn(S * H));
    float* rows = static_cast<float*>(device_bytes(S * 4 * H * 4));
    check("gather_rows" + at, table, S * H, {{rows, S * 4 * H * 4}}, {}, true,
          [&] { kernels::gather_rows(table, gid, S * 4, S, H, rows, err, 1, stream_); });
    // Top-k of index scores (the bitonic kernel: T <= its limit).
    const int64_t T = 300, kk = 64;
    float* scores = device_floats(randn(S * T));
    int32_t* picks = static_cast<int32_t*>(device_bytes(S * kk * 4));
    void* ws = device_bytes(static_cast<int64_t>(kernels::topk_workspace_bytes(S, T)));
    check("topk" + at, scores, S * T, {{picks, S * kk * 4}}, {}, true,
          [&] { kernels::topk(scores, S, T, kk, picks, ws, stream_); });
    // Softmax pooling of L rows (the compressor's).
    const int64_t L = 4, d = 512;
    float* values = device_floats(randn(S * L * d));
    float* sc = device_floats(randn(S * L * d));
    float* pooled = static_cast<float*>(device_bytes(S * d * 4));
    check("softmax_pool" + at, values, S * L * d, {{pooled, S * d * 4}}, {}, true,
          [&] { kernels::softmax_pool(values, sc, S, L, d, pooled, stream_); });
    // mHC expand: streams [S, 4, H] from the previous streams, y, post and comb.
    const int64_t hc = 4;
    float* xs = device_floats(randn(S * hc * H));
    float* y = device_floats(randn(S * H));
    float* post = device_floats(randn(S * hc));
    float* comb = device_floats(randn(S * hc * hc));
    float* xn = static_cast<float*>(device_bytes(S * hc * H * 4));
    check("hc_expand" + at, y, S * H, {{xn, S * hc * H * 4}}, {}, true,
          [&] { kernels::hc_expand(xs, y, post, comb, S, hc, H, xn, stream_); });
    // Session 12: the expand of y + y2 (the MoE's shared and routed parts), y2 written late.
    float* y2 = device_floats(randn(S * H));
    check("hc_expand_sum" + at, y2, S * H, {{xn, S * hc * H * 4}}, {}, true,
          [&] { kernels::hc_expand(xs, y, post, comb, S, hc, H, xn, stream_, y2); });
    // copy_many: three pairs, the first one's source written late.
    float* c_src = device_floats(randn(S * H));
    float* c_src2 = device_floats(randn(512));
    float* c_dst = static_cast<float*>(device_bytes(S * H * 4));
    float* c_dst2 = static_cast<float*>(device_bytes(512 * 4));
    float* c_dst3 = static_cast<float*>(device_bytes(S * 4 * 4));
    check("copy_many" + at, c_src, S * H,
          {{c_dst, S * H * 4}, {c_dst2, 512 * 4}, {c_dst3, S * 4 * 4}}, {}, true, [&] {
            kernels::CopyManyTable t{};
            t.n = 3;
            t.src[0] = c_src, t.dst[0] = c_dst, t.bytes[0] = S * H * 4;
            t.src[1] = c_src2, t.dst[1] = c_dst2, t.bytes[1] = 512 * 4;
            t.src[2] = c_src, t.dst[2] = c_dst3, t.bytes[2] = S * 4 * 4;
            kernels::copy_many(t, stream_);
          });
  }
  int32_t flag = -1;
  ASSERT_EQ(cudaMemcpy(&flag, err, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(flag, 0) << "a kernel flagged an error";
}

// Session 12: the mHC site with the sublayer's RMSNorm in its finish kernel (hc_site with an
// HcSiteNorm; launched with PDL when small kernels are), for the site and the expand variant
// (the late input: the streams, or the y the expand adds).
TEST_F(CudaSmallPdl, HcSiteWithNormWaitsForItsInputs) {
  const int64_t hc = 4, H = 4096, N = (2 + hc) * hc;
  for (int64_t S : {1, 16}) {
    for (int variant = 0; variant < 3; ++variant) {  // site, expand, expand of y + y2
      const bool expand = variant > 0;
      float* x = device_floats(randn(S * hc * H));
      float* fn = device_floats(randn(N * hc * H, 0.01f));
      float* base = device_floats(randn(N));
      float* scale = device_floats(randn(3));
      float* w = device_floats(randn(H));
      float* y = device_floats(randn(S * H));
      float* post_prev = device_floats(randn(S * hc));
      float* comb_prev = device_floats(randn(S * hc * hc));
      const int64_t scratch =
          kernels::hc_site_scratch_floats(S, hc, H, false, kernels::HcSiteMode::kAuto);
      float* part = static_cast<float*>(device_bytes(scratch * 4));
      float* post = static_cast<float*>(device_bytes(S * hc * 4));
      float* comb = static_cast<float*>(device_bytes(S * hc * hc * 4));
      float* col = static_cast<float*>(device_bytes(S * H * 4));
      float* normed = static_cast<float*>(device_bytes(S * H * 4));
      float* xnew = static_cast<float*>(device_bytes(S * hc * H * 4));
      float* y2 = device_floats(randn(S * H));
      kernels::HcExpandIn ex{x, y, post_prev, comb_prev, xnew};
      if (variant == 2) ex.y2 = y2;
      const kernels::HcSiteNorm nm{w, 1e-6f, normed};
      std::vector<Out> outs{
          {normed, S * H * 4}, {col, S * H * 4}, {post, S * hc * 4}, {comb, S * hc * hc * 4}};
      if (expand) outs.push_back({xnew, S * hc * H * 4});
      const char* name = variant == 0   ? "hc_pre_norm"
                         : variant == 1 ? "hc_expand_pre_norm"
                                        : "hc_expand_pre_norm y+y2";
      check(std::string(name) + " S=" + std::to_string(S),
            variant == 2 ? y2
            : expand     ? y
                         : x,
            expand ? S * H : S * hc * H, outs, {}, true, [&] {
              kernels::hc_site(x, fn, base, scale, S, hc, H, 20, 1e-6f, 1e-6f, false, part, post,
                               comb, col, stream_, expand ? &ex : nullptr, pdl::small_kernels(),
                               kernels::HcSiteMode::kAuto, &nm);
            });
    }
  }
}

}  // namespace
}  // namespace deepinfer::cuda
