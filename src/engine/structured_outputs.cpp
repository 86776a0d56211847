#include "engine/structured_outputs.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/check.h"
#include "common/logging.h"
#include "common/thread_pool.h"
#include "engine/structured_spec.h"
#include "structured/vocab_from_tokenizer.h"

namespace deepinfer::engine {
namespace {

using structured::CompiledGrammar;
using structured::GrammarMatcher;
using structured::TokenVocabulary;

// One compiled (or compiling, or failed) spec, shared by every request with the same cache key.
struct GrammarEntry {
  StructuredOutputState state = StructuredOutputState::kPending;
  bool compiling = false;  // a worker has started it
  std::shared_ptr<const CompiledGrammar> grammar;
  Status error;
  std::vector<std::string> warnings;
};

}  // namespace

struct StructuredOutputManager::Impl {
  struct RequestState {
    uint64_t serial = 0;  // tells a re-submitted id from its released predecessor
    std::shared_ptr<GrammarEntry> entry;
    std::shared_ptr<GrammarMatcher> matcher;  // set when ready
    Status error;                             // request-level failure (e.g. work limit)
  };
  struct Job {
    std::string request_id;
    uint64_t serial = 0;
    std::string key;
    StructuredOutputsParams params;
    std::shared_ptr<GrammarEntry> entry;
  };

  VocabFactory make_vocab;
  StructuredOutputOptions options;

  // Vocabulary, built once.
  std::mutex vocab_mu;
  bool vocab_built = false;
  std::shared_ptr<const TokenVocabulary> vocab;
  Status vocab_error;

  mutable std::mutex mu;
  mutable std::condition_variable changed;  // a request or entry left kPending
  std::unordered_map<std::string, RequestState> requests;
  std::unordered_map<std::string, std::shared_ptr<GrammarEntry>> cache;
  std::deque<std::string> cache_order;  // insertion order, for eviction
  std::deque<Job> jobs;
  bool stopping = false;
  uint64_t next_serial = 1;
  StructuredOutputStats stats;
  std::vector<std::thread> workers;

  // Mask filling.
  std::unique_ptr<ThreadPool> mask_pool;
  std::mutex async_mu;
  std::condition_variable async_cv;
  std::deque<std::packaged_task<std::vector<Status>()>> async_jobs;
  bool async_stopping = false;
  std::thread async_thread;

  // Returns the vocabulary, building it on first use (on the calling thread).
  StatusOr<std::shared_ptr<const TokenVocabulary>> ensure_vocab() {
    std::lock_guard<std::mutex> lock(vocab_mu);
    if (!vocab_built) {
      auto v = make_vocab();
      if (v.ok()) {
        vocab = std::move(v).value();
      } else {
        vocab_error = v.status().with_context("structured outputs: building the token vocabulary");
      }
      vocab_built = true;
    }
    if (!vocab) return vocab_error;
    return vocab;
  }

