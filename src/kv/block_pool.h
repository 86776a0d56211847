// BlockPool: `num_blocks` fixed-size blocks of one kind of state, a free list and reference counts.
//
// The free list is a doubly linked list over block ids (O(1) removal from the middle, which prefix
// caching needs to revive a cached free block). Allocation pops from the head; freed blocks are
// appended at the tail, so a freshly built pool hands out 0, 1, 2, ... and recently freed blocks are
// reused last. "No room" is a normal answer: allocate() returns false and changes nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kv/kv_spec.h"

namespace deepinfer::kv {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_count_.size()); }
  int32_t num_free() const { return num_free_; }

  // Appends `n` blocks (ref count 1) to `out` and returns true, or returns false and leaves
  // everything unchanged if fewer than `n` blocks are free.
  [[nodiscard]] bool allocate(int32_t n, std::vector<BlockId>* out);
  // One more owner of an allocated block (prefix sharing).
  void retain(BlockId block);
  // Drops one reference per listed block (kNullBlock entries are skipped), in list order; blocks
  // reaching 0 go to the tail of the free list in that order.
  void release(const std::vector<BlockId>& blocks);
  void release(BlockId block);

  int32_t ref_count(BlockId block) const { return ref_count_.at(static_cast<size_t>(block)); }
  // Free block ids, head (next to be allocated) first.
  std::vector<BlockId> free_list() const;

  // Free list well formed (links agree both ways, no cycle, length == num_free) and a block is on it
  // iff its ref count is 0; ref counts never negative.
  Status check_integrity() const;

 private:
  void push_back_free(BlockId b);
  void unlink_free(BlockId b);

  std::vector<int32_t> ref_count_;
  std::vector<BlockId> prev_, next_;  // free-list links; kNullBlock at the ends
  BlockId head_ = kNullBlock, tail_ = kNullBlock;
  int32_t num_free_ = 0;
};

}  // namespace deepinfer::kv
