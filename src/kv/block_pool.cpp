#include "kv/block_pool.h"

#include <string>

#include "common/check.h"

namespace deepinfer::kv {

BlockPool::BlockPool(int32_t num_blocks)
    : ref_count_(static_cast<size_t>(num_blocks), 0),
      prev_(static_cast<size_t>(num_blocks), kNullBlock),
      next_(static_cast<size_t>(num_blocks), kNullBlock) {
  DI_CHECK(num_blocks >= 0) << "num_blocks=" << num_blocks;
  for (BlockId b = 0; b < num_blocks; ++b) push_back_free(b);
}

void BlockPool::push_back_free(BlockId b) {
  prev_[b] = tail_;
  next_[b] = kNullBlock;
  if (tail_ != kNullBlock) next_[tail_] = b; else head_ = b;
  tail_ = b;
  ++num_free_;
}

void BlockPool::unlink_free(BlockId b) {
  if (prev_[b] != kNullBlock) next_[prev_[b]] = next_[b]; else head_ = next_[b];
  if (next_[b] != kNullBlock) prev_[next_[b]] = prev_[b]; else tail_ = prev_[b];
  prev_[b] = next_[b] = kNullBlock;
  --num_free_;
}

bool BlockPool::allocate(int32_t n, std::vector<BlockId>* out) {
  DI_CHECK(n >= 0) << "n=" << n;
  if (n > num_free_) return false;
  for (int32_t i = 0; i < n; ++i) {
    const BlockId b = head_;
    unlink_free(b);
    ref_count_[b] = 1;
    out->push_back(b);
  }
  return true;
}

void BlockPool::retain(BlockId block) {
  DI_CHECK(block >= 0 && block < num_blocks() && ref_count_[block] > 0) << "retain of free/invalid block " << block;
  ++ref_count_[block];
}

void BlockPool::release(BlockId block) {
  if (block == kNullBlock) return;
  DI_CHECK(block >= 0 && block < num_blocks() && ref_count_[block] > 0) << "release of free/invalid block " << block;
  if (--ref_count_[block] == 0) push_back_free(block);
}

void BlockPool::release(const std::vector<BlockId>& blocks) {
  for (BlockId b : blocks) release(b);
}

std::vector<BlockId> BlockPool::free_list() const {
  std::vector<BlockId> out;
  for (BlockId b = head_; b != kNullBlock && out.size() <= ref_count_.size(); b = next_[b]) out.push_back(b);
  return out;
}

Status BlockPool::check_integrity() const {
  const auto n = static_cast<size_t>(num_blocks());
  std::vector<bool> on_list(n, false);
  size_t count = 0;
  BlockId prev = kNullBlock;
  for (BlockId b = head_; b != kNullBlock; b = next_[b]) {
    if (b < 0 || static_cast<size_t>(b) >= n) return Internal("free list holds invalid block id " + std::to_string(b));
    if (on_list[b]) return Internal("free list has a cycle at block " + std::to_string(b));
    if (prev_[b] != prev) return Internal("free list back link of block " + std::to_string(b) + " is wrong");
    on_list[b] = true;
    prev = b;
    ++count;
  }
  if (prev != tail_) return Internal("free list tail is " + std::to_string(tail_) + ", walk ends at " + std::to_string(prev));
  if (count != static_cast<size_t>(num_free_)) {
    return Internal("free list has " + std::to_string(count) + " blocks, num_free says " + std::to_string(num_free_));
  }
  for (size_t b = 0; b < n; ++b) {
    if (ref_count_[b] < 0) return Internal("block " + std::to_string(b) + " has a negative ref count");
    if ((ref_count_[b] == 0) != on_list[b]) {
      return Internal("block " + std::to_string(b) + " has ref count " + std::to_string(ref_count_[b]) +
                      (on_list[b] ? " but is on the free list" : " but is not on the free list"));
    }
  }
  return OkStatus();
}

}  // namespace deepinfer::kv
