#include "kv/state_manager.h"

#include <algorithm>

#include "common/check.h"

namespace deepinfer::kv {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t StateManager::num_new_blocks(RequestKey key, int64_t num_tokens) const {
  const auto it = tables_.find(key);
  const int64_t have = it == tables_.end() ? 0 : static_cast<int64_t>(it->second.size());
  return std::max<int64_t>(0, table_length(num_tokens) - have);
}

bool StateManager::allocate(RequestKey key, int64_t num_tokens) {
  const int64_t n = num_new_blocks(key, num_tokens);
  if (n == 0) return true;
  if (n > pool_.num_free()) return false;
  return pool_.allocate(static_cast<int32_t>(n), &tables_[key]);
}

void StateManager::free(RequestKey key) {
  const auto it = tables_.find(key);
  if (it == tables_.end()) return;
  std::vector<BlockId> reversed(it->second.rbegin(), it->second.rend());
  pool_.release(reversed);
  tables_.erase(it);
}

const std::vector<BlockId>& StateManager::table(RequestKey key) const {
  static const std::vector<BlockId> kEmpty;
  const auto it = tables_.find(key);
  return it == tables_.end() ? kEmpty : it->second;
}

int64_t WindowStateManager::table_length(int64_t num_tokens) const { return ceil_div(num_tokens, block_size_); }

int64_t WindowStateManager::peak_blocks(int64_t num_tokens, int64_t max_chunk) const {
  if (keep_tokens_ == 0) return table_length(num_tokens);
  // Live rows span at most keep + chunk positions, which touch at most ceil(../B) + 1 blocks.
  return std::min(table_length(num_tokens), ceil_div(keep_tokens_ + max_chunk, block_size_) + 1);
}

void WindowStateManager::free_skipped(RequestKey key, int64_t num_computed) {
  if (keep_tokens_ == 0) return;
  const auto it = tables_.find(key);
  if (it == tables_.end()) return;
  std::vector<BlockId>& table = it->second;
  // Block i is dead once all its positions are below the first position still needed.
  const int64_t first_needed = num_computed - keep_tokens_;
  if (first_needed <= 0) return;
  const int64_t dead = std::min<int64_t>(first_needed / block_size_, static_cast<int64_t>(table.size()));
  // Dead blocks form a prefix; walk down from its end until an already-freed entry.
  int64_t first = dead;
  while (first > 0 && table[static_cast<size_t>(first - 1)] != kNullBlock) --first;
  for (int64_t i = first; i < dead; ++i) {  // release in ascending position order
    pool_.release(table[static_cast<size_t>(i)]);
    table[static_cast<size_t>(i)] = kNullBlock;
  }
}

int64_t EntryStateManager::table_length(int64_t num_tokens) const {
  return ceil_div(num_tokens / compress_rate_, entries_per_block_);
}

}  // namespace deepinfer::kv
