// StructuredOutputManager: the engine's side of structured outputs (issue 8, docs/structured.md
// "Engine integration"). It turns a request's `SamplingParams::structured_outputs` into a
// GrammarMatcher, compiling OFF the engine thread, and gives the engine per-step token masks.
//
// Life of a constrained request (all calls from the engine thread; nothing here blocks on a
// compile):
//
//   // once, at Engine::create (the vocabulary is built lazily, on the compile worker):
//   auto so = engine::StructuredOutputManager::for_tokenizer(*tokenizer, /*logits_width=*/V);
//
//   // add_request: start compiling; a bad spec (validate()) is refused right here.
//   if (params.structured_outputs) DI_RETURN_IF_ERROR(so->submit(id, *params.structured_outputs));
//
//   // schedule: a request whose grammar is not ready waits (the batch does not):
//   switch (so->status(id).state) {
//     case StructuredOutputState::kPending: /* skip it this step */ break;
//     case StructuredOutputState::kFailed:  /* finish it with FinishReason::kError,
//                                              error = so->status(id).error.to_string() */ break;
//     case StructuredOutputState::kReady:   /* schedule as usual */ break;
//   }
//
//   // each step, for the sampling rows of constrained requests (distinct ids):
//   const size_t W = so->words_per_row();                // ceil(V / 32)
//   std::vector<uint32_t> masks(ids.size() * W);         // [rows, W]
//   auto mask_job = so->fill_masks_async(ids, masks.data());  // overlaps the forward pass
//   ... runner->execute(sched) ...
//   std::vector<Status> row_status = mask_job.get();     // one per row; !ok -> fail that request
//   rows[r].allowed_token_mask = {masks.data() + r * W, W};   // sample::SampleRow
//   ... sampler.sample(...) ...
//
//   // update: feed every sampled token (EOS included) of a constrained request:
//   Status st = so->accept(id, token);  // !ok only if the sampler broke the mask (a bug)
//   if (so->is_terminated(id)) { /* grammar complete: finish with FinishReason::kStop */ }
//
//   // finish / abort / preemption-by-recompute of a finished request:
//   so->release(id);
//
// A preempted (recomputed) request keeps its matcher: its output tokens stay accepted. Speculative
// decoding: accept the draft tokens, then rollback(id, n) the rejected ones.
//
// Failure isolation: a spec that does not compile (a refused keyword, a bad regex, a GBNF syntax
// error) or a mask that exceeds the matcher's work limit (RESOURCE_EXHAUSTED) fails only that
// request; the manager and the other requests go on.
//
// Caching: compiled grammars are cached by StructuredOutputsParams::cache_key() (kind, options,
// text), so identical specs compile once; failures are cached too. The mask cache inside each
// CompiledGrammar is shared by every request on it. stats() counts compiles and cache hits.
//
// Thread safety: every public method may be called from any thread (one internal mutex guards
// the request table and the grammar cache; compiles run on the worker threads without it).
// Calls that touch the SAME request (accept / rollback / release / fill_masks naming it) must not
// overlap: between fill_masks_async and the future's get(), do not accept, rollback or release
// the requests in that batch. The manager's destructor waits for running compiles.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "deepinfer/sampling_params.h"
#include "structured/matcher.h"
#include "structured/token_vocabulary.h"

namespace deepinfer::tokenizer {
class Tokenizer;
}

namespace deepinfer::engine {

enum class StructuredOutputState { kPending, kReady, kFailed };

struct StructuredOutputStatus {
  StructuredOutputState state = StructuredOutputState::kPending;
  Status error;                       // kFailed: why (e.g. "keyword 'not' at #/properties/a ...")
  std::vector<std::string> warnings;  // kReady, lenient JSON Schema: the relaxed keywords
};

struct StructuredOutputOptions {
  int num_compile_threads = 1;  // worker threads that compile grammars (>= 1)
  int num_mask_threads = 1;     // threads that fill the rows of one batch (1 = the caller only)
  structured::MatcherOptions matcher;  // incl. the per-mask work limit
  size_t max_cached_grammars = 1024;   // oldest finished entries are dropped past this
};

struct StructuredOutputStats {
  int64_t num_compiles = 0;    // specs actually compiled (cache misses)
  int64_t num_cache_hits = 0;  // submits answered by an already compiled / compiling spec
  int64_t num_failed = 0;      // compiles that failed
};

class StructuredOutputManager {
 public:
  using VocabFactory =
      std::function<StatusOr<std::shared_ptr<const structured::TokenVocabulary>>()>;

  // `make_vocab` is called once, lazily, on a compile worker (the first submit). If it fails,
  // every request fails with its status.
  explicit StructuredOutputManager(VocabFactory make_vocab, StructuredOutputOptions options = {});
  // The model's vocabulary from its tokenizer (structured::vocab_from_tokenizer); `tok` must
  // outlive the manager. logits_width: the logits row length V (-1: the tokenizer's vocab size).
  static std::unique_ptr<StructuredOutputManager> for_tokenizer(
      const tokenizer::Tokenizer& tok, int32_t logits_width = -1,
      StructuredOutputOptions options = {});
  ~StructuredOutputManager();
  StructuredOutputManager(const StructuredOutputManager&) = delete;
  StructuredOutputManager& operator=(const StructuredOutputManager&) = delete;

  // Starts compiling (returns at once). InvalidArgument if params.validate() fails or the id is
  // already submitted (and not released).
  Status submit(const std::string& request_id, const StructuredOutputsParams& params);
  // kPending until the grammar is compiled and the matcher made; NotFound error state for an id
  // that was never submitted (state kFailed).
  StructuredOutputStatus status(const std::string& request_id) const;
  bool has(const std::string& request_id) const;
  // Blocks until the request is no longer pending (tests, offline tools; not the engine loop).
  StructuredOutputStatus wait(const std::string& request_id) const;

  // Mask words per row: ceil(V / 32). Blocks until the vocabulary is built (so call it after a
  // request is ready, or from tests).
  size_t words_per_row() const;

  // Fills masks[r * words_per_row() .. +words_per_row()) for each request_ids[r] (bit t & 31 of
  // word t >> 5 set = token t allowed; the sample::SampleRow::allowed_token_mask layout). Returns
  // one Status per row: FailedPrecondition if the request is not ready, NotFound if unknown,
  // RESOURCE_EXHAUSTED past the work limit (fail that request), InvalidArgument for a repeated
  // id. A row that failed is all zeros. Rows run in parallel on num_mask_threads.
  std::vector<Status> fill_masks(std::span<const std::string> request_ids, uint32_t* masks);
  // The same on a background thread, so that masks are computed while the forward pass runs.
  // `request_ids` is copied; `masks` must stay alive until the future is ready.
  std::future<std::vector<Status>> fill_masks_async(std::vector<std::string> request_ids,
                                                    uint32_t* masks);

  // Advances the request's matcher by one sampled token. InvalidArgument (state unchanged) if the
  // grammar does not allow it; FailedPrecondition if not ready.
  Status accept(const std::string& request_id, int32_t token);
  // Undoes the last n accepted tokens (speculative decoding). InvalidArgument if n > accepted.
  Status rollback(const std::string& request_id, int n);
  // EOS was accepted: the output is complete.
  bool is_terminated(const std::string& request_id) const;
  // The output so far is complete and nothing more can follow (the engine may stop without EOS).
  bool must_terminate(const std::string& request_id) const;
  // Forgets the request (a pending compile still finishes and stays cached). Unknown ids: no-op.
  void release(const std::string& request_id);

  StructuredOutputStats stats() const;
  size_t num_requests() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::engine
