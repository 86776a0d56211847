// First-fit range allocator over [0, capacity): the bookkeeping half of the device memory pool.
// Pure host logic (no CUDA), so it is unit-tested on every machine. Offsets are aligned to
// `alignment`; freed ranges coalesce with their neighbours. "No room" is a normal answer
// (std::nullopt), never an exception.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace deepinfer::cuda {

class RangeAllocator {
 public:
  RangeAllocator(uint64_t capacity, uint64_t alignment = 256);

  std::optional<uint64_t> allocate(uint64_t bytes);
  // Frees a range returned by allocate(). Returns false for an offset that is not allocated.
  bool free(uint64_t offset);

  uint64_t capacity() const { return capacity_; }
  uint64_t bytes_in_use() const { return in_use_; }
  uint64_t largest_free_range() const;
  size_t num_allocations() const { return allocated_.size(); }
  // Every byte is in exactly one free or allocated range; free ranges are coalesced.
  bool check_integrity() const;

 private:
  uint64_t capacity_;
  uint64_t alignment_;
  uint64_t in_use_ = 0;
  std::map<uint64_t, uint64_t> free_;       // offset -> size
  std::map<uint64_t, uint64_t> allocated_;  // offset -> size
};

}  // namespace deepinfer::cuda
