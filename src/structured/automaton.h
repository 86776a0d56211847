// Byte-level automata for grammar terminals. A terminal is a conjunction of components, each a
// regex compiled to a byte NFA (Thompson construction; code points become UTF-8 byte ranges),
// optionally negated. It is determinized eagerly into a DFA over byte equivalence classes, so
// that stepping a terminal is one table lookup. State 0 is the dead state, and every other state
// can still reach an accepting state (non-live states are folded into 0 after construction).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "structured/regex.h"

namespace deepinfer::structured {

struct TerminalComponent {
  std::shared_ptr<const Regex> regex;
  // kFull: the whole input must match. kSearch: ECMA-262 search semantics (the regex may match
  // anywhere; ^ and $ assert the input's start and end).
  enum class Mode { kFull, kSearch } mode = Mode::kFull;
  // The regex describes the *decoded* content of a JSON string; the automaton accepts the
  // quoted, escaped JSON text (canonical escapes: \" \\ \b \f \n \r \t, other controls \u00XX).
  bool json_string = false;
  bool negated = false;
};

struct TerminalSpec {
  std::string name;  // for diagnostics and as a deduplication key (with the components)
  std::vector<TerminalComponent> components;
  // A state limit this terminal may use even when the grammar's is lower (0: none). Set for
  // lexemes whose exact automaton is known to be larger, e.g. date-time with its leap seconds.
  uint32_t min_state_limit = 0;
  // Minimize the DFA after the subset construction (Hopcroft's partition refinement; same
  // language, fewest states). Off by default: the subset construction's states are kept as they
  // are for every other lexeme.
  bool minimize = false;
};

class Dfa {
 public:
  static constexpr uint32_t kDead = 0;
  Dfa();
  uint32_t start() const { return start_; }
  uint32_t next(uint32_t state, uint8_t byte) const {
    return trans_[static_cast<size_t>(state) * num_classes_ + class_of_[byte]];
  }
  bool accepting(uint32_t state) const { return accepting_[state] != 0; }
  // Whether some byte leads from `state` to a live state.
  bool has_successor(uint32_t state) const { return t_->has_successor[state] != 0; }
  // The bytes that lead from `state` to a live state: 256 bits, bit b&63 of word b>>6.
  const uint64_t* live_bytes(uint32_t state) const { return t_->live_bytes.data() + 4 * static_cast<size_t>(state); }
  uint32_t num_states() const { return static_cast<uint32_t>(t_->accepting.size()); }
  uint32_t num_classes() const { return num_classes_; }
  uint8_t byte_class(uint8_t byte) const { return class_of_[byte]; }
  bool empty_language() const { return start_ == kDead; }
  size_t memory_bytes() const {
    return t_->trans.size() * 4 + t_->accepting.size() * 2 + t_->live_bytes.size() * 8;
  }
  // Automata with equal tables (classes, transitions, accepting states, start) share one table
  // and one id for the life of the process, in every grammar; masks are cached by this id
  // (mask_cache.h), so grammars share the work on their common lexemes. Ids are never reused.
  uint64_t content_id() const { return t_->id; }

  // Builds the DFA; errors when it would exceed `max_states`. Results (and refusals) are
  // memoized process-wide by the components' exact content (regex ASTs, modes, flags) and
  // `max_states`, so lexemes common to many grammars (strings, numbers, formats, counted
  // strings) are determinized once; the build is deterministic, so a hit equals a rebuild.
  static StatusOr<Dfa> build(const TerminalSpec& spec, uint32_t max_states);
  // Number of builds answered from that memo (for tests and benchmarks).
  static uint64_t build_cache_hits();
  // Empties the memo (benchmarks measure cold compiles with it).
  static void clear_build_cache();

 private:
  struct Tables {
    uint64_t id = 0;
    uint32_t start = 0;
    uint32_t num_classes = 1;
    uint8_t class_of[256] = {};
    std::vector<uint32_t> trans;  // [state][class]
    std::vector<uint8_t> accepting, has_successor;
    std::vector<uint64_t> live_bytes;  // [state][4], derived from trans (not part of identity)
  };
  explicit Dfa(std::shared_ptr<const Tables> t);
  static std::shared_ptr<const Tables> intern(std::shared_ptr<Tables> t);
  // The subset construction; error messages lack the "terminal NAME: " prefix.
  static StatusOr<Dfa> build_uncached(const TerminalSpec& spec, uint32_t max_states);

  std::shared_ptr<const Tables> t_;
  // Copies of t_'s fields for the hot path.
  const uint32_t* trans_;
  const uint8_t* class_of_;
  const uint8_t* accepting_;
  uint32_t num_classes_;
  uint32_t start_;
};

}  // namespace deepinfer::structured
