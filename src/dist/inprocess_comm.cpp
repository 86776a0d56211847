#include "dist/inprocess_comm.h"

#include <cstring>
#include <string>

namespace deepinfer::dist {

using backend::Tensor;

namespace {

const char* op_name(InProcessGroup::Op op) {
  switch (op) {
    case InProcessGroup::Op::kAllToAll: return "all_to_all_v";
    case InProcessGroup::Op::kAllReduce: return "all_reduce_sum";
    case InProcessGroup::Op::kExchange: return "exchange_counts";
    case InProcessGroup::Op::kNone: break;
  }
  return "none";
}

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup* group, int rank) : g_(group), rank_(rank) {}
  const char* name() const override { return "in-process"; }
  int rank() const override { return rank_; }
  int world_size() const override { return g_->world_size(); }

  Status all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows, Tensor& recv,
                      const std::vector<int64_t>& recv_rows) override {
    const int W = world_size();
    Status args = check_all_to_all_args("in-process all_to_all_v", W, send, send_rows, recv, recv_rows);
    if (args.ok() && (send.on_device() || recv.on_device()))
      args = InvalidArgument("in-process all_to_all_v: device tensors (this communicator moves host memory)");
    InProcessGroup::Post p;
    p.op = InProcessGroup::Op::kAllToAll;
    p.data = send.raw();
    const int64_t width = send.dim(0) > 0 ? send.numel() / send.dim(0)
                          : recv.dim(0) > 0 ? recv.numel() / recv.dim(0) : 0;
    p.row_bytes = static_cast<int64_t>(dtype_bytes(send.dtype(), static_cast<uint64_t>(width)));
    p.offsets.assign(W + 1, 0);
    if (args.ok())
      for (int d = 0; d < W; ++d) p.offsets[d + 1] = p.offsets[d] + send_rows[d];
    return collective(std::move(p), args, [&](const std::vector<InProcessGroup::Post>& all) -> Status {
      int64_t at = 0;
      for (int s = 0; s < W; ++s) {
        const InProcessGroup::Post& q = all[s];
        const int64_t rows = q.offsets[rank_ + 1] - q.offsets[rank_];
        if (rows != recv_rows[s])
          return InvalidArgument("in-process all_to_all_v: rank " + std::to_string(rank_) +
                                 " expects " + std::to_string(recv_rows[s]) + " rows from rank " +
                                 std::to_string(s) + ", which sends " + std::to_string(rows));
        if (rows > 0 && q.row_bytes != all[rank_].row_bytes)
          return InvalidArgument("in-process all_to_all_v: rank " + std::to_string(s) +
                                 " sends rows of another width or dtype");
        if (rows > 0)
          std::memcpy(static_cast<char*>(recv.raw()) + at * q.row_bytes,
                      static_cast<const char*>(q.data) + q.offsets[rank_] * q.row_bytes,
                      static_cast<size_t>(rows * q.row_bytes));
        at += rows;
      }
      return OkStatus();
    });
  }

  Status all_reduce_sum(Tensor& inout) override {
    Status args;
    if (inout.dtype() != DType::kF32 && inout.dtype() != DType::kI32)
      args = InvalidArgument("in-process all_reduce_sum: " + inout.describe() + " (F32 or I32 only)");
    else if (inout.on_device())
      args = InvalidArgument("in-process all_reduce_sum: device tensor (host memory only)");
    InProcessGroup::Post p;
    p.op = InProcessGroup::Op::kAllReduce;
    p.data = inout.raw();
    p.count = inout.numel();
    p.dtype = static_cast<int>(inout.dtype());
    std::vector<float> sum_f;
    std::vector<int32_t> sum_i;
    DI_RETURN_IF_ERROR(collective(std::move(p), args, [&](const std::vector<InProcessGroup::Post>& all) -> Status {
      for (const auto& q : all)
        if (q.count != inout.numel() || q.dtype != static_cast<int>(inout.dtype()))
          return InvalidArgument("in-process all_reduce_sum: ranks pass different shapes or dtypes");
      const int64_t n = inout.numel();
      if (inout.dtype() == DType::kF32) {
        sum_f.assign(static_cast<const float*>(all[0].data), static_cast<const float*>(all[0].data) + n);
        for (size_t s = 1; s < all.size(); ++s)
          for (int64_t i = 0; i < n; ++i) sum_f[i] += static_cast<const float*>(all[s].data)[i];
      } else {
        sum_i.assign(static_cast<const int32_t*>(all[0].data), static_cast<const int32_t*>(all[0].data) + n);
        for (size_t s = 1; s < all.size(); ++s)
          for (int64_t i = 0; i < n; ++i) sum_i[i] += static_cast<const int32_t*>(all[s].data)[i];
      }
      return OkStatus();
    }));
    // Every rank has finished reading; write our own buffer now.
    if (!sum_f.empty()) std::memcpy(inout.raw(), sum_f.data(), sum_f.size() * sizeof(float));
    if (!sum_i.empty()) std::memcpy(inout.raw(), sum_i.data(), sum_i.size() * sizeof(int32_t));
    return OkStatus();
  }

  StatusOr<std::vector<int64_t>> exchange_counts(const std::vector<int64_t>& send, int64_t n) override {
    const int W = world_size();
    Status args = check_exchange_args("in-process exchange_counts", W, send, n);
    InProcessGroup::Post p;
    p.op = InProcessGroup::Op::kExchange;
    p.data = send.data();
    p.count = n;
    std::vector<int64_t> out(static_cast<size_t>(W) * (n > 0 ? n : 0));
    DI_RETURN_IF_ERROR(collective(std::move(p), args, [&](const std::vector<InProcessGroup::Post>& all) -> Status {
      for (int s = 0; s < W; ++s) {
        if (all[s].count != n)
          return InvalidArgument("in-process exchange_counts: rank " + std::to_string(s) +
                                 " uses block size " + std::to_string(all[s].count) + ", this rank " +
                                 std::to_string(n));
        const int64_t* src = static_cast<const int64_t*>(all[s].data) + rank_ * n;
        std::copy(src, src + n, out.begin() + s * n);
      }
      return OkStatus();
    }));
    return out;
  }

 private:
  // Post; rendezvous; read (unless this rank's arguments were bad, or the ranks disagree on the
  // op); rendezvous. Both rendezvous always happen, so a bad call on one rank never strands the
  // others; the rank with bad arguments reports them, its peers the mismatch they see.
  template <typename Read>
  Status collective(InProcessGroup::Post post, const Status& args, const Read& read) {
    const InProcessGroup::Op op = post.op;
    if (!args.ok()) post.op = InProcessGroup::Op::kNone;  // peers see "no valid call"
    g_->posts()[rank_] = std::move(post);
    DI_RETURN_IF_ERROR(g_->rendezvous());
    Status st = args;
    if (st.ok()) {
      for (int s = 0; s < world_size() && st.ok(); ++s)
        if (g_->posts()[s].op != op)
          st = InvalidArgument(std::string("in-process ") + op_name(op) + ": rank " +
                               std::to_string(s) + " is in " + op_name(g_->posts()[s].op) +
                               " (mismatched collective or bad arguments there)");
      if (st.ok()) st = read(g_->posts());
    }
    Status done = g_->rendezvous();
    if (!st.ok()) return st;
    return done;
  }

  InProcessGroup* g_;
  int rank_;
};

}  // namespace

InProcessGroup::InProcessGroup(int world_size)
    : world_size_(world_size < 1 ? 1 : world_size), posts_(world_size_) {}

StatusOr<std::unique_ptr<Communicator>> InProcessGroup::communicator(int rank) {
  if (rank < 0 || rank >= world_size_)
    return InvalidArgument("in-process group: rank " + std::to_string(rank) + " outside [0, " +
                           std::to_string(world_size_) + ")");
  return std::unique_ptr<Communicator>(new InProcessCommunicator(this, rank));
}

void InProcessGroup::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  cv_.notify_all();
}

Status InProcessGroup::rendezvous() {
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) return Cancelled("in-process group: aborted by a rank");
  const uint64_t gen = generation_;
  if (++arrived_ == world_size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return OkStatus();
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen) return Cancelled("in-process group: aborted by a rank");
  return OkStatus();
}

}  // namespace deepinfer::dist
