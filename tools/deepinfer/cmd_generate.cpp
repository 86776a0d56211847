// `deepinfer generate`: offline batch generation through the full engine (continuous batching,
// chunked prefill, preemption), with vLLM's flag names.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <utility>
#include <unistd.h>

#include "backend/make_backend.h"
#include "common/logging.h"
#include "deepinfer/llm.h"
#include "dist/parallel_config.h"
#include "engine/expert_parallel_hook.h"  // visible_gpu_count
#include "tokenizer/chat_dsv4.h"
#include "tokenizer/tokenizer.h"
#include "tools/deepinfer/cli_parse.h"
#include "tools/deepinfer/command.h"
#include "tools/deepinfer/generate_common.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kDefaultModel = "deepseek-ai/DeepSeek-V4.1-Flash-1017";

Status parse_structured_outputs(const nlohmann::json& j, StructuredOutputsParams* so);

// Per-line sampling overrides in --input JSONL use the same names as the flags (snake_case, as in
// vLLM's SamplingParams). Unknown keys are an error, never ignored.
Status apply_json_params(const nlohmann::json& j, SamplingParams* p) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const auto& v = it.value();
    try {
      if (k == "prompt" || k == "prompt_token_ids" || k == "messages" || k == "id") continue;
      if (k == "n") p->n = v.get<int>();
      else if (k == "temperature") p->temperature = v.get<float>();
      else if (k == "top_p") p->top_p = v.get<float>();
      else if (k == "top_k") p->top_k = v.get<int>();
      else if (k == "min_p") p->min_p = v.get<float>();
      else if (k == "seed") p->seed = v.get<uint64_t>();
      else if (k == "max_tokens") p->max_tokens = v.get<int>();
      else if (k == "min_tokens") p->min_tokens = v.get<int>();
      else if (k == "stop") p->stop = v.is_string() ? std::vector<std::string>{v.get<std::string>()} : v.get<std::vector<std::string>>();
      else if (k == "stop_token_ids") p->stop_token_ids = v.get<std::vector<int32_t>>();
      else if (k == "ignore_eos") p->ignore_eos = v.get<bool>();
      else if (k == "repetition_penalty") p->repetition_penalty = v.get<float>();
      else if (k == "presence_penalty") p->presence_penalty = v.get<float>();
      else if (k == "frequency_penalty") p->frequency_penalty = v.get<float>();
      else if (k == "logprobs") p->logprobs = v.get<int>();
      else if (k == "skip_special_tokens") p->skip_special_tokens = v.get<bool>();
      else if (k == "include_stop_str_in_output") p->include_stop_str_in_output = v.get<bool>();
      else if (k == "structured_outputs") {
        StructuredOutputsParams so;
        DI_RETURN_IF_ERROR(parse_structured_outputs(v, &so));
        p->structured_outputs = so;
      }
      else return InvalidArgument("unknown key '" + k + "'");
    } catch (const nlohmann::json::exception& e) {
      return InvalidArgument("key '" + k + "': " + e.what());
    }
  }
  return OkStatus();
}

// `structured_outputs` of an --input line, vLLM's shape: {"json": schema object or its text} |
// {"regex": "..."} | {"grammar": "..."} | {"json_object": true}, plus optional "lenient" (bool),
// "whitespace" ("flexible" | "compact"), "format_mode" ("assert" | "annotation") and
// "grammar_syntax" ("auto" | "gbnf" | "lark").
Status parse_structured_outputs(const nlohmann::json& j, StructuredOutputsParams* so) {
  if (!j.is_object()) return InvalidArgument("structured_outputs must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const auto& v = it.value();
    try {
      if (k == "json") so->json = v.is_string() ? v.get<std::string>() : v.dump();
      else if (k == "regex") so->regex = v.get<std::string>();
      else if (k == "grammar") so->grammar = v.get<std::string>();
      else if (k == "json_object") so->json_object = v.get<bool>();
      else if (k == "lenient") so->lenient = v.get<bool>();
      else if (k == "format_mode") {
        const auto f = v.get<std::string>();
        if (f != "assert" && f != "annotation") return InvalidArgument("structured_outputs.format_mode must be assert or annotation");
        so->format = f == "annotation" ? StructuredOutputsParams::Format::kAnnotation
                                       : StructuredOutputsParams::Format::kAssert;
      }
      else if (k == "whitespace") {
        const auto w = v.get<std::string>();
        if (w != "flexible" && w != "compact") return InvalidArgument("structured_outputs.whitespace must be flexible or compact");
        so->whitespace = w == "compact" ? StructuredOutputsParams::Whitespace::kCompact
                                        : StructuredOutputsParams::Whitespace::kFlexible;
      } else if (k == "grammar_syntax") {
        const auto g = v.get<std::string>();
        if (g == "auto") so->grammar_syntax = StructuredOutputsParams::GrammarSyntax::kAuto;
        else if (g == "gbnf") so->grammar_syntax = StructuredOutputsParams::GrammarSyntax::kGbnf;
        else if (g == "lark") so->grammar_syntax = StructuredOutputsParams::GrammarSyntax::kLark;
        else return InvalidArgument("structured_outputs.grammar_syntax must be auto, gbnf or lark");
      } else {
        return InvalidArgument("unknown key 'structured_outputs." + k + "'");
      }
    } catch (const nlohmann::json::exception& e) {
      return InvalidArgument("key 'structured_outputs." + k + "': " + e.what());
    }
  }
  return so->validate();
}

