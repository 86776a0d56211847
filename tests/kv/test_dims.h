// A tiny DeepSeek-V4-shaped cache used by the kv and engine tests: 4 layers (1 CSA, 1 HCA), D = 8,
// window 8 (7 rows kept), CSA m = 4, HCA m = 16, cI = 4; window blocks of 4 tokens, 2 entries per
// CSA block (8 tokens) and per HCA block (32 tokens).
#pragma once

#include "kv/kv_spec.h"

namespace deepinfer::kv::testing {

inline KvModelDims tiny_dims() {
  KvModelDims d;
  d.num_layers = 4;
  d.head_dim = 8;
  d.sliding_window = 8;
  d.num_csa_layers = 1;
  d.num_hca_layers = 1;
  d.csa_compress_rate = 4;
  d.hca_compress_rate = 16;
  d.index_head_dim = 4;
  return d;
}

inline KvCacheConfig tiny_config() {
  KvCacheConfig c;
  c.window_block_size = 4;
  c.csa_entries_per_block = 2;
  c.hca_entries_per_block = 2;
  return c;
}

}  // namespace deepinfer::kv::testing
