// The step pipeline of Engine (docs/engine.md §5): schedule (ahead, with placeholders, under async
// scheduling) → grammar masks + forward (worker thread) → sample → update → stop strings.
#include <algorithm>

#include "common/check.h"
#include "common/logging.h"
#include "engine/engine_impl.h"

namespace deepinfer {

using engine_internal::now_seconds;

engine::SchedulerOutput Engine::Impl::schedule() {
  engine::SchedulerOutput out = scheduler->schedule();
  executor->release(out.preempted_request_ids);
  return out;
}

void Engine::Impl::launch(engine::SchedulerOutput step) {
  if (structured) {
    MaskJob job;
    for (const auto& chunk : step.chunks) {
      if (!chunk.samples) continue;
      const engine::Request* req = scheduler->get_request(chunk.request_id);
      if (req != nullptr && req->params.structured_outputs) job.ids.push_back(chunk.request_id);
    }
    if (!job.ids.empty()) {
      // The tokens of every earlier step are accepted, so the masks are this step's; they are
      // computed while the forward runs.
      job.words = structured->words_per_row();
      job.masks.assign(job.ids.size() * job.words, 0u);
      job.statuses = structured->fill_masks_async(job.ids, job.masks.data());
      mask_job = std::move(job);
    }
  }
  std::vector<backend::SampleRowParams> sample_rows = device_sample_rows(step);
  executor->launch(std::move(step), std::move(sample_rows));
}

// Sampling on the device (docs/engine.md "Sampling on the device"): when every sampling row
// takes the sampler's plain path (sample::is_plain_row), the backend samples the step right
// after its forward with the exact inputs of the host path (seed, sequence index, output
// position of each chunk). Rows that do not sample, or whose request is gone (its token will be
// skipped), get greedy parameters. Otherwise no rows: the host sampler, as before.
std::vector<backend::SampleRowParams> Engine::Impl::device_sample_rows(
    const engine::SchedulerOutput& step) const {
  std::vector<backend::SampleRowParams> sample_rows;
  if (!config.device_sampling) return sample_rows;
  sample_rows.resize(step.chunks.size());
  for (size_t i = 0; i < step.chunks.size(); ++i) {
    const auto& chunk = step.chunks[i];
    backend::SampleRowParams& row = sample_rows[i];
    row.temperature = 0.0f;
    if (!chunk.samples) continue;
    const engine::Request* req = scheduler->get_request(chunk.request_id);
    if (req == nullptr || req->key != chunk.key) continue;
    if (!sample::is_plain_row(req->params, chunk.num_output_tokens)) return {};
    row.temperature = req->params.temperature;
    row.top_k = req->params.top_k;
    row.top_p = req->params.top_p;
    row.min_p = req->params.min_p;
    row.seed = chunk.seed;
    row.sequence_index = chunk.sequence_index;
    row.output_position = static_cast<uint32_t>(chunk.num_output_tokens);
  }
  return sample_rows;
}

// Token ids on the device (docs/engine.md "Token ids on the device"): `next` (scheduled while
// step N runs) is queued behind N at once, each placeholder token fed from N's sampled ids on the
// backend, when N was sampled there and no request of `next` has structured outputs (its mask
// needs N's token accepted first). Every placeholder must be a chunk's last token and belong to
// a chunk of N that samples for the same request. Returns false (nothing launched; `next` kept)
// when it cannot.
bool Engine::Impl::launch_fed(engine::SchedulerOutput& next) {
  if (!config.device_token_feedback || next.empty() || !executor->can_feed()) return false;
  const engine::SchedulerOutput& prev = executor->newest_step();
  std::unordered_map<std::string, int32_t> prev_row;  // request id -> its sampling chunk in N
  for (size_t j = 0; j < prev.chunks.size(); ++j)
    if (prev.chunks[j].samples) prev_row[prev.chunks[j].request_id] = static_cast<int32_t>(j);
  std::vector<int32_t> fed_rows(next.chunks.size(), -1);
  for (size_t i = 0; i < next.chunks.size(); ++i) {
    const engine::ScheduledChunk& c = next.chunks[i];
    const engine::Request* req = scheduler->get_request(c.request_id);
    if (req != nullptr && req->params.structured_outputs) return false;
    const auto placeholders =
        std::count(c.token_ids.begin(), c.token_ids.end(), engine::kPlaceholderToken);
    if (placeholders == 0) continue;
    if (placeholders > 1 || c.token_ids.back() != engine::kPlaceholderToken) return false;
    auto it = prev_row.find(c.request_id);
    if (it == prev_row.end() || prev.chunks[static_cast<size_t>(it->second)].key != c.key)
      return false;
    fed_rows[i] = it->second;
  }
  std::vector<backend::SampleRowParams> sample_rows = device_sample_rows(next);
  return executor->launch_fed(next, std::move(sample_rows), std::move(fed_rows));
}

void Engine::Impl::poll_grammars(std::vector<RequestOutput>* outputs) {
  std::vector<std::string> still;
  for (const auto& id : awaiting_grammar) {
    const engine::StructuredOutputStatus st = structured->status(id);
    if (st.state == engine::StructuredOutputState::kPending) {
      still.push_back(id);
    } else if (st.state == engine::StructuredOutputState::kReady) {
      scheduler->set_ready(id, true);
    } else if (auto req = scheduler->finish_request(id, sample::FinishReason::kError)) {
      req->error = st.error.to_string();  // names the request and the spec's problem
      finish_sequence(std::move(req), outputs);
    }
  }
  awaiting_grammar = std::move(still);
}

void Engine::Impl::release_grammar(const std::string& id) {
  if (mask_job) deferred_grammar_releases.push_back(id);
  else if (structured->has(id)) structured->release(id);
}

void Engine::Impl::fail_request(const std::string& id, kv::RequestKey key, const std::string& error,
                                std::vector<std::unique_ptr<engine::Request>>* finished) {
  const engine::Request* live = scheduler->get_request(id);
  if (live == nullptr || live->key != key) return;
  auto req = scheduler->finish_request(id, sample::FinishReason::kError);
  req->error = error;
  finished->push_back(std::move(req));
}

void Engine::Impl::fail_step(const engine::SchedulerOutput& step, const Status& error,
                             std::vector<std::unique_ptr<engine::Request>>* finished) {
  // A failure on validated inputs is an internal error: the requests of this batch fail with the
  // message; the engine goes on with the others.
  log_error("engine: step " + std::to_string(step.step) + " failed: " + error.to_string());
  for (const auto& chunk : step.chunks) {
    const engine::Request* live = scheduler->get_request(chunk.request_id);
    if (live == nullptr || live->key != chunk.key) continue;
    auto req = scheduler->finish_request(chunk.request_id, sample::FinishReason::kError);
    req->error = error.to_string();
    finished->push_back(std::move(req));
  }
}

void Engine::Impl::sample_and_update(const engine::StepResult& done,
                                     std::vector<std::unique_ptr<engine::Request>>* finished,
                                     std::vector<size_t>* sampled_chunks) {
  const engine::SchedulerOutput& sched = done.step;
  // This step's grammar masks (filled while its forward ran).
  std::optional<MaskJob> job = std::move(mask_job);
  mask_job.reset();
  std::unordered_map<std::string, size_t> mask_row;   // request id -> row of job->masks
  std::unordered_map<std::string, Status> mask_error;
  if (job) {
    const std::vector<Status> st = job->statuses.get();
    for (size_t r = 0; r < job->ids.size(); ++r) {
      if (st[r].ok()) mask_row[job->ids[r]] = r;
      else mask_error[job->ids[r]] = st[r];
    }
  }
  for (const auto& id : deferred_grammar_releases) {
    if (structured->has(id)) structured->release(id);
  }
  deferred_grammar_releases.clear();
  if (!done.logits.ok()) return fail_step(sched, done.logits.status(), finished);
  const backend::Tensor& logits = *done.logits;
  // Sampled on the device: every row took the plain path (no mask, no logprobs), ids per chunk.
  const bool device_sampled = done.sampled_ids.has_value();
  const int64_t V = device_sampled ? 0 : logits.dim(1);

  // One row per chunk that samples and whose request is still there (running, or preempted by the
  // step scheduled while this one ran: its token still counts). Aborted ones are skipped.
  std::vector<sample::SampleRow> rows;
  std::vector<size_t> row_chunk;
  for (size_t i = 0; i < sched.chunks.size(); ++i) {
    const auto& chunk = sched.chunks[i];
    if (!chunk.samples) continue;
    const engine::Request* req = scheduler->get_request(chunk.request_id);
    if (req == nullptr || req->key != chunk.key) continue;
    DI_CHECK(req->num_output_tokens() == chunk.num_output_tokens)
        << "request " << req->request_id << " samples output " << chunk.num_output_tokens << " but has "
        << req->num_output_tokens();
    sample::SampleRow row{&req->params, chunk.seed, chunk.sequence_index, req->prompt_token_ids,
                          req->output_token_ids, req->eos_token_id, {}};
    if (req->params.structured_outputs) {
      DI_CHECK(!device_sampled) << "request " << req->request_id
                                << " has structured outputs but its step was sampled on the device";
      if (auto e = mask_error.find(chunk.request_id); e != mask_error.end()) {
        fail_request(chunk.request_id, chunk.key, "structured_outputs: " + e->second.to_string(), finished);
        continue;
      }
      auto m = mask_row.find(chunk.request_id);
      if (m == mask_row.end()) {
        fail_request(chunk.request_id, chunk.key, "structured_outputs: no token mask for this step", finished);
        continue;
      }
      row.allowed_token_mask = {job->masks.data() + m->second * job->words, job->words};
      if (sample::first_allowed_token(row.allowed_token_mask, V) < 0) {  // else the sampler fails the batch
        fail_request(chunk.request_id, chunk.key, "structured_outputs: the grammar allows no token here", finished);
        continue;
      }
    }
    rows.push_back(row);
    row_chunk.push_back(i);
  }
  StatusOr<std::vector<sample::SampledToken>> sampled =
      std::vector<sample::SampledToken>(rows.size());
  if (device_sampled) {
    ++stats.num_device_sampled_steps;
    DI_CHECK(done.sampled_ids->size() == sched.chunks.size())
        << done.sampled_ids->size() << " sampled ids for " << sched.chunks.size() << " chunks";
    for (size_t r = 0; r < rows.size(); ++r) (*sampled)[r].token = (*done.sampled_ids)[row_chunk[r]];
  } else {
    std::vector<float> sample_logits(rows.size() * static_cast<size_t>(V));
    for (size_t r = 0; r < rows.size(); ++r) {
      const float* src = logits.data<float>() + row_chunk[r] * static_cast<size_t>(V);
      std::copy(src, src + V, sample_logits.begin() + static_cast<std::ptrdiff_t>(r * V));
    }
    sampled = sampler.sample(sample_logits, V, rows);
    if (!sampled.ok()) return fail_step(sched, sampled.status(), finished);
  }
  std::vector<int32_t> tokens(sched.chunks.size(), 0);
  for (size_t r = 0; r < rows.size(); ++r) tokens[row_chunk[r]] = (*sampled)[r].token;
  // Constrained rows: the grammar advances by the sampled token (EOS included).
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].allowed_token_mask.empty()) continue;
    const auto& chunk = sched.chunks[row_chunk[r]];
    const Status st = structured->accept(chunk.request_id, tokens[row_chunk[r]]);
    if (!st.ok()) fail_request(chunk.request_id, chunk.key, "structured_outputs: " + st.to_string(), finished);
  }

  const double t = now_seconds();
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& chunk = sched.chunks[row_chunk[r]];
    auto it = sequences.find(chunk.request_id);
    if (it == sequences.end()) continue;
    if (it->second.first_token_time == 0) it->second.first_token_time = t;
    const auto& s = (*sampled)[r];
    if (rows[r].params->logprobs) {
      TokenLogprobs lp{s.token, s.logprob.value_or(0.f), s.rank, {}};
      for (const auto& e : s.top_logprobs) lp.top_logprobs.emplace_back(e.token, e.logprob);
      it->second.logprobs.push_back(std::move(lp));
    }
  }
  for (const auto& chunk : sched.chunks) {
    const engine::Request* req = scheduler->get_request(chunk.request_id);
    const int64_t prompt_end = req ? req->num_prompt_tokens() : 0;
    stats.num_prompt_tokens +=
        std::max<int64_t>(0, std::min(chunk.start_position + chunk.num_tokens, prompt_end) -
                                 chunk.start_position);
  }
  stats.num_generated_tokens += static_cast<int64_t>(rows.size());

  auto done_now = scheduler->update_from_output(sched, tokens);
  for (auto& r : done_now) finished->push_back(std::move(r));
  *sampled_chunks = std::move(row_chunk);
}

