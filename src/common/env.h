// Every environment variable deepinfer reads, read in ONE place (STYLE.md 16). Nothing else in
// the code base calls getenv. Code takes an `const Env&` where it needs one, so tests can pass a
// hand-built Env instead of mutating the process environment.
#pragma once

#include <optional>
#include <string>

namespace deepinfer {

struct Env {
  // --- deepinfer ---
  std::optional<std::string> model_path;  // DEEPINFER_MODEL_PATH: local model dir, overrides ids
  std::string log_level = "info";         // DEEPINFER_LOG_LEVEL: debug|info|warning|error
  int num_threads = 0;                    // DEEPINFER_NUM_THREADS: CPU threads (0 = all cores)
  // DEEPINFER_GEMV_EXPERTS: the CUDA routed-expert GEMV of decode batches, 2 (default: the
  // session-5 kernel, gemv_experts.cuh) or 1 (the session-4 kernel); same bits, kept to compare.
  int gemv_experts_version = 2;
  // DEEPINFER_CUDA_ATTENTION: simt|tc — the CUDA attention kernel for V4's layout (tc: the
  // tensor-core decode kernel, attention_tc.cu; simt: the fp32 CUDA-core kernel).
  std::string cuda_attention = "simt";
  // DEEPINFER_CUDA_MOE_TC: v1|v2|v2s3|v2n256 — the grouped FP4 routed-expert tensor-core GEMM
  // for prefill-sized batches (v1: linear_tc.cuh tc_kernel; v2*: moe_tc.cuh variants, same bits).
  std::string cuda_moe_tc = "v2s3";

  // --- Hugging Face hub, as huggingface_hub defines them ---
  std::string hf_home;        // HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface
  std::string hf_hub_cache;   // HF_HUB_CACHE, else $HF_HOME/hub
  std::string hf_endpoint = "https://huggingface.co";  // HF_ENDPOINT (no trailing slash)
  std::optional<std::string> hf_token;  // HF_TOKEN, else the file $HF_TOKEN_PATH / $HF_HOME/token
  bool hf_hub_offline = false;          // HF_HUB_OFFLINE (1/true/yes/on)

  // Reads the process environment. Invalid values (e.g. DEEPINFER_NUM_THREADS=abc) are reported
  // through `warnings` and replaced by the default, never silently ignored.
  static Env from_process();
};

// The process-wide Env, read once on first use.
const Env& env();

// Parses a boolean env value the way huggingface_hub does ("1", "true", "yes", "on", case-insensitive).
bool env_value_is_true(const std::string& v);

}  // namespace deepinfer
