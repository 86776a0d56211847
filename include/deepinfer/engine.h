// The engine: one loop of schedule → execute → sample → update (STYLE.md 2). The offline `LLM`
// (llm.h) and the server are thin clients of it.
//
//   DI_ASSIGN_OR_RETURN(auto engine, Engine::create(config));
//   DI_RETURN_IF_ERROR(engine->add_request("a", {1, 15043, 29892}, params));
//   while (engine->has_unfinished_requests()) {
//     DI_ASSIGN_OR_RETURN(auto outputs, engine->step());   // finished requests of this step
//   }
//
// A bad request (invalid params, prompt too long or empty, token outside the vocabulary) is
// refused by add_request with a Status naming what was wrong; the engine and the other requests
// go on.
//
// With async scheduling (the default) a step() launches the next step's forward on a worker
// thread before it returns, so the caller's own work between steps overlaps with the model too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "deepinfer/outputs.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer {

namespace tokenizer { class Tokenizer; }
namespace engine_internal { struct EngineAccess; }  // engine-internal: data-parallel ranks

struct EngineConfig {
  std::string model;              // local model directory, or a Hub id resolved via the HF cache
  std::string tokenizer;          // default: the model's directory
  int max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
  int64_t max_model_len = 0;      // 0 = the model's max_position_embeddings
  // Bytes of cache state (--kv-cache-memory). On the CPU this is the budget; on a GPU the budget
  // is what gpu_memory_utilization leaves after the weights (see below), capped by this value
  // when it is set explicitly (kv_cache_memory_set).
  int64_t kv_cache_memory = int64_t{1} << 30;
  bool kv_cache_memory_set = false;
  // GPU: fraction of the device's memory deepinfer may use (weights, activations, cache), like
  // vLLM's --gpu-memory-utilization; the cache gets free memory after loading minus the rest.
  double gpu_memory_utilization = 0.9;
  // Kernels whose result for a row does not depend on the batch (--batch-invariant; see
  // docs/cuda.md): a request's logits are bitwise the same in any batch.
  bool batch_invariant = false;
  // FP8 weights at prefill sizes through DeepSeek's FP8 recipe (activations quantized per 1×128
  // to e4m3, cuBLASLt block-scaled GEMM; --fp8-activations; CUDA only). Lossy, so off by default.
  bool fp8_activations = false;
  // CUDA: run every decode step op by op instead of replaying captured CUDA graphs (vLLM's
  // --enforce-eager; also DEEPINFER_CUDA_GRAPHS=0). Outputs are the same either way.
  bool enforce_eager = false;
  int block_size = 16;            // window rows per cache block (vLLM's --block-size)
  int compressed_entries_per_block = 64;  // CSA/HCA compressed entries per cache block
  uint64_t seed = 0;              // engine seed; unseeded requests derive theirs from it
  std::string device = "cpu";     // backend::make_backend: "cpu", "cpu-reference", "cuda", "cuda:N"
  // Schedule step N+1 and build its inputs while step N's forward runs (on a worker thread);
  // outputs are identical either way (--no-async-scheduling turns it off). See docs/engine.md.
  bool async_scheduling = true;
  // Run the routed experts through the expert-parallel MoE path (--enable-expert-parallel; see
  // docs/dist.md): DeepSeek-V4 only (another architecture is InvalidArgument). At world size 1
  // a one-rank communicator (in-process on the CPU, a one-rank NCCL group on CUDA; Unimplemented
  // in a CUDA build without NCCL) with the identity placement; greedy outputs are token-identical
  // to the plain path. At data_parallel_size > 1 the group is the launcher's (see below).
  bool enable_expert_parallel = false;
  // Attention data parallelism (--data-parallel-size; docs/dist.md): this engine is rank
  // data_parallel_rank of data_parallel_size, with its own requests, batch and cache. With
  // enable_expert_parallel the ranks share the routed experts (each loads its slots) and step in
  // lockstep over a communicator handed in by the launcher (engine/data_parallel.h); async
  // scheduling is then turned off. Without it the ranks are independent full replicas.
  int data_parallel_size = 1;
  int data_parallel_rank = 0;
  // Live EPLB (--enable-eplb, vLLM's flags; docs/dist.md "Live EPLB"): with enable_expert_parallel,
  // the router's picks are counted over the last eplb_window_size steps and every
  // eplb_step_interval steps the experts are re-placed (num_redundant_experts extra slots hold
  // replicas of the hottest) when that lowers the hottest GPU's load by 5 % or more. Replicas
  // hold the same weights, so outputs do not change. Turns async scheduling off (a placement is
  // applied between two forwards).
  bool enable_eplb = false;
  int num_redundant_experts = 0;
  int eplb_window_size = 1000;
  int eplb_step_interval = 3000;
  // Context parallelism (--context-parallel-size; docs/dist.md "Context parallelism"): this
  // engine is rank context_parallel_rank of context_parallel_size. Every rank runs the same
  // requests with the same scheduler in lockstep; a prefill chunk of at least
  // context_parallel_min_tokens tokens is split over the ranks (serpentine blocks of
  // context_parallel_block rows, equal attention work) through a communicator handed in by the
  // launcher (engine/context_parallel.h); the rest (decode, short chunks) runs replicated on every
  // rank. DeepSeek-V4 only; not with data_parallel_size > 1 or enable_expert_parallel; no
  // structured outputs; async scheduling is turned off.
  int context_parallel_size = 1;
  int context_parallel_rank = 0;
  int64_t context_parallel_min_tokens = 1024;
  int64_t context_parallel_block = 16;
  // Tensor parallelism (--tensor-parallel-size; docs/dist.md "Tensor parallelism"): this engine
  // is rank tensor_parallel_rank of tensor_parallel_size and holds a 1/W shard of the big
  // matrices (model/deepseek_v4/tensor_parallel.h). Every rank runs the same requests with the
  // same scheduler in lockstep over a communicator handed in by the launcher; the all-reduced
  // logits are the same on every rank. DeepSeek-V4 only; not with data_parallel_size > 1,
  // enable_expert_parallel or context_parallel_size > 1; no structured outputs; async
  // scheduling is turned off.
  int tensor_parallel_size = 1;
  int tensor_parallel_rank = 0;