  void worker_loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu);
        changed.wait(lock, [&] { return stopping || !jobs.empty(); });
        if (stopping) return;
        job = std::move(jobs.front());
        jobs.pop_front();
      }
      run_job(job);
    }
  }

  void run_job(const Job& job) {
    auto vocab_or = ensure_vocab();
    GrammarEntry& e = *job.entry;
    bool compile_here = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (e.state == StructuredOutputState::kPending && !e.compiling) {
        e.compiling = true;
        compile_here = true;
        ++stats.num_compiles;
      }
    }
    if (compile_here) {
      StatusOr<CompiledSpec> compiled = vocab_or.status();
      if (vocab_or.ok()) {
        // No exception may end a worker thread (it would terminate the process): report it.
        try {
          compiled = compile_spec(job.params);
        } catch (const std::exception& ex) {
          compiled = Internal(std::string("structured outputs: compiling threw: ") + ex.what());
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      if (compiled.ok()) {
        e.grammar = std::move(compiled->grammar);
        e.warnings = std::move(compiled->warnings);
        e.state = StructuredOutputState::kReady;
      } else {
        e.error = compiled.status();
        e.state = StructuredOutputState::kFailed;
        ++stats.num_failed;
      }
      e.compiling = false;
      changed.notify_all();
    } else {
      // Another worker compiles this spec: wait for it (only with several compile threads).
      std::unique_lock<std::mutex> lock(mu);
      changed.wait(lock, [&] { return stopping || e.state != StructuredOutputState::kPending; });
      if (stopping) return;
    }
    // Make the request's matcher outside the lock (its initial Earley set is real work).
    std::shared_ptr<GrammarMatcher> matcher;
    Status matcher_error;
    if (e.state == StructuredOutputState::kReady) {
      try {
        matcher = std::make_shared<GrammarMatcher>(e.grammar, *vocab_or, options.matcher);
      } catch (const std::exception& ex) {
        matcher_error =
            Internal(std::string("structured outputs: making the matcher threw: ") + ex.what());
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    auto it = requests.find(job.request_id);
    if (it != requests.end() && it->second.serial == job.serial) {
      it->second.matcher = std::move(matcher);
      if (!matcher_error.ok()) it->second.error = matcher_error;
    }
    changed.notify_all();
  }

  // Under `mu`.
  StructuredOutputStatus status_locked(const std::string& id) const {
    StructuredOutputStatus s;
    auto it = requests.find(id);
    if (it == requests.end()) {
      s.state = StructuredOutputState::kFailed;
      s.error = NotFound("structured outputs: request '" + id + "' was not submitted");
      return s;
    }
    const RequestState& r = it->second;
    const GrammarEntry& e = *r.entry;
    if (!r.error.ok()) {
      s.state = StructuredOutputState::kFailed;
      s.error = r.error;
    } else if (e.state == StructuredOutputState::kFailed) {
      s.state = StructuredOutputState::kFailed;
      s.error = e.error.with_context("request '" + id + "'");
    } else if (e.state == StructuredOutputState::kReady && r.matcher) {
      s.state = StructuredOutputState::kReady;
      s.warnings = e.warnings;
    } else {
      s.state = StructuredOutputState::kPending;
    }
    return s;
  }

  void evict_locked() {
    size_t scanned = 0;
    while (cache.size() > options.max_cached_grammars && scanned < cache_order.size()) {
      std::string key = std::move(cache_order.front());
      cache_order.pop_front();
      auto it = cache.find(key);
      if (it == cache.end()) continue;
      if (it->second->state == StructuredOutputState::kPending) {
        cache_order.push_back(std::move(key));  // still compiling: keep
        ++scanned;
        continue;
      }
      cache.erase(it);  // requests on it keep their shared_ptr
    }
  }

  std::vector<Status> fill(const std::vector<std::string>& ids, uint32_t* masks, size_t words) {
    std::vector<Status> out(ids.size());
    std::vector<std::shared_ptr<GrammarMatcher>> matchers(ids.size());
    {
      std::lock_guard<std::mutex> lock(mu);
      std::unordered_set<std::string> seen;
      for (size_t r = 0; r < ids.size(); ++r) {
        if (!seen.insert(ids[r]).second) {
          out[r] = InvalidArgument("structured outputs: request '" + ids[r] +
                                   "' appears twice in one fill_masks batch");
          continue;
        }
        StructuredOutputStatus s = status_locked(ids[r]);
        if (s.state == StructuredOutputState::kReady) {
          matchers[r] = requests.at(ids[r]).matcher;
        } else if (s.state == StructuredOutputState::kPending) {
          out[r] = FailedPrecondition("structured outputs: request '" + ids[r] +
                                      "' is still compiling its grammar");
        } else {
          out[r] = s.error;
        }
      }
    }
    auto fill_row = [&](size_t r) {
      uint32_t* row = masks + r * words;
      if (!matchers[r]) {
        std::fill(row, row + words, 0u);
        return;
      }
      Status st;
      try {
        st = matchers[r]->fill_mask(row, words);
      } catch (const std::exception& ex) {
        st = Internal(std::string("structured outputs: fill_mask threw: ") + ex.what());
      }
      if (!st.ok()) {
        std::fill(row, row + words, 0u);
        out[r] = st.with_context("request '" + ids[r] + "'");
      }
    };
    if (mask_pool && ids.size() > 1) {
      std::atomic<size_t> next{0};
      mask_pool->parallel_for(mask_pool->num_threads(), [&](int64_t, int64_t) {
        for (size_t r = next++; r < ids.size(); r = next++) fill_row(r);
      });
    } else {
      for (size_t r = 0; r < ids.size(); ++r) fill_row(r);
    }
    // A mask past the work limit fails the request (later status() calls say so).
    std::lock_guard<std::mutex> lock(mu);
    for (size_t r = 0; r < ids.size(); ++r) {
      if (matchers[r] && !out[r].ok()) {
        auto it = requests.find(ids[r]);
        if (it != requests.end() && it->second.matcher == matchers[r]) it->second.error = out[r];
      }
    }
    return out;
  }

  void async_loop() {
    for (;;) {
      std::packaged_task<std::vector<Status>()> task;
      {
        std::unique_lock<std::mutex> lock(async_mu);
        async_cv.wait(lock, [&] { return async_stopping || !async_jobs.empty(); });
        if (async_jobs.empty()) return;  // stopping, nothing left
        task = std::move(async_jobs.front());
        async_jobs.pop_front();
      }
      task();
    }
  }
};

StructuredOutputManager::StructuredOutputManager(VocabFactory make_vocab,
                                                 StructuredOutputOptions options)
    : impl_(std::make_unique<Impl>()) {
  DI_CHECK(make_vocab != nullptr) << "StructuredOutputManager needs a vocabulary factory";
  impl_->make_vocab = std::move(make_vocab);
  impl_->options = options;
  const int compile_threads = std::max(1, options.num_compile_threads);
  for (int i = 0; i < compile_threads; ++i) {
    impl_->workers.emplace_back([this] { impl_->worker_loop(); });
  }
  if (options.num_mask_threads > 1)
    impl_->mask_pool = std::make_unique<ThreadPool>(options.num_mask_threads);
}

std::unique_ptr<StructuredOutputManager> StructuredOutputManager::for_tokenizer(
    const tokenizer::Tokenizer& tok, int32_t logits_width, StructuredOutputOptions options) {
  const tokenizer::Tokenizer* t = &tok;
  return std::make_unique<StructuredOutputManager>(
      [t, logits_width] { return structured::vocab_from_tokenizer(*t, logits_width); }, options);
}

StructuredOutputManager::~StructuredOutputManager() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    impl_->jobs.clear();
  }
  impl_->changed.notify_all();
  for (auto& w : impl_->workers) w.join();
  if (impl_->async_thread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(impl_->async_mu);
      impl_->async_stopping = true;
    }
    impl_->async_cv.notify_all();
    impl_->async_thread.join();
  }
}

