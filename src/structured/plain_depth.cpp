#include "structured/plain_depth.h"

#include <memory>
#include <unordered_map>
#include <vector>

#include "structured/plain_text.h"

namespace deepinfer::structured {

namespace {

using Reps = std::vector<uint8_t>[plain_text::kNumStates];

// One representative byte per (plain-text state, byte behaviour): bytes with the same DFA class
// and the same plain-text transition from that state behave identically.
void representative_bytes(const Dfa& dfa, int cls, Reps& reps) {
  std::vector<uint32_t> seen(dfa.num_classes() * 16u, 0);
  for (uint32_t r = 1; r < plain_text::kNumStates; ++r) {
    for (int b = 0; b < 256; ++b) {
      uint8_t nr = plain_text::step(static_cast<uint8_t>(r), static_cast<uint8_t>(b), cls);
      if (nr == plain_text::kDead) continue;
      uint32_t& stamp = seen[dfa.byte_class(static_cast<uint8_t>(b)) * 16u + nr];
      if (stamp != r) {
        stamp = r;
        reps[r].push_back(static_cast<uint8_t>(b));
      }
    }
  }
}

// representative_bytes per automaton (by Dfa::content_id), per thread: the frontier of every
// cache miss asks for it up to three times.
const Reps& cached_reps(const Dfa& dfa, int cls) {
  struct Boxed { Reps reps; };
  thread_local std::unordered_map<uint64_t, std::unique_ptr<Boxed>> memo;
  thread_local uint64_t last_key = ~0ull;  // the last answer (a miss asks for one automaton a few times)
  thread_local const Reps* last = nullptr;
  const uint64_t key = dfa.content_id() * plain_text::kNumClasses + static_cast<uint64_t>(cls);
  if (key == last_key) return *last;
  auto it = memo.find(key);
  if (it == memo.end()) {
    if (memo.size() >= 4096) memo.clear();
    auto boxed = std::make_unique<Boxed>();
    representative_bytes(dfa, cls, boxed->reps);
    it = memo.emplace(key, std::move(boxed)).first;
  }
  last_key = key;
  last = &it->second->reps;
  return *last;
}

// A per-thread visited set over (DFA state, plain-text state) pairs, cleared in O(1) by bumping
// the stamp.
struct Visited {
  std::vector<uint32_t> stamp;
  uint32_t current = 0;
  void reset(size_t n) {
    if (stamp.size() < n) stamp.resize(n, 0);
    if (++current == 0) { std::fill(stamp.begin(), stamp.end(), 0u); current = 1; }
  }
};

}  // namespace

uint32_t plain_depth(const Dfa& dfa, uint32_t state, bool stop_at_dead, uint32_t cap,
                     uint32_t max_visit, int cls) {
  if (state == Dfa::kDead || cap == 0) return 0;
  // Quick answer for most lexemes (numbers, literals, punctuation): some printable ASCII byte
  // already kills or ends the lexeme.
  for (int b = 0x20; b < 0x7F; ++b) {
    if (b == '"' || b == '\\') continue;
    uint32_t ns = dfa.next(state, static_cast<uint8_t>(b));
    if (ns == Dfa::kDead ? stop_at_dead : dfa.accepting(ns)) return 0;
  }
  const Reps& reps = cached_reps(dfa, cls);
  thread_local Visited visited_pairs;
  visited_pairs.reset(static_cast<size_t>(dfa.num_states()) * plain_text::kNumStates);
  uint32_t* seen_pair = visited_pairs.stamp.data();
  const uint32_t mark = visited_pairs.current;
  auto key = [](uint32_t s, uint8_t r) { return static_cast<size_t>(s) * plain_text::kNumStates + r; };
  seen_pair[key(state, plain_text::kStart)] = mark;
  uint32_t visited = 1;
  std::vector<std::pair<uint32_t, uint8_t>> level{{state, plain_text::kStart}}, next;
  for (uint32_t depth = 1; depth <= cap; ++depth) {
    next.clear();
    for (auto [s, r] : level) {
      for (uint8_t b : reps[r]) {
        uint32_t ns = dfa.next(s, b);
        if (ns == Dfa::kDead) {
          if (stop_at_dead) return depth - 1;
          continue;
        }
        if (dfa.accepting(ns)) return depth - 1;
        uint8_t nr = plain_text::step(r, b, cls);
        if (seen_pair[key(ns, nr)] != mark) {
          seen_pair[key(ns, nr)] = mark;
          if (++visited > max_visit) return depth - 1;
          next.emplace_back(ns, nr);
        }
      }
    }
    if (next.empty()) return cap;  // every reachable pair was seen at a smaller depth
    level.swap(next);
  }
  return cap;
}

bool plain_dies_by(const Dfa& dfa, uint32_t state, uint32_t k, uint32_t max_work, int cls) {
  if (state == Dfa::kDead) return true;
  const Reps& reps = cached_reps(dfa, cls);
  // Level by level without merging levels (a pair reached at two depths counts at both): one
  // per-thread stamp per level (no table allocated per call).
  thread_local Visited level_marks;
  const size_t pairs = static_cast<size_t>(dfa.num_states()) * plain_text::kNumStates;
  thread_local std::vector<std::pair<uint32_t, uint8_t>> level, next;
  level.assign(1, {state, plain_text::kStart});
  uint32_t work = 0;
  for (uint32_t depth = 1; depth <= k; ++depth) {
    next.clear();
    level_marks.reset(pairs);
    uint32_t* stamp = level_marks.stamp.data();
    const uint32_t mark = level_marks.current;
    for (auto [s, r] : level) {
      for (uint8_t b : reps[r]) {
        uint32_t ns = dfa.next(s, b);
        if (ns == Dfa::kDead) continue;
        uint8_t nr = plain_text::step(r, b, cls);
        uint32_t& st = stamp[static_cast<size_t>(ns) * plain_text::kNumStates + nr];
        if (st != mark) {
          st = mark;
          next.emplace_back(ns, nr);
        }
        if (++work > max_work) return false;
      }
    }
    if (next.empty()) return true;  // dead is absorbing
    level.swap(next);
  }
  return false;
}

}  // namespace deepinfer::structured
