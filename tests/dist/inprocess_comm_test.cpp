// The in-process communicator (threads as ranks): all-to-all-v delivers each peer's rows at the
// right offsets (random row counts, zero rows included), all-reduce sums in rank order and gives
// every rank the same bits, exchange_counts transposes blocks; mismatched calls and bad arguments
// return errors on every rank instead of hanging; abort() releases waiting ranks.
#include "dist/inprocess_comm.h"

#include <gtest/gtest.h>

#include <random>

#include "ep_test_util.h"

namespace deepinfer::dist {
namespace {

using backend::Tensor;

// Value of row i sent from rank s to rank d, channel c (exactly representable).
float value(int s, int d, int64_t i, int64_t c) {
  return static_cast<float>(s * 100000 + d * 10000 + i * 10 + c);
}

TEST(InProcessComm, AllToAllVRandomCounts) {
  const uint32_t seed = std::random_device{}();
  std::mt19937 rng(seed);
  for (int W : {1, 2, 3, 4}) {
    const int64_t width = 1 + rng() % 5;
    std::vector<int64_t> rows(W * W);  // rows[s * W + d]: rows s sends to d
    for (auto& r : rows) r = rng() % 4;
    auto st = testing::run_ranks(W, [&](int me, Communicator& comm) -> Status {
      EXPECT_EQ(comm.rank(), me);
      EXPECT_EQ(comm.world_size(), W);
      std::vector<int64_t> send_rows(W), recv_rows(W);
      int64_t ns = 0, nr = 0;
      for (int d = 0; d < W; ++d) ns += send_rows[d] = rows[me * W + d];
      for (int s = 0; s < W; ++s) nr += recv_rows[s] = rows[s * W + me];
      Tensor send = Tensor::empty(DType::kF32, {ns, width});
      int64_t at = 0;
      for (int d = 0; d < W; ++d)
        for (int64_t i = 0; i < send_rows[d]; ++i, ++at)
          for (int64_t c = 0; c < width; ++c) send.data<float>()[at * width + c] = value(me, d, i, c);
      Tensor recv = Tensor::empty(DType::kF32, {nr, width});
      DI_RETURN_IF_ERROR(comm.all_to_all_v(send, send_rows, recv, recv_rows));
      at = 0;
      for (int s = 0; s < W; ++s)
        for (int64_t i = 0; i < recv_rows[s]; ++i, ++at)
          for (int64_t c = 0; c < width; ++c)
            if (recv.data<float>()[at * width + c] != value(s, me, i, c))
              return Internal("rank " + std::to_string(me) + " row " + std::to_string(at) + " wrong");
      return OkStatus();
    });
    for (int r = 0; r < W; ++r) ASSERT_TRUE(st[r].ok()) << st[r].to_string() << " seed " << seed;
  }
}

TEST(InProcessComm, AllReduceAndExchange) {
  const int W = 3;
  std::vector<std::vector<float>> result(W);
  auto st = testing::run_ranks(W, [&](int me, Communicator& comm) -> Status {
    Tensor f = Tensor::from_f32({4}, {1e8f, 1.0f, 0.5f * me, -1e8f});
    DI_RETURN_IF_ERROR(comm.all_reduce_sum(f));
    result[me].assign(f.data<float>(), f.data<float>() + 4);
    Tensor i = Tensor::from_i32({2}, {me, 10 * me});
    DI_RETURN_IF_ERROR(comm.all_reduce_sum(i));
    if (i.data<int32_t>()[0] != 3 || i.data<int32_t>()[1] != 30) return Internal("int sum");
    // exchange: block d of rank s is {s, d}; rank me receives {s, me} from each s.
    std::vector<int64_t> send;
    for (int d = 0; d < W; ++d) {
      send.push_back(me);
      send.push_back(d);
    }
    DI_ASSIGN_OR_RETURN(auto got, comm.exchange_counts(send, 2));
    for (int s = 0; s < W; ++s)
      if (got[2 * s] != s || got[2 * s + 1] != me) return Internal("exchange block " + std::to_string(s));
    DI_ASSIGN_OR_RETURN(auto counts, all_gather_count(comm, 5 + me));
    if (counts != std::vector<int64_t>{5, 6, 7}) return Internal("all_gather_count");
    return OkStatus();
  });
  for (int r = 0; r < W; ++r) ASSERT_TRUE(st[r].ok()) << st[r].to_string();
  // Rank order: ((1e8 + 1e8) + 1e8) = 3e8, ((1 + 1) + 1) = 3, 0 + 0.5 + 1, -3e8 — same bits everywhere.
  for (int r = 0; r < W; ++r) EXPECT_EQ(result[r], (std::vector<float>{3e8f, 3.0f, 1.5f, -3e8f}));
}

TEST(InProcessComm, MismatchesAreErrorsOnEveryRank) {
  // Rank 1 expects 2 rows from rank 0, which sends 1.
  auto st = testing::run_ranks(2, [&](int me, Communicator& comm) -> Status {
    Tensor send = Tensor::empty(DType::kF32, {1, 3});
    std::vector<int64_t> send_rows = me == 0 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{1, 0};
    std::vector<int64_t> recv_rows = me == 0 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{2, 0};
    Tensor recv = Tensor::empty(DType::kF32, {me == 0 ? 1 : 2, 3});
    return comm.all_to_all_v(send, send_rows, recv, recv_rows);
  });
  EXPECT_TRUE(st[0].ok()) << st[0].to_string();
  EXPECT_EQ(st[1].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st[1].message().find("expects 2 rows from rank 0, which sends 1"), std::string::npos)
      << st[1].to_string();

  // Different collectives on the two ranks; and bad arguments on one rank (wrong counts size).
  auto mixed = testing::run_ranks(2, [&](int me, Communicator& comm) -> Status {
    if (me == 0) {
      Tensor t = Tensor::from_f32({1}, {1.0f});
      return comm.all_reduce_sum(t);
    }
    return comm.exchange_counts({1, 2}, 1).status();
  });
  EXPECT_FALSE(mixed[0].ok());
  EXPECT_FALSE(mixed[1].ok());
  EXPECT_NE(mixed[0].message().find("rank 1 is in exchange_counts"), std::string::npos) << mixed[0].to_string();

  auto bad = testing::run_ranks(2, [&](int me, Communicator& comm) -> Status {
    return comm.exchange_counts(me == 0 ? std::vector<int64_t>{1, 2, 3} : std::vector<int64_t>{1, 2}, 1).status();
  });
  EXPECT_NE(bad[0].message().find("expected world_size · n = 2"), std::string::npos) << bad[0].to_string();
  EXPECT_FALSE(bad[1].ok());

  // A rank that fails before a collective: its peer is released by abort().
  auto aborted = testing::run_ranks(3, [&](int me, Communicator& comm) -> Status {
    if (me == 2) return Internal("rank 2 failed before the collective");
    return comm.exchange_counts({1, 1, 1}, 1).status();
  });
  EXPECT_EQ(aborted[0].code(), StatusCode::kCancelled);
  EXPECT_EQ(aborted[1].code(), StatusCode::kCancelled);

  InProcessGroup g(2);
  EXPECT_EQ(g.communicator(2).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepinfer::dist
