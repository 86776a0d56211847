#include "structured/automaton.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace deepinfer::structured {
namespace {

constexpr uint32_t kMaxNfaStates = 400000;

struct Nfa {
  struct Edge { uint8_t lo, hi; uint32_t to; };
  enum EpsKind : uint8_t { kPlain = 0, kBegin = 1, kEnd = 2 };
  struct Eps { uint32_t to; EpsKind kind; };
  std::vector<std::vector<Edge>> edges;
  std::vector<std::vector<Eps>> eps;
  uint32_t start = 0, final = 0;
  bool too_big = false;

  uint32_t add_state() {
    if (edges.size() >= kMaxNfaStates) { too_big = true; return 0; }
    edges.emplace_back();
    eps.emplace_back();
    return static_cast<uint32_t>(edges.size() - 1);
  }
  void add_eps(uint32_t from, uint32_t to, EpsKind k = kPlain) { if (!too_big) eps[from].push_back({to, k}); }
  void add_edge(uint32_t from, uint8_t lo, uint8_t hi, uint32_t to) { if (!too_big) edges[from].push_back({lo, hi, to}); }
  // A byte string from `from` to `to`.
  void add_bytes(uint32_t from, const std::string& bytes, uint32_t to) {
    uint32_t cur = from;
    for (size_t i = 0; i < bytes.size(); ++i) {
      uint32_t nxt = i + 1 == bytes.size() ? to : add_state();
      uint8_t b = static_cast<uint8_t>(bytes[i]);
      add_edge(cur, b, b, nxt);
      cur = nxt;
    }
  }
};

const CodepointSet& json_escaped_set() {
  static const CodepointSet s = [] {
    CodepointSet e = CodepointSet::range(0, 0x1F);
    e.add('"', '"');
    e.add('\\', '\\');
    return e;
  }();
  return s;
}

class NfaBuilder {
 public:
  NfaBuilder(const Regex& re, bool json) : re_(re), json_(json) {}

  // Edges for one code point class from `from` to a fresh end state.
  uint32_t add_class(const CodepointSet& cls, uint32_t from, Nfa* nfa) {
    uint32_t end = nfa->add_state();
    CodepointSet plain = json_ ? cls.minus(json_escaped_set()) : cls;
    for (const auto& r : plain.ranges()) {
      for (const auto& seq : utf8_sequences(r.first, r.second)) {
        uint32_t cur = from;
        for (size_t i = 0; i < seq.size(); ++i) {
          uint32_t nxt = i + 1 == seq.size() ? end : nfa->add_state();
          nfa->add_edge(cur, seq[i].first, seq[i].second, nxt);
          cur = nxt;
        }
      }
    }
    if (json_) {
      CodepointSet esc = cls.intersect(json_escaped_set());
      for (const auto& r : esc.ranges()) {
        for (uint32_t c = r.first; c <= r.second; ++c) add_escape(c, from, end, nfa);
      }
    }
    return end;
  }

  static void add_escape(uint32_t c, uint32_t from, uint32_t end, Nfa* nfa) {
    const char* short_form = nullptr;
    switch (c) {
      case '"': short_form = "\\\""; break;
      case '\\': short_form = "\\\\"; break;
      case 8: short_form = "\\b"; break;
      case 12: short_form = "\\f"; break;
      case 10: short_form = "\\n"; break;
      case 13: short_form = "\\r"; break;
      case 9: short_form = "\\t"; break;
      default: break;
    }
    if (short_form) { nfa->add_bytes(from, short_form, end); return; }
    // \u00XX with either hex case for the last digit.
    static const char* hex = "0123456789abcdef";
    uint32_t mid = nfa->add_state();
    nfa->add_bytes(from, std::string("\\u00") + hex[c >> 4], mid);
    uint32_t lo = c & 15;
    char l = hex[lo];
    nfa->add_edge(mid, l, l, end);
    if (lo >= 10) nfa->add_edge(mid, l - 'a' + 'A', l - 'a' + 'A', end);
  }

