// Engine: schedule → execute → sample → update. See include/deepinfer/engine.h.
#include "deepinfer/engine.h"

#include <algorithm>
#include <limits>

#include "backend/make_backend.h"
#include "common/check.h"
#include "common/env.h"
#include "common/logging.h"
#include "engine/engine_impl.h"
#include "io/config.h"
#include "io/hub.h"
#include "kv/coordinator.h"
#include "kv/pool_sizing.h"
#include "model/deepseek_v4/tensor_parallel.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "sample/stop_checker.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

using engine_internal::now_seconds;
using engine_internal::Sequence;
using engine_internal::Group;

namespace {

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

}  // namespace

Status EngineConfig::validate() const {
  if (max_num_seqs < 1) return InvalidArgument("max_num_seqs must be >= 1, got " + std::to_string(max_num_seqs));
  if (max_num_batched_tokens < 1) {
    return InvalidArgument("max_num_batched_tokens must be >= 1, got " +
                           std::to_string(max_num_batched_tokens));
  }
  if (max_model_len < 0) return InvalidArgument("max_model_len must be >= 0 (0 = the model's), got " + std::to_string(max_model_len));
  if (kv_cache_memory <= 0) return InvalidArgument("kv_cache_memory must be > 0 bytes");
  if (device.empty()) return InvalidArgument("device must not be empty (cpu, cpu-reference, cuda, cuda:N)");
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0))
    return InvalidArgument("gpu_memory_utilization must be in (0, 1], got " +
                           std::to_string(gpu_memory_utilization));
  if (data_parallel_size < 1)
    return InvalidArgument("data_parallel_size must be >= 1, got " + std::to_string(data_parallel_size));
  if (enable_eplb && !enable_expert_parallel)
    return InvalidArgument("enable_eplb needs enable_expert_parallel (EPLB places the routed experts of "
                           "the expert-parallel path)");
  if (num_redundant_experts < 0 || eplb_window_size < 1 || eplb_step_interval < 1)
    return InvalidArgument("EPLB: need num_redundant_experts >= 0, eplb_window_size >= 1 and "
                           "eplb_step_interval >= 1; got " + std::to_string(num_redundant_experts) + ", " +
                           std::to_string(eplb_window_size) + ", " + std::to_string(eplb_step_interval));
  if (context_parallel_size < 1)
    return InvalidArgument("context_parallel_size must be >= 1, got " + std::to_string(context_parallel_size));
  if (context_parallel_rank < 0 || context_parallel_rank >= context_parallel_size)
    return InvalidArgument("context_parallel_rank must be in [0, context_parallel_size = " +
                           std::to_string(context_parallel_size) + "), got " +
                           std::to_string(context_parallel_rank));
  if (context_parallel_size > 1) {
    if (data_parallel_size > 1)
      return InvalidArgument("context_parallel_size " + std::to_string(context_parallel_size) +
                             " with data_parallel_size " + std::to_string(data_parallel_size) +
                             ": context parallelism cannot be combined with data parallelism yet");
    if (enable_expert_parallel)
      return InvalidArgument("context_parallel_size " + std::to_string(context_parallel_size) +
                             " with enable_expert_parallel: not supported (each context-parallel "
                             "rank holds all the experts)");
    if (context_parallel_block < 1 ||
        context_parallel_min_tokens < context_parallel_block * context_parallel_size)
      return InvalidArgument("context_parallel_min_tokens (" + std::to_string(context_parallel_min_tokens) +
                             ") must be >= context_parallel_block (" + std::to_string(context_parallel_block) +
                             ", >= 1) x context_parallel_size (" + std::to_string(context_parallel_size) +
                             "): every rank needs at least one block of a split chunk");
  }
  if (tensor_parallel_size < 1)
    return InvalidArgument("tensor_parallel_size must be >= 1, got " + std::to_string(tensor_parallel_size));
  if (tensor_parallel_rank < 0 || tensor_parallel_rank >= tensor_parallel_size)
    return InvalidArgument("tensor_parallel_rank must be in [0, tensor_parallel_size = " +
                           std::to_string(tensor_parallel_size) + "), got " +
                           std::to_string(tensor_parallel_rank));
  if (tensor_parallel_size > 1) {
    const std::string tp = "tensor_parallel_size " + std::to_string(tensor_parallel_size);
    if (data_parallel_size > 1)
      return InvalidArgument(tp + " with data_parallel_size " + std::to_string(data_parallel_size) +
                             ": tensor parallelism cannot be combined with data parallelism yet");
    if (enable_expert_parallel)
      return InvalidArgument(tp + " with enable_expert_parallel: not supported (the tensor-parallel "
                             "ranks shard every expert's intermediate dim instead)");
    if (context_parallel_size > 1)
      return InvalidArgument(tp + " with context_parallel_size " + std::to_string(context_parallel_size) +
                             ": not supported");
  }
  if (data_parallel_rank < 0 || data_parallel_rank >= data_parallel_size) {
    return InvalidArgument("data_parallel_rank must be in [0, data_parallel_size = " +
                           std::to_string(data_parallel_size) + "), got " +
                           std::to_string(data_parallel_rank));
  }
  return OkStatus();
}


Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