StatusOr<std::string> read_text_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(std::string(flag) + ": cannot open '" + path + "'");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

namespace gen {

// Everything as token ids, so prompts, ids and chat messages share one batch. `tok` may be null
// (a model without tokenizer.json: token-id prompts only). Sets *error instead on failure.
void encode_item(const Item& item, const tokenizer::Tokenizer* tok, std::vector<int32_t>* ids,
                 std::string* error) {
  if (item.has_ids) {
    *ids = item.ids;
    return;
  }
  std::string text = item.prompt;
  bool special = true;
  if (!item.messages.is_null()) {
    auto chat = tokenizer::apply_chat_template(item.messages, tokenizer::ChatOptions{});
    if (!chat.ok()) { *error = chat.status().to_string(); return; }
    text = *chat;
    special = false;  // the encoding carries its own BOS
  }
  if (tok == nullptr) {
    *error = "the model has no tokenizer.json: use prompt_token_ids (or --tokenizer DIR)";
    return;
  }
  auto enc = tok->encode(text, special);
  if (!enc.ok()) { *error = enc.status().to_string(); return; }
  *ids = std::move(enc).value();
}

// Prints (and writes to --output) every request in order, then the summary; the exit code.
// outs[i]: the output of items[i] (a failed one has .error set); prompt_tokens[i]: its length.
int report(const std::vector<Item>& items, std::vector<RequestOutput>& outs,
           const std::vector<int64_t>& prompt_tokens, const std::string& output, bool quiet,
           const RunSummary& summary) {
  std::ofstream out_file;
  if (!output.empty()) {
    out_file.open(output);
    if (!out_file) {
      std::fprintf(stderr, "deepinfer generate: cannot write --output '%s'\n", output.c_str());
      return 2;
    }
  }
  const double gen_s = summary.gen_s;
  int64_t n_prompt = 0, n_out = 0, n_failed = 0;
  std::vector<double> ttft, tpot;
  for (size_t i = 0; i < items.size(); ++i) {
    RequestOutput& r = outs[i];
    const bool failed = !r.error.empty();
    n_failed += failed;
    n_prompt += prompt_tokens[i];
    const double total_s = r.metrics.finished_time - r.metrics.arrival_time;
    size_t max_len = 0;
    for (const auto& c : r.outputs) {
      n_out += static_cast<int64_t>(c.token_ids.size());
      max_len = std::max(max_len, c.token_ids.size());
    }
    if (!failed && r.metrics.first_token_time > 0) {
      ttft.push_back(r.metrics.ttft());
      if (max_len > 1) tpot.push_back((r.metrics.finished_time - r.metrics.first_token_time) / (max_len - 1));
    }
    nlohmann::json j;
    j["index"] = i;
    if (failed) j["error"] = r.error;
    nlohmann::json seqs = nlohmann::json::array();
    for (const auto& c : r.outputs) {
      nlohmann::json sj{{"text", c.text}, {"token_ids", c.token_ids}, {"finish_reason", c.finish_reason}};
      if (c.stop_reason) sj["stop_reason"] = *c.stop_reason;
      if (!c.logprobs.empty()) {
        nlohmann::json lp = nlohmann::json::array();
        for (const auto& t : c.logprobs) {
          nlohmann::json top = nlohmann::json::array();
          for (const auto& [tid, l] : t.top_logprobs) top.push_back({tid, l});
          lp.push_back({{"token", t.token}, {"logprob", t.logprob}, {"rank", t.rank}, {"top", top}});
        }
        sj["logprobs"] = lp;
      }
      seqs.push_back(sj);
    }
    j["outputs"] = seqs;
    j["prompt_tokens"] = prompt_tokens[i];
    j["timings"] = {{"ttft_s", r.metrics.ttft()}, {"total_s", total_s}, {"preemptions", r.metrics.num_preemptions}};
    if (out_file) out_file << j.dump() << "\n";
    if (!quiet) {
      const std::string shown = items[i].has_ids ? "<" + std::to_string(prompt_tokens[i]) + " token ids>"
                                : !items[i].messages.is_null() ? "<chat>" : items[i].prompt;
      if (failed) {
        std::printf("[%zu] %s\n  ERROR: %s\n", i, shown.c_str(), r.error.c_str());
      } else {
        for (const auto& c : r.outputs) {
          std::printf("[%zu%s] %s%s\n  (%zu tokens, %s)\n", i, r.outputs.size() > 1 ? ("." + std::to_string(c.index)).c_str() : "",
                      shown.c_str(), c.text.c_str(), c.token_ids.size(), c.finish_reason.c_str());
        }
      }
    }
  }
  std::printf("\n=== deepinfer generate: %zu requests (%lld failed) ===\n", items.size(), static_cast<long long>(n_failed));
  std::printf("model       %s (loaded in %.2f s)\n", summary.model_dir.c_str(), summary.load_s);
  if (!summary.ranks_line.empty()) std::printf("ranks       %s\n", summary.ranks_line.c_str());
  std::printf("tokens      %lld prompt, %lld generated in %.2f s\n", static_cast<long long>(n_prompt), static_cast<long long>(n_out), gen_s);
  std::printf("throughput  %.1f output tok/s, %.1f total tok/s, %.2f req/s\n", gen_s > 0 ? n_out / gen_s : 0.0,
              gen_s > 0 ? (n_prompt + n_out) / gen_s : 0.0, gen_s > 0 ? items.size() / gen_s : 0.0);
  std::printf("TTFT        p50 %.1f ms, p99 %.1f ms\n", 1e3 * percentile(ttft, 0.5), 1e3 * percentile(ttft, 0.99));
  std::printf("TPOT        p50 %.2f ms, p99 %.2f ms\n", 1e3 * percentile(tpot, 0.5), 1e3 * percentile(tpot, 0.99));
  std::printf("engine      %s\n", summary.engine_line.c_str());
  return n_failed > 0 && n_failed == static_cast<int64_t>(items.size()) ? 1 : 0;
}

}  // namespace gen

