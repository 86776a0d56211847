#include "kv/coordinator.h"

#include <sstream>

#include "common/check.h"

namespace deepinfer::kv {

StatusOr<std::unique_ptr<KvCacheCoordinator>> KvCacheCoordinator::create(const KvModelDims& dims,
                                                                         const KvCacheConfig& config,
                                                                         const KvPoolSizes& sizes) {
  DI_RETURN_IF_ERROR(dims.validate());
  DI_RETURN_IF_ERROR(config.validate());
  std::unique_ptr<KvCacheCoordinator> c(new KvCacheCoordinator(dims, config));
  for (StateKind kind : kAllStateKinds) {
    if (bytes_per_block(dims, config, kind) == 0) continue;  // the model has no state of this kind
    const int32_t n = sizes[kind];
    if (n <= 0) {
      return InvalidArgument(std::string("KV pool for kind '") + state_kind_name(kind) +
                             "' needs at least one block, got " + std::to_string(n));
    }
    std::unique_ptr<StateManager> m;
    switch (kind) {
      case StateKind::kWindow:
        m = std::make_unique<WindowStateManager>(n, config.window_block_size, window_keep_tokens(dims, config));
        break;
      case StateKind::kCsa:
        m = std::make_unique<EntryStateManager>(kind, n, dims.csa_compress_rate, config.csa_entries_per_block);
        break;
      case StateKind::kHca:
        m = std::make_unique<EntryStateManager>(kind, n, dims.hca_compress_rate, config.hca_entries_per_block);
        break;
      case StateKind::kTail:
        m = std::make_unique<TailStateManager>(n);
        break;
    }
    c->managers_[static_cast<size_t>(kind)] = std::move(m);
  }
  return c;
}

bool KvCacheCoordinator::allocate_slots(RequestKey key, int64_t num_computed, int64_t num_new) {
  DI_CHECK(num_computed >= 0 && num_new >= 0) << "num_computed=" << num_computed << " num_new=" << num_new;
  const int64_t total = num_computed + num_new;
  for (auto& m : managers_) {
    if (m) m->free_skipped(key, num_computed);
  }
  for (const auto& m : managers_) {
    if (m && m->num_new_blocks(key, total) > m->pool().num_free()) return false;
  }
  for (auto& m : managers_) {
    if (!m) continue;
    const bool allocated = m->allocate(key, total);
    DI_CHECK(allocated) << "allocation failed after the room check";
  }
  return true;
}

void KvCacheCoordinator::free_skipped_blocks(RequestKey key, int64_t num_computed) {
  for (auto& m : managers_) {
    if (m) m->free_skipped(key, num_computed);
  }
}

void KvCacheCoordinator::free(RequestKey key) {
  for (auto& m : managers_) {
    if (m) m->free(key);
  }
}

KvBlockTables KvCacheCoordinator::block_tables(RequestKey key) const {
  KvBlockTables t;
  for (StateKind kind : kAllStateKinds) {
    if (const StateManager* m = manager(kind)) t[kind] = m->table(key);
  }
  return t;
}

int32_t KvCacheCoordinator::num_blocks(StateKind kind) const {
  const StateManager* m = manager(kind);
  return m ? m->pool().num_blocks() : 0;
}

int32_t KvCacheCoordinator::num_free_blocks(StateKind kind) const {
  const StateManager* m = manager(kind);
  return m ? m->pool().num_free() : 0;
}

Status KvCacheCoordinator::check_can_ever_fit(int64_t num_tokens, int64_t max_chunk) const {
  for (StateKind kind : kAllStateKinds) {
    const StateManager* m = manager(kind);
    if (!m) continue;
    const int64_t need = m->peak_blocks(num_tokens, max_chunk);
    if (need > m->pool().num_blocks()) {
      std::ostringstream os;
      os << "a sequence of " << num_tokens << " tokens needs " << need << " '" << state_kind_name(kind)
         << "' KV blocks but the whole pool has " << m->pool().num_blocks()
         << "; raise the KV cache memory or lower max_model_len / max_tokens";
      return ResourceExhausted(os.str());
    }
  }
  return OkStatus();
}

Status KvCacheCoordinator::check_integrity() const {
  for (StateKind kind : kAllStateKinds) {
    const StateManager* m = manager(kind);
    if (!m) continue;
    const std::string name = state_kind_name(kind);
    Status s = m->pool().check_integrity();
    if (!s.ok()) return s.with_context("KV pool '" + name + "'");
    std::vector<int32_t> owners(static_cast<size_t>(m->pool().num_blocks()), 0);
    for (const auto& [key, table] : m->tables()) {
      for (BlockId b : table) {
        if (b == kNullBlock) continue;
        if (b < 0 || b >= m->pool().num_blocks()) {
          return Internal("KV pool '" + name + "': request " + std::to_string(key) + " holds invalid block " +
                          std::to_string(b));
        }
        ++owners[static_cast<size_t>(b)];
      }
    }
    for (size_t b = 0; b < owners.size(); ++b) {
      const int32_t refs = m->pool().ref_count(static_cast<BlockId>(b));
      if (owners[b] != refs) {
        return Internal("KV pool '" + name + "': block " + std::to_string(b) + " has ref count " +
                        std::to_string(refs) + " but " + std::to_string(owners[b]) + " table entries");
      }
    }
  }
  return OkStatus();
}

std::string KvCacheCoordinator::usage_summary() const {
  std::ostringstream os;
  bool first = true;
  for (StateKind kind : kAllStateKinds) {
    const StateManager* m = manager(kind);
    if (!m) continue;
    os << (first ? "" : ", ") << state_kind_name(kind) << " " << m->pool().num_free() << "/"
       << m->pool().num_blocks() << " free";
    first = false;
  }
  return os.str();
}

int64_t window_slot(const std::vector<BlockId>& table, int block_size, int64_t position) {
  const BlockId b = table.at(static_cast<size_t>(position / block_size));
  DI_CHECK(b != kNullBlock) << "window row of position " << position << " was freed";
  return int64_t{b} * block_size + position % block_size;
}

int64_t entry_slot(const std::vector<BlockId>& table, int entries_per_block, int64_t entry) {
  const BlockId b = table.at(static_cast<size_t>(entry / entries_per_block));
  return int64_t{b} * entries_per_block + entry % entries_per_block;
}

}  // namespace deepinfer::kv
