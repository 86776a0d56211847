#include "engine/scheduler.h"

#include <algorithm>
#include <sstream>

#include "common/check.h"
#include "sample/rng.h"

namespace deepinfer::engine {
namespace {

bool before_in_priority(const Request* a, const Request* b) {  // a is served before b
  if (a->priority != b->priority) return a->priority < b->priority;
  return a->arrival_index < b->arrival_index;
}

}  // namespace

Status SchedulerConfig::validate() const {
  if (max_num_seqs < 1) return InvalidArgument("max_num_seqs must be at least 1, got " + std::to_string(max_num_seqs));
  if (max_num_batched_tokens < 1) {
    return InvalidArgument("max_num_batched_tokens must be at least 1, got " + std::to_string(max_num_batched_tokens));
  }
  if (max_model_len < 1) return InvalidArgument("max_model_len must be at least 1, got " + std::to_string(max_model_len));
  if (!enable_chunked_prefill && max_num_batched_tokens < max_model_len) {
    return InvalidArgument("without chunked prefill, max_num_batched_tokens (" + std::to_string(max_num_batched_tokens) +
                           ") must be >= max_model_len (" + std::to_string(max_model_len) +
                           ") or long prompts could never be scheduled");
  }
  return OkStatus();
}

Scheduler::Scheduler(const SchedulerConfig& config, kv::KvCacheCoordinator* kv) : config_(config), kv_(kv) {
  const Status s = config.validate();
  DI_CHECK(s.ok()) << s.to_string();
  DI_CHECK(kv != nullptr) << "Scheduler needs a KV cache coordinator";
}

Status Scheduler::add_request(std::unique_ptr<Request> request) {
  DI_CHECK(request != nullptr) << "null request";
  Request& r = *request;
  auto fail = [&](const std::string& what) { return InvalidArgument("request '" + r.request_id + "': " + what); };
  if (r.request_id.empty()) return InvalidArgument("request id must not be empty");
  if (requests_.count(r.request_id) != 0) return fail("a request with this id is already queued or running");
  const Status params_ok =
      config_.vocab_size > 0 ? r.params.validate_for_vocab(config_.vocab_size) : r.params.validate();
  if (!params_ok.ok()) return fail(params_ok.message());
  if (r.prompt_token_ids.empty()) return fail("the prompt is empty; at least one token is needed");
  if (r.num_prompt_tokens() > config_.max_model_len) {
    return fail("the prompt has " + std::to_string(r.num_prompt_tokens()) +
                " tokens, more than max_model_len = " + std::to_string(config_.max_model_len));
  }
  if (config_.vocab_size > 0) {
    for (size_t i = 0; i < r.prompt_token_ids.size(); ++i) {
      const int32_t t = r.prompt_token_ids[i];
      if (t < 0 || t >= config_.vocab_size) {
        return fail("prompt token " + std::to_string(i) + " is " + std::to_string(t) + ", outside the vocabulary [0, " +
                    std::to_string(config_.vocab_size) + ")");
      }
    }
  }
  // The longest this request can get: computed tokens never exceed max_model_len.
  int64_t longest = config_.max_model_len;
  if (r.params.max_tokens.has_value()) longest = std::min(longest, r.num_prompt_tokens() + *r.params.max_tokens - 1);
  longest = std::max(longest, r.num_prompt_tokens());
  const Status fits = kv_->check_can_ever_fit(longest, config_.max_num_batched_tokens);
  if (!fits.ok()) return ResourceExhausted("request '" + r.request_id + "': " + fits.message());

  r.arrival_index = next_arrival_++;
  r.key = r.arrival_index;
  r.seed = r.params.seed.has_value() ? *r.params.seed : sample::derive_request_seed(config_.seed, r.arrival_index);
  r.status = RequestStatus::kWaiting;
  r.num_computed_tokens = 0;
  waiting_.push_back(&r);
  requests_.emplace(r.request_id, std::move(request));
  return OkStatus();
}

std::deque<Request*>::iterator Scheduler::next_waiting() {
  // A request that is not ready (its grammar still compiling) is passed over; the others are not
  // held up by it.
  const auto ready = [](const Request* r) { return r->ready; };
  if (config_.policy == SchedulingPolicy::kFcfs) return std::find_if(waiting_.begin(), waiting_.end(), ready);
  auto best = waiting_.end();
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->ready && (best == waiting_.end() || before_in_priority(*it, *best))) best = it;
  }
  return best;
}