  // Sampling on the device (docs/engine.md "Sampling on the device"): a step whose sampling rows
  // all need only temperature / top-k / top-p / min-p (no structured outputs, logit_bias,
  // penalties, logprobs or pending min_tokens) is sampled by the backend right after its forward,
  // and on a GPU only the token ids leave the device. CPU: the op is the host sampler's code
  // (identical tokens). GPU: greedy tokens identical, random draws from the same distribution
  // (see the doc). false: always the host sampler on downloaded logits.
  bool device_sampling = true;
  // Token ids on the device (docs/engine.md "Token ids on the device"; needs async scheduling
  // and device sampling): a decode step whose tokens the previous step is still sampling is
  // queued before those ids reach the host — they are placed into its inputs on the device — so
  // the device runs the two steps back to back. Steps with structured outputs, or after a step
  // sampled on the host, wait for the ids as before. Same tokens either way. DeepSeek-V4 models.
  bool device_token_feedback = true;

  Status validate() const;
};

struct EngineStats {
  int64_t num_steps = 0;
  int64_t num_prompt_tokens = 0;      // computed prompt tokens (recomputation included)
  int64_t num_generated_tokens = 0;
  int64_t num_preemptions = 0;
  int64_t num_idle_steps = 0;         // data parallel + expert parallel: steps with no own work
  int64_t num_eplb_rebalances = 0;   // live EPLB: placements applied (EngineConfig.enable_eplb)
  int64_t num_device_sampled_steps = 0;  // steps sampled by the backend (EngineConfig::device_sampling)
  int64_t num_fed_steps = 0;  // steps queued before the previous step's ids reached the host
  int64_t num_context_parallel_chunks = 0;  // prefill chunks split over the CP ranks
  std::string kv_summary;             // pool sizes per kind of state
};

class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> create(const EngineConfig& config);
  ~Engine();

  // Queues a request; with params.n > 1 it runs as n sequences reported together.
  Status add_request(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                     const SamplingParams& params, int priority = 0);
  // Encodes `prompt` with the model's tokenizer (BOS as tokenizer_config says) and queues it.
  Status add_request(const std::string& request_id, const std::string& prompt,
                     const SamplingParams& params, int priority = 0);
  // One engine step. Returns the requests that finished in it (all their sequences done).
  StatusOr<std::vector<RequestOutput>> step();
  // Ends a request; its partial output is returned by the next step() with finish_reason "abort".
  void abort_request(const std::string& request_id);
  bool has_unfinished_requests() const;
  // For tests: the scheduler's invariants and the KV pools' integrity; with no unfinished request,
  // also that every block is back in its pool.
  Status check_invariants() const;

  // nullptr for a model directory without tokenizer.json (token-id prompts only, no text).
  const tokenizer::Tokenizer* tokenizer() const;
  int64_t vocab_size() const;
  const EngineConfig& config() const;
  EngineStats stats() const;
  std::string model_dir() const;

 private:
  struct Impl;
  friend struct engine_internal::EngineAccess;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