Status StructuredOutputManager::submit(const std::string& request_id,
                                       const StructuredOutputsParams& params) {
  DI_RETURN_IF_ERROR(params.validate().with_context("request '" + request_id + "'"));
  Impl& m = *impl_;
  std::string key = params.cache_key();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.requests.count(request_id)) {
      return InvalidArgument("structured outputs: request '" + request_id +
                             "' is already submitted");
    }
    std::shared_ptr<GrammarEntry>& slot = m.cache[key];
    if (slot) {
      ++m.stats.num_cache_hits;
    } else {
      slot = std::make_shared<GrammarEntry>();
      m.cache_order.push_back(key);
    }
    Impl::RequestState rs;
    rs.serial = m.next_serial++;
    rs.entry = slot;
    Impl::Job job{request_id, rs.serial, key, params, slot};
    m.requests.emplace(request_id, std::move(rs));
    m.jobs.push_back(std::move(job));
    m.evict_locked();
  }
  m.changed.notify_all();
  return OkStatus();
}

StructuredOutputStatus StructuredOutputManager::status(const std::string& request_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->status_locked(request_id);
}

bool StructuredOutputManager::has(const std::string& request_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->requests.count(request_id) != 0;
}

StructuredOutputStatus StructuredOutputManager::wait(const std::string& request_id) const {
  std::unique_lock<std::mutex> lock(impl_->mu);
  StructuredOutputStatus s;
  impl_->changed.wait(lock, [&] {
    s = impl_->status_locked(request_id);
    return s.state != StructuredOutputState::kPending || impl_->stopping;
  });
  return s;
}

