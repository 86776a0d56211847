#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <atomic>
#include <cstdio>

#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

size_t StringHash::operator()(std::string_view s) const noexcept {
  // FNV-1a over 8-byte chunks mixed with a multiply: fast for short words.
  uint64_t h = 0xcbf29ce484222325ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t v;
    std::memcpy(&v, s.data() + i, 8);
    h = (h ^ v) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>(h ^ (h >> 32));
}

namespace {

std::atomic<uint64_t> g_next_cache_key{1};

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

// Per-thread cache of word -> ids for every loaded model (keyed by the model's cache key).
struct WordCache {
  static constexpr size_t kMaxEntries = 1 << 17;
  static constexpr size_t kMaxWordBytes = 256;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

WordCache& thread_cache(uint64_t key) {
  // Fast path: the same model as the previous word on this thread.
  thread_local uint64_t last_key = 0;
  thread_local WordCache* last = nullptr;
  if (key == last_key) return *last;
  thread_local std::unordered_map<uint64_t, std::unique_ptr<WordCache>> caches;
  auto& slot = caches[key];
  if (!slot) slot = std::make_unique<WordCache>();
  last_key = key;
  last = slot.get();
  return *last;
}

// Decodes the GPT-2 byte-level form of a token into raw bytes; false if a char is outside the
// byte alphabet.
bool byte_level_to_bytes(std::string_view tok, std::string* out) {
  out->clear();
  size_t i = 0;
  while (i < tok.size()) {
    const size_t n = valid_utf8_seq_len(tok, i);
    if (n == 0) return false;
    size_t len;
    const uint32_t cp = decode_utf8(tok, i, &len);
    const int b = unicode_to_byte(cp);
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
    i += len;
  }
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::load(const nlohmann::json& model, bool byte_level) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->byte_level_ = byte_level;
  m->cache_key_ = g_next_cache_key.fetch_add(1);
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return InvalidArgument("model.vocab: expected an object of token -> id");
  }
  const auto opt_string = [&](const char* key) -> std::string {
    if (!model.contains(key) || model[key].is_null()) return "";
    return model[key].get<std::string>();
  };
  if (!opt_string("continuing_subword_prefix").empty() || !opt_string("end_of_word_suffix").empty()) {
    return Unimplemented("BPE continuing_subword_prefix / end_of_word_suffix are not supported");
  }
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() != 0.0) {
    return Unimplemented("BPE dropout is not supported (inference tokenizers do not use it)");
  }
  m->ignore_merges_ = model.value("ignore_merges", false);
  m->byte_fallback_ = model.value("byte_fallback", false);
  m->fuse_unk_ = model.value("fuse_unk", false);

  m->vocab_.reserve(model["vocab"].size() * 2);
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer()) {
      return InvalidArgument("model.vocab[\"" + it.key() + "\"]: id must be an integer");
    }
    m->vocab_[it.key()] = it.value().get<int32_t>();
  }
  const std::string unk = opt_string("unk_token");
  if (!unk.empty()) {
    auto it = m->vocab_.find(unk);
    if (it == m->vocab_.end()) return InvalidArgument("model.unk_token \"" + unk + "\" is not in the vocab");
    m->unk_id_ = it->second;
  }

  m->byte_ids_.fill(-1);
  m->fallback_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = m->vocab_.find(std::string_view(name));
    if (it != m->vocab_.end()) m->fallback_ids_[b] = it->second;
  }
  if (byte_level) {
    std::string bytes;
    for (const auto& [tok, id] : m->vocab_) {
      if (byte_level_to_bytes(tok, &bytes)) {
        if (bytes.size() == 1) m->byte_ids_[static_cast<uint8_t>(bytes[0])] = id;
        if (m->ignore_merges_) m->word_vocab_.emplace(bytes, id);
      }
    }
  } else {
    m->word_vocab_ = m->vocab_;
  }

  // Merges.
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return InvalidArgument("model.merges: expected an array");
  }
  const auto& merges = model["merges"];
  size_t cap = 16;
  while (cap < merges.size() * 2) cap <<= 1;
  m->merges_.assign(cap, MergeSlot{kEmpty, 0, 0});
  m->merge_mask_ = cap - 1;
  std::string a, b;
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& e = merges[r];
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return InvalidArgument("model.merges[" + std::to_string(r) + "] \"" + s +
                               "\": expected two tokens separated by one space");
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      return InvalidArgument("model.merges[" + std::to_string(r) + "]: expected \"a b\" or [\"a\", \"b\"]");
    }
    auto ia = m->vocab_.find(a), ib = m->vocab_.find(b), ic = m->vocab_.find(a + b);
    if (ia == m->vocab_.end() || ib == m->vocab_.end() || ic == m->vocab_.end()) {
      return InvalidArgument("model.merges[" + std::to_string(r) + "] (\"" + a + "\", \"" + b +
                             "\"): a part or the merged token is missing from the vocab");
    }
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) |
                         static_cast<uint32_t>(ib->second);
    uint64_t h = mix64(key) & m->merge_mask_;
    while (m->merges_[h].key != kEmpty && m->merges_[h].key != key) h = (h + 1) & m->merge_mask_;
    if (m->merges_[h].key == key) continue;  // duplicate merge: the first (lowest rank) wins
    m->merges_[h] = MergeSlot{key, static_cast<uint32_t>(r), ic->second};
  }
  return m;
}

