// What the KV cache stores for a DeepSeek-V4 model, in plain numbers (deepseek-v4.md §6).
//
// Four kinds of per-sequence state, each in its own block pool with its own manager:
//   kWindow : window KV rows of every layer, one row of D values per token per layer, kept for the
//             last W-1 positions (+ a retention margin); blocks of `window_block_size` tokens that
//             fall entirely out of the window are freed. With sliding_window = 0 the rows are never
//             freed (plain full attention, e.g. the llama family).
//   kCsa    : CSA compressed entries (D values) + Lightning-Indexer keys (cI values), one entry per
//             csa_compress_rate tokens per CSA layer; append-only, kept for the whole sequence.
//   kHca    : HCA compressed entries (D values), one per hca_compress_rate tokens per HCA layer.
//   kTail   : compressor tails and CSA overlaps, a fixed-size slot per sequence (one "block").
//
// KvModelDims takes plain numbers so this module does not depend on the config parser. Where
// io::DeepseekV4Config exists, a `KvModelDims kv_dims_from_config(const io::DeepseekV4Config&)` in
// the engine (or io) fills it: num_layers = num_hidden_layers, head_dim, sliding_window, counts of
// each layer_types entry, compress_rates, index_head_dim.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace deepinfer::kv {

enum class StateKind : int { kWindow = 0, kCsa = 1, kHca = 2, kTail = 3 };
inline constexpr int kNumStateKinds = 4;
inline constexpr std::array<StateKind, kNumStateKinds> kAllStateKinds = {StateKind::kWindow, StateKind::kCsa,
                                                                        StateKind::kHca, StateKind::kTail};
const char* state_kind_name(StateKind kind);  // "window", "csa", "hca", "tail"

using BlockId = int32_t;
inline constexpr BlockId kNullBlock = -1;  // a freed (out-of-window) or absent block in a table
using RequestKey = uint64_t;               // the scheduler's handle of a request

struct KvModelDims {
  int num_layers = 0;            // every layer keeps window rows
  int head_dim = 0;              // D (width of one window row / compressed entry)
  int sliding_window = 0;        // W; 0 = full attention (rows never freed)
  int num_csa_layers = 0;
  int num_hca_layers = 0;
  int csa_compress_rate = 4;     // m of CSA
  int hca_compress_rate = 128;   // m of HCA
  int index_head_dim = 0;        // cI (indexer key width), CSA only
  int kv_bytes_per_value = 2;    // cache dtype: 2 = bf16, 4 = fp32 (CPU reference)
  int state_bytes_per_value = 4; // compressor tails are fp32 (§6.2)

  Status validate() const;
  bool has_compressors() const { return num_csa_layers + num_hca_layers > 0; }
};

struct KvCacheConfig {
  int window_block_size = 16;        // tokens per window block
  int csa_entries_per_block = 64;    // 64 entries = 256 tokens at m = 4 (§6.5)
  int hca_entries_per_block = 64;    // 64 entries = 8192 tokens at m = 128
  // Window rows kept beyond the W-1 the next token needs, e.g. the positions a speculative step may
  // roll back (serving-research.md §2.4: 128 + 12 = 140 for DSpark gamma=5 under async scheduling).
  int window_retention_tokens = 0;

  Status validate() const;
};

// Bytes of one block of `kind` (0 when the model has no state of that kind).
int64_t bytes_per_block(const KvModelDims& dims, const KvCacheConfig& config, StateKind kind);

// Tokens whose window rows must be kept for the next token: W - 1 + retention (0 = keep all).
int64_t window_keep_tokens(const KvModelDims& dims, const KvCacheConfig& config);

}  // namespace deepinfer::kv
