// Engine: schedule → execute → sample → update. See include/deepinfer/engine.h.
#include "deepinfer/engine.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <unordered_map>

#include "common/check.h"
#include "common/env.h"
#include "common/logging.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "io/config.h"
#include "io/hub.h"
#include "kv/coordinator.h"
#include "kv/pool_sizing.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "sample/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

namespace {

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Cache dimensions of a model: DeepSeek-V4 keeps one D-wide row per token (K = V) plus compressed
// state; a Llama layer keeps K and V of every kv head under full attention.
kv::KvModelDims kv_dims_of(const io::ModelConfig& config) {
  kv::KvModelDims d;
  d.kv_bytes_per_value = 4;  // the CPU backend keeps fp32 state
  if (config.is_deepseek_v4()) {
    const auto& c = config.deepseek_v4();
    d.num_layers = static_cast<int>(c.num_hidden_layers);
    d.head_dim = static_cast<int>(c.head_dim);
    d.sliding_window = static_cast<int>(c.sliding_window);
    d.num_csa_layers = static_cast<int>(c.num_layers_of(io::AttentionType::kCompressedSparse));
    d.num_hca_layers = static_cast<int>(c.num_layers_of(io::AttentionType::kHeavilyCompressed));
    d.csa_compress_rate = static_cast<int>(c.compress_rate_csa);
    d.hca_compress_rate = static_cast<int>(c.compress_rate_hca);
    d.index_head_dim = static_cast<int>(c.index_head_dim);
  } else {
    const auto& c = config.llama();
    d.num_layers = static_cast<int>(c.num_hidden_layers);
    d.head_dim = static_cast<int>(2 * c.num_key_value_heads * c.head_dim);
    d.sliding_window = 0;
  }
  return d;
}

int64_t max_position_embeddings(const io::ModelConfig& config) {
  return config.is_deepseek_v4() ? config.deepseek_v4().max_position_embeddings
                                 : config.llama().max_position_embeddings;
}

// One sequence of a user request, tracked from add to finish.
struct Sequence {
  std::string parent_id;
  int index = 0;
  sample::DetokenizingStopChecker checker;
  std::vector<TokenLogprobs> logprobs;
  double first_token_time = 0;
};

// A user request: its n sequences and what has been reported.
struct Group {
  std::vector<int32_t> prompt_token_ids;
  std::vector<std::optional<CompletionOutput>> done;  // per sequence index
  int num_done = 0;
  RequestMetrics metrics;
};

}  // namespace

Status EngineConfig::validate() const {
  if (max_num_seqs < 1) return InvalidArgument("max_num_seqs must be >= 1, got " + std::to_string(max_num_seqs));
  if (max_num_batched_tokens < 1) {
    return InvalidArgument("max_num_batched_tokens must be >= 1, got " +
                           std::to_string(max_num_batched_tokens));
  }
  if (max_model_len < 0) return InvalidArgument("max_model_len must be >= 0 (0 = the model's), got " + std::to_string(max_model_len));
  if (kv_cache_memory <= 0) return InvalidArgument("kv_cache_memory must be > 0 bytes");
  if (device != "cpu") {
    return Unimplemented("device '" + device +
                         "': only the CPU backend runs whole models so far (the CUDA backend "
                         "passes its op tests; the model on the GPU is not wired yet)");
  }
  return OkStatus();
}

struct Engine::Impl {
  EngineConfig config;
  std::string model_dir;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::unique_ptr<kv::KvCacheCoordinator> kv;
  std::unique_ptr<engine::Scheduler> scheduler;
  std::unique_ptr<engine::ModelRunner> runner;
  sample::Sampler sampler;
  int32_t eos_token_id = -1;
  std::unordered_map<std::string, Sequence> sequences;  // by internal (scheduler) request id
  std::map<std::string, Group> groups;                  // by user request id
  std::vector<RequestOutput> pending_outputs;           // finished outside step() (aborts)
  EngineStats stats;