  uint32_t build(int node, uint32_t from, Nfa* nfa) {
    if (nfa->too_big) return 0;
    const RegexNode& n = re_.nodes[node];
    switch (n.kind) {
      case RegexNode::Kind::kEmpty: return from;
      case RegexNode::Kind::kClass: return add_class(n.cls, from, nfa);
      case RegexNode::Kind::kConcat: {
        uint32_t cur = from;
        for (int k : n.kids) cur = build(k, cur, nfa);
        return cur;
      }
      case RegexNode::Kind::kAlt: {
        uint32_t end = nfa->add_state();
        for (int k : n.kids) {
          uint32_t s = nfa->add_state();
          nfa->add_eps(from, s);
          nfa->add_eps(build(k, s, nfa), end);
        }
        return end;
      }
      case RegexNode::Kind::kRepeat: {
        uint32_t cur = from;
        for (uint32_t i = 0; i < n.min && !nfa->too_big; ++i) {
          uint32_t s = nfa->add_state();
          nfa->add_eps(cur, s);
          cur = build(n.kids[0], s, nfa);
        }
        if (n.unbounded) {
          uint32_t loop = nfa->add_state();
          nfa->add_eps(cur, loop);
          uint32_t body = nfa->add_state();
          nfa->add_eps(loop, body);
          nfa->add_eps(build(n.kids[0], body, nfa), loop);
          return loop;
        }
        uint32_t end = nfa->add_state();
        nfa->add_eps(cur, end);
        for (uint32_t i = n.min; i < n.max && !nfa->too_big; ++i) {
          uint32_t s = nfa->add_state();
          nfa->add_eps(cur, s);
          cur = build(n.kids[0], s, nfa);
          nfa->add_eps(cur, end);
        }
        return end;
      }
      case RegexNode::Kind::kBegin: {
        uint32_t s = nfa->add_state();
        nfa->add_eps(from, s, Nfa::kBegin);
        return s;
      }
      case RegexNode::Kind::kEnd: {
        uint32_t s = nfa->add_state();
        nfa->add_eps(from, s, Nfa::kEnd);
        return s;
      }
    }
    return from;
  }