namespace {

using gen::encode_item;
using gen::Item;
using gen::RankFlags;
using gen::report;
using gen::run_data_parallel;
using gen::RunSummary;

int run_generate(int argc, char** argv) {
  CLI::App app{"Offline batch generation: prompts in, text and throughput out."};
  EngineConfig cfg;
  std::vector<std::string> prompts;
  std::string input, output;
  SamplingParams sp;
  int max_tokens = 16;
  std::optional<uint64_t> seed;
  std::optional<int> logprobs;
  bool quiet = false;
  std::string json_schema_file, regex, grammar_file;
  app.add_option("--model", cfg.model, "model directory or Hub id (default: $DEEPINFER_MODEL_PATH, else " + std::string(kDefaultModel) + ")");
  app.add_option("--tokenizer", cfg.tokenizer, "tokenizer directory (default: the model's)");
  app.add_option("--prompt", prompts, "a prompt (repeatable)");
  app.add_option("--input", input, "JSONL: {\"prompt\"|\"prompt_token_ids\"|\"messages\": ..., optional sampling keys and structured_outputs}");
  app.add_option("--output", output, "JSONL results: text, token_ids, finish_reason, timings");
  app.add_option("--max-tokens", max_tokens, "output tokens per sequence")->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", sp.temperature, "0 = greedy");
  app.add_option("--top-p", sp.top_p);
  app.add_option("--top-k", sp.top_k);
  app.add_option("--min-p", sp.min_p);
  app.add_option("--n", sp.n, "sequences per prompt");
  app.add_option("--seed", seed, "engine seed (requests without their own seed derive one from it)");
  app.add_option("--stop", sp.stop, "stop string (repeatable)");
  app.add_option("--stop-token-ids", sp.stop_token_ids);
  app.add_flag("--ignore-eos", sp.ignore_eos);
  app.add_option("--repetition-penalty", sp.repetition_penalty);
  app.add_option("--presence-penalty", sp.presence_penalty);
  app.add_option("--frequency-penalty", sp.frequency_penalty);
  app.add_option("--logprobs", logprobs, "top log-probabilities per output token");
  app.add_option("--max-num-seqs", cfg.max_num_seqs);
  app.add_option("--max-num-batched-tokens", cfg.max_num_batched_tokens);
  app.add_option("--max-model-len", cfg.max_model_len, "0 = the model's max_position_embeddings");
  CLI::Option* kv_opt = app.add_option(
      "--kv-cache-memory", cfg.kv_cache_memory,
      "bytes of KV-cache state (the budget on the CPU; a cap on a GPU)");
  app.add_option("--gpu-memory-utilization", cfg.gpu_memory_utilization,
                 "GPU: fraction of device memory for weights + activations + cache (default 0.9)");
  app.add_flag("--batch-invariant", cfg.batch_invariant,
               "kernels whose per-request results do not depend on the batch (bitwise)");
  app.add_flag("--fp8-activations", cfg.fp8_activations,
               "CUDA: FP8 weights at prefill sizes via e4m3 activations + block-scaled FP8 GEMM (lossy)");
  app.add_flag("--enforce-eager", cfg.enforce_eager,
               "CUDA: launch every decode op one by one (no CUDA graphs; same outputs)");
  app.add_option("--block-size", cfg.block_size, "window rows per cache block");
  app.add_option("--device", cfg.device, "cpu (default), cpu-reference, cuda, cuda:N");
  app.add_flag("--async-scheduling,!--no-async-scheduling", cfg.async_scheduling,
               "schedule step N+1 while step N runs (default on; outputs are identical either way)");
  app.add_flag("--device-token-feedback,!--no-device-token-feedback", cfg.device_token_feedback,
               "queue decode step N+1 before step N's sampled ids reach the host (default on; same "
               "outputs)");
  app.add_option("--json-schema", json_schema_file, "constrain every output to this JSON Schema (file)");
  app.add_option("--regex", regex, "constrain every output to match this regex (whole output)");
  app.add_option("--grammar", grammar_file, "constrain every output to this grammar (GBNF file; .lark: Lark)");
  app.add_flag("--quiet", quiet, "print only the summary");
  dist::ParallelFlags parallel;  // vLLM's flags; see dist/parallel_config.h for what runs
  app.add_option("--tensor-parallel-size", parallel.tensor_parallel_size, "tensor-parallel ranks: each holds a 1/N shard of the attention heads and expert widths, every rank runs every prompt (DeepSeek-V4; one process per GPU on cuda, threads on the CPU)");
  app.add_option("--data-parallel-size", parallel.data_parallel_size, "attention data-parallel ranks: one process per GPU on cuda (rank r on cuda:r), threads on the CPU (test mode)");
  app.add_flag("--enable-expert-parallel", parallel.enable_expert_parallel, "shard the routed experts over the data-parallel ranks (DeepSeek-V4; at one rank: the expert-parallel MoE path in process)");
  app.add_flag("--enable-eplb", cfg.enable_eplb, "with --enable-expert-parallel: re-place the experts from observed load between steps (EPLB; turns async scheduling off)");
  app.add_option("--num-redundant-experts", cfg.num_redundant_experts, "EPLB: extra expert slots over all ranks for replicas of hot experts (0)");
  app.add_option("--eplb-window-size", cfg.eplb_window_size, "EPLB: steps of router load summed (1000)");
  app.add_option("--eplb-step-interval", cfg.eplb_step_interval, "EPLB: steps between rebalances (3000)");
  app.add_option("--context-parallel-size", parallel.context_parallel_size, "context-parallel ranks: every rank runs every prompt, long prefill chunks are split over them (DeepSeek-V4; one process per GPU on cuda, threads on the CPU)");
  app.add_option("--context-parallel-min-tokens", cfg.context_parallel_min_tokens, "context parallel: prefill chunks of at least this many tokens are split (1024)");
  app.add_option("--context-parallel-block", cfg.context_parallel_block, "context parallel: rows per dealt block of a split chunk (16)");
  RankFlags rank_flags;  // the launcher's, hidden (group "")
  app.add_option("--dp-rank", rank_flags.rank, "internal: this process is that data-parallel rank")->group("");
  app.add_option("--dp-nccl-id", rank_flags.nccl_id, "internal: the group's NCCL unique id (hex)")->group("");
  app.add_option("--dp-results", rank_flags.results, "internal: where this rank writes its results")->group("");
  if (const int rc = cli::parse_taking_last(app, argc, argv); rc >= 0) return rc;
  if (rank_flags.rank < 0) {  // a rank process was checked by its launcher
    // GPUs on this machine, counted only when more than one rank is asked for (the error names
    // them): cudaGetDeviceCount when the build has NCCL (no context is made), else by opening them.
    int gpus = -1;
    if (parallel.world_size() > 1 && cfg.device.rfind("cuda", 0) == 0) {
      gpus = engine::visible_gpu_count();
      if (gpus < 0) {
        gpus = 0;
        while (gpus < parallel.world_size() && backend::make_backend("cuda:" + std::to_string(gpus)).ok()) ++gpus;
      }
    }
    if (Status st = dist::check_parallel_flags(parallel, cfg.device, gpus); !st.ok()) {
      std::fprintf(stderr, "deepinfer generate: %s\n", st.message().c_str());
      return 2;
    }
  }
  cfg.enable_expert_parallel = parallel.enable_expert_parallel;
  sp.max_tokens = max_tokens;
  sp.logprobs = logprobs;
  cfg.kv_cache_memory_set = kv_opt->count() > 0;
  if (!json_schema_file.empty() + !regex.empty() + !grammar_file.empty() > 1) {
    std::fprintf(stderr, "deepinfer generate: --json-schema, --regex and --grammar are exclusive\n");
    return 2;
  }
  if (!json_schema_file.empty() || !regex.empty() || !grammar_file.empty()) {
    StructuredOutputsParams so;
    if (!regex.empty()) so.regex = regex;
    for (const auto& [file, flag] : {std::pair{json_schema_file, "--json-schema"}, std::pair{grammar_file, "--grammar"}}) {
      if (file.empty()) continue;
      auto text = read_text_file(file, flag);
      if (!text.ok()) {
        std::fprintf(stderr, "deepinfer generate: %s\n", text.status().message().c_str());
        return 2;
      }
      if (std::string(flag) == "--json-schema") so.json = *text;
      else so.grammar = *text;
      if (std::string(flag) == "--grammar" && file.size() > 5 && file.substr(file.size() - 5) == ".lark") {
        so.grammar_syntax = StructuredOutputsParams::GrammarSyntax::kLark;
      }
    }
    sp.structured_outputs = so;
  }
  if (seed) cfg.seed = *seed;
  if (cfg.model.empty()) cfg.model = kDefaultModel;  // DEEPINFER_MODEL_PATH overrides inside resolve

  // Requests: --prompt values, then --input lines.
  std::vector<Item> items;
  for (auto& p : prompts) items.push_back({p, {}, false, nullptr, sp});
  if (!input.empty()) {
    std::ifstream in(input);
    if (!in) {
      std::fprintf(stderr, "deepinfer generate: cannot open --input '%s'\n", input.c_str());
      return 2;
    }
    std::string line;
    for (int ln = 1; std::getline(in, line); ++ln) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      Item it{"", {}, false, nullptr, sp};
      try {
        auto j = nlohmann::json::parse(line);
        if (!j.is_object()) throw std::runtime_error("not a JSON object");
        if (j.contains("prompt")) it.prompt = j["prompt"].get<std::string>();
        else if (j.contains("prompt_token_ids")) it.ids = j["prompt_token_ids"].get<std::vector<int32_t>>(), it.has_ids = true;
        else if (j.contains("messages")) it.messages = j["messages"];
        else throw std::runtime_error("needs one of prompt, prompt_token_ids, messages");
        Status st = apply_json_params(j, &it.params);
        if (!st.ok()) throw std::runtime_error(st.message());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "deepinfer generate: %s line %d: %s\n", input.c_str(), ln, e.what());
        return 2;
      }
      items.push_back(std::move(it));
    }
  }
  if (items.empty()) {
    std::fprintf(stderr, "deepinfer generate: no prompts (use --prompt or --input)\n");
    return 2;
  }

  if (parallel.context_parallel_size != 1 || parallel.tensor_parallel_size != 1) {
    // context or tensor parallel: the lockstep-group launcher (cmd_generate_cp.cpp) checks its flags
    return gen::run_context_parallel(argc, argv, cfg, parallel, rank_flags, items, output, quiet);
  }
  if (parallel.data_parallel_size > 1 || rank_flags.rank >= 0) {
    return run_data_parallel(argc, argv, cfg, parallel, rank_flags, items, output, quiet);
  }

  const auto t_load = std::chrono::steady_clock::now();
  auto llm_or = LLM::create(cfg);
  if (!llm_or.ok()) {
    std::fprintf(stderr, "deepinfer generate: %s\n", llm_or.status().to_string().c_str());
    if (llm_or.status().code() == StatusCode::kUnavailable || llm_or.status().code() == StatusCode::kNotFound) {
      std::fprintf(stderr, "  (no local copy of '%s' and it could not be downloaded: pass --model DIR "
                           "or set DEEPINFER_MODEL_PATH)\n", cfg.model.c_str());
    }
    return 1;
  }
  auto llm = std::move(llm_or).value();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  const tokenizer::Tokenizer* tok = llm->engine().tokenizer();

  std::vector<std::vector<int32_t>> ids(items.size());
  std::vector<SamplingParams> params(items.size());
  std::vector<std::string> input_errors(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    params[i] = items[i].params;
    encode_item(items[i], tok, &ids[i], &input_errors[i]);
  }

  const auto t0 = std::chrono::steady_clock::now();
  const bool tty = isatty(fileno(stderr));
  size_t last_done = static_cast<size_t>(-1);
  auto last_print = std::chrono::steady_clock::now();
  auto progress = [&](size_t done, size_t total) {
    // A TTY gets a live line (at most 10 updates/s); a log gets a line when a request finishes.
    const auto now = std::chrono::steady_clock::now();
    if (quiet || (tty ? now - last_print < std::chrono::milliseconds(100) && done != total
                      : done == last_done)) {
      return;
    }
    last_done = done;
    last_print = now;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto st = llm->engine().stats();
    std::fprintf(stderr, "%s[generate] %zu/%zu requests, %.1f output tok/s%s", tty ? "\r" : "", done,
                 total, s > 0 ? st.num_generated_tokens / s : 0.0, tty ? "" : "\n");
  };
  // Requests that failed to encode still get an (error) output, in order.
  std::vector<std::vector<int32_t>> run_ids;
  std::vector<SamplingParams> run_params;
  std::vector<size_t> run_index;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!input_errors[i].empty()) continue;
    run_ids.push_back(ids[i]);
    run_params.push_back(params[i]);
    run_index.push_back(i);
  }
  std::vector<RequestOutput> outs(items.size());
  if (!run_ids.empty()) {
    auto res = llm->generate(run_ids, run_params, progress);
    if (!res.ok()) {
      std::fprintf(stderr, "\ndeepinfer generate: engine failed: %s\n", res.status().to_string().c_str());
      return 1;
    }
    for (size_t j = 0; j < run_index.size(); ++j) outs[run_index[j]] = std::move((*res)[j]);
  }
  const double gen_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet && tty) std::fprintf(stderr, "\n");

  std::vector<int64_t> prompt_tokens(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    prompt_tokens[i] = static_cast<int64_t>(ids[i].size());
    if (input_errors[i].empty()) continue;
    outs[i].error = input_errors[i];
    outs[i].outputs.assign(1, CompletionOutput{});
    outs[i].outputs[0].finish_reason = "error";
  }
  const auto st = llm->engine().stats();
  RunSummary summary;
  summary.model_dir = llm->engine().model_dir();
  summary.load_s = load_s;
  summary.gen_s = gen_s;
  summary.engine_line = std::to_string(st.num_steps) + " steps, " + std::to_string(st.num_preemptions) +
                        " preemptions" +
                        (cfg.enable_eplb ? ", " + std::to_string(st.num_eplb_rebalances) + " EPLB rebalances"
                                         : std::string()) +
                        "; kv " + st.kv_summary;
  return report(items, outs, prompt_tokens, output, quiet, summary);
}

}  // namespace

DI_REGISTER_COMMAND("generate", "offline batch generation with the full engine", run_generate);

}  // namespace deepinfer::cli