size_t StructuredOutputManager::words_per_row() const {
  auto v = impl_->ensure_vocab();
  return v.ok() ? (*v)->bitmask_words() : 0;
}

std::vector<Status> StructuredOutputManager::fill_masks(std::span<const std::string> request_ids,
                                                        uint32_t* masks) {
  const size_t words = words_per_row();
  std::vector<std::string> ids(request_ids.begin(), request_ids.end());
  if (words == 0) {
    return std::vector<Status>(ids.size(), impl_->vocab_error);
  }
  return impl_->fill(ids, masks, words);
}

std::future<std::vector<Status>> StructuredOutputManager::fill_masks_async(
    std::vector<std::string> request_ids, uint32_t* masks) {
  Impl& m = *impl_;
  std::packaged_task<std::vector<Status>()> task(
      [this, ids = std::move(request_ids), masks] { return fill_masks(ids, masks); });
  auto future = task.get_future();
  {
    std::lock_guard<std::mutex> lock(m.async_mu);
    if (!m.async_thread.joinable()) m.async_thread = std::thread([&m] { m.async_loop(); });
    m.async_jobs.push_back(std::move(task));
  }
  m.async_cv.notify_all();
  return future;
}

Status StructuredOutputManager::accept(const std::string& request_id, int32_t token) {
  std::shared_ptr<GrammarMatcher> matcher;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    StructuredOutputStatus s = impl_->status_locked(request_id);
    if (s.state == StructuredOutputState::kPending) {
      return FailedPrecondition("structured outputs: request '" + request_id +
                                "' is still compiling");
    }
    if (s.state == StructuredOutputState::kFailed) return s.error;
    matcher = impl_->requests.at(request_id).matcher;
  }
  if (!matcher->accept_token(token)) {
    return InvalidArgument("structured outputs: token " + std::to_string(token) +
                           " is not allowed by the grammar of request '" + request_id + "'" +
                           (matcher->is_terminated() ? " (it already ended)" : ""));
  }
  return OkStatus();
}

Status StructuredOutputManager::rollback(const std::string& request_id, int n) {
  std::shared_ptr<GrammarMatcher> matcher;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->requests.find(request_id);
    if (it == impl_->requests.end() || !it->second.matcher) {
      return FailedPrecondition("structured outputs: request '" + request_id + "' has no matcher");
    }
    matcher = it->second.matcher;
  }
  if (n < 0 || n > matcher->num_accepted()) {
    return InvalidArgument("structured outputs: rollback(" + std::to_string(n) + ") of request '" +
                           request_id + "', which accepted " +
                           std::to_string(matcher->num_accepted()) + " tokens");
  }
  matcher->rollback(n);
  return OkStatus();
}

bool StructuredOutputManager::is_terminated(const std::string& request_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->requests.find(request_id);
  return it != impl_->requests.end() && it->second.matcher && it->second.matcher->is_terminated();
}

bool StructuredOutputManager::must_terminate(const std::string& request_id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->requests.find(request_id);
  return it != impl_->requests.end() && it->second.matcher && it->second.matcher->must_terminate();
}

void StructuredOutputManager::release(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->requests.erase(request_id);
}

StructuredOutputStats StructuredOutputManager::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

size_t StructuredOutputManager::num_requests() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->requests.size();
}

}  // namespace deepinfer::engine