bool Scheduler::set_ready(const std::string& request_id, bool ready) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  DI_CHECK(ready || it->second->status == RequestStatus::kWaiting)
      << "only a request that was never admitted can be held back; " << request_id << " is "
      << request_status_name(it->second->status);
  it->second->ready = ready;
  return true;
}

Request* Scheduler::pick_victim() {
  DI_CHECK(!running_.empty()) << "no running request to preempt";
  if (config_.policy == SchedulingPolicy::kFcfs) return running_.back();
  return *std::max_element(running_.begin(), running_.end(), before_in_priority);
}

void Scheduler::preempt(Request* victim) {
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  kv_->free(victim->key);
  victim->status = RequestStatus::kPreempted;
  victim->num_computed_tokens = 0;
  ++victim->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(victim);
}

ScheduledChunk Scheduler::make_chunk(const Request& r, int64_t n, bool first) const {
  ScheduledChunk c;
  c.request_id = r.request_id;
  c.key = r.key;
  c.start_position = r.num_computed_tokens;
  c.num_tokens = n;
  c.token_ids.reserve(static_cast<size_t>(n));
  for (int64_t p = c.start_position; p < c.start_position + n; ++p) {
    c.token_ids.push_back(p < r.num_tokens() ? r.token_at(p) : kPlaceholderToken);
  }
  c.samples = c.start_position + n == r.num_tokens_with_placeholders();
  c.is_first_chunk = first;
  c.seed = r.seed;
  c.sequence_index = r.sequence_index;
  // Output position of the token this chunk samples (placeholders included).
  c.num_output_tokens = c.samples ? c.start_position + n - r.num_prompt_tokens() : r.num_output_tokens();
  c.block_tables = kv_->block_tables(r.key);
  return c;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  out.step = next_step_++;
  out.finished_request_ids = std::move(finished_since_last_step_);
  finished_since_last_step_.clear();
  int64_t budget = config_.max_num_batched_tokens;
  // Scheduled running requests: key -> tokens (chunks are built at the end, when tables are final).
  std::vector<std::pair<Request*, int64_t>> scheduled;

  // 1. Running requests.
  const std::vector<Request*> order = running_;
  for (Request* r : order) {
    if (budget == 0) break;
    if (r->status != RequestStatus::kRunning) continue;  // preempted earlier in this step
    if (will_finish_by_length(*r)) continue;  // its in-flight token is its last one
    const int64_t n = std::min({r->num_tokens_with_placeholders() - r->num_computed_tokens, budget,
                                config_.max_model_len - r->num_computed_tokens});
    if (n <= 0) continue;
    bool allocated = false;
    while (!(allocated = kv_->allocate_slots(r->key, r->num_computed_tokens, n))) {
      Request* victim = pick_victim();
      auto it = std::find_if(scheduled.begin(), scheduled.end(), [&](const auto& s) { return s.first == victim; });
      if (it != scheduled.end()) {  // priority policy: may already hold a share of this step
        budget += it->second;
        scheduled.erase(it);
      }
      out.preempted_request_ids.push_back(victim->request_id);
      preempt(victim);
      if (victim == r) break;
    }
    if (!allocated) continue;
    scheduled.emplace_back(r, n);
    budget -= n;
  }

  // 2. Waiting requests, unless this step already had to preempt.
  std::vector<std::pair<Request*, int64_t>> admitted;
  if (out.preempted_request_ids.empty()) {
    while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < config_.max_num_seqs) {
      auto it = next_waiting();
      if (it == waiting_.end()) break;  // only requests that are not ready wait
      Request* r = *it;
      // Preempted while its last token was in flight: it waits until that token is known.
      if (r->num_output_placeholders > 0) break;
      int64_t n = std::min(r->num_tokens() - r->num_computed_tokens, config_.max_model_len - r->num_computed_tokens);
      if (!config_.enable_chunked_prefill && n > budget) break;
      n = std::min(n, budget);
      if (!kv_->allocate_slots(r->key, r->num_computed_tokens, n)) {
        kv_->free(r->key);  // allocate_slots may have created empty tables
        break;
      }
      waiting_.erase(it);
      r->status = RequestStatus::kRunning;
      running_.push_back(r);
      admitted.emplace_back(r, n);
      budget -= n;
    }
  }

  for (const auto& [r, n] : scheduled) out.chunks.push_back(make_chunk(*r, n, /*first=*/r->num_computed_tokens == 0));
  for (const auto& [r, n] : admitted) out.chunks.push_back(make_chunk(*r, n, /*first=*/true));
  // The scheduled tokens count as computed from now on (their state is being computed), and every
  // chunk that samples leaves a placeholder until its token is known (update_from_output).
  for (const ScheduledChunk& c : out.chunks) {
    out.total_num_scheduled_tokens += c.num_tokens;
    Request* r = requests_.at(c.request_id).get();
    r->num_computed_tokens += c.num_tokens;
    if (c.samples) ++r->num_output_placeholders;
  }
  return out;
}