 private:
  const Regex& re_;
  bool json_;
};

StatusOr<Nfa> build_nfa(const TerminalComponent& c) {
  Nfa nfa;
  NfaBuilder b(*c.regex, c.json_string);
  nfa.start = nfa.add_state();
  uint32_t cur = nfa.start;
  if (c.json_string) {
    uint32_t s = nfa.add_state();
    nfa.add_edge(cur, '"', '"', s);
    cur = s;
  }
  CodepointSet any = c.json_string ? CodepointSet::all() : ecma_dot();
  if (c.mode == TerminalComponent::Mode::kSearch) {
    any = CodepointSet::all();
    uint32_t loop = nfa.add_state();
    nfa.add_eps(cur, loop);
    uint32_t e = b.add_class(any, loop, &nfa);
    nfa.add_eps(e, loop);
    cur = loop;
  }
  cur = b.build(c.regex->root, cur, &nfa);
  if (c.mode == TerminalComponent::Mode::kSearch) {
    uint32_t loop = nfa.add_state();
    nfa.add_eps(cur, loop);
    uint32_t e = b.add_class(any, loop, &nfa);
    nfa.add_eps(e, loop);
    cur = loop;
  }
  if (c.json_string) {
    uint32_t s = nfa.add_state();
    nfa.add_edge(cur, '"', '"', s);
    cur = s;
  }
  nfa.final = cur;
  if (nfa.too_big) {
    return ResourceExhausted("regex automaton exceeds " + std::to_string(kMaxNfaStates) +
                             " NFA states (large repetition counts?)");
  }
  return nfa;
}

// Epsilon closure of `set` (sorted unique output).
void closure(const Nfa& nfa, std::vector<uint32_t>* set, bool allow_begin, bool allow_end,
             std::vector<uint8_t>* mark) {
  thread_local std::vector<uint32_t> stack;
  stack.assign(set->begin(), set->end());
  for (uint32_t s : *set) (*mark)[s] = 1;
  while (!stack.empty()) {
    uint32_t s = stack.back();
    stack.pop_back();
    for (const auto& e : nfa.eps[s]) {
      if (e.kind == Nfa::kBegin && !allow_begin) continue;
      if (e.kind == Nfa::kEnd && !allow_end) continue;
      if (!(*mark)[e.to]) {
        (*mark)[e.to] = 1;
        set->push_back(e.to);
        stack.push_back(e.to);
      }
    }
  }
  for (uint32_t s : *set) (*mark)[s] = 0;
  std::sort(set->begin(), set->end());
}

// Hopcroft's partition refinement: blocks start as {accepting} / {not accepting} and are split
// by the predecessors (on one byte class) of a block in the worklist, until stable; then
// renumbered by the first state of each block (the dead state 0 stays 0: its row is all zeros,
// and non-live states, already folded into 0, join its block). Returns the new state count.
uint32_t minimize(std::vector<uint32_t>* trans, std::vector<uint8_t>* accepting, uint32_t* start,
                  uint32_t ns, uint32_t nc) {
  // Inverse transitions, per (class, target): the sources.
  std::vector<uint32_t> inv_off(static_cast<size_t>(nc) * ns + 1, 0), inv(static_cast<size_t>(nc) * ns);
  for (uint32_t s = 0; s < ns; ++s) {
    for (uint32_t c = 0; c < nc; ++c) ++inv_off[static_cast<size_t>(c) * ns + (*trans)[static_cast<size_t>(s) * nc + c] + 1];
  }
  for (size_t i = 1; i < inv_off.size(); ++i) inv_off[i] += inv_off[i - 1];
  {
    std::vector<uint32_t> fill(inv_off.begin(), inv_off.end() - 1);
    for (uint32_t s = 0; s < ns; ++s) {
      for (uint32_t c = 0; c < nc; ++c) inv[fill[static_cast<size_t>(c) * ns + (*trans)[static_cast<size_t>(s) * nc + c]]++] = s;
    }
  }
  // Blocks are ranges [bstart, bend) of `elems`; loc[s] is s's index in elems.
  std::vector<uint32_t> elems(ns), loc(ns), blk(ns), bstart, bend, marked;
  uint32_t na = 0;
  for (uint32_t s = 0; s < ns; ++s) na += (*accepting)[s] != 0;
  uint32_t ia = 0, in = na;  // accepting states first
  for (uint32_t s = 0; s < ns; ++s) {
    uint32_t i = (*accepting)[s] ? ia++ : in++;
    elems[i] = s;
    loc[s] = i;
  }
  auto add_block = [&](uint32_t b, uint32_t e) {
    bstart.push_back(b);
    bend.push_back(e);
    marked.push_back(0);
    uint32_t id = static_cast<uint32_t>(bstart.size() - 1);
    for (uint32_t i = b; i < e; ++i) blk[elems[i]] = id;
    return id;
  };
  std::vector<uint8_t> in_work;
  std::vector<std::pair<uint32_t, uint32_t>> work;  // (block, class)
  auto size = [&](uint32_t b) { return bend[b] - bstart[b]; };
  auto push = [&](uint32_t b, uint32_t c) {
    if (in_work.size() < bstart.size() * nc) in_work.resize(bstart.size() * nc * 2, 0);
    if (!in_work[static_cast<size_t>(b) * nc + c]) { in_work[static_cast<size_t>(b) * nc + c] = 1; work.push_back({b, c}); }
  };
  if (na > 0 && na < ns) {
    uint32_t a = add_block(0, na), r = add_block(na, ns);
    uint32_t smaller = size(a) <= size(r) ? a : r;
    for (uint32_t c = 0; c < nc; ++c) push(smaller, c);
  } else {
    add_block(0, ns);
  }
  std::vector<uint32_t> splitter, touched;
  while (!work.empty()) {
    auto [a, c] = work.back();
    work.pop_back();
    in_work[static_cast<size_t>(a) * nc + c] = 0;
    splitter.assign(elems.begin() + bstart[a], elems.begin() + bend[a]);
    touched.clear();
    for (uint32_t t : splitter) {
      const size_t k = static_cast<size_t>(c) * ns + t;
      for (uint32_t q = inv_off[k]; q < inv_off[k + 1]; ++q) {
        uint32_t s = inv[q], b = blk[s];
        uint32_t front = bstart[b] + marked[b];
        if (loc[s] < front) continue;  // already marked
        uint32_t other = elems[front];
        std::swap(elems[loc[s]], elems[front]);
        loc[other] = loc[s];
        loc[s] = front;
        if (marked[b]++ == 0) touched.push_back(b);
      }
    }
    for (uint32_t b : touched) {
      uint32_t m = marked[b];
      marked[b] = 0;
      if (m == size(b)) continue;
      uint32_t nb = add_block(bstart[b], bstart[b] + m);  // the marked part
      bstart[b] += m;
      for (uint32_t d = 0; d < nc; ++d) {
        if (in_work.size() > static_cast<size_t>(b) * nc + d && in_work[static_cast<size_t>(b) * nc + d]) push(nb, d);
        else push(size(nb) <= size(b) ? nb : b, d);
      }
    }
  }
  const uint32_t blocks = static_cast<uint32_t>(bstart.size());
  std::vector<uint32_t> new_id(blocks, UINT32_MAX), rep;
  for (uint32_t s = 0; s < ns; ++s) {
    if (new_id[blk[s]] == UINT32_MAX) { new_id[blk[s]] = static_cast<uint32_t>(rep.size()); rep.push_back(s); }
  }
  std::vector<uint32_t> t2(static_cast<size_t>(rep.size()) * nc);
  std::vector<uint8_t> acc2(rep.size());
  for (uint32_t b = 0; b < rep.size(); ++b) {
    const uint32_t* row = trans->data() + static_cast<size_t>(rep[b]) * nc;
    for (uint32_t c = 0; c < nc; ++c) t2[static_cast<size_t>(b) * nc + c] = new_id[blk[row[c]]];
    acc2[b] = (*accepting)[rep[b]];
  }
  *start = new_id[blk[*start]];
  trans->swap(t2);
  accepting->swap(acc2);
  return static_cast<uint32_t>(rep.size());
}

}  // namespace