StatusOr<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config) {
  return engine_internal::EngineAccess::create(config, nullptr);
}

StatusOr<std::unique_ptr<Engine>> engine_internal::EngineAccess::create(
    const EngineConfig& config_in, const engine::ExpertParallelOptions* ep_options,
    const engine::ContextParallelOptions* cp_options) {
  DI_RETURN_IF_ERROR(config_in.validate());
  EngineConfig config = config_in;
  const bool cp_group = config.context_parallel_size > 1;
  if (cp_group && (cp_options == nullptr ||
                   (cp_options->comm == nullptr && cp_options->nccl_unique_id_hex.empty()))) {
    return FailedPrecondition(
        "EngineConfig.context_parallel_size " + std::to_string(config.context_parallel_size) +
        ": the ranks split long prefills over a communicator that the launcher hands in "
        "(deepinfer generate --context-parallel-size N); Engine::create alone cannot join a group");
  }
  const bool tp_group = config.tensor_parallel_size > 1;
  if (tp_group && (cp_options == nullptr ||
                   (cp_options->comm == nullptr && cp_options->nccl_unique_id_hex.empty()))) {
    return FailedPrecondition(
        "EngineConfig.tensor_parallel_size " + std::to_string(config.tensor_parallel_size) +
        ": the ranks all-reduce their shards over a communicator that the launcher hands in "
        "(deepinfer generate --tensor-parallel-size N); Engine::create alone cannot join a group");
  }
  if (tp_group && config.async_scheduling) {
    log_info("engine: tensor parallel rank " + std::to_string(config.tensor_parallel_rank) + " of " +
             std::to_string(config.tensor_parallel_size) +
             ": async scheduling is off (the ranks step in lockstep)");
    config.async_scheduling = false;
  }
  if (cp_group && config.async_scheduling) {
    log_info("engine: context parallel rank " + std::to_string(config.context_parallel_rank) + " of " +
             std::to_string(config.context_parallel_size) +
             ": async scheduling is off (the ranks step in lockstep)");
    config.async_scheduling = false;
  }
  const bool ep_group = config.enable_expert_parallel && config.data_parallel_size > 1;
  if (ep_group && (ep_options == nullptr ||
                   (ep_options->comm == nullptr && ep_options->nccl_unique_id_hex.empty()))) {
    return FailedPrecondition(
        "EngineConfig.data_parallel_size " + std::to_string(config.data_parallel_size) +
        " with enable_expert_parallel: the ranks share the experts over a communicator that the "
        "launcher hands in (deepinfer generate --data-parallel-size N, or "
        "engine::create_engine_rank); Engine::create alone cannot join a group");
  }
  if (config.enable_eplb && !ep_group && config.async_scheduling) {
    log_info("engine: EPLB applies placements between two forwards: async scheduling is off");
    config.async_scheduling = false;
  }
  if (ep_group && config.async_scheduling) {
    // The ranks exchange "who has work" on the MoE communicator between steps; a forward in
    // flight on the worker thread would interleave its collectives with that exchange.
    log_info("engine: data parallel rank " + std::to_string(config.data_parallel_rank) + " of " +
             std::to_string(config.data_parallel_size) +
             " with expert parallelism: async scheduling is off (the ranks step in lockstep)");
    config.async_scheduling = false;
  }
  auto impl = std::make_unique<Engine::Impl>();
  impl->config = config;
  DI_ASSIGN_OR_RETURN(impl->model_dir, io::resolve_model(config.model, env()));
  DI_ASSIGN_OR_RETURN(io::ModelConfig model_config, io::load_model_config(impl->model_dir));
  auto backend = backend::make_backend(
      config.device, {.batch_invariant = config.batch_invariant,
                      .fp8_activations = config.fp8_activations,
                      .graphs = !config.enforce_eager});
  if (!backend.ok()) return backend.status().with_context("EngineConfig.device");
  impl->backend = std::move(backend).value();
  if (config.enable_expert_parallel) {
    engine::ExpertParallelOptions opt;
    if (ep_options != nullptr) opt = *ep_options;
    opt.world_size = config.data_parallel_size;
    opt.rank = config.data_parallel_rank;
    if (config.enable_eplb) {
      dist::EplbOptions e;
      e.num_redundant_experts = config.num_redundant_experts;
      e.window_steps = config.eplb_window_size;
      e.step_interval = config.eplb_step_interval;
      opt.eplb = e;
    }
    auto ep = engine::load_model_expert_parallel(impl->model_dir, model_config, config.device,
                                                 impl->backend.get(), opt);
    if (!ep.ok()) return ep.status().with_context("EngineConfig.enable_expert_parallel");
    impl->expert_parallel = std::move(ep->runtime);
    impl->model = std::move(ep->model);
    if (ep_group) impl->lockstep_comm = impl->expert_parallel->context.comm;
  } else if (tp_group) {  // join the group first: the sharded model borrows its communicator
    auto rt = engine::join_lockstep_group("tensor parallel", config.tensor_parallel_size,
                                          config.tensor_parallel_rank, config.device, *cp_options,
                                          impl->backend.get());
    if (!rt.ok()) return rt.status().with_context("EngineConfig.tensor_parallel_size");
    impl->tensor_parallel = std::move(rt).value();
    auto m = model::v4::load_tensor_parallel_model(impl->model_dir, impl->backend.get(),
                                                   impl->tensor_parallel->comm);
    if (!m.ok()) return m.status().with_context("EngineConfig.tensor_parallel_size");
    // ContextParallelModel with no chunk long enough to split: only its per-forward batch
    // fingerprint exchange, so ranks that diverge fail together instead of mismatching collectives.
    auto wrapped = engine::ContextParallelModel::wrap(
        std::move(m).value(), impl->tensor_parallel->comm, impl->backend.get(),
        std::numeric_limits<int64_t>::max(), /*block=*/1);
    if (!wrapped.ok()) return wrapped.status().with_context("EngineConfig.tensor_parallel_size");
    impl->model = std::move(wrapped).value();
  } else {
    DI_ASSIGN_OR_RETURN(impl->model, model::load_model(impl->model_dir, impl->backend.get()));
  }
  if (cp_group) {  // context parallelism: the model seen by the runner splits long prefills
    auto rt = engine::join_context_parallel_group(config, *cp_options, impl->backend.get());
    if (!rt.ok()) return rt.status().with_context("EngineConfig.context_parallel_size");
    impl->context_parallel = std::move(rt).value();
    auto wrapped = engine::ContextParallelModel::wrap(
        std::move(impl->model), impl->context_parallel->comm, impl->backend.get(),
        config.context_parallel_min_tokens, config.context_parallel_block,
        &impl->stats.num_context_parallel_chunks);
    if (!wrapped.ok()) return wrapped.status().with_context("EngineConfig.context_parallel_size");
    impl->model = std::move(wrapped).value();
  }
  const std::string tok_dir = config.tokenizer.empty() ? impl->model_dir : config.tokenizer;
  auto tok = tokenizer::Tokenizer::from_dir(tok_dir);
  if (tok.ok()) {
    impl->tokenizer = std::move(tok).value();
  } else if (config.tokenizer.empty() && tok.status().code() == StatusCode::kNotFound) {
    // A model without a tokenizer (the random test fixtures) still runs on token ids.
    log_warning("engine: " + tok.status().message() + ": token-id prompts only, no output text");
  } else {
    return tok.status();
  }
  const auto& info = impl->model->info();
  if (!info.eos_token_ids.empty()) impl->eos_token_id = static_cast<int32_t>(info.eos_token_ids[0]);
  if (impl->tokenizer && !impl->tokenizer->eos_ids().empty()) impl->eos_token_id = impl->tokenizer->eos_ids()[0];

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
  // Cache budget: --kv-cache-memory on the CPU; on a GPU what --gpu-memory-utilization leaves
  // once the weights are in (capped by an explicit --kv-cache-memory).
  int64_t kv_bytes = config.kv_cache_memory;
  std::string budget_source = "--kv-cache-memory";
  uint64_t free_bytes = 0, total_bytes = 0;
  if (impl->backend->memory_info(&free_bytes, &total_bytes)) {
    const double reserve = static_cast<double>(total_bytes) * (1.0 - config.gpu_memory_utilization);
    const double available = static_cast<double>(free_bytes) - reserve;
    if (available <= 0) {
      return ResourceExhausted(
          "--gpu-memory-utilization " + std::to_string(config.gpu_memory_utilization) +
          " leaves no memory for the KV cache: " + std::to_string(free_bytes >> 20) + " MiB of " +
          std::to_string(total_bytes >> 20) + " MiB are free after loading the model");
    }
    const int64_t from_gpu = static_cast<int64_t>(available);
    kv_bytes = config.kv_cache_memory_set ? std::min(from_gpu, config.kv_cache_memory) : from_gpu;
    budget_source = config.kv_cache_memory_set && config.kv_cache_memory < from_gpu
                        ? "--kv-cache-memory (below the GPU's free memory x --gpu-memory-utilization)"
                        : "free GPU memory x --gpu-memory-utilization";
  }
  if (impl->context_parallel || impl->tensor_parallel) {  // equal budgets, or the ranks' schedulers
                                                         // would preempt differently
    auto* group = impl->context_parallel ? impl->context_parallel.get() : impl->tensor_parallel.get();
    auto agreed = engine::min_over_ranks(*group->comm, kv_bytes);
    if (!agreed.ok()) return agreed.status().with_context("lockstep group: agreeing on the KV budget");
    kv_bytes = *agreed;
  }
  kv::KvBudget budget{kv_bytes, sc.max_model_len, sc.max_num_seqs, sc.max_num_batched_tokens};
  auto plan = kv::plan_kv_pools(dims, kv_config, budget);
  if (!plan.ok()) {
    return plan.status().with_context(
        "the KV cache budget (" + std::to_string(kv_bytes) + " bytes from " + budget_source +
        ") cannot hold one sequence of max_model_len " + std::to_string(sc.max_model_len) +
        "; raise the budget or lower --max-model-len");
  }
  log_info("engine: KV cache budget " + std::to_string(kv_bytes >> 20) + " MiB (" + budget_source + ")");
  DI_ASSIGN_OR_RETURN(impl->kv, kv::KvCacheCoordinator::create(dims, kv_config, plan->sizes));
  impl->stats.kv_summary = plan->summary();
  impl->scheduler = std::make_unique<engine::Scheduler>(sc, impl->kv.get());
  impl->runner = std::make_unique<engine::ModelRunner>(impl->model.get());
  impl->executor = std::make_unique<engine::StepExecutor>(impl->runner.get(), config.async_scheduling,
                                                          impl->backend.get());
  log_info("engine: model " + impl->model_dir + " (" + info.family + ", " +
           std::to_string(info.num_layers) + " layers), max_model_len " +
           std::to_string(sc.max_model_len) + ", kv " + plan->summary() +
           (config.async_scheduling ? ", async scheduling" : "") +
           (impl->expert_parallel
                ? ", expert parallel (world size " + std::to_string(config.data_parallel_size) +
                      ", " + impl->expert_parallel->context.comm->name() + ")"
                : std::string()) +
           (config.data_parallel_size > 1
                ? ", data parallel rank " + std::to_string(config.data_parallel_rank) + " of " +
                      std::to_string(config.data_parallel_size)
                : std::string()) +
           (cp_group ? ", context parallel rank " + std::to_string(config.context_parallel_rank) +
                           " of " + std::to_string(config.context_parallel_size) + " (" +
                           impl->context_parallel->comm->name() + ", chunks of >= " +
                           std::to_string(config.context_parallel_min_tokens) + " tokens split)"
                     : std::string()) +
           (tp_group ? ", tensor parallel rank " + std::to_string(config.tensor_parallel_rank) +
                           " of " + std::to_string(config.tensor_parallel_size) + " (" +
                           impl->tensor_parallel->comm->name() + ")"
                     : std::string()));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Status Engine::add_request(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                           const SamplingParams& params, int priority) {
  Impl& m = *impl_;
  if (m.groups.count(request_id)) {
    return InvalidArgument("request id '" + request_id + "' is already in use");
  }
  DI_RETURN_IF_ERROR(params.validate().with_context("request '" + request_id + "'"));
  if (!m.tokenizer && !params.stop.empty()) {
    return InvalidArgument("request '" + request_id + "': stop strings need a tokenizer, and " +
                           m.model_dir + " has none (use stop_token_ids)");
  }
  if (params.structured_outputs && (m.context_parallel || m.tensor_parallel)) {  // compile times differ per rank
    return InvalidArgument("request '" + request_id + "': structured outputs are not supported with " +
                           std::string(m.context_parallel ? "context" : "tensor") +
                           " parallelism (the ranks must schedule in lockstep)");
  }
  if (params.structured_outputs) {
    if (!m.tokenizer) {
      return InvalidArgument("request '" + request_id + "': structured outputs need a tokenizer, and " +
                             m.model_dir + " has none");
    }
    if (!m.structured) {
      m.structured = engine::StructuredOutputManager::for_tokenizer(
          *m.tokenizer, static_cast<int32_t>(m.model->info().vocab_size));
    }
  }
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
    if (st.ok() && params.structured_outputs) {
      // Compiles off the engine thread; the request waits (the batch does not) until it is done.
      st = m.structured->submit(id, *params.structured_outputs).with_context("request '" + request_id + "'");
      if (st.ok()) {
        m.scheduler->set_ready(id, false);
        m.awaiting_grammar.push_back(id);
      } else {
        m.scheduler->abort_request(id);
      }
    }
    if (!st.ok()) {
      for (const auto& a : added) {
        m.scheduler->abort_request(a);
        m.sequences.erase(a);
        if (m.structured && m.structured->has(a)) m.structured->release(a);
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
  if (!impl_->tokenizer) {
    return InvalidArgument("request '" + request_id + "': " + impl_->model_dir +
                           " has no tokenizer.json, so text prompts cannot be encoded; pass token "
                           "ids or a tokenizer directory");
  }
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
  executor->release({request->request_id});
  if (structured) release_grammar(request->request_id);
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
Status Engine::check_invariants() const {
  DI_RETURN_IF_ERROR(impl_->scheduler->check_invariants());
  if (impl_->scheduler->has_unfinished_requests()) return OkStatus();
  for (kv::StateKind k : kv::kAllStateKinds) {
    if (impl_->kv->num_free_blocks(k) != impl_->kv->num_blocks(k)) {
      return Internal(std::string("no request left but the '") + kv::state_kind_name(k) + "' pool has " +
                      std::to_string(impl_->kv->num_blocks(k) - impl_->kv->num_free_blocks(k)) +
                      " blocks in use");
    }
  }
  return OkStatus();
}
const tokenizer::Tokenizer* Engine::tokenizer() const { return impl_->tokenizer.get(); }
int64_t Engine::vocab_size() const { return impl_->model->info().vocab_size; }
const EngineConfig& Engine::config() const { return impl_->config; }
EngineStats Engine::stats() const { return impl_->stats; }
std::string Engine::model_dir() const { return impl_->model_dir; }

}  // namespace deepinfer