std::vector<std::unique_ptr<Request>> Scheduler::update_from_output(const SchedulerOutput& output,
                                                                    std::span<const int32_t> sampled_token_ids) {
  DI_CHECK(sampled_token_ids.size() == output.chunks.size())
      << "sampled " << sampled_token_ids.size() << " tokens for " << output.chunks.size() << " chunks";
  std::vector<std::unique_ptr<Request>> finished;
  for (size_t i = 0; i < output.chunks.size(); ++i) {
    const ScheduledChunk& c = output.chunks[i];
    auto it = requests_.find(c.request_id);
    if (it == requests_.end() || it->second->key != c.key) continue;  // finished or aborted meanwhile
    Request* r = it->second.get();
    if (c.samples) {
      // Also for a request preempted while this step ran (async scheduling): the token is valid
      // and joins what it recomputes.
      DI_CHECK(r->num_output_placeholders > 0) << "request " << r->request_id << " got a token it did not wait for";
      --r->num_output_placeholders;
      r->output_token_ids.push_back(sampled_token_ids[i]);
      const sample::TokenStopResult stop = sample::check_token_stop(
          r->params, r->output_token_ids, r->num_tokens(), r->eos_token_id, config_.max_model_len);
      if (stop.finished()) {
        r->stop_token = stop.stop_token;
        r->status = stop.reason == sample::FinishReason::kStop ? RequestStatus::kFinishedStopped
                                                               : RequestStatus::kFinishedLength;
        finished_since_last_step_.push_back(r->request_id);
        finished.push_back(remove(r));
        continue;
      }
    }
    // Window rows below this chunk's end minus the window are dead for every later step.
    if (r->status == RequestStatus::kRunning) kv_->free_skipped_blocks(r->key, c.start_position + c.num_tokens);
  }
  return finished;
}

void Scheduler::fill_placeholders(SchedulerOutput* next) const {
  std::vector<ScheduledChunk> kept;
  kept.reserve(next->chunks.size());
  next->total_num_scheduled_tokens = 0;
  for (ScheduledChunk& c : next->chunks) {
    const Request* r = get_request(c.request_id);
    // Finished (a token stop of the previous step, an abort, a stop string): its slots are already
    // back in the pool and its chunk is dropped. Preemption only happens inside schedule(), so a
    // request that still exists with the same key is running.
    if (r == nullptr || r->key != c.key) continue;
    DI_CHECK(r->status == RequestStatus::kRunning) << "request " << r->request_id << " is " << request_status_name(r->status);
    for (size_t j = 0; j < c.token_ids.size(); ++j) {
      if (c.token_ids[j] != kPlaceholderToken) continue;
      const int64_t p = c.start_position + static_cast<int64_t>(j);
      DI_CHECK(p < r->num_tokens()) << "request " << r->request_id << ": token at position " << p
                                    << " is still unknown";
      c.token_ids[j] = r->token_at(p);
    }
    next->total_num_scheduled_tokens += c.num_tokens;
    kept.push_back(std::move(c));
  }
  next->chunks = std::move(kept);
}

