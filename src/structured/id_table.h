// Dense ids for short uint32 sequences (session 8), for the matcher's per-mask and kept tables
// (push ids, skeletons, exit state vectors). Open addressing over 64-bit hashes, keys stored
// back to back in one pool and compared in full on a hash match (exact), emptied in O(1) by a
// stamp: no allocation per lookup or insert once grown (the std::unordered_map<std::string>
// tables it replaces allocated a node and a string per new key, ~7 % of mask time).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace deepinfer::structured {

class IdTable {
 public:
  // The id of key[0 .. n) (0, 1, 2, ... in order of first sight since the last clear);
  // *inserted tells whether it was new.
  uint32_t id(const uint32_t* key, size_t n, bool* inserted = nullptr) {
    const uint64_t h = hash(key, n);
    if (2 * (off_.size() + 1) > slots_.size()) grow();
    const size_t mask = slots_.size() - 1;
    for (size_t i = static_cast<size_t>(h) & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.stamp != stamp_) {
        s = Slot{h, stamp_, static_cast<uint32_t>(off_.size())};
        off_.push_back(static_cast<uint32_t>(pool_.size()));
        len_.push_back(static_cast<uint32_t>(n));
        hashes_.push_back(h);
        pool_.insert(pool_.end(), key, key + n);
        if (inserted) *inserted = true;
        return s.id;
      }
      if (s.hash == h && len_[s.id] == n &&
          (n == 0 || std::memcmp(pool_.data() + off_[s.id], key, n * sizeof(uint32_t)) == 0)) {
        if (inserted) *inserted = false;
        return s.id;
      }
    }
  }
  void clear() {
    off_.clear();
    len_.clear();
    hashes_.clear();
    pool_.clear();
    if (++stamp_ == 0) {  // wrapped: forget every slot for real
      for (Slot& s : slots_) s.stamp = 0;
      stamp_ = 1;
    }
  }
  size_t size() const { return off_.size(); }
  size_t key_words() const { return pool_.size(); }

 private:
  struct Slot {
    uint64_t hash;
    uint32_t stamp, id;
  };
  static uint64_t hash(const uint32_t* key, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; ++i) {
      h = (h ^ key[i]) * 0xBF58476D1CE4E5B9ull;
      h ^= h >> 29;
    }
    h ^= h >> 32;
    h *= 0x94D049BB133111EBull;
    return h ^ (h >> 31);
  }
  void grow() {
    const size_t size = slots_.empty() ? 64 : slots_.size() * 2;
    slots_.assign(size, Slot{0, 0, 0});
    stamp_ = 1;
    const size_t mask = size - 1;
    for (uint32_t id = 0; id < off_.size(); ++id) {
      size_t i = static_cast<size_t>(hashes_[id]) & mask;
      while (slots_[i].stamp == stamp_) i = (i + 1) & mask;
      slots_[i] = Slot{hashes_[id], stamp_, id};
    }
  }
  std::vector<Slot> slots_;
  std::vector<uint32_t> off_, len_, pool_;
  std::vector<uint64_t> hashes_;
  uint32_t stamp_ = 1;
};

}  // namespace deepinfer::structured