Dfa::Dfa(std::shared_ptr<const Tables> t)
    : t_(std::move(t)), trans_(t_->trans.data()), class_of_(t_->class_of),
      accepting_(t_->accepting.data()), num_classes_(t_->num_classes), start_(t_->start) {}

Dfa::Dfa() : Dfa([] {
  // The empty language: only the dead state.
  static const std::shared_ptr<const Tables> empty = [] {
    auto t = std::make_shared<Tables>();
    t->trans.assign(1, 0);
    t->accepting.assign(1, 0);
    t->has_successor.assign(1, 0);
    t->live_bytes.assign(4, 0);
    return intern(std::move(t));
  }();
  return empty;
}()) {}

std::shared_ptr<const Dfa::Tables> Dfa::intern(std::shared_ptr<Tables> t) {
  // Exact deduplication: bucket by a hash, then compare the tables.
  uint64_t h = 1469598103934665603ull ^ t->start ^ (static_cast<uint64_t>(t->num_classes) << 32);
  auto mix = [&h](uint64_t x) { h = (h ^ x) * 0x9E3779B97F4A7C15ull; h ^= h >> 31; };
  for (int i = 0; i < 256; i += 8) {
    uint64_t x;
    std::memcpy(&x, t->class_of + i, 8);
    mix(x);
  }
  for (uint32_t x : t->trans) mix(x);
  for (uint8_t x : t->accepting) mix(x);
  static std::mutex mu;
  static std::unordered_map<uint64_t, std::vector<std::weak_ptr<const Tables>>> registry;
  static uint64_t next_id = 1;
  static size_t inserts = 0;
  std::lock_guard<std::mutex> lock(mu);
  auto& bucket = registry[h];
  for (size_t i = 0; i < bucket.size();) {
    std::shared_ptr<const Tables> o = bucket[i].lock();
    if (!o) { bucket[i] = bucket.back(); bucket.pop_back(); continue; }
    if (o->start == t->start && o->num_classes == t->num_classes &&
        std::memcmp(o->class_of, t->class_of, 256) == 0 && o->trans == t->trans &&
        o->accepting == t->accepting) {
      return o;
    }
    ++i;
  }
  t->id = next_id++;
  bucket.push_back(t);
  if (++inserts % 4096 == 0) {  // drop buckets whose automata are all gone
    for (auto it = registry.begin(); it != registry.end();) {
      auto& b = it->second;
      b.erase(std::remove_if(b.begin(), b.end(), [](const auto& w) { return w.expired(); }), b.end());
      it = b.empty() ? registry.erase(it) : std::next(it);
    }
  }
  return t;
}

