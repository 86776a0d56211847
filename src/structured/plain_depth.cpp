#include "structured/plain_depth.h"

#include <algorithm>
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
  thread_local std::vector<uint32_t> seen;
  seen.assign(dfa.num_classes() * 16u, 0);
  for (uint32_t r = 1; r < plain_text::kNumStates; ++r) {
    // Inside a character only continuation bytes (0x80..0xBF) go on.
    const int lo = r == plain_text::kStart ? 0 : 0x80, hi = r == plain_text::kStart ? 256 : 0xC0;
    for (int b = lo; b < hi; ++b) {
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

namespace {

// plain_depth in code points: a level is one more character started (a byte read between
// characters); the bytes that continue a character stay in its level (a stack, depth first).
// Pairs are visited once over all levels: a pair seen at a lower level was checked there with
// every continuation, at a smaller length.
uint32_t plain_depth_code_points(const Dfa& dfa, uint32_t state, bool stop_at_dead, uint32_t cap,
                                 uint32_t max_visit, int cls, const Reps& reps, bool* exhausted) {
  thread_local Visited visited_pairs;
  visited_pairs.reset(static_cast<size_t>(dfa.num_states()) * plain_text::kNumStates);
  uint32_t* seen_pair = visited_pairs.stamp.data();
  const uint32_t mark = visited_pairs.current;
  auto key = [](uint32_t s, uint8_t r) { return static_cast<size_t>(s) * plain_text::kNumStates + r; };
  seen_pair[key(state, plain_text::kStart)] = mark;
  uint32_t visited = 1;
  thread_local std::vector<std::pair<uint32_t, uint8_t>> level, next, stack;
  level.assign(1, {state, plain_text::kStart});
  for (uint32_t depth = 1; depth <= cap; ++depth) {
    next.clear();
    for (auto [s0, r0] : level) {  // r0 == kStart
      stack.assign(1, {s0, r0});
      while (!stack.empty()) {
        auto [s, r] = stack.back();
        stack.pop_back();
        for (uint8_t b : reps[r]) {
          uint32_t ns = dfa.next(s, b);
          if (ns == Dfa::kDead) {
            if (stop_at_dead) return depth - 1;
            continue;
          }
          if (dfa.accepting(ns)) return depth - 1;
          uint8_t nr = plain_text::step(r, b, cls);
          if (seen_pair[key(ns, nr)] == mark) continue;
          seen_pair[key(ns, nr)] = mark;
          if (++visited > max_visit) { *exhausted = true; return depth - 1; }
          if (nr == plain_text::kStart) next.emplace_back(ns, nr); else stack.emplace_back(ns, nr);
        }
      }
    }
    if (next.empty()) return cap;  // every reachable pair was seen at a smaller length
    level.swap(next);
  }
  return cap;
}

// plain_dies_by in code points: the pairs between characters after j characters (level by
// level, a character's continuation bytes followed depth first), then: does any byte that starts
// character k leave the DFA alive?
bool plain_dies_by_code_points(const Dfa& dfa, uint32_t state, uint32_t k, uint32_t max_work,
                               int cls, const Reps& reps, bool* exhausted) {
  thread_local Visited level_marks;
  const size_t pairs = static_cast<size_t>(dfa.num_states()) * plain_text::kNumStates;
  thread_local std::vector<std::pair<uint32_t, uint8_t>> level, next, stack;
  level.assign(1, {state, plain_text::kStart});
  uint32_t work = 0;
  for (uint32_t depth = 1; depth <= k; ++depth) {
    if (depth == k) {
      for (auto [s, r] : level) {
        for (uint8_t b : reps[r]) {
          if (dfa.next(s, b) != Dfa::kDead) return false;
          if (++work > max_work) { *exhausted = true; return false; }
        }
      }
      return true;
    }
    next.clear();
    level_marks.reset(pairs);
    uint32_t* stamp = level_marks.stamp.data();
    const uint32_t mark = level_marks.current;
    for (auto [s0, r0] : level) {
      stack.assign(1, {s0, r0});
      while (!stack.empty()) {
        auto [s, r] = stack.back();
        stack.pop_back();
        for (uint8_t b : reps[r]) {
          if (++work > max_work) { *exhausted = true; return false; }
          uint32_t ns = dfa.next(s, b);
          if (ns == Dfa::kDead) continue;
          uint8_t nr = plain_text::step(r, b, cls);
          uint32_t& st = stamp[static_cast<size_t>(ns) * plain_text::kNumStates + nr];
          if (st == mark) continue;
          st = mark;
          if (nr == plain_text::kStart) next.emplace_back(ns, nr); else stack.emplace_back(ns, nr);
        }
      }
    }
    if (next.empty()) return true;  // dead is absorbing
    level.swap(next);
  }
  return true;
}

}  // namespace

namespace {

// Exact answers for every state of one automaton at once (per measure), for automata asked
// about repeatedly — a counted string is asked once per character written, each time from a
// new state, and the searches above cost up to 4,096 pairs each. Over the product graph of
// (DFA state, plain-text state) pairs, with an edge per representative byte weighing one length
// unit (bytes: every byte; code points: a byte read between characters, so a cycle always
// weighs at least one):
//   alive[s] / quiet[s]: the least length of a plain text from (s, start) whose last byte kills
//     the DFA or makes it accept / makes it accept (multi-source 0-1 shortest paths on the
//     reversed graph); plain_depth = min(cap, that - 1).
//   longest[s]: the greatest length of a plain text from (s, start) after which the DFA is
//     alive (longest paths in reverse topological order; pairs left over reach a cycle:
//     unbounded). Every length up to it is a prefix's, so plain_dies_by(k) <=> longest < k.
// Lengths are clamped at kClamp (stored values are then lower bounds for shortest and upper
// bounds for longest paths, which keeps both answers safe for caps below kClamp).
struct PlainTable {
  static constexpr uint16_t kClamp = 1025;
  static constexpr uint16_t kUnbounded = 0xFFFF;
  std::vector<uint16_t> alive, quiet, longest;  // [num_states]
};

// A table costs about one search that visits every pair (three passes over the edges): built
// for automata of at most 4,096 pairs (~370 states: counted strings up to maxLength ~300), whose
// every question is then a lookup. Larger ones are searched per question (bounded visits).
constexpr size_t kMaxTablePairs = 4096;

void build_plain_table(const Dfa& dfa, int cls, bool code_points, const Reps& reps, PlainTable& t) {
  const uint32_t ns_count = dfa.num_states();
  const int kr = plain_text::kNumStates;
  const size_t pairs = static_cast<size_t>(ns_count) * kr;
  const int max_r = cls == plain_text::kEcmaDot ? kr : 9;  // states 9, 10: kEcmaDot only
  constexpr uint16_t kInf = 0xFFFF;
  std::vector<uint16_t> bad_alive(pairs, kInf), bad_quiet(pairs, kInf);
  std::vector<uint32_t> outdeg(pairs, 0), rev_start(pairs + 1, 0);
  // Two passes over the edges: count the reversed edges per target, then fill them.
  auto for_edges = [&](auto&& fn) {
    for (uint32_t s = 1; s < ns_count; ++s) {
      for (int r = 1; r < max_r; ++r) {
        const uint32_t p = s * kr + r;
        const uint16_t w = code_points ? (r == plain_text::kStart) : 1;
        for (uint8_t b : reps[r]) fn(p, s, r, b, w);
      }
    }
  };
  for_edges([&](uint32_t p, uint32_t s, int r, uint8_t b, uint16_t w) {
    const uint32_t n = dfa.next(s, b);
    if (n == Dfa::kDead) { bad_alive[p] = std::min(bad_alive[p], w); return; }
    if (dfa.accepting(n)) {
      bad_alive[p] = std::min(bad_alive[p], w);
      bad_quiet[p] = std::min(bad_quiet[p], w);
    }
    ++outdeg[p];
    ++rev_start[n * kr + plain_text::step(static_cast<uint8_t>(r), b, cls) + 1];
  });
  for (size_t q = 0; q < pairs; ++q) rev_start[q + 1] += rev_start[q];
  std::vector<uint32_t> rev(rev_start[pairs]);  // predecessor * 2 + weight
  {
    std::vector<uint32_t> fill(rev_start.begin(), rev_start.end() - 1);
    for_edges([&](uint32_t p, uint32_t s, int r, uint8_t b, uint16_t w) {
      const uint32_t n = dfa.next(s, b);
      if (n == Dfa::kDead) return;
      rev[fill[n * kr + plain_text::step(static_cast<uint8_t>(r), b, cls)]++] = p * 2 + w;
    });
  }
  // Shortest paths to a bad edge (0-1 weights: a deque, weight-0 edges in front). Every
  // pair starts at its own bad-edge weight (0 or 1) or kInf; values above kClamp are not
  // propagated (stored answers are then lower bounds, as documented above).
  thread_local std::vector<uint32_t> dq;
  auto shortest = [&](const std::vector<uint16_t>& bad, std::vector<uint16_t>& out) {
    std::vector<uint16_t> dist(bad);
    // A deque in a flat buffer: the front grows down from the middle, the back up.
    const size_t cap = 2 * (rev.size() + pairs) + 2;
    if (dq.size() < cap) dq.resize(cap);
    size_t head = cap / 2, tail = cap / 2;
    for (size_t p = 0; p < pairs; ++p) if (dist[p] == 0) dq[tail++] = static_cast<uint32_t>(p);
    for (size_t p = 0; p < pairs; ++p) if (dist[p] == 1) dq[tail++] = static_cast<uint32_t>(p);
    std::vector<uint8_t> settled(pairs, 0);
    while (head < tail) {
      const uint32_t q = dq[head++];
      if (settled[q]) continue;
      settled[q] = 1;
      const uint32_t d = dist[q];
      for (uint32_t e = rev_start[q]; e < rev_start[q + 1]; ++e) {
        const uint32_t p = rev[e] >> 1;
        const uint32_t w = rev[e] & 1;
        const uint32_t nd = d + w;
        if (nd < dist[p] && nd <= PlainTable::kClamp) {
          dist[p] = static_cast<uint16_t>(nd);
          if (w == 0) dq[--head] = p; else dq[tail++] = p;
        }
      }
    }
    out.assign(ns_count, 0);
    for (uint32_t s = 1; s < ns_count; ++s) {
      const uint16_t v = dist[s * kr + plain_text::kStart];
      out[s] = v > PlainTable::kClamp ? PlainTable::kClamp : v;  // unreachable: at least kClamp
    }
  };
  shortest(bad_alive, t.alive);
  shortest(bad_quiet, t.quiet);
  // Longest alive paths: Kahn's order on the reversed graph from pairs with no live edge.
  std::vector<uint16_t> len(pairs, 0);
  std::vector<uint8_t> done(pairs, 0);
  std::vector<uint32_t> queue;
  for (size_t p = 0; p < pairs; ++p) if (outdeg[p] == 0) queue.push_back(static_cast<uint32_t>(p));
  while (!queue.empty()) {
    const uint32_t q = queue.back();
    queue.pop_back();
    done[q] = 1;
    for (uint32_t e = rev_start[q]; e < rev_start[q + 1]; ++e) {
      const uint32_t p = rev[e] >> 1;
      const uint32_t l = std::min<uint32_t>(len[q] + (rev[e] & 1), PlainTable::kClamp);
      if (l > len[p]) len[p] = static_cast<uint16_t>(l);
      if (--outdeg[p] == 0) queue.push_back(p);
    }
  }
  t.longest.assign(ns_count, 0);
  for (uint32_t s = 1; s < ns_count; ++s) {
    const uint32_t p = s * kr + plain_text::kStart;
    t.longest[s] = done[p] ? len[p] : PlainTable::kUnbounded;
  }
}

bool table_sized(const Dfa& dfa) {
  return static_cast<size_t>(dfa.num_states()) * plain_text::kNumStates <= kMaxTablePairs;
}

// The table of (automaton, measure): built on demand when `reps` is given, else null when not
// built yet; null for large automata.
thread_local std::unordered_map<uint64_t, std::unique_ptr<PlainTable>> t_plain_tables;

const PlainTable* plain_table(const Dfa& dfa, int measure, const Reps* reps) {
  auto& memo = t_plain_tables;
  if (!table_sized(dfa)) return nullptr;
  const uint64_t key = dfa.content_id() * plain_text::kNumMeasures + static_cast<uint64_t>(measure);
  auto it = memo.find(key);
  if (it == memo.end()) {
    if (!reps) return nullptr;
    if (memo.size() >= 4096) memo.clear();
    auto t = std::make_unique<PlainTable>();
    build_plain_table(dfa, plain_text::measure_class(measure),
                      plain_text::measure_counts_code_points(measure), *reps, *t);
    it = memo.emplace(key, std::move(t)).first;
  }
  return it->second.get();
}

// Whether some byte that plain text may hold (printable ASCII but '"' and '\\', or a UTF-8
// byte) enters an accepting state from some state: if not (a JSON string lexeme ends only at
// its closing quote), no plain text ends the lexeme and the quiet depth is the cap. Per
// automaton, per thread.
bool plain_byte_can_accept(const Dfa& dfa) {
  thread_local std::unordered_map<uint64_t, bool> memo;
  auto it = memo.find(dfa.content_id());
  if (it != memo.end()) return it->second;
  if (memo.size() >= 65536) memo.clear();
  std::vector<uint8_t> class_rep(dfa.num_classes(), 0), has(dfa.num_classes(), 0);
  std::vector<uint8_t> reps;
  for (int b = 0x20; b <= 0xF4; ++b) {
    if (b == '"' || b == '\\' || b == 0xC0 || b == 0xC1) continue;
    const uint32_t c = dfa.byte_class(static_cast<uint8_t>(b));
    if (!has[c]) { has[c] = 1; reps.push_back(static_cast<uint8_t>(b)); }
  }
  bool any = false;
  for (uint32_t st = 1; st < dfa.num_states() && !any; ++st) {
    for (uint8_t b : reps) {
      const uint32_t n = dfa.next(st, b);
      if (n != Dfa::kDead && dfa.accepting(n)) { any = true; break; }
    }
  }
  memo.emplace(dfa.content_id(), any);
  return any;
}

}  // namespace

namespace {

// Probe budgets of kAuto (pairs visited / steps): a search that finishes within them answers
// exactly without building a table. An object-key or enum lexeme dies on most plain bytes, so
// its questions finish in a few steps; a table costs a pass over every (state, plain state,
// representative byte) edge (~100 µs for a few hundred states).
uint32_t g_probe_visits = 256;
uint32_t g_probe_work = 1024;

// The bounded breadth-first search of plain_depth (bytes or code points); *exhausted is set when
// it stopped at max_visit (the answer is then a safe lower bound).
uint32_t plain_depth_search(const Dfa& dfa, uint32_t state, bool stop_at_dead, uint32_t cap,
                            uint32_t max_visit, int measure, const Reps& reps, bool* exhausted) {
  const int cls = plain_text::measure_class(measure);
  if (plain_text::measure_counts_code_points(measure)) {
    return plain_depth_code_points(dfa, state, stop_at_dead, cap, max_visit, cls, reps, exhausted);
  }
  thread_local Visited visited_pairs;
  visited_pairs.reset(static_cast<size_t>(dfa.num_states()) * plain_text::kNumStates);
  uint32_t* seen_pair = visited_pairs.stamp.data();
  const uint32_t mark = visited_pairs.current;
  auto key = [](uint32_t s, uint8_t r) { return static_cast<size_t>(s) * plain_text::kNumStates + r; };
  seen_pair[key(state, plain_text::kStart)] = mark;
  uint32_t visited = 1;
  thread_local std::vector<std::pair<uint32_t, uint8_t>> level, next;
  level.assign(1, {state, plain_text::kStart});
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
          if (++visited > max_visit) { *exhausted = true; return depth - 1; }
          next.emplace_back(ns, nr);
        }
      }
    }
    if (next.empty()) return cap;  // every reachable pair was seen at a smaller depth
    level.swap(next);
  }
  return cap;
}

