#include "kv/kv_spec.h"

namespace deepinfer::kv {
namespace {

Status positive(const char* what, int v) {
  if (v > 0) return OkStatus();
  return InvalidArgument(std::string(what) + " must be > 0, got " + std::to_string(v));
}

}  // namespace

const char* state_kind_name(StateKind kind) {
  switch (kind) {
    case StateKind::kWindow: return "window";
    case StateKind::kCsa: return "csa";
    case StateKind::kHca: return "hca";
    case StateKind::kTail: return "tail";
  }
  return "?";
}

Status KvModelDims::validate() const {
  DI_RETURN_IF_ERROR(positive("KvModelDims.num_layers", num_layers));
  DI_RETURN_IF_ERROR(positive("KvModelDims.head_dim", head_dim));
  DI_RETURN_IF_ERROR(positive("KvModelDims.kv_bytes_per_value", kv_bytes_per_value));
  DI_RETURN_IF_ERROR(positive("KvModelDims.state_bytes_per_value", state_bytes_per_value));
  if (sliding_window < 0) return InvalidArgument("KvModelDims.sliding_window must be >= 0 (0 = full attention), got " + std::to_string(sliding_window));
  if (num_csa_layers < 0 || num_hca_layers < 0 || num_csa_layers + num_hca_layers > num_layers) {
    return InvalidArgument("KvModelDims: num_csa_layers (" + std::to_string(num_csa_layers) + ") + num_hca_layers (" +
                           std::to_string(num_hca_layers) + ") must be in [0, num_layers = " +
                           std::to_string(num_layers) + "]");
  }
  if (num_csa_layers > 0) {
    DI_RETURN_IF_ERROR(positive("KvModelDims.csa_compress_rate", csa_compress_rate));
    DI_RETURN_IF_ERROR(positive("KvModelDims.index_head_dim", index_head_dim));
  }
  if (num_hca_layers > 0) DI_RETURN_IF_ERROR(positive("KvModelDims.hca_compress_rate", hca_compress_rate));
  return OkStatus();
}

Status KvCacheConfig::validate() const {
  DI_RETURN_IF_ERROR(positive("KvCacheConfig.window_block_size", window_block_size));
  DI_RETURN_IF_ERROR(positive("KvCacheConfig.csa_entries_per_block", csa_entries_per_block));
  DI_RETURN_IF_ERROR(positive("KvCacheConfig.hca_entries_per_block", hca_entries_per_block));
  if (window_retention_tokens < 0) {
    return InvalidArgument("KvCacheConfig.window_retention_tokens must be >= 0, got " +
                           std::to_string(window_retention_tokens));
  }
  return OkStatus();
}

int64_t bytes_per_block(const KvModelDims& d, const KvCacheConfig& c, StateKind kind) {
  const int64_t D = d.head_dim;
  switch (kind) {
    case StateKind::kWindow:
      return int64_t{c.window_block_size} * d.num_layers * D * d.kv_bytes_per_value;
    case StateKind::kCsa:
      return int64_t{c.csa_entries_per_block} * d.num_csa_layers * (D + d.index_head_dim) * d.kv_bytes_per_value;
    case StateKind::kHca:
      return int64_t{c.hca_entries_per_block} * d.num_hca_layers * D * d.kv_bytes_per_value;
    case StateKind::kTail: {
      // Per CSA layer (coff = 2): main tail (m-1) rows of kv [2D] + gate [2D], overlap m rows of
      // kv [D] + gate [D]; indexer tail (m-1) x (2cI + 2cI), indexer overlap m x (cI + cI).
      // Per HCA layer (coff = 1): tail (m-1) rows of kv [D] + gate [D]. (deepseek-v4.md §6.1-6.2)
      const int64_t m4 = d.csa_compress_rate, cI = d.index_head_dim, m128 = d.hca_compress_rate;
      const int64_t csa = (m4 - 1) * 4 * D + m4 * 2 * D + (m4 - 1) * 4 * cI + m4 * 2 * cI;
      const int64_t hca = (m128 - 1) * 2 * D;
      return (d.num_csa_layers * csa + d.num_hca_layers * hca) * d.state_bytes_per_value;
    }
  }
  return 0;
}

int64_t window_keep_tokens(const KvModelDims& d, const KvCacheConfig& c) {
  if (d.sliding_window == 0) return 0;
  return int64_t{d.sliding_window} - 1 + c.window_retention_tokens;
}

}  // namespace deepinfer::kv
