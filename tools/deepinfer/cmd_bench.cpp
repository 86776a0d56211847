// `deepinfer bench`: offline throughput / latency of the full engine on random token-id prompts,
// shaped like `vllm bench throughput` and `vllm bench latency` (same flag names where they exist).
//
//   deepinfer bench --model DIR --input-len 512 --output-len 128 --num-prompts 256
//                   --max-concurrency 64 --output-json out.json
//
// throughput: all --num-prompts requests are queued at once; the engine runs at most
//             --max-concurrency of them together (its max_num_seqs). TTFT counts from the moment
//             a request was queued, so it includes waiting for a free slot.
// latency:    one batch of --num-prompts requests, run --num-iters times back to back; the
//             per-iteration wall time is the latency (vLLM's `bench latency` with --batch-size).
// Every request ignores EOS and produces exactly --output-len tokens (checked). A warm-up run
// (same lengths, fewer tokens) goes first and is not measured.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "deepinfer/engine.h"
#include "tokenizer/tokenizer.h"
#include "tools/deepinfer/cli_parse.h"
#include "tools/deepinfer/command.h"

namespace deepinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string mode = "throughput";
  int input_len = 128;
  int output_len = 32;
  int num_prompts = 64;
  int num_iters = 3;        // latency mode
  int warmup_prompts = -1;  // -1 = min(num_prompts, max_concurrency); 0 = no warm-up
  int warmup_output_len = 8;
  float temperature = 1.0f;
  bool disable_detokenize = false;
  uint64_t seed = 0;
  std::string output_json;
};

// Numpy-style linear-interpolated percentile (q in [0, 100]).
double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

nlohmann::json summary_ms(const std::vector<double>& seconds) {
  return {{"mean", 1e3 * mean(seconds)}, {"p50", 1e3 * percentile(seconds, 50)},
          {"p90", 1e3 * percentile(seconds, 90)}, {"p99", 1e3 * percentile(seconds, 99)},
          {"count", seconds.size()}};
}

// Uniform random prompts over the non-special ids of the tokenizer's vocabulary, from one seeded
// stream, so every run with the same seed sends the same prompts.
StatusOr<std::vector<std::vector<int32_t>>> random_prompts(const Engine& engine, int n, int len,
                                                           uint64_t seed) {
  const tokenizer::Tokenizer* tok = engine.tokenizer();
  if (tok == nullptr) return FailedPrecondition("bench: the model has no tokenizer (vocabulary size unknown)");
  std::vector<int32_t> allowed;
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    if (!tok->is_special(id)) allowed.push_back(id);
  }
  if (allowed.empty()) return FailedPrecondition("bench: the tokenizer has no non-special token");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, allowed.size() - 1);
  std::vector<std::vector<int32_t>> prompts(n, std::vector<int32_t>(len));
  for (auto& p : prompts) {
    for (auto& t : p) t = allowed[pick(rng)];
  }
  return prompts;
}

struct RunResult {
  double elapsed_s = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  std::vector<double> ttft_s, tpot_s, e2e_s;
};

// Queues every prompt, steps the engine until all finish, and checks that each request produced
// exactly `output_len` tokens.
StatusOr<RunResult> run_batch(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                              const SamplingParams& params, int output_len, const std::string& tag) {
  RunResult r;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    DI_RETURN_IF_ERROR(engine.add_request(tag + "-" + std::to_string(i), prompts[i], params));
  }
  std::vector<RequestOutput> done;
  while (engine.has_unfinished_requests()) {
    DI_ASSIGN_OR_RETURN(auto outs, engine.step());
    for (auto& o : outs) done.push_back(std::move(o));
  }
  r.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (done.size() != prompts.size()) {
    return Internal("bench: " + std::to_string(done.size()) + " of " +
                    std::to_string(prompts.size()) + " requests finished");
  }
  for (const RequestOutput& o : done) {
    if (!o.error.empty()) return Internal("bench: request " + o.request_id + " failed: " + o.error);
    if (o.outputs.size() != 1) return Internal("bench: request " + o.request_id + " has " + std::to_string(o.outputs.size()) + " sequences");
    const auto& c = o.outputs[0];
    if (static_cast<int>(c.token_ids.size()) != output_len) {
      return Internal("bench: request " + o.request_id + " produced " +
                      std::to_string(c.token_ids.size()) + " tokens, expected " +
                      std::to_string(output_len) + " (finish_reason '" + c.finish_reason + "')");
    }
    r.input_tokens += static_cast<int64_t>(o.prompt_token_ids.size());
    r.output_tokens += static_cast<int64_t>(c.token_ids.size());
    const RequestMetrics& m = o.metrics;
    if (m.first_token_time > 0) {
      r.ttft_s.push_back(m.ttft());
      if (output_len > 1) r.tpot_s.push_back((m.finished_time - m.first_token_time) / (output_len - 1));
    }
    r.e2e_s.push_back(m.finished_time - m.arrival_time);
  }
  return r;
}