// The bounded search of plain_dies_by; *exhausted is set when it stopped at max_work (the
// answer is then false).
bool plain_dies_by_search(const Dfa& dfa, uint32_t state, uint32_t k, uint32_t max_work,
                          int measure, const Reps& reps, bool* exhausted) {
  const int cls = plain_text::measure_class(measure);
  if (plain_text::measure_counts_code_points(measure)) {
    return plain_dies_by_code_points(dfa, state, k, max_work, cls, reps, exhausted);
  }
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
        if (++work > max_work) { *exhausted = true; return false; }
      }
    }
    if (next.empty()) return true;  // dead is absorbing
    level.swap(next);
  }
  return false;
}

}  // namespace

void forget_plain_tables() { t_plain_tables.clear(); }

void set_plain_probe_budgets(uint32_t visits, uint32_t work) {
  g_probe_visits = visits;
  g_probe_work = work;
}

uint32_t plain_depth(const Dfa& dfa, uint32_t state, bool stop_at_dead, uint32_t cap,
                     uint32_t max_visit, int measure, PlainPath path) {
  const int cls = plain_text::measure_class(measure);
  if (state == Dfa::kDead || cap == 0) return 0;
  // Quick answer for most lexemes (numbers, literals, punctuation): some printable ASCII byte
  // already kills or ends the lexeme.
  for (int b = 0x20; b < 0x7F; ++b) {
    if (b == '"' || b == '\\') continue;
    uint32_t ns = dfa.next(state, static_cast<uint8_t>(b));
    if (ns == Dfa::kDead ? stop_at_dead : dfa.accepting(ns)) return 0;
  }
  if (!stop_at_dead && !plain_byte_can_accept(dfa)) return cap;
  const Reps& reps = cached_reps(dfa, cls);
  auto lookup = [&](const PlainTable* t) {
    const uint32_t bad_at = stop_at_dead ? t->alive[state] : t->quiet[state];  // >= 1
    return bad_at == 0 ? 0 : std::min<uint32_t>(cap, bad_at - 1);
  };
  if (path != PlainPath::kSearch) {
    if (const PlainTable* t = plain_table(dfa, measure, nullptr)) return lookup(t);
    if (path == PlainPath::kAuto && table_sized(dfa)) {
      bool exhausted = false;
      const uint32_t d = plain_depth_search(dfa, state, stop_at_dead, cap, std::min(max_visit, g_probe_visits),
                                            measure, reps, &exhausted);
      if (!exhausted) return d;
    }
    if (const PlainTable* t = plain_table(dfa, measure, &reps)) return lookup(t);
  }
  bool exhausted = false;
  return plain_depth_search(dfa, state, stop_at_dead, cap, max_visit, measure, reps, &exhausted);
}

bool plain_dies_by(const Dfa& dfa, uint32_t state, uint32_t k, uint32_t max_work, int measure,
                   PlainPath path) {
  if (state == Dfa::kDead) return true;
  const int cls = plain_text::measure_class(measure);
  const Reps& reps = cached_reps(dfa, cls);
  if (k == 0) return false;  // the empty text keeps a live state alive
  auto lookup = [&](const PlainTable* t) { return k <= PlainTable::kClamp && t->longest[state] < k; };
  if (path != PlainPath::kSearch) {
    if (const PlainTable* t = plain_table(dfa, measure, nullptr)) return lookup(t);
    if (path == PlainPath::kAuto && table_sized(dfa)) {
      bool exhausted = false;
      const bool dies = plain_dies_by_search(dfa, state, k, std::min(max_work, g_probe_work), measure,
                                             reps, &exhausted);
      if (!exhausted) return dies;
    }
    if (const PlainTable* t = plain_table(dfa, measure, &reps)) return lookup(t);
  }
  bool exhausted = false;
  return plain_dies_by_search(dfa, state, k, max_work, measure, reps, &exhausted);
}

}  // namespace deepinfer::structured
