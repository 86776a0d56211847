// Offline batch inference, shaped like vLLM's `LLM`:
//
//   EngineConfig cfg;  cfg.model = "tests/data/models/deepseek-v4-tiny-stories";
//   DI_ASSIGN_OR_RETURN(auto llm, LLM::create(cfg));
//   SamplingParams p;  p.temperature = 0;  p.max_tokens = 64;
//   DI_ASSIGN_OR_RETURN(auto outs, llm->generate({"Once upon a time"}, p));
//
// Every prompt gets an output in input order. A prompt that fails (bad params, too long) gets an
// output with finish_reason "error" and its message; the others are unaffected.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/engine.h"

namespace deepinfer {

class LLM {
 public:
  static StatusOr<std::unique_ptr<LLM>> create(const EngineConfig& config);

  // Called after every engine step with (requests finished so far, total requests).
  using Progress = std::function<void(size_t done, size_t total)>;

  StatusOr<std::vector<RequestOutput>> generate(const std::vector<std::string>& prompts,
                                                const SamplingParams& params,
                                                const Progress& progress = {});
  StatusOr<std::vector<RequestOutput>> generate(
      const std::vector<std::vector<int32_t>>& prompt_token_ids, const SamplingParams& params,
      const Progress& progress = {});
  // Per-prompt parameters (same length as prompts).
  StatusOr<std::vector<RequestOutput>> generate(const std::vector<std::string>& prompts,
                                                const std::vector<SamplingParams>& params,
                                                const Progress& progress = {});
  StatusOr<std::vector<RequestOutput>> generate(
      const std::vector<std::vector<int32_t>>& prompt_token_ids,
      const std::vector<SamplingParams>& params, const Progress& progress = {});

  Engine& engine() { return *engine_; }

 private:
  explicit LLM(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {}
  template <typename Prompt>
  StatusOr<std::vector<RequestOutput>> run(const std::vector<Prompt>& prompts,
                                           const std::vector<SamplingParams>& params,
                                           const Progress& progress);
  std::unique_ptr<Engine> engine_;
  uint64_t next_id_ = 0;
};

}  // namespace deepinfer
