// A Communicator wrapper that records every collective call (kind, dtype, row width, row counts)
// before passing it on, and a check that W ranks' records form one valid collective sequence:
// the same calls in the same order on every rank, and at every all-to-all the rows rank r sends
// to rank d are the rows rank d expects from rank r. NCCL hangs (or corrupts) on a violation;
// the in-process test double would often not notice (it buffers), so CPU tests check the
// recorded sequence to catch this class of bug in CI.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace deepinfer::dist::testing {

struct CollectiveCall {
  enum Kind { kAllToAll, kAllReduce, kExchange } kind;
  int dtype = -1;                  // DType as int (all-to-all, all-reduce)
  int64_t width = 0;               // elements per row (all-to-all), elements (all-reduce), n (exchange)
  std::vector<int64_t> send_rows;  // all-to-all: [W]
  std::vector<int64_t> recv_rows;  // all-to-all: [W]
  std::string describe() const {
    std::ostringstream o;
    o << (kind == kAllToAll ? "all_to_all_v" : kind == kAllReduce ? "all_reduce_sum" : "exchange_counts")
      << "(dtype " << dtype << ", width " << width;
    if (kind == kAllToAll) {
      o << ", send";
      for (int64_t v : send_rows) o << ' ' << v;
      o << ", recv";
      for (int64_t v : recv_rows) o << ' ' << v;
    }
    o << ')';
    return o.str();
  }
};

class RecordingCommunicator final : public Communicator {
 public:
  explicit RecordingCommunicator(Communicator* inner) : inner_(inner) {}
  const char* name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  Status all_to_all_v(const backend::Tensor& send, const std::vector<int64_t>& send_rows,
                      backend::Tensor& recv, const std::vector<int64_t>& recv_rows) override {
    int64_t width = 1;  // elements per row: the product of dims 1.. (defined with 0 rows too)
    for (int i = 1; i < send.rank(); ++i) width *= send.dim(i);
    calls.push_back({CollectiveCall::kAllToAll, static_cast<int>(send.dtype()), width, send_rows,
                     recv_rows});
    return inner_->all_to_all_v(send, send_rows, recv, recv_rows);
  }
  Status all_reduce_sum(backend::Tensor& inout) override {
    calls.push_back({CollectiveCall::kAllReduce, static_cast<int>(inout.dtype()), inout.numel(), {}, {}});
    return inner_->all_reduce_sum(inout);
  }
  StatusOr<std::vector<int64_t>> exchange_counts(const std::vector<int64_t>& send, int64_t n) override {
    calls.push_back({CollectiveCall::kExchange, -1, n, {}, {}});
    return inner_->exchange_counts(send, n);
  }

  std::vector<CollectiveCall> calls;

 private:
  Communicator* inner_;
};

// Empty when the W ranks' records are one valid sequence; else the first violation.
inline std::string check_collective_sequence(const std::vector<std::vector<CollectiveCall>>& ranks) {
  const size_t W = ranks.size();
  for (size_t r = 1; r < W; ++r)
    if (ranks[r].size() != ranks[0].size())
      return "rank " + std::to_string(r) + " made " + std::to_string(ranks[r].size()) +
             " collective calls, rank 0 made " + std::to_string(ranks[0].size());
  for (size_t i = 0; i < ranks[0].size(); ++i) {
    const CollectiveCall& c0 = ranks[0][i];
    for (size_t r = 0; r < W; ++r) {
      const CollectiveCall& c = ranks[r][i];
      if (c.kind != c0.kind || c.dtype != c0.dtype || c.width != c0.width)
        return "call " + std::to_string(i) + ": rank " + std::to_string(r) + " " + c.describe() +
               ", rank 0 " + c0.describe();
      if (c.kind != CollectiveCall::kAllToAll) continue;
      if (c.send_rows.size() != W || c.recv_rows.size() != W)
        return "call " + std::to_string(i) + ": rank " + std::to_string(r) + " row counts of size " +
               std::to_string(c.send_rows.size()) + " for " + std::to_string(W) + " ranks";
      for (size_t d = 0; d < W; ++d)
        if (c.send_rows[d] != ranks[d][i].recv_rows[r])
          return "call " + std::to_string(i) + ": rank " + std::to_string(r) + " sends " +
                 std::to_string(c.send_rows[d]) + " rows to rank " + std::to_string(d) +
                 ", which expects " + std::to_string(ranks[d][i].recv_rows[r]);
    }
  }
  return std::string();
}

}  // namespace deepinfer::dist::testing
