// KvCacheCoordinator: the one object the scheduler and the model runner talk to about cache memory.
// It holds one StateManager per kind of state the model has (kinds with no layers are absent) and
// answers, all-or-nothing across kinds, "can this request get slots for its next N tokens".
//
//   KvCacheCoordinator kv(dims, config, sizes);
//   if (!kv.allocate_slots(req, num_computed, num_new)) { /* preempt someone, retry */ }
//   ... run the step ...
//   kv.free_skipped_blocks(req, num_computed + num_new);   // out-of-window rows back to the pool
//   kv.free(req);                                          // finished / preempted / aborted
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "kv/kv_spec.h"
#include "kv/state_manager.h"

namespace deepinfer::kv {

struct KvPoolSizes {
  std::array<int32_t, kNumStateKinds> num_blocks{};  // indexed by StateKind
  int32_t& operator[](StateKind k) { return num_blocks[static_cast<size_t>(k)]; }
  int32_t operator[](StateKind k) const { return num_blocks[static_cast<size_t>(k)]; }
};

// A request's block tables, one per kind (empty for kinds the model lacks). The kTail table has at
// most one entry: the request's state slot.
struct KvBlockTables {
  std::array<std::vector<BlockId>, kNumStateKinds> tables;
  const std::vector<BlockId>& operator[](StateKind k) const { return tables[static_cast<size_t>(k)]; }
  std::vector<BlockId>& operator[](StateKind k) { return tables[static_cast<size_t>(k)]; }
  friend bool operator==(const KvBlockTables&, const KvBlockTables&) = default;
};

class KvCacheCoordinator {
 public:
  // Fails if dims/config are invalid, or a kind the model has gets 0 blocks.
  static StatusOr<std::unique_ptr<KvCacheCoordinator>> create(const KvModelDims& dims, const KvCacheConfig& config,
                                                               const KvPoolSizes& sizes);

  // Makes the request's tables cover `num_computed + num_new` tokens. First frees its out-of-window
  // blocks (as of num_computed); then, only if every kind has room, allocates. false = no room
  // (nothing allocated); the caller preempts and retries, or waits.
  [[nodiscard]] bool allocate_slots(RequestKey key, int64_t num_computed, int64_t num_new);
  // After a step: frees blocks that `num_computed` computed tokens no longer need.
  void free_skipped_blocks(RequestKey key, int64_t num_computed);
  // Releases everything the request holds (finish, abort, preemption).
  void free(RequestKey key);

  KvBlockTables block_tables(RequestKey key) const;
  bool has_kind(StateKind kind) const { return managers_[static_cast<size_t>(kind)] != nullptr; }
  int32_t num_blocks(StateKind kind) const;
  int32_t num_free_blocks(StateKind kind) const;
  const StateManager* manager(StateKind kind) const { return managers_[static_cast<size_t>(kind)].get(); }
  const KvModelDims& dims() const { return dims_; }
  const KvCacheConfig& config() const { return config_; }

  // OK if a request of `num_tokens` tokens computed in chunks of at most `max_chunk` could run with
  // the whole cache to itself; otherwise ResourceExhausted naming the kind, the blocks it would need
  // and the pool size. The scheduler rejects such a request up front instead of waiting forever.
  Status check_can_ever_fit(int64_t num_tokens, int64_t max_chunk) const;

  // Every pool consistent (BlockPool::check_integrity), and every block either free or referenced by
  // exactly as many table entries as its ref count (without prefix caching: exactly one owner).
  Status check_integrity() const;

  // "window 12/64 free, csa 3/8 free, ..." for logs.
  std::string usage_summary() const;

 private:
  KvCacheCoordinator(const KvModelDims& dims, const KvCacheConfig& config) : dims_(dims), config_(config) {}

  KvModelDims dims_;
  KvCacheConfig config_;
  std::array<std::unique_ptr<StateManager>, kNumStateKinds> managers_;
};

// Slot mappings for the model runner (row index inside a kind's paged storage).
// Window row of token `position`: table[position / B] * B + position % B (table entry must be live).
int64_t window_slot(const std::vector<BlockId>& table, int block_size, int64_t position);
// Compressed entry `entry` (CSA or HCA): table[entry / E] * E + entry % E.
int64_t entry_slot(const std::vector<BlockId>& table, int entries_per_block, int64_t entry);

}  // namespace deepinfer::kv
