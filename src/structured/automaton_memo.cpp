// Process-wide memo of built automata (Dfa::build): keyed by the exact content of a terminal's
// components, so the lexemes that many grammars share are determinized once per process.
#include <mutex>
#include <string>
#include <unordered_map>

#include "structured/automaton.h"

namespace deepinfer::structured {
namespace {

// Exact content of a terminal's components: every regex node (kind, class ranges, kids,
// repetition bounds), the root, and each component's mode and flags.
void append_u32(std::string* out, uint32_t x) { out->append(reinterpret_cast<const char*>(&x), 4); }

std::string build_key(const TerminalSpec& spec, uint32_t max_states) {
  std::string k;
  append_u32(&k, max_states);
  append_u32(&k, spec.minimize ? 1u : 0u);
  append_u32(&k, static_cast<uint32_t>(spec.components.size()));
  for (const auto& c : spec.components) {
    append_u32(&k, static_cast<uint32_t>(c.mode) | (c.json_string ? 16u : 0u) | (c.negated ? 32u : 0u));
    const Regex& re = *c.regex;
    append_u32(&k, static_cast<uint32_t>(re.root));
    append_u32(&k, static_cast<uint32_t>(re.nodes.size()));
    for (const auto& n : re.nodes) {
      append_u32(&k, static_cast<uint32_t>(n.kind) | (n.unbounded ? 256u : 0u));
      append_u32(&k, n.min);
      append_u32(&k, n.max);
      append_u32(&k, static_cast<uint32_t>(n.kids.size()));
      for (int kid : n.kids) append_u32(&k, static_cast<uint32_t>(kid));
      append_u32(&k, static_cast<uint32_t>(n.cls.ranges().size()));
      for (const auto& r : n.cls.ranges()) { append_u32(&k, r.first); append_u32(&k, r.second); }
    }
  }
  return k;
}

struct BuildMemo {
  std::mutex mu;
  // Built automata (or the refusal: code and message without the terminal's name).
  struct Entry {
    std::shared_ptr<const Dfa> dfa;
    StatusCode code = StatusCode::kOk;
    std::string message;
  };
  std::unordered_map<std::string, Entry> entries;
  size_t bytes = 0;
  uint64_t hits = 0;
};

BuildMemo& build_memo() {
  static BuildMemo* memo = new BuildMemo();  // never destroyed (used from any thread)
  return *memo;
}

constexpr size_t kMaxBuildMemoBytes = 96u << 20;  // cleared when full

}  // namespace

uint64_t Dfa::build_cache_hits() {
  BuildMemo& memo = build_memo();
  std::lock_guard<std::mutex> lock(memo.mu);
  return memo.hits;
}

void Dfa::clear_build_cache() {
  BuildMemo& memo = build_memo();
  std::lock_guard<std::mutex> lock(memo.mu);
  memo.entries.clear();
  memo.bytes = 0;
}

StatusOr<Dfa> Dfa::build(const TerminalSpec& spec, uint32_t max_states) {
  for (const auto& c : spec.components) {
    if (!c.regex) return InvalidArgument("terminal " + spec.name + ": component without a regex");
  }
  std::string key = build_key(spec, max_states);
  BuildMemo& memo = build_memo();
  {
    std::lock_guard<std::mutex> lock(memo.mu);
    auto it = memo.entries.find(key);
    if (it != memo.entries.end()) {
      ++memo.hits;
      if (it->second.dfa) return *it->second.dfa;
      return Status(it->second.code, "terminal " + spec.name + ": " + it->second.message);
    }
  }
  StatusOr<Dfa> built = build_uncached(spec, max_states);
  BuildMemo::Entry e;
  if (built.ok()) {
    e.dfa = std::make_shared<const Dfa>(*built);
  } else {
    e.code = built.status().code();
    e.message = built.status().message();
  }
  {
    std::lock_guard<std::mutex> lock(memo.mu);
    size_t add = key.size() + (e.dfa ? e.dfa->memory_bytes() : e.message.size()) + 64;
    if (memo.bytes + add > kMaxBuildMemoBytes) {
      memo.entries.clear();
      memo.bytes = 0;
    }
    if (memo.entries.emplace(std::move(key), e).second) memo.bytes += add;
  }
  if (!built.ok()) return Status(built.status().code(), "terminal " + spec.name + ": " + built.status().message());
  return built;
}

}  // namespace deepinfer::structured
