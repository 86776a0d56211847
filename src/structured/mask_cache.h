// Per-(grammar, vocabulary) cache of "context-independent" masks. The key is the frontier of an
// Earley set: the distinct (terminal, DFA state) pairs its scan items wait in. Walking the token
// trie from a frontier only steps DFAs until some lexeme can end; those trie nodes ("exits")
// need the parser (the continuation depends on the items' origins), everything else depends on
// the frontier alone. So a cached entry holds the bits of tokens decided by the DFAs alone plus
// the list of exits with the DFA states reached there; a mask is then a copy of the bits and a
// parser walk below each exit only.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/grammar.h"

namespace deepinfer::structured {

struct CachedMask {
  std::vector<uint32_t> bits;  // [bitmask_words]
  struct Exit {
    uint32_t node;
    uint32_t states_offset;  // into exit_states: one DFA state per frontier entry
  };
  std::vector<Exit> exits;
  std::vector<uint32_t> exit_states;
  size_t bytes() const { return bits.size() * 4 + exits.size() * 8 + exit_states.size() * 4 + 64; }
};

struct CompiledGrammar::CacheSlot {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const CachedMask>> entries;
  size_t bytes = 0;
};

}  // namespace deepinfer::structured
