// The matcher the engine drives per request (STYLE.md 18): accept(token) / rollback(n) /
// fill_mask(bitmask) / is_terminated() / can_terminate(). Masks use the common layout
// int32[ceil(V/32)], bit (t & 31) of word (t >> 5) set when token t is allowed, V = logits width.
// Not thread-safe per matcher; many matchers may share one CompiledGrammar (its mask cache is
// locked) and one TokenVocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "structured/earley.h"
#include "structured/grammar.h"
#include "structured/id_table.h"
#include "structured/mask_cache.h"
#include "structured/token_vocabulary.h"

namespace deepinfer::structured {

// What the last fill_mask did (for benchmarks and tests; not needed to use the matcher).
struct MaskStats {
  bool cache_hit = false;       // the frontier's context-independent part came from the cache
  uint32_t frontier = 0;        // distinct (terminal, DFA state) pairs in the top set
  uint32_t plain_depth = 0;     // plain tokens up to this length were allowed en bloc
  int plain_class = 0;          // of this plain measure (plain_text.h: class, bytes / code points)
  uint32_t exits = 0;           // exits with tokens below them
  uint32_t exit_walks = 0;      // parser walks below exits, at any depth
  uint32_t exit_reuses = 0;     // walks below exits taken from a memo instead
  uint32_t exit_groups = 0;     // distinct state vectors among the exits (sets pushed on the top set)
  uint32_t top_pushes = 0;      // sets pushed on the top set (the others' first bytes were kept)
  uint32_t top_items = 0;       // items of the top set (its skeleton's length)
  uint64_t trie_nodes = 0;      // trie nodes stepped
  uint64_t parser_items = 0;    // Earley items created
};

struct MatcherOptions {
  // Hard work limit per fill_mask (trie nodes visited + Earley items created). Past it the mask
  // fails with RESOURCE_EXHAUSTED for this request; no schema can stall the batch.
  uint64_t max_work_per_mask = 4'000'000;
  // Memory for cached masks per (grammar, vocabulary); the cache is cleared when full.
  size_t max_cache_bytes = 128u << 20;
  // Session-8 fast paths below exits (all exact): parser walks below the top set's exits kept
  // across masks (keyed by the top set's skeleton, see GrammarMatcher::skeleton_id), and exits
  // skipped by byte filters (CompiledGrammar::next_bytes, CachedMask::Exit::child_bytes). False
  // recomputes every walk and filters nothing (the session-7 path; structured_walk_memo_test and
  // bench_structured --verify compare the two).
  bool keep_exit_walks = true;
};

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar,
                 std::shared_ptr<const TokenVocabulary> vocab, MatcherOptions options = {});

  // Advances by one token. False (state unchanged) if the token is not allowed: special tokens
  // never are, EOS only when can_terminate(), nothing after termination.
  bool accept_token(int32_t token_id);
  // Advances by raw bytes as one step (rollback(1) undoes it). False (unchanged) if rejected.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted steps (tokens or byte strings), n <= num_accepted().
  void rollback(int n);
  int num_accepted() const { return static_cast<int>(history_.size()); }

  // Fills bitmask[0 .. num_words) (num_words >= ceil(vocab_size / 32)).
  Status fill_mask(uint32_t* bitmask, size_t num_words);

  bool is_terminated() const { return terminated_; }   // EOS was accepted
  bool can_terminate() const;                          // the output so far is complete
  // True when the output is complete and no further byte is possible.
  bool must_terminate() const;

  // Testing aid: whether `bytes` could be appended (keeps the state).
  bool can_accept_bytes(std::string_view bytes);

  const MaskStats& last_mask_stats() const { return stats_; }

 private:
  // Lexemes and per-depth DFA states of one (possibly nested) trie walk.
  struct WalkLevel {
    std::vector<const Dfa*> dfas;
    std::vector<uint32_t> states;  // [depth][lexeme]
    // Parser walks: scan item k walks lexeme expand[k]; scan_states is the vector pushed at exits.
    std::vector<std::pair<uint64_t, uint32_t>> sorted;
    std::vector<uint32_t> expand, scan_states;
    std::vector<uint32_t> collected;  // tokens allowed below the exit being walked at this level
    std::vector<uint32_t> idx, sts, cnt, full;  // sparse alive lexemes per depth (see walk)
    std::vector<int32_t> exit_at;                // record walks: exit of the node per depth
  };
  // Tokens allowed below an exit are also appended here, as offsets from `base`.
  struct Collect {
    std::vector<uint32_t>* out;
    uint32_t base;
  };
  std::shared_ptr<const CachedMask> frontier_mask(Status* status);
  // The plain depth d of the frontier under plain measure m (plain tokens of length <= d are
  // allowed en bloc); sets *no_longer when moreover every plain text of length d + 1 kills every
  // lexeme, so that plain subtrees hold nothing else and the walk can skip them all.
  uint32_t frontier_plain_depth(TokenVocabulary::MaskCache& slot, int m, bool* no_longer);
  // Walks the trie below node `parent` (not `parent` itself): from the frontier (record != null),
  // or from the parser's top set, whose push id (see below) is `push_id`. The walk goes on past
  // exits with the DFA states alone (what the moved items allow there). With `first_bytes`
  // (256 bits), a subtree at depth base_depth + 1 whose byte is not in it is skipped: there the
  // top set behaves as the set below continued, which the caller's walk covers (see
  // new_scan_bytes).
  // Plain subtrees of measure plain_cls with plain_len <= skip_plain_len are skipped (when that
  // skips every one, the record walk runs over the vocabulary's SkipTrie instead).
  Status walk(uint32_t parent, CachedMask* record,
              uint32_t skip_plain_len, int plain_cls, uint32_t* bits, const Collect* collect, uint32_t level,
              uint32_t push_id, const uint64_t* first_bytes);
  // The bytes some *new* scan item of the parser's top set takes: one not moved there from the
  // set below by push_scanned (EarleyParser::copy_end). After any other byte only moved items
  // survive, with the origins and states they would have had without the exit, so the set
  // pushed there equals the one the walk of the set below reaches by going on past the exit.
  void new_scan_bytes(uint64_t out[4]) const;
  // The parser part below exit `node`, whose pushed set has id `child_id`; `scan_states` (per
  // scan item of the top set) is pushed unless the walk is memoized or `pushed` already holds it.
  // Only children whose byte is in new_scan_bytes() are walked (the caller walks on past the
  // exit for the rest).
  // The offsets found are memo_tokens_[*first .. *last) when first/last are given.
  Status walk_below_exit(uint32_t node, uint32_t child_id, const uint32_t* scan_states,
                         uint32_t* bits, const Collect* collect, uint32_t level, bool pushed,
                         uint32_t* first = nullptr, uint32_t* last = nullptr);
  uint32_t push_id(uint32_t parent, const uint32_t* states, size_t n);
  Status walk_exits(const CachedMask& cached, const std::vector<uint32_t>& scans, uint32_t* bits);

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  MatcherOptions options_;
  EarleyParser parser_;
  std::vector<uint32_t> history_;  // sets pushed per step; kEosStep for EOS
  bool terminated_ = false;
  uint64_t work_ = 0;
  // Frontier of the top set: distinct (automaton content id, state) pairs (with one terminal
  // that has the automaton), sorted; and per scan item its index.
  struct FrontierEntry {
    uint64_t content;
    uint32_t state;
    int terminal;
    bool operator<(const FrontierEntry& o) const {
      return content != o.content ? content < o.content : state < o.state;
    }
    bool operator==(const FrontierEntry& o) const { return content == o.content && state == o.state; }
  };
  std::vector<FrontierEntry> frontier_;
  std::string frontier_key_;
  std::vector<uint32_t> scan_to_frontier_;
  std::vector<std::unique_ptr<WalkLevel>> levels_;
  IdTable exit_dedup_;                 // record walk: state vector -> id
  std::vector<uint32_t> dedup_offset_;  // id -> offset in the entry's exit_states
  std::vector<uint32_t> record_bits_;  // the bits of a cache miss, before they become a patch
  // Per fill_mask. A set pushed at an exit is a function of the set below it and the DFA states
  // pushed, so it gets an id from (parent id, states); the walk below an exit is a function of
  // that id and the forest below the node: (id, forest) -> allowed token offsets from the node's
  // tok_end, in memo_tokens_.
  //
  // Kept across masks (session 8): the walks below the exits of the top set T. The set pushed
  // on T is a function of T's items without their DFA states (prod, dot, origin; T's scan items'
  // states enter only through the states pushed), of the origin sets they reach and of the
  // states pushed. T's origins are < t or = t (T itself); every set they reach is at most M =
  // the largest origin < t, and sets 0..M are unchanged iff set M's stamp is
  // (EarleyParser::set_stamp). So T's *skeleton* key is (M, stamp(M), T's items (prod, dot,
  // origin, origin t written as "self")): equal keys and equal states pushed give equal pushed
  // sets, hence equal walks, whatever was accepted or rolled back in between. Inside a JSON
  // string every mask has the same skeleton, so its ~22 closing-quote walks run once per string.
  // Top-level push ids (skeleton id, scan states) carry kTopBit, so they never equal a per-mask
  // id; top_memo_ maps (top id, forest) -> offsets in top_tokens_.
  static constexpr uint32_t kTopBit = 0x80000000u;
  uint32_t skeleton_id();  // of the parser's top set; assigns a new id when unseen
  void trim_top_memo();    // empties the kept tables when they grow past their bounds
  IdTable skel_ids_, top_ids_;
  std::vector<uint32_t> skel_key_, push_key_;
  std::vector<uint32_t> top_tokens_;
  struct TopFirst {
    bool known = false;
    uint64_t bytes[4] = {0, 0, 0, 0};  // new_scan_bytes() of the pushed set (0: it dies)
  };
  std::vector<TopFirst> top_first_;  // per top-level push id (without kTopBit)
  std::vector<const uint64_t*> scan_next_;  // per scan item of the top set: next_bytes
  std::vector<const Dfa*> scan_dfa_;        // per scan item: its lexeme's automaton
  IdTable push_ids_;
  // (push id, forest) -> [first, last) in memo_tokens_: open addressing, emptied by a stamp
  // (no allocation per mask once grown).
  struct ExitMemo {
    struct Slot {
      uint64_t key;
      uint32_t stamp, first, last;
    };
    std::vector<Slot> slots;
    uint32_t stamp = 0, count = 0;
    void clear();
    const Slot* find(uint64_t key) const;
    void insert(uint64_t key, uint32_t first, uint32_t last);
  };
  ExitMemo exit_memo_, top_memo_;
  std::vector<uint32_t> memo_tokens_;
  std::vector<uint32_t> exit_scan_states_;
  MaskStats stats_;
};

}  // namespace deepinfer::structured
