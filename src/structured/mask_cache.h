// Per-vocabulary cache of "context-independent" masks, shared by every grammar on the vocabulary.
// The key is the frontier of an Earley set: the distinct (lexeme automaton, DFA state) pairs its
// scan items wait in, automata named by Dfa::content_id (equal tables, equal id). Walking the token
// trie from a frontier only steps DFAs until some lexeme can end; those trie nodes ("exits")
// need the parser (the continuation depends on the items' origins), everything else depends on
// the frontier alone. So a cached entry holds the bits of tokens decided by the DFAs alone plus
// the list of exits with the DFA states reached there; a mask is then a copy of the bits and a
// parser walk below each exit only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "structured/token_vocabulary.h"

namespace deepinfer::structured {

struct CachedMask {
  // The bits of the tokens decided by the DFAs alone: TokenVocabulary::plain_mask(plain_depth,
  // plain_class) (plain_class: a plain measure, plain_text.h) with the words in `patch` replaced ((word index, value), ascending). Most
  // entries differ from their plain mask in a few words, so an entry is small (no 16 KB block
  // per frontier: fewer page faults, and hits copy a plain mask that stays in cache).
  uint32_t plain_depth = 0;
  int plain_class = 0;
  std::vector<std::pair<uint32_t, uint32_t>> patch;
  // Exits with tokens below them (an exit that is a leaf needs no parser walk). Equal state
  // vectors share one offset, so the offset identifies the parser set pushed at the exit.
  struct Exit {
    uint32_t node;
    uint32_t states_offset;  // into exit_states: one DFA state per frontier entry
    // A superset of the first bytes of the node's children whose subtrees hold tokens the
    // cached bits do not allow yet (256 bits; all ones after a skip-trie walk): a pushed set
    // whose new scan items take none of them adds nothing below the exit (session 8: e.g. the
    // ~110 digit prefixes where a number can end, whose children are digits, cost no walk).
    uint64_t child_bytes[4];
  };
  std::vector<Exit> exits;
  std::vector<uint32_t> exit_states;
  size_t bytes() const { return patch.size() * 8 + exits.size() * sizeof(Exit) + exit_states.size() * 4 + 96; }
};

struct TokenVocabulary::MaskCache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const CachedMask>> entries;
  size_t bytes = 0;
  // plain_depth (plain_depth.h) per (Dfa::content_id, DFA state), for the two stop rules, per
  // plain measure (plain_text.h).
  struct KeyHash {
    size_t operator()(const std::pair<uint64_t, uint32_t>& k) const {
      return static_cast<size_t>((k.first * 0x9E3779B97F4A7C15ull) ^ (k.second * 0xC2B2AE3D27D4EB4Full));
    }
    size_t operator()(const std::tuple<uint64_t, uint32_t, uint32_t>& k) const {
      return static_cast<size_t>((std::get<0>(k) * 0x9E3779B97F4A7C15ull) ^
                                 (std::get<1>(k) * 0xC2B2AE3D27D4EB4Full) ^ (std::get<2>(k) * 0x165667B1ull));
    }
  };
  std::unordered_map<std::pair<uint64_t, uint32_t>, uint32_t, KeyHash> plain_alive[4], plain_quiet[4];
  // plain_dies_by per (Dfa::content_id, DFA state, k), per plain measure.
  std::unordered_map<std::tuple<uint64_t, uint32_t, uint32_t>, bool, KeyHash> plain_dies[4];
};

}  // namespace deepinfer::structured
