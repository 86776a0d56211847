#include "dist/communicator.h"

#include <numeric>
#include <string>

namespace deepinfer::dist {
namespace {

Status check_rows(const std::string& who, const char* arg, int world_size,
                  const backend::Tensor& t, const std::vector<int64_t>& rows) {
  if (rows.size() != static_cast<size_t>(world_size))
    return InvalidArgument(who + ": " + arg + "_rows has " + std::to_string(rows.size()) +
                           " entries, expected world_size = " + std::to_string(world_size));
  int64_t sum = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r] < 0)
      return InvalidArgument(who + ": " + arg + "_rows[" + std::to_string(r) + "] is negative (" +
                             std::to_string(rows[r]) + ")");
    sum += rows[r];
  }
  if (t.rank() < 1 || t.dim(0) != sum)
    return InvalidArgument(who + ": " + arg + " " + t.describe() + " must have " +
                           std::to_string(sum) + " rows (the sum of " + arg + "_rows)");
  return OkStatus();
}

}  // namespace

Status check_all_to_all_args(const char* who, int world_size, const backend::Tensor& send,
                             const std::vector<int64_t>& send_rows, const backend::Tensor& recv,
                             const std::vector<int64_t>& recv_rows) {
  DI_RETURN_IF_ERROR(check_rows(who, "send", world_size, send, send_rows));
  DI_RETURN_IF_ERROR(check_rows(who, "recv", world_size, recv, recv_rows));
  const int64_t send_width = send.dim(0) > 0 ? send.numel() / send.dim(0) : -1;
  const int64_t recv_width = recv.dim(0) > 0 ? recv.numel() / recv.dim(0) : -1;
  if (send.dtype() != recv.dtype() ||
      (send_width >= 0 && recv_width >= 0 && send_width != recv_width))
    return InvalidArgument(std::string(who) + ": send " + send.describe() + " and recv " +
                           recv.describe() + " differ in dtype or row width");
  return OkStatus();
}

Status check_exchange_args(const char* who, int world_size, const std::vector<int64_t>& send,
                           int64_t n) {
  if (n < 0) return InvalidArgument(std::string(who) + ": block size n must be >= 0");
  if (send.size() != static_cast<size_t>(world_size * n))
    return InvalidArgument(std::string(who) + ": send has " + std::to_string(send.size()) +
                           " counts, expected world_size · n = " + std::to_string(world_size * n));
  return OkStatus();
}

StatusOr<std::vector<int64_t>> all_gather_count(Communicator& comm, int64_t count) {
  std::vector<int64_t> send(comm.world_size(), count);
  return comm.exchange_counts(send, 1);
}

}  // namespace deepinfer::dist
