#include "backend/cuda/range_allocator.h"

namespace deepinfer::cuda {

RangeAllocator::RangeAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity / alignment * alignment), alignment_(alignment) {
  if (capacity_ > 0) free_[0] = capacity_;
}

std::optional<uint64_t> RangeAllocator::allocate(uint64_t bytes) {
  if (bytes == 0) bytes = 1;
  const uint64_t size = (bytes + alignment_ - 1) / alignment_ * alignment_;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const uint64_t offset = it->first, rest = it->second - size;
    free_.erase(it);
    if (rest > 0) free_[offset + size] = rest;
    allocated_[offset] = size;
    in_use_ += size;
    return offset;
  }
  return std::nullopt;
}

bool RangeAllocator::free(uint64_t offset) {
  auto it = allocated_.find(offset);
  if (it == allocated_.end()) return false;
  uint64_t start = offset, size = it->second;
  allocated_.erase(it);
  in_use_ -= size;
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = size;
  return true;
}

uint64_t RangeAllocator::largest_free_range() const {
  uint64_t best = 0;
  for (const auto& [o, s] : free_) best = s > best ? s : best;
  return best;
}

bool RangeAllocator::check_integrity() const {
  std::map<uint64_t, std::pair<uint64_t, bool>> all;  // offset -> (size, is_free)
  for (const auto& [o, s] : free_) all[o] = {s, true};
  for (const auto& [o, s] : allocated_) {
    if (all.count(o)) return false;
    all[o] = {s, false};
  }
  uint64_t pos = 0, used = 0;
  bool prev_free = false;
  for (const auto& [o, e] : all) {
    if (o != pos || e.first == 0 || o % alignment_ != 0) return false;
    if (e.second && prev_free) return false;  // two adjacent free ranges: not coalesced
    prev_free = e.second;
    if (!e.second) used += e.first;
    pos += e.first;
  }
  return pos == capacity_ && used == in_use_;
}

}  // namespace deepinfer::cuda