  void finish_sequence(std::unique_ptr<engine::Request> request, std::vector<RequestOutput>* out);
  // Output text in the context of the prompt's last tokens, as vLLM's incremental detokenizer
  // does: decode(context + ids) minus decode(context). Decoding the output alone would lose what
  // a decoder does at the start of a text (e.g. SentencePiece drops the first token's space).
  std::string detokenize(std::span<const int32_t> context, std::span<const int32_t> ids,
                         bool skip_special) const {
    if (!tokenizer) return std::string();
    std::vector<int32_t> all(context.begin(), context.end());
    all.insert(all.end(), ids.begin(), ids.end());
    const std::string prefix = tokenizer->decode(context, skip_special);
    std::string text = tokenizer->decode(all, skip_special);
    if (text.compare(0, prefix.size(), prefix) == 0) return text.substr(prefix.size());
    return tokenizer->decode(ids, skip_special);
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

StatusOr<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config) {
  DI_RETURN_IF_ERROR(config.validate());
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  DI_ASSIGN_OR_RETURN(impl->model_dir, io::resolve_model(config.model, env()));
  DI_ASSIGN_OR_RETURN(io::ModelConfig model_config, io::load_model_config(impl->model_dir));
  impl->backend = backend::make_cpu_backend();
  DI_ASSIGN_OR_RETURN(impl->model, model::load_model(impl->model_dir, impl->backend.get()));
  const std::string tok_dir = config.tokenizer.empty() ? impl->model_dir : config.tokenizer;
  DI_ASSIGN_OR_RETURN(impl->tokenizer, tokenizer::Tokenizer::from_dir(tok_dir));
  const auto& info = impl->model->info();
  if (!info.eos_token_ids.empty()) impl->eos_token_id = static_cast<int32_t>(info.eos_token_ids[0]);
  if (!impl->tokenizer->eos_ids().empty()) impl->eos_token_id = impl->tokenizer->eos_ids()[0];

  engine::SchedulerConfig sc;
  sc.max_num_seqs = config.max_num_seqs;
  sc.max_num_batched_tokens = config.max_num_batched_tokens;
  sc.max_model_len = config.max_model_len > 0 ? config.max_model_len : max_position_embeddings(model_config);
  sc.seed = config.seed;
  sc.vocab_size = info.vocab_size;
  DI_RETURN_IF_ERROR(sc.validate());

  const kv::KvModelDims dims = kv_dims_of(model_config);
  kv::KvCacheConfig kv_config;
  kv_config.window_block_size = config.block_size;
  kv_config.csa_entries_per_block = config.compressed_entries_per_block;
  kv_config.hca_entries_per_block = config.compressed_entries_per_block;
  DI_RETURN_IF_ERROR(kv_config.validate());
  kv::KvBudget budget{config.kv_cache_memory, sc.max_model_len, sc.max_num_seqs,
                      sc.max_num_batched_tokens};
  auto plan = kv::plan_kv_pools(dims, kv_config, budget);
  if (!plan.ok()) {
    return plan.status().with_context(
        "the KV cache budget (--kv-cache-memory " + std::to_string(config.kv_cache_memory) +
        " bytes) cannot hold one sequence of max_model_len " + std::to_string(sc.max_model_len) +
        "; raise --kv-cache-memory or lower --max-model-len");
  }
  DI_ASSIGN_OR_RETURN(impl->kv, kv::KvCacheCoordinator::create(dims, kv_config, plan->sizes));
  impl->stats.kv_summary = plan->summary();
  impl->scheduler = std::make_unique<engine::Scheduler>(sc, impl->kv.get());
  impl->runner = std::make_unique<engine::ModelRunner>(impl->model.get());
  log_info("engine: model " + impl->model_dir + " (" + info.family + ", " +
           std::to_string(info.num_layers) + " layers), max_model_len " +
           std::to_string(sc.max_model_len) + ", kv " + plan->summary());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Status Engine::add_request(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                           const SamplingParams& params, int priority) {
  Impl& m = *impl_;
  if (m.groups.count(request_id)) {
    return InvalidArgument("request id '" + request_id + "' is already in use");
  }
  DI_RETURN_IF_ERROR(params.validate().with_context("request '" + request_id + "'"));
  const int n = params.n;
  Group group;
  group.prompt_token_ids = prompt_token_ids;
  group.done.resize(static_cast<size_t>(n));
  group.metrics.arrival_time = now_seconds();
  std::vector<std::string> added;
  for (auto& req : engine::make_sequence_requests(request_id, prompt_token_ids, params,
                                                  m.eos_token_id, priority)) {
    const std::string id = req->request_id;
    const int index = static_cast<int>(req->sequence_index);
    Status st = m.scheduler->add_request(std::move(req));
    if (!st.ok()) {
      for (const auto& a : added) {
        m.scheduler->abort_request(a);
        m.sequences.erase(a);
      }
      return st;
    }
    const bool skip = params.skip_special_tokens, detok = params.detokenize;
    constexpr size_t kContextTokens = 5;
    std::vector<int32_t> context(
        prompt_token_ids.end() - static_cast<std::ptrdiff_t>(std::min(kContextTokens, prompt_token_ids.size())),
        prompt_token_ids.end());
    m.sequences.emplace(
        id, Sequence{request_id, index,
                     sample::DetokenizingStopChecker(
                         params, [this, skip, detok, context](std::span<const int32_t> ids) {
                           return detok ? impl_->detokenize(context, ids, skip) : std::string();
                         }),
                     {}, 0});
    added.push_back(id);
  }
  m.groups.emplace(request_id, std::move(group));
  return OkStatus();
}

Status Engine::add_request(const std::string& request_id, const std::string& prompt,
                           const SamplingParams& params, int priority) {
  auto ids = impl_->tokenizer->encode(prompt, /*add_special_tokens=*/true);
  if (!ids.ok()) return ids.status().with_context("request '" + request_id + "': tokenizing the prompt");
  return add_request(request_id, std::move(ids).value(), params, priority);
}

void Engine::Impl::finish_sequence(std::unique_ptr<engine::Request> request,
                                   std::vector<RequestOutput>* out) {
  auto it = sequences.find(request->request_id);
  if (it == sequences.end()) return;
  Sequence& seq = it->second;
  Group& group = groups[seq.parent_id];
  CompletionOutput c;
  c.index = seq.index;
  c.token_ids = request->output_token_ids;
  seq.checker.matcher().flush();
  c.text = seq.checker.matcher().text();
  const sample::FinishReason reason = engine::finish_reason_of(request->status);
  c.finish_reason = sample::finish_reason_name(reason);
  if (!request->stop_string.empty()) c.stop_reason = request->stop_string;
  else if (request->stop_token) c.stop_reason = std::to_string(*request->stop_token);
  c.logprobs = std::move(seq.logprobs);
  if (seq.first_token_time > 0 &&
      (group.metrics.first_token_time == 0 || seq.first_token_time < group.metrics.first_token_time)) {
    group.metrics.first_token_time = seq.first_token_time;
  }
  group.metrics.num_preemptions += request->num_preemptions;
  std::string error = request->error;
  group.done[static_cast<size_t>(seq.index)] = std::move(c);
  ++group.num_done;
  const std::string parent = seq.parent_id;
  sequences.erase(it);
  runner->release({request->request_id});
  if (group.num_done == static_cast<int>(group.done.size())) {
    RequestOutput r;
    r.request_id = parent;
    r.prompt_token_ids = std::move(group.prompt_token_ids);
    for (auto& d : group.done) r.outputs.push_back(std::move(*d));
    r.finished = true;
    r.error = error;
    r.metrics = group.metrics;
    r.metrics.finished_time = now_seconds();
    groups.erase(parent);
    out->push_back(std::move(r));
  }
}

StatusOr<std::vector<RequestOutput>> Engine::step() {
  Impl& m = *impl_;
  std::vector<RequestOutput> outputs = std::move(m.pending_outputs);
  m.pending_outputs.clear();
  engine::SchedulerOutput sched = m.scheduler->schedule();
  m.runner->release(sched.preempted_request_ids);
  if (sched.empty()) return outputs;
  ++m.stats.num_steps;

  auto logits_or = m.runner->execute(sched);
  if (!logits_or.ok()) {
    // A forward that fails on validated inputs is an internal error: the requests of this batch
    // fail with the message; the engine goes on with the others.
    log_error("engine: forward failed: " + logits_or.status().to_string());
    for (const auto& chunk : sched.chunks) {
      auto req = m.scheduler->finish_request(chunk.request_id, sample::FinishReason::kError);
      if (req) {
        req->error = logits_or.status().to_string();
        m.finish_sequence(std::move(req), &outputs);
      }
    }
    return outputs;
  }
  const backend::Tensor& logits = *logits_or;
  const int64_t V = logits.dim(1);

  std::vector<sample::SampleRow> rows;
  std::vector<size_t> row_chunk;
  for (size_t i = 0; i < sched.chunks.size(); ++i) {
    const auto& chunk = sched.chunks[i];
    if (!chunk.samples) continue;
    const engine::Request* req = m.scheduler->get_request(chunk.request_id);
    DI_CHECK(req != nullptr) << "scheduled request " << chunk.request_id << " vanished";
    rows.push_back({&req->params, chunk.seed, chunk.sequence_index, req->prompt_token_ids,
                    req->output_token_ids, req->eos_token_id});
    row_chunk.push_back(i);
  }
  std::vector<float> sample_logits(rows.size() * static_cast<size_t>(V));
  for (size_t r = 0; r < rows.size(); ++r) {
    const float* src = logits.data<float>() + row_chunk[r] * static_cast<size_t>(V);
    std::copy(src, src + V, sample_logits.begin() + static_cast<std::ptrdiff_t>(r * V));
  }
  DI_ASSIGN_OR_RETURN(auto sampled, m.sampler.sample(sample_logits, V, rows));
  std::vector<int32_t> tokens(sched.chunks.size(), 0);
  for (size_t r = 0; r < rows.size(); ++r) tokens[row_chunk[r]] = sampled[r].token;

  const double t = now_seconds();
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& chunk = sched.chunks[row_chunk[r]];
    auto it = m.sequences.find(chunk.request_id);
    if (it == m.sequences.end()) continue;
    if (it->second.first_token_time == 0) it->second.first_token_time = t;
    if (rows[r].params->logprobs) {
      TokenLogprobs lp{sampled[r].token, sampled[r].logprob.value_or(0.f), sampled[r].rank, {}};
      for (const auto& e : sampled[r].top_logprobs) lp.top_logprobs.emplace_back(e.token, e.logprob);
      it->second.logprobs.push_back(std::move(lp));
    }
  }
  for (const auto& chunk : sched.chunks) {
    const engine::Request* req = m.scheduler->get_request(chunk.request_id);
    const int64_t prompt_end = req ? req->num_prompt_tokens() : 0;
    m.stats.num_prompt_tokens +=
        std::max<int64_t>(0, std::min(chunk.start_position + chunk.num_tokens, prompt_end) -
                                 chunk.start_position);
    if (chunk.samples) m.stats.num_generated_tokens += 1;
  }

  auto finished = m.scheduler->update_from_output(sched, tokens);
  // Stop strings: detokenize the new output of every sequence that got a token and still runs.
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& chunk = sched.chunks[row_chunk[r]];
    const engine::Request* req = m.scheduler->get_request(chunk.request_id);
    if (req == nullptr) continue;  // finished by a token stop; handled below
    auto it = m.sequences.find(chunk.request_id);
    if (it == m.sequences.end() || req->params.stop.empty()) continue;
    auto update = it->second.checker.update(req->output_token_ids);
    if (update.stopped) {
      auto done = m.scheduler->finish_request(chunk.request_id, sample::FinishReason::kStop);
      if (done) {
        done->stop_string = update.stop_string;
        finished.push_back(std::move(done));
      }
    }
  }
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

void Engine::abort_request(const std::string& request_id) {
  Impl& m = *impl_;
  auto g = m.groups.find(request_id);
  if (g == m.groups.end()) return;
  std::vector<std::string> ids;
  for (const auto& [id, seq] : m.sequences) {
    if (seq.parent_id == request_id) ids.push_back(id);
  }
  for (const auto& id : ids) {
    if (auto req = m.scheduler->abort_request(id)) {
      m.sequences.at(id).checker.update(req->output_token_ids);
      m.finish_sequence(std::move(req), &m.pending_outputs);
    }
  }
}

bool Engine::has_unfinished_requests() const {
  return impl_->scheduler->has_unfinished_requests() || !impl_->pending_outputs.empty();
}
const tokenizer::Tokenizer* Engine::tokenizer() const { return impl_->tokenizer.get(); }
const EngineConfig& Engine::config() const { return impl_->config; }
EngineStats Engine::stats() const { return impl_->stats; }
std::string Engine::model_dir() const { return impl_->model_dir; }

}  // namespace deepinfer
