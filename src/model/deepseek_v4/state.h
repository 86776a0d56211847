// Per-sequence state of a DeepSeek-V4 model for incremental decoding (deepseek-v4.md §6):
// per layer the sliding-window KV rows; for CSA/HCA layers the compressor tail (raw projections
// of the open window), the CSA overlap (a-halves of the last closed window, gate already biased)
// and the compressed entries; for CSA layers the same for the indexer's compressor (index keys).
//
// `DeepseekV4State` is the interface the model reads and writes through; the engine's paged
// cache implements it later (block tables behind read_/write_/append_). `ContiguousV4State` keeps
// everything in per-layer tensors in the backend's memory (host or device).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace deepinfer::model::v4 {

enum class CompressorKind { kMain = 0, kIndexer = 1 };

// Fixed-size per-sequence compressor bookkeeping (§6.1), in the backend's memory. The compressor
// allocates the tensors on first use.
struct CompressorTail {
  int64_t rows = 0;                  // raw rows of the open window (< m between steps; m only
                                     // from a decode update until compressor_pool_tails)
  Tensor kv, gate;                   // [m, coff·d]; rows [0, rows) hold x·kv_projᵀ, x·gate_projᵀ
  bool has_overlap = false;          // CSA: a closed window exists
  Tensor overlap_kv, overlap_gate;   // [m, d] a-halves; gate with position bias added
};

// Copies a step collects to issue together (Backend::copy_many, one launch on a device) instead
// of one backend call each; flush() issues them in order and clears the list.
struct CopyList {
  std::vector<Tensor> src, dst;
  void add(Tensor from, Tensor to) {
    src.push_back(std::move(from));
    dst.push_back(std::move(to));
  }
  Status flush(backend::Backend& be) {
    const Status s = src.empty() ? OkStatus() : be.copy_many(src, dst);
    src.clear();
    dst.clear();
    return s;
  }
};

class DeepseekV4State : public SequenceState {
 public:
  // Window rows of `layer`: kv rows (after norm and rope) of the last min(num_tokens, W−1)
  // positions, oldest first.
  virtual int64_t window_rows(int layer) const = 0;
  virtual Status read_window(int layer, Tensor& out) const = 0;     // out [window_rows, D]
  virtual Status write_window(int layer, const Tensor& rows) = 0;   // rows [n ≤ W−1, D]; replaces
  // Compressed entries (kMain: K_w [T, D]; kIndexer: J_w [T, cI]).
  virtual int64_t num_entries(int layer, CompressorKind kind) const = 0;
  virtual Status read_entries(int layer, CompressorKind kind, Tensor& out) const = 0;  // [T, d]
  virtual Status append_entries(int layer, CompressorKind kind, const Tensor& rows) = 0;  // [n, d]
  virtual CompressorTail& tail(int layer, CompressorKind kind) = 0;
  // read_window / read_entries / write_window with the copy put on `later` (made when the caller
  // flushes it; the state's bookkeeping — window_rows — changes now). The sources and targets
  // must stay untouched until then. Defaults copy at once.
  virtual Status defer_read_window(int layer, Tensor& out, CopyList& later) const {
    (void)later;
    return read_window(layer, out);
  }
  virtual Status defer_read_entries(int layer, CompressorKind kind, Tensor& out,
                                    CopyList& later) const {
    (void)later;
    return read_entries(layer, kind, out);
  }
  virtual Status defer_write_window(int layer, const Tensor& rows, CopyList& later) {
    (void)later;
    return write_window(layer, rows);
  }
  // Marks n more tokens consumed (after every layer has been updated).
  virtual void advance(int64_t n) = 0;
};

// Dimensions the contiguous state needs.
struct StateDims {
  int64_t num_layers = 0;
  int64_t window = 0;        // W
  int64_t head_dim = 0;      // D
  int64_t index_head_dim = 0;  // cI
};

class ContiguousV4State final : public DeepseekV4State {
 public:
  // `be` (not owned) holds the state's memory and copies it; it must outlive the state.
  ContiguousV4State(const StateDims& dims, backend::Backend* be);
  int64_t num_tokens() const override { return num_tokens_; }
  int64_t window_rows(int layer) const override;
  Status read_window(int layer, Tensor& out) const override;
  Status write_window(int layer, const Tensor& rows) override;
  int64_t num_entries(int layer, CompressorKind kind) const override;
  Status read_entries(int layer, CompressorKind kind, Tensor& out) const override;
  Status append_entries(int layer, CompressorKind kind, const Tensor& rows) override;
  CompressorTail& tail(int layer, CompressorKind kind) override;
  Status defer_read_window(int layer, Tensor& out, CopyList& later) const override;
  Status defer_read_entries(int layer, CompressorKind kind, Tensor& out,
                            CopyList& later) const override;
  Status defer_write_window(int layer, const Tensor& rows, CopyList& later) override;
  void advance(int64_t n) override { num_tokens_ += n; }

 private:
  struct Layer {
    Tensor window;          // [W-1, D], rows [0, window_rows) valid
    int64_t window_rows = 0;
    Tensor entries[2];      // [capacity, d], rows [0, num_entries) valid
    int64_t num_entries[2] = {0, 0};
    CompressorTail tails[2];
  };
  Status check_layer(int layer) const;
  int64_t width(CompressorKind kind) const {
    return kind == CompressorKind::kMain ? dims_.head_dim : dims_.index_head_dim;
  }
  StateDims dims_;
  backend::Backend* be_ = nullptr;
  int64_t num_tokens_ = 0;
  std::vector<Layer> layers_;
};

}  // namespace deepinfer::model::v4
