// The matcher the engine drives per request (STYLE.md 18): accept(token) / rollback(n) /
// fill_mask(bitmask) / is_terminated() / can_terminate(). Masks use the common layout
// int32[ceil(V/32)], bit (t & 31) of word (t >> 5) set when token t is allowed, V = logits width.
// Not thread-safe per matcher; many matchers may share one CompiledGrammar (its mask cache is
// locked) and one TokenVocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "structured/earley.h"
#include "structured/grammar.h"
#include "structured/mask_cache.h"
#include "structured/token_vocabulary.h"

namespace deepinfer::structured {

struct MatcherOptions {
  // Hard work limit per fill_mask (trie nodes visited + Earley items created). Past it the mask
  // fails with RESOURCE_EXHAUSTED for this request; no schema can stall the batch.
  uint64_t max_work_per_mask = 4'000'000;
  // Memory for cached masks per (grammar, vocabulary); the cache is cleared when full.
  size_t max_cache_bytes = 128u << 20;
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

 private:
  std::shared_ptr<const CachedMask> frontier_mask(Status* status);
  Status walk(uint32_t begin, uint32_t end, uint32_t base_depth, CachedMask* record,
              uint32_t* bits);

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  MatcherOptions options_;
  EarleyParser parser_;
  std::vector<uint32_t> history_;  // sets pushed per step; kEosStep for EOS
  bool terminated_ = false;
  uint64_t work_ = 0;
  // Frontier of the top set: distinct (terminal, state) pairs, and per scan item its index.
  std::vector<std::pair<int, uint32_t>> frontier_;
  std::vector<uint32_t> scan_to_frontier_;
  std::vector<uint32_t> level_states_;
};

}  // namespace deepinfer::structured