bool Scheduler::will_finish_by_length(const Request& r) const {
  if (r.num_output_placeholders == 0) return false;
  if (r.num_tokens_with_placeholders() >= config_.max_model_len) return true;
  return r.params.max_tokens.has_value() &&
         r.num_output_tokens() + r.num_output_placeholders >= *r.params.max_tokens;
}

std::unique_ptr<Request> Scheduler::remove(Request* r) {
  kv_->free(r->key);
  if (auto it = std::find(running_.begin(), running_.end(), r); it != running_.end()) running_.erase(it);
  if (auto it = std::find(waiting_.begin(), waiting_.end(), r); it != waiting_.end()) waiting_.erase(it);
  auto node = requests_.extract(r->request_id);
  return std::move(node.mapped());
}

std::unique_ptr<Request> Scheduler::finish_request(const std::string& request_id, sample::FinishReason reason) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return nullptr;
  Request* r = it->second.get();
  switch (reason) {
    case sample::FinishReason::kStop: r->status = RequestStatus::kFinishedStopped; break;
    case sample::FinishReason::kLength: r->status = RequestStatus::kFinishedLength; break;
    case sample::FinishReason::kError: r->status = RequestStatus::kFinishedError; break;
    default: r->status = RequestStatus::kFinishedAborted; break;
  }
  finished_since_last_step_.push_back(request_id);
  return remove(r);
}

const Request* Scheduler::get_request(const std::string& request_id) const {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

std::vector<std::string> Scheduler::waiting_ids() const {
  std::vector<std::string> ids;
  for (const Request* r : waiting_) ids.push_back(r->request_id);
  return ids;
}

std::vector<std::string> Scheduler::running_ids() const {
  std::vector<std::string> ids;
  for (const Request* r : running_) ids.push_back(r->request_id);
  return ids;
}

Status Scheduler::check_invariants() const {
  if (static_cast<int>(running_.size()) > config_.max_num_seqs) return Internal("more running requests than max_num_seqs");
  if (running_.size() + waiting_.size() != requests_.size()) {
    return Internal("request map holds " + std::to_string(requests_.size()) + " requests, queues " +
                    std::to_string(running_.size() + waiting_.size()));
  }
  std::unordered_map<kv::RequestKey, const Request*> by_key;
  for (const Request* r : running_) {
    if (r->status != RequestStatus::kRunning) return Internal("request " + r->request_id + " in running queue is " + request_status_name(r->status));
    by_key[r->key] = r;
    const int64_t covered = r->num_computed_tokens;
    if (covered > r->num_tokens_with_placeholders() || covered > config_.max_model_len) {
      return Internal("request " + r->request_id + " covers " + std::to_string(covered) + " tokens, has " +
                      std::to_string(r->num_tokens_with_placeholders()));
    }
    for (kv::StateKind kind : kv::kAllStateKinds) {
      const kv::StateManager* m = kv_->manager(kind);
      if (!m) continue;
      if (static_cast<int64_t>(m->table(r->key).size()) != m->table_length(covered)) {
        return Internal("request " + r->request_id + ": '" + kv::state_kind_name(kind) + "' table has " +
                        std::to_string(m->table(r->key).size()) + " entries, " + std::to_string(covered) +
                        " tokens need " + std::to_string(m->table_length(covered)));
      }
    }
  }
  for (const Request* r : waiting_) {
    if (r->status != RequestStatus::kWaiting && r->status != RequestStatus::kPreempted) {
      return Internal("request " + r->request_id + " in waiting queue is " + request_status_name(r->status));
    }
    if (r->num_computed_tokens != 0) return Internal("waiting request " + r->request_id + " has computed tokens");
  }
  for (kv::StateKind kind : kv::kAllStateKinds) {
    const kv::StateManager* m = kv_->manager(kind);
    if (!m) continue;
    for (const auto& [key, table] : m->tables()) {
      if (by_key.count(key) == 0) {
        std::ostringstream os;
        os << "'" << kv::state_kind_name(kind) << "' table of request key " << key << " belongs to no running request";
        return Internal(os.str());
      }
    }
  }
  return kv_->check_integrity();
}

}  // namespace deepinfer::engine