nlohmann::json config_json(const EngineConfig& c) {
  return {{"model", c.model},
          {"device", c.device},
          {"max_num_seqs", c.max_num_seqs},
          {"max_num_batched_tokens", c.max_num_batched_tokens},
          {"max_model_len", c.max_model_len},
          {"kv_cache_memory", c.kv_cache_memory},
          {"block_size", c.block_size},
          {"compressed_entries_per_block", c.compressed_entries_per_block},
          {"seed", c.seed}};
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "deepinfer bench: %s\n", msg.c_str());
  return 1;
}

int run_bench(int argc, char** argv) {
  CLI::App app{"Engine benchmark on random token-id prompts (like `vllm bench throughput|latency`)."};
  EngineConfig cfg;
  BenchOptions o;
  int max_concurrency = 256;
  app.add_option("--model", cfg.model, "model directory or Hub id")->required();
  app.add_option("--tokenizer", cfg.tokenizer, "tokenizer directory (default: the model's)");
  app.add_option("--device", cfg.device, "backend device (EngineConfig::device), e.g. cpu, cuda, cuda:1");
  app.add_option("--mode", o.mode, "throughput | latency")->check(CLI::IsMember({"throughput", "latency"}));
  app.add_option("--input-len", o.input_len, "prompt tokens per request")->check(CLI::PositiveNumber);
  app.add_option("--output-len", o.output_len, "output tokens per request (EOS ignored)")->check(CLI::PositiveNumber);
  app.add_option("--num-prompts", o.num_prompts, "requests (latency mode: the batch size)")->check(CLI::PositiveNumber);
  app.add_option("--max-concurrency", max_concurrency, "sequences running together (the engine's max_num_seqs)")->check(CLI::PositiveNumber);
  app.add_option("--num-iters", o.num_iters, "latency mode: timed iterations")->check(CLI::PositiveNumber);
  app.add_option("--warmup-prompts", o.warmup_prompts, "warm-up requests (default min(num-prompts, max-concurrency); 0 = none)");
  app.add_option("--warmup-output-len", o.warmup_output_len, "output tokens per warm-up request")->check(CLI::PositiveNumber);
  app.add_option("--temperature", o.temperature, "sampling temperature (vLLM's bench uses 1.0; 0 = greedy)")->check(CLI::NonNegativeNumber);
  app.add_flag("--disable-detokenize", o.disable_detokenize, "do not detokenize outputs");
  app.add_option("--seed", o.seed, "seed of the random prompts and of the engine");
  app.add_option("--max-num-batched-tokens", cfg.max_num_batched_tokens);
  app.add_option("--max-model-len", cfg.max_model_len, "0 = the model's max_position_embeddings");
  CLI::Option* kv_opt = app.add_option("--kv-cache-memory", cfg.kv_cache_memory,
                                       "bytes of KV-cache state (the budget on the CPU; a cap on a GPU)");
  app.add_option("--gpu-memory-utilization", cfg.gpu_memory_utilization,
                 "GPU: fraction of device memory for weights + activations + cache (default 0.9)");
  app.add_flag("--batch-invariant", cfg.batch_invariant, "batch-invariant kernels");
  app.add_flag("--fp8-activations", cfg.fp8_activations,
               "CUDA: e4m3 activations + block-scaled FP8 GEMM for FP8 weights at prefill sizes");
  app.add_flag("--enforce-eager", cfg.enforce_eager,
               "CUDA: launch every decode op one by one (no CUDA graphs; same outputs)");
  app.add_option("--block-size", cfg.block_size, "window rows per cache block");
  app.add_flag("--device-token-feedback,!--no-device-token-feedback", cfg.device_token_feedback,
               "queue decode step N+1 before step N's sampled ids reach the host (default on; same "
               "outputs)");
  app.add_option("--output-json", o.output_json, "write the results as JSON to this file");
  if (const int rc = cli::parse_taking_last(app, argc, argv); rc >= 0) return rc;
  cfg.kv_cache_memory_set = kv_opt->count() > 0;
  cfg.max_num_seqs = max_concurrency;
  cfg.seed = o.seed;
  if (cfg.max_model_len > 0 && o.input_len + o.output_len > cfg.max_model_len) {
    return fail("--input-len + --output-len = " + std::to_string(o.input_len + o.output_len) +
                " exceeds --max-model-len " + std::to_string(cfg.max_model_len));
  }

  const auto t_load = Clock::now();
  auto engine_or = Engine::create(cfg);
  if (!engine_or.ok()) return fail(engine_or.status().to_string());
  std::unique_ptr<Engine> engine = std::move(engine_or).value();
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();

  auto prompts_or = random_prompts(*engine, o.num_prompts, o.input_len, o.seed);
  if (!prompts_or.ok()) return fail(prompts_or.status().to_string());
  const auto& prompts = *prompts_or;

  SamplingParams sp;
  sp.temperature = o.temperature;
  sp.ignore_eos = true;
  sp.max_tokens = o.output_len;
  sp.detokenize = !o.disable_detokenize;

  // Warm-up: same prompt length, a few output tokens, different prompts (no prefix reuse).
  const int n_warm = o.warmup_prompts < 0 ? std::min(o.num_prompts, max_concurrency) : o.warmup_prompts;
  double warm_s = 0;
  if (n_warm > 0) {
    auto warm_prompts = random_prompts(*engine, n_warm, o.input_len, o.seed ^ 0x9e3779b97f4a7c15ULL);
    if (!warm_prompts.ok()) return fail(warm_prompts.status().to_string());
    SamplingParams wp = sp;
    const int warm_len = std::min(o.warmup_output_len, o.output_len);
    wp.max_tokens = warm_len;
    auto w = run_batch(*engine, *warm_prompts, wp, warm_len, "warmup");
    if (!w.ok()) return fail("warm-up: " + w.status().to_string());
    warm_s = w->elapsed_s;
  }
  const EngineStats before = engine->stats();

  RunResult total;
  std::vector<double> iter_s;
  const int iters = o.mode == "latency" ? o.num_iters : 1;
  for (int it = 0; it < iters; ++it) {
    auto r = run_batch(*engine, prompts, sp, o.output_len, "bench" + std::to_string(it));
    if (!r.ok()) return fail(r.status().to_string());
    iter_s.push_back(r->elapsed_s);
    total.elapsed_s += r->elapsed_s;
    total.input_tokens += r->input_tokens;
    total.output_tokens += r->output_tokens;
    for (double x : r->ttft_s) total.ttft_s.push_back(x);
    for (double x : r->tpot_s) total.tpot_s.push_back(x);
    for (double x : r->e2e_s) total.e2e_s.push_back(x);
  }
  const EngineStats after = engine->stats();
  const int64_t n_requests = static_cast<int64_t>(prompts.size()) * iters;
  const double el = total.elapsed_s;

  nlohmann::json j;
  j["mode"] = o.mode;
  j["model"] = engine->model_dir();
  j["device"] = cfg.device;
  j["input_len"] = o.input_len;
  j["output_len"] = o.output_len;
  j["num_prompts"] = o.num_prompts;
  j["max_concurrency"] = max_concurrency;
  j["num_iters"] = iters;
  j["temperature"] = o.temperature;
  j["seed"] = o.seed;
  j["num_requests"] = n_requests;
  j["num_input_tokens"] = total.input_tokens;
  j["num_output_tokens"] = total.output_tokens;
  j["elapsed_time"] = el;
  j["requests_per_second"] = el > 0 ? n_requests / el : 0.0;
  j["input_tokens_per_second"] = el > 0 ? total.input_tokens / el : 0.0;
  j["output_tokens_per_second"] = el > 0 ? total.output_tokens / el : 0.0;
  j["total_tokens_per_second"] = el > 0 ? (total.input_tokens + total.output_tokens) / el : 0.0;
  j["ttft_ms"] = summary_ms(total.ttft_s);
  j["tpot_ms"] = summary_ms(total.tpot_s);
  j["e2e_latency_ms"] = summary_ms(total.e2e_s);
  if (o.mode == "latency") j["iteration_latency_ms"] = summary_ms(iter_s);
  j["load_time_s"] = load_s;
  j["warmup"] = {{"prompts", n_warm}, {"output_len", std::min(o.warmup_output_len, o.output_len)}, {"elapsed_time", warm_s}};
  j["engine_config"] = config_json(engine->config());
  j["engine_stats"] = {{"steps", after.num_steps - before.num_steps},
                       {"prompt_tokens_computed", after.num_prompt_tokens - before.num_prompt_tokens},
                       {"generated_tokens", after.num_generated_tokens - before.num_generated_tokens},
                       {"preemptions", after.num_preemptions - before.num_preemptions},
                       {"kv", after.kv_summary}};
  j["host_threads"] = std::thread::hardware_concurrency();

  const auto& t = j["ttft_ms"];
  const auto& p = j["tpot_ms"];
  std::printf("=== deepinfer bench (%s) ===\n", o.mode.c_str());
  std::printf("model            %s on %s (loaded in %.2f s)\n", engine->model_dir().c_str(), cfg.device.c_str(), load_s);
  std::printf("engine           max_num_seqs %d, max_num_batched_tokens %lld, block_size %d, kv %s\n",
              engine->config().max_num_seqs, static_cast<long long>(engine->config().max_num_batched_tokens),
              engine->config().block_size, after.kv_summary.c_str());
  std::printf("workload         %d prompts x (%d in, %d out)%s, temperature %g, seed %llu\n", o.num_prompts,
              o.input_len, o.output_len, iters > 1 ? (" x " + std::to_string(iters) + " iterations").c_str() : "",
              o.temperature, static_cast<unsigned long long>(o.seed));
  std::printf("warm-up          %d prompts x %d out in %.2f s\n", n_warm, std::min(o.warmup_output_len, o.output_len), warm_s);
  std::printf("total time       %.3f s (%lld steps, %lld preemptions)\n", el,
              static_cast<long long>(j["engine_stats"]["steps"].get<int64_t>()),
              static_cast<long long>(j["engine_stats"]["preemptions"].get<int64_t>()));
  std::printf("tokens           %lld input, %lld output\n", static_cast<long long>(total.input_tokens),
              static_cast<long long>(total.output_tokens));
  std::printf("throughput       %.2f requests/s, %.1f input tok/s, %.1f output tok/s, %.1f total tok/s\n",
              j["requests_per_second"].get<double>(), j["input_tokens_per_second"].get<double>(),
              j["output_tokens_per_second"].get<double>(), j["total_tokens_per_second"].get<double>());
  std::printf("TTFT             mean %.2f ms, p50 %.2f ms, p99 %.2f ms\n", t["mean"].get<double>(),
              t["p50"].get<double>(), t["p99"].get<double>());
  std::printf("TPOT             mean %.3f ms, p50 %.3f ms, p99 %.3f ms\n", p["mean"].get<double>(),
              p["p50"].get<double>(), p["p99"].get<double>());
  if (o.mode == "latency") {
    const auto& l = j["iteration_latency_ms"];
    std::printf("batch latency    mean %.2f ms, p50 %.2f ms, p99 %.2f ms over %d iterations\n",
                l["mean"].get<double>(), l["p50"].get<double>(), l["p99"].get<double>(), iters);
  }
  if (!o.output_json.empty()) {
    std::ofstream f(o.output_json);
    if (!f) return fail("cannot write --output-json '" + o.output_json + "'");
    f << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

DI_REGISTER_COMMAND("bench", "engine throughput / latency benchmark on random prompts", run_bench);

}  // namespace deepinfer::cli
