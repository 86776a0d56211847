// The BPE model of tokenizer.json ("model": {"type": "BPE"}): vocab, ranked merges (string "a b"
// or pair ["a", "b"] form), ignore_merges, unk/fuse_unk and byte_fallback. Words are merged the
// way Hugging Face tokenizers does it (a min-heap of (rank, position) over a linked list of
// symbols), with a per-thread word -> ids cache in front.
//
// Byte-level mode: when the pre-tokenizer contains ByteLevel, words arrive as raw UTF-8 bytes
// (the byte -> unicode mapping is folded into the vocabulary at load time, so no per-word
// conversion happens on the hot path).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace deepinfer::tokenizer {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept;
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object. `byte_level`: see the file comment.
  static StatusOr<std::unique_ptr<BpeModel>> load(const nlohmann::json& model, bool byte_level);

  // Appends the ids of one pre-tokenized word to `out`.
  void tokenize_word(std::string_view word, std::vector<int32_t>& out) const;

  // Model vocabulary (token string as written in tokenizer.json -> id).
  const StringIdMap& vocab() const { return vocab_; }
  bool byte_level() const { return byte_level_; }
  bool byte_fallback() const { return byte_fallback_; }
  int32_t unk_id() const { return unk_id_; }

 private:
  BpeModel() = default;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  // Initial symbols (id, byte length) of a word before merging.
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids,
                       std::vector<uint32_t>& lens) const;
  bool find_merge(int32_t a, int32_t b, uint32_t* rank, int32_t* new_id) const;

  StringIdMap vocab_;       // token strings as in the file
  StringIdMap word_vocab_;  // keys in the form words arrive in (raw bytes in byte-level mode)
  bool byte_level_ = false;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  int32_t unk_id_ = -1;
  std::array<int32_t, 256> byte_ids_{};      // byte-level: id of each single byte; -1 if none
  std::array<int32_t, 256> fallback_ids_{};  // byte_fallback: id of "<0xAB>"; -1 if none

  // Merges: open-addressing table keyed by (left id, right id).
  struct MergeSlot {
    uint64_t key;  // ((uint64)left << 32) | right, or kEmpty
    uint32_t rank;
    int32_t new_id;
  };
  static constexpr uint64_t kEmpty = ~0ull;
  std::vector<MergeSlot> merges_;
  uint64_t merge_mask_ = 0;
  uint64_t cache_key_ = 0;  // identifies this model's entries in the per-thread word caches
};

}  // namespace deepinfer::tokenizer
