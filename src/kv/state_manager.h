// One manager per kind of state (STYLE.md 5): it owns that kind's BlockPool and each request's block
// table, and knows the kind's rules — how many blocks `num_tokens` tokens need, and which blocks may
// be freed early. Subclasses differ only in those rules:
//   WindowStateManager : table entry i covers token positions [i*B, (i+1)*B); entries entirely below
//                        num_computed - (W-1) - retention are freed and become kNullBlock.
//   EntryStateManager  : CSA / HCA compressed entries, floor(num_tokens / m) entries, E per block.
//   TailStateManager   : one fixed-size block per sequence (compressor tails + overlaps).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_spec.h"

namespace deepinfer::kv {

class StateManager {
 public:
  StateManager(StateKind kind, int32_t num_blocks) : kind_(kind), pool_(num_blocks) {}
  virtual ~StateManager() = default;
  StateManager(const StateManager&) = delete;
  StateManager& operator=(const StateManager&) = delete;

  StateKind kind() const { return kind_; }
  const BlockPool& pool() const { return pool_; }

  // Table entries needed to hold the state of the first `num_tokens` tokens.
  virtual int64_t table_length(int64_t num_tokens) const = 0;
  // The most blocks one request of `num_tokens` tokens can hold at once when it is computed in
  // chunks of at most `max_chunk` tokens (and skipped blocks are freed after every step).
  virtual int64_t peak_blocks(int64_t num_tokens, int64_t max_chunk) const { return table_length(num_tokens); }
  // Frees blocks no longer needed once `num_computed` tokens are computed. Default: none.
  virtual void free_skipped(RequestKey key, int64_t num_computed) {}

  // New blocks the request needs so its table covers `num_tokens` tokens.
  int64_t num_new_blocks(RequestKey key, int64_t num_tokens) const;
  // Grows the table to cover `num_tokens`; false (nothing changed) if the pool lacks blocks.
  [[nodiscard]] bool allocate(RequestKey key, int64_t num_tokens);
  // Releases all the request's blocks, last table entry first (vLLM's habit: with prefix caching
  // the tail of a sequence is the least likely to be shared, so it should be evicted first).
  void free(RequestKey key);

  const std::vector<BlockId>& table(RequestKey key) const;
  const std::unordered_map<RequestKey, std::vector<BlockId>>& tables() const { return tables_; }

 protected:
  StateKind kind_;
  BlockPool pool_;
  std::unordered_map<RequestKey, std::vector<BlockId>> tables_;
};

class WindowStateManager : public StateManager {
 public:
  // keep_tokens = W - 1 + retention (0 = full attention, never free).
  WindowStateManager(int32_t num_blocks, int block_size, int64_t keep_tokens)
      : StateManager(StateKind::kWindow, num_blocks), block_size_(block_size), keep_tokens_(keep_tokens) {}
  int64_t table_length(int64_t num_tokens) const override;
  int64_t peak_blocks(int64_t num_tokens, int64_t max_chunk) const override;
  void free_skipped(RequestKey key, int64_t num_computed) override;
  int block_size() const { return block_size_; }

 private:
  int block_size_;
  int64_t keep_tokens_;
};

class EntryStateManager : public StateManager {
 public:
  EntryStateManager(StateKind kind, int32_t num_blocks, int compress_rate, int entries_per_block)
      : StateManager(kind, num_blocks), compress_rate_(compress_rate), entries_per_block_(entries_per_block) {}
  int64_t table_length(int64_t num_tokens) const override;
  int compress_rate() const { return compress_rate_; }
  int entries_per_block() const { return entries_per_block_; }

 private:
  int compress_rate_;
  int entries_per_block_;
};

class TailStateManager : public StateManager {
 public:
  explicit TailStateManager(int32_t num_blocks) : StateManager(StateKind::kTail, num_blocks) {}
  int64_t table_length(int64_t num_tokens) const override { return num_tokens > 0 ? 1 : 0; }
};

}  // namespace deepinfer::kv