void Engine::Impl::check_stop_strings(const engine::SchedulerOutput& step,
                                      const std::vector<size_t>& sampled,
                                      std::vector<std::unique_ptr<engine::Request>>* finished) {
  for (size_t i : sampled) {
    const auto& chunk = step.chunks[i];
    const engine::Request* req = scheduler->get_request(chunk.request_id);
    if (req == nullptr || req->key != chunk.key) continue;  // finished by a token stop, or aborted
    if (req->params.stop.empty()) continue;
    auto it = sequences.find(chunk.request_id);
    if (it == sequences.end()) continue;
    auto update = it->second.checker.update(req->output_token_ids);
    if (!update.stopped) continue;
    // Under async scheduling its next step may already be running: that token is dropped
    // (update_from_output skips finished requests), as it would never have been computed.
    auto done = scheduler->finish_request(chunk.request_id, sample::FinishReason::kStop);
    if (done) {
      done->stop_string = update.stop_string;
      finished->push_back(std::move(done));
    }
  }
}

StatusOr<std::vector<RequestOutput>> Engine::step() {
  Impl& m = *impl_;
  std::vector<RequestOutput> outputs = std::move(m.pending_outputs);
  m.pending_outputs.clear();
  if (!m.awaiting_grammar.empty()) m.poll_grammars(&outputs);
  if (!m.executor->in_flight()) {
    engine::SchedulerOutput first = m.schedule();
    if (first.empty()) {
      // Nothing can run but grammars are compiling: wait for one instead of spinning.
      if (outputs.empty() && !m.awaiting_grammar.empty()) m.structured->wait(m.awaiting_grammar.front());
      return outputs;
    }
    m.launch(std::move(first));
  }
  // Step N's forward is running. With async scheduling, step N+1 is scheduled and its inputs built
  // now, each decoding request's next token being a placeholder for the one step N samples.
  std::optional<engine::SchedulerOutput> next;
  if (m.config.async_scheduling) next = m.schedule();
  // Token ids on the device: N+1 queued behind N before N's ids reach the host (its requests that
  // finish with N's token are skipped when N+1's tokens come back).
  if (next && m.launch_fed(*next)) {
    ++m.stats.num_fed_steps;
    next.reset();
  }
  engine::StepResult done = m.executor->wait();
  ++m.stats.num_steps;
  std::vector<std::unique_ptr<engine::Request>> finished;
  std::vector<size_t> sampled;
  m.sample_and_update(done, &finished, &sampled);
  if (m.expert_parallel && m.expert_parallel->eplb) {
    // Between two forwards (EPLB turns async scheduling off): may re-place experts.
    Status st = m.expert_parallel->eplb->after_step();
    if (!st.ok()) return st.with_context("EPLB after step " + std::to_string(m.stats.num_steps));
    m.stats.num_eplb_rebalances = m.expert_parallel->eplb->num_rebalances();
  }
  if (next) {
    // Step N's tokens replace the placeholders; requests that just finished leave the batch.
    m.scheduler->fill_placeholders(&*next);
    if (!next->empty()) m.launch(std::move(*next));
  }
  // Step N+1 runs (async) while step N's outputs are detokenized, checked and reported.
  m.check_stop_strings(done.step, sampled, &finished);
  for (auto& req : finished) {
    auto it = m.sequences.find(req->request_id);
    if (it != m.sequences.end() && !it->second.checker.matcher().stopped()) {
      it->second.checker.update(req->output_token_ids);
    }
    m.finish_sequence(std::move(req), &outputs);
  }
  m.stats.num_preemptions = static_cast<int64_t>(m.scheduler->num_preemptions());
  return outputs;
}

}  // namespace deepinfer
