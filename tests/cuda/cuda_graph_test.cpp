// CudaBackend's captured work (Backend::begin_capture / end_capture / replay; CUDA graphs):
// replays see new inputs written into the fixed tensors, tensors allocated while capturing keep
// their memory, two graphs can share one pool, and a call that needs the host while capturing
// (upload, download, synchronize) fails the capture cleanly and leaves the backend usable.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"

namespace deepinfer::cuda {
namespace {

using backend::Tensor;

std::vector<float> random_values(size_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

std::vector<float> download(CudaBackend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  Tensor host = Tensor::borrow(out.data(), DType::kF32, t.shape());
  const Status st = be.download(t, host);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

void upload(CudaBackend& be, std::vector<float>& v, Tensor& dst) {
  const Status st = be.upload(Tensor::borrow(v.data(), DType::kF32, dst.shape()), dst);
  ASSERT_TRUE(st.ok()) << st.to_string();
}

class CudaGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto be = CudaBackend::create({});
    ASSERT_TRUE(be.ok()) << be.status().to_string();
    be_ = std::move(be).value();
    gen_.seed(std::random_device{}());
  }
  std::unique_ptr<CudaBackend> be_;
  std::mt19937 gen_;
};

TEST_F(CudaGraphTest, ReplaysReadNewInputsAndShareAPool) {
  constexpr int64_t kN = 3000;
  ASSERT_TRUE(be_->supports_graphs());
  auto x = be_->empty(DType::kF32, {kN});
  ASSERT_TRUE(x.ok());
  // Graph 1: t = x + x (a temporary, freed inside the capture), out1 = t + x.
  ASSERT_TRUE(be_->begin_capture(nullptr).ok());
  Tensor out1;
  {
    auto t = be_->empty(DType::kF32, {kN});
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE(be_->add(*x, *x, *t).ok());
    auto o = be_->empty(DType::kF32, {kN});
    ASSERT_TRUE(o.ok());
    out1 = *o;
    ASSERT_TRUE(be_->add(*t, *x, out1).ok());
  }
  auto g1 = be_->end_capture();
  ASSERT_TRUE(g1.ok()) << g1.status().to_string();
  // Graph 2 in graph 1's pool: out2 = out1 + out1 (its allocation may reuse t's block).
  ASSERT_TRUE(be_->begin_capture(g1->get()).ok());
  auto out2 = be_->empty(DType::kF32, {kN});
  ASSERT_TRUE(out2.ok());
  ASSERT_TRUE(be_->add(out1, out1, *out2).ok());
  auto g2 = be_->end_capture();
  ASSERT_TRUE(g2.ok()) << g2.status().to_string();
  for (int round = 0; round < 3; ++round) {
    std::vector<float> xv = random_values(kN, gen_);
    upload(*be_, xv, *x);
    ASSERT_TRUE(be_->replay(**g1).ok());
    ASSERT_TRUE(be_->replay(**g2).ok());
    const std::vector<float> a = download(*be_, out1), b = download(*be_, *out2);
    for (int64_t i = 0; i < kN; ++i) {
      const float t = xv[i] + xv[i], o1 = t + xv[i];
      ASSERT_EQ(a[i], o1) << "round " << round << " element " << i;
      ASSERT_EQ(b[i], o1 + o1) << "round " << round << " element " << i;
    }
  }
}

TEST_F(CudaGraphTest, HostCallsFailTheCaptureAndLeaveTheBackendUsable) {
  constexpr int64_t kN = 64;
  std::vector<float> host = random_values(kN, gen_);
  auto x = be_->empty(DType::kF32, {kN});
  ASSERT_TRUE(x.ok());
  upload(*be_, host, *x);
  struct Case {
    const char* what;
    std::function<Status()> call;
  };
  std::vector<float> sink(kN);
  const Case cases[] = {
      {"upload", [&] { return be_->upload(Tensor::borrow(host.data(), DType::kF32, {kN}), *x); }},
      {"download", [&] {
         Tensor h = Tensor::borrow(sink.data(), DType::kF32, {kN});
         return be_->download(*x, h);
       }},
      {"synchronize", [&] { return be_->synchronize(); }},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(be_->begin_capture(nullptr).ok()) << c.what;
    auto y = be_->empty(DType::kF32, {kN});
    ASSERT_TRUE(y.ok());
    ASSERT_TRUE(be_->add(*x, *x, *y).ok());
    const Status st = c.call();
    EXPECT_FALSE(st.ok()) << c.what << " succeeded while capturing";
    EXPECT_NE(st.message().find(c.what), std::string::npos) << st.to_string();
    auto g = be_->end_capture();
    ASSERT_FALSE(g.ok()) << c.what << ": the capture should have failed";
    EXPECT_NE(g.status().message().find(c.what), std::string::npos) << g.status().to_string();
    // Normal mode again: ops run, and nothing captured ran.
    auto z = be_->empty(DType::kF32, {kN});
    ASSERT_TRUE(z.ok());
    ASSERT_TRUE(be_->add(*x, *x, *z).ok()) << c.what;
    const std::vector<float> got = download(*be_, *z);
    for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(got[i], host[i] + host[i]) << c.what;
  }
}

TEST_F(CudaGraphTest, MisuseIsAnError) {
  EXPECT_FALSE(be_->end_capture().ok());  // nothing begun
  ASSERT_TRUE(be_->begin_capture(nullptr).ok());
  const Status nested = be_->begin_capture(nullptr);
  EXPECT_FALSE(nested.ok());
  EXPECT_NE(nested.message().find("while capturing"), std::string::npos) << nested.to_string();
  auto g = be_->end_capture();  // an empty capture is a valid (empty) graph
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(be_->replay(**g).ok());
  EXPECT_TRUE(be_->synchronize().ok());
  auto off = CudaBackend::create({.graphs = false});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE((*off)->supports_graphs());
  const Status st = (*off)->begin_capture(nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("disabled"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace deepinfer::cuda