bool BpeModel::find_merge(int32_t a, int32_t b, uint32_t* rank, int32_t* new_id) const {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  uint64_t h = mix64(key) & merge_mask_;
  while (true) {
    const MergeSlot& s = merges_[h];
    if (s.key == key) {
      *rank = s.rank;
      *new_id = s.new_id;
      return true;
    }
    if (s.key == kEmpty) return false;
    h = (h + 1) & merge_mask_;
  }
}

void BpeModel::initial_symbols(std::string_view w, std::vector<int32_t>& ids,
                               std::vector<uint32_t>& lens) const {
  ids.clear();
  lens.clear();
  int32_t pending_unk = -1;
  uint32_t pending_len = 0;
  auto flush_unk = [&] {
    if (pending_unk >= 0) {
      ids.push_back(pending_unk);
      lens.push_back(pending_len);
      pending_unk = -1;
    }
  };
  size_t i = 0;
  while (i < w.size()) {
    size_t n;
    int32_t id = -1;
    if (byte_level_) {
      n = 1;
      id = byte_ids_[static_cast<uint8_t>(w[i])];
    } else {
      n = valid_utf8_seq_len(w, i);
      if (n == 0) n = 1;  // cannot happen for validated input
      auto it = word_vocab_.find(w.substr(i, n));
      if (it != word_vocab_.end()) id = it->second;
    }
    if (id >= 0) {
      flush_unk();
      ids.push_back(id);
      lens.push_back(static_cast<uint32_t>(n));
      i += n;
      continue;
    }
    if (byte_fallback_ && !byte_level_) {
      bool all = true;
      for (size_t k = 0; k < n; ++k) all = all && fallback_ids_[static_cast<uint8_t>(w[i + k])] >= 0;
      if (all) {
        for (size_t k = 0; k < n; ++k) {
          ids.push_back(fallback_ids_[static_cast<uint8_t>(w[i + k])]);
          lens.push_back(1);
        }
        i += n;
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk >= 0 && fuse_unk_) {
        pending_len += static_cast<uint32_t>(n);
      } else {
        flush_unk();
        pending_unk = unk_id_;
        pending_len = static_cast<uint32_t>(n);
      }
    }
    i += n;  // no vocab entry, no fallback, no unk: the character is dropped (as HF does)
  }
  flush_unk();
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id;
    int32_t prev, next;
    uint32_t len;
  };
  struct Cand {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
  };
  thread_local std::vector<int32_t> ids;
  thread_local std::vector<uint32_t> lens;
  thread_local std::vector<Sym> syms;
  thread_local std::vector<Cand> heap;
  initial_symbols(word, ids, lens);
  const int32_t n = static_cast<int32_t>(ids.size());
  syms.resize(n);
  for (int32_t i = 0; i < n; ++i) syms[i] = Sym{ids[i], i - 1, (i + 1 < n) ? i + 1 : -1, lens[i]};
  // Min-heap on (rank, pos): std heap functions build a max-heap, so invert the comparison.
  const auto greater = [](const Cand& x, const Cand& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  heap.clear();
  uint32_t rank;
  int32_t new_id;
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (find_merge(syms[i].id, syms[i + 1].id, &rank, &new_id)) heap.push_back({rank, i, new_id});
  }
  std::make_heap(heap.begin(), heap.end(), greater);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), greater);
    const Cand top = heap.back();
    heap.pop_back();
    Sym& left = syms[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    Sym& right = syms[left.next];
    if (!find_merge(left.id, right.id, &rank, &new_id) || new_id != top.new_id) continue;
    // Merge right into left.
    left.id = top.new_id;
    left.len += right.len;
    const int32_t right_next = right.next;
    right.len = 0;
    left.next = right_next;
    if (right_next >= 0) syms[right_next].prev = top.pos;
    if (left.prev >= 0 && find_merge(syms[left.prev].id, left.id, &rank, &new_id)) {
      heap.push_back({rank, left.prev, new_id});
      std::push_heap(heap.begin(), heap.end(), greater);
    }
    if (right_next >= 0 && find_merge(left.id, syms[right_next].id, &rank, &new_id)) {
      heap.push_back({rank, top.pos, new_id});
      std::push_heap(heap.begin(), heap.end(), greater);
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    if (syms[i].len != 0) out.push_back(syms[i].id);
  }
}

void BpeModel::tokenize_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = word_vocab_.find(word);
    if (it != word_vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() > WordCache::kMaxWordBytes) {
    merge_word(word, out);
    return;
  }
  WordCache& cache = thread_cache(cache_key_);
  auto it = cache.map.find(word);
  if (it != cache.map.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t before = out.size();
  merge_word(word, out);
  if (cache.map.size() >= WordCache::kMaxEntries) cache.map.clear();
  cache.map.emplace(std::string(word), std::vector<int32_t>(out.begin() + before, out.end()));
}

}  // namespace deepinfer::tokenizer