StatusOr<Dfa> Dfa::build_uncached(const TerminalSpec& spec, uint32_t max_states) {
  std::vector<Nfa> nfas;
  for (const auto& c : spec.components) {
    DI_ASSIGN_OR_RETURN(Nfa n, build_nfa(c));
    nfas.push_back(std::move(n));
  }
  auto tables = std::make_shared<Tables>();
  Tables& dfa = *tables;
  // Byte equivalence classes from all edge boundaries.
  std::vector<uint8_t> boundary(257, 0);
  for (const auto& n : nfas) {
    for (const auto& es : n.edges) {
      for (const auto& e : es) { boundary[e.lo] = 1; boundary[e.hi + 1] = 1; }
    }
  }
  std::vector<uint8_t> representative;
  uint32_t cls = 0;
  for (int b = 0; b < 256; ++b) {
    if (b > 0 && boundary[b]) ++cls;
    dfa.class_of[b] = static_cast<uint8_t>(cls);
    if (representative.size() <= cls) representative.push_back(static_cast<uint8_t>(b));
  }
  dfa.num_classes = cls + 1;

  std::vector<std::vector<uint8_t>> marks;
  for (const auto& n : nfas) marks.emplace_back(n.edges.size(), 0);

  using Key = std::vector<uint32_t>;  // [is_start, n0, states..., n1, states...]
  std::vector<Key> keys;
  std::unordered_map<std::string, uint32_t> index;
  auto is_dead = [&](const Key& k) {
    size_t p = 1;
    for (size_t i = 0; i < nfas.size(); ++i) {
      uint32_t n = k[p];
      if (n == 0 && !spec.components[i].negated) return true;
      p += 1 + n;
    }
    return false;
  };
  auto accepts = [&](const Key& k) {
    size_t p = 1;
    bool at_start = k[0] == 1;
    for (size_t i = 0; i < nfas.size(); ++i) {
      uint32_t n = k[p];
      std::vector<uint32_t> set(k.begin() + p + 1, k.begin() + p + 1 + n);
      closure(nfas[i], &set, at_start, true, &marks[i]);
      bool acc = std::binary_search(set.begin(), set.end(), nfas[i].final);
      if (acc == spec.components[i].negated) return false;
      p += 1 + n;
    }
    return true;
  };
  // State 0: dead.
  keys.push_back(Key{});
  dfa.accepting.push_back(0);
  std::string key_buf;
  auto intern = [&](Key k) -> StatusOr<uint32_t> {
    if (is_dead(k)) return 0u;
    key_buf.assign(reinterpret_cast<const char*>(k.data()), k.size() * 4);
    auto it = index.find(key_buf);
    if (it != index.end()) return it->second;
    if (keys.size() >= max_states) {
      return ResourceExhausted("automaton exceeds " + std::to_string(max_states) + " DFA states");
    }
    uint32_t id = static_cast<uint32_t>(keys.size());
    index.emplace(key_buf, id);
    dfa.accepting.push_back(accepts(k) ? 1 : 0);
    keys.push_back(std::move(k));
    return id;
  };
  // key[0]: 1 = at the start of the content (BEGIN assertions hold), 2 = before the opening
  // quote of a JSON string (the content starts after it), 0 = elsewhere. In a JSON string the
  // content ends right before the closing quote, so END assertions are followed when moving
  // on '"' (a raw quote can only be the closing one).
  const bool json = !spec.components.empty() && spec.components[0].json_string;
  Key start{json ? 2u : 1u};
  for (size_t i = 0; i < nfas.size(); ++i) {
    std::vector<uint32_t> set{nfas[i].start};
    closure(nfas[i], &set, !json, false, &marks[i]);
    start.push_back(static_cast<uint32_t>(set.size()));
    start.insert(start.end(), set.begin(), set.end());
  }
  DI_ASSIGN_OR_RETURN(dfa.start, intern(std::move(start)));
  dfa.trans.assign(dfa.num_classes, 0);  // dead row
  // Per state: the NFA targets of every class in one pass over the edges (an edge covers whole
  // classes, since classes are cut at every edge boundary), then closure and interning per class.
  const uint32_t nc = dfa.num_classes;
  const uint32_t quote_class = dfa.class_of[static_cast<uint8_t>('"')];
  std::vector<std::vector<uint32_t>> bucket(static_cast<size_t>(nc) * nfas.size());
  std::vector<uint32_t> from;
  std::string pre_buf;
  std::unordered_map<std::string, uint32_t> pre_index;
  for (uint32_t s = 1; s < keys.size(); ++s) {
    dfa.trans.resize(static_cast<size_t>(s + 1) * nc, 0);
    const uint32_t flag = keys[s][0];
    const uint32_t new_flag = flag == 2 ? 1 : 0;
    // A raw quote in a JSON string is the closing one: END assertions are followed first.
    const bool quote_closes = json && flag != 2 && representative[quote_class] == '"';
    size_t p = 1;
    for (size_t i = 0; i < nfas.size(); ++i) {
      const Key& k = keys[s];
      const uint32_t n = k[p];
      std::vector<uint32_t>* b = bucket.data() + i * nc;
      for (uint32_t c = 0; c < nc; ++c) b[c].clear();
      for (size_t q = 0; q < n; ++q) {
        for (const auto& e : nfas[i].edges[k[p + 1 + q]]) {
          for (uint32_t c = dfa.class_of[e.lo], last = dfa.class_of[e.hi]; c <= last; ++c) {
            if (!(quote_closes && c == quote_class)) b[c].push_back(e.to);
          }
        }
      }
      if (quote_closes) {
        from.assign(k.begin() + p + 1, k.begin() + p + 1 + n);
        closure(nfas[i], &from, flag == 1, true, &marks[i]);
        for (uint32_t st : from) {
          for (const auto& e : nfas[i].edges[st]) {
            if (e.lo <= '"' && '"' <= e.hi) b[quote_class].push_back(e.to);
          }
        }
      }
      p += 1 + n;
    }
    for (uint32_t c = 0; c < nc; ++c) {
      // The target before closure decides the state: repeated targets (across classes and
      // states) skip the closure and interning.
      pre_buf.assign(1, static_cast<char>(new_flag));
      for (size_t i = 0; i < nfas.size(); ++i) {
        std::vector<uint32_t>& set = bucket[i * nc + c];
        std::sort(set.begin(), set.end());
        set.erase(std::unique(set.begin(), set.end()), set.end());
        uint32_t sz = static_cast<uint32_t>(set.size());
        pre_buf.append(reinterpret_cast<const char*>(&sz), 4);
        pre_buf.append(reinterpret_cast<const char*>(set.data()), set.size() * 4);
      }
      auto pre = pre_index.find(pre_buf);
      if (pre != pre_index.end()) {
        dfa.trans[static_cast<size_t>(s) * nc + c] = pre->second;
        continue;
      }
      Key next{new_flag};
      for (size_t i = 0; i < nfas.size(); ++i) {
        std::vector<uint32_t>& set = bucket[i * nc + c];
        closure(nfas[i], &set, new_flag == 1, false, &marks[i]);
        next.push_back(static_cast<uint32_t>(set.size()));
        next.insert(next.end(), set.begin(), set.end());
      }
      DI_ASSIGN_OR_RETURN(uint32_t t, intern(std::move(next)));
      pre_index.emplace(pre_buf, t);
      dfa.trans[static_cast<size_t>(s) * nc + c] = t;
    }
  }
  // Liveness: states that can reach an accepting state.
  uint32_t ns = static_cast<uint32_t>(keys.size());
  std::vector<std::vector<uint32_t>> rev(ns);
  for (uint32_t s = 1; s < ns; ++s) {
    for (uint32_t c = 0; c < dfa.num_classes; ++c) {
      uint32_t t = dfa.trans[static_cast<size_t>(s) * dfa.num_classes + c];
      if (t) rev[t].push_back(s);
    }
  }
  std::vector<uint8_t> live(ns, 0);
  std::vector<uint32_t> stack;
  for (uint32_t s = 1; s < ns; ++s) if (dfa.accepting[s]) { live[s] = 1; stack.push_back(s); }
  while (!stack.empty()) {
    uint32_t s = stack.back();
    stack.pop_back();
    for (uint32_t p : rev[s]) if (!live[p]) { live[p] = 1; stack.push_back(p); }
  }
  for (auto& t : dfa.trans) if (!live[t]) t = 0;
  if (!live[dfa.start]) dfa.start = 0;
  if (spec.minimize) ns = minimize(&dfa.trans, &dfa.accepting, &dfa.start, ns, dfa.num_classes);
  dfa.has_successor.assign(ns, 0);
  for (uint32_t s = 1; s < ns; ++s) {
    for (uint32_t c = 0; c < dfa.num_classes; ++c) {
      if (dfa.trans[static_cast<size_t>(s) * dfa.num_classes + c]) { dfa.has_successor[s] = 1; break; }
    }
  }
  std::vector<uint64_t> class_bytes(static_cast<size_t>(dfa.num_classes) * 4, 0);
  for (int b = 0; b < 256; ++b) class_bytes[4 * dfa.class_of[b] + (b >> 6)] |= 1ull << (b & 63);
  dfa.live_bytes.assign(static_cast<size_t>(ns) * 4, 0);
  for (uint32_t s = 1; s < ns; ++s) {
    uint64_t* out = dfa.live_bytes.data() + 4 * static_cast<size_t>(s);
    for (uint32_t c = 0; c < dfa.num_classes; ++c) {
      if (!dfa.trans[static_cast<size_t>(s) * dfa.num_classes + c]) continue;
      for (int w = 0; w < 4; ++w) out[w] |= class_bytes[4 * c + w];
    }
  }
  return Dfa(Dfa::intern(std::move(tables)));
}

}  // namespace deepinfer::structured

