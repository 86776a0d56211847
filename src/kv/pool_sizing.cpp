#include "kv/pool_sizing.h"

#include <limits>
#include <sstream>

namespace deepinfer::kv {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of `kind` one sequence of `len` tokens needs at its largest.
int64_t blocks_for_one_sequence(const KvModelDims& d, const KvCacheConfig& c, StateKind kind, int64_t len,
                                int64_t max_chunk) {
  switch (kind) {
    case StateKind::kWindow:
      return WindowStateManager(0, c.window_block_size, window_keep_tokens(d, c)).peak_blocks(len, max_chunk);
    case StateKind::kCsa: return ceil_div(len / d.csa_compress_rate, c.csa_entries_per_block);
    case StateKind::kHca: return ceil_div(len / d.hca_compress_rate, c.hca_entries_per_block);
    case StateKind::kTail: return 1;
  }
  return 0;
}

}  // namespace

std::string KvPoolPlan::summary() const {
  std::ostringstream os;
  bool first = true;
  for (StateKind kind : kAllStateKinds) {
    const auto i = static_cast<size_t>(kind);
    if (bytes_per_block[i] == 0) continue;
    os << (first ? "" : ", ") << state_kind_name(kind) << " " << sizes.num_blocks[i] << " x " << bytes_per_block[i]
       << " B";
    first = false;
  }
  os << " = " << total_bytes << " B";
  return os.str();
}

StatusOr<KvPoolPlan> plan_kv_pools(const KvModelDims& dims, const KvCacheConfig& config, const KvBudget& budget) {
  DI_RETURN_IF_ERROR(dims.validate());
  DI_RETURN_IF_ERROR(config.validate());
  if (budget.budget_bytes <= 0) return InvalidArgument("KV cache budget must be > 0 bytes, got " + std::to_string(budget.budget_bytes));
  if (budget.max_model_len <= 0) return InvalidArgument("max_model_len must be > 0, got " + std::to_string(budget.max_model_len));
  if (budget.max_num_seqs <= 0) return InvalidArgument("max_num_seqs must be > 0, got " + std::to_string(budget.max_num_seqs));
  if (budget.max_num_batched_tokens <= 0) {
    return InvalidArgument("max_num_batched_tokens must be > 0, got " + std::to_string(budget.max_num_batched_tokens));
  }
  KvPoolPlan plan;
  for (StateKind kind : kAllStateKinds) plan.bytes_per_block[static_cast<size_t>(kind)] = bytes_per_block(dims, config, kind);
  auto bpb = [&](StateKind k) { return plan.bytes_per_block[static_cast<size_t>(k)]; };

  // 1. Kinds bounded per sequence.
  const bool sliding = dims.sliding_window > 0;
  std::array<int64_t, kNumStateKinds> fixed{};
  if (bpb(StateKind::kTail) > 0) fixed[static_cast<size_t>(StateKind::kTail)] = budget.max_num_seqs;
  if (sliding) {
    const int64_t B = config.window_block_size;
    fixed[static_cast<size_t>(StateKind::kWindow)] =
        int64_t{budget.max_num_seqs} * (ceil_div(window_keep_tokens(dims, config), B) + 2) +
        ceil_div(budget.max_num_batched_tokens, B);
  }
  int64_t fixed_bytes = 0;
  for (StateKind k : kAllStateKinds) fixed_bytes += fixed[static_cast<size_t>(k)] * bpb(k);

  // 2. Kinds that grow with the context: what one max_model_len sequence needs.
  std::array<int64_t, kNumStateKinds> per_seq{};
  int64_t per_seq_bytes = 0;
  for (StateKind k : {StateKind::kWindow, StateKind::kCsa, StateKind::kHca}) {
    if (bpb(k) == 0 || (k == StateKind::kWindow && sliding)) continue;
    per_seq[static_cast<size_t>(k)] =
        std::max<int64_t>(1, blocks_for_one_sequence(dims, config, k, budget.max_model_len, budget.max_num_batched_tokens));
    per_seq_bytes += per_seq[static_cast<size_t>(k)] * bpb(k);
  }

  if (fixed_bytes + per_seq_bytes > budget.budget_bytes) {
    std::ostringstream os;
    os << "KV cache budget of " << budget.budget_bytes << " bytes is too small: " << budget.max_num_seqs
       << " sequences (max_num_seqs) need " << fixed_bytes << " bytes of fixed state (window rows and compressor tails)"
       << " and one sequence of max_model_len " << budget.max_model_len << " needs " << per_seq_bytes
       << " bytes of compressed entries, " << (fixed_bytes + per_seq_bytes)
       << " in all; raise the KV cache memory, or lower max_num_seqs or max_model_len";
    return ResourceExhausted(os.str());
  }

  const int64_t rest = budget.budget_bytes - fixed_bytes;
  for (StateKind k : kAllStateKinds) {
    const auto i = static_cast<size_t>(k);
    int64_t n = fixed[i];
    if (per_seq[i] > 0) n = per_seq[i] * rest / per_seq_bytes;  // floor of the proportional share
    if (n > std::numeric_limits<int32_t>::max()) {
      return OutOfRange(std::string("KV pool '") + state_kind_name(k) + "' would have " + std::to_string(n) +
                        " blocks, more than a 32-bit block id can address; raise the block size");
    }
    plan.sizes.num_blocks[i] = static_cast<int32_t>(n);
    plan.total_bytes += n * bpb(k);
  }
  return plan;
}

}  // namespace deepinfer::kv
