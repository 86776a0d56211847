#include "common/env.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "common/logging.h"

namespace deepinfer {

namespace {

std::optional<std::string> get(const char* name) {
  const char* v = std::getenv(name);  // the only getenv in deepinfer
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string trim(std::string s) {
  auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

// An integer switch: `name` set to a decimal lo..hi (exactly, no sign or padding) sets *field;
// anything else is warned about and leaves *field (`kept` names it in the warning).
void read_int(const char* name, int lo, int hi, int* field, const std::string& kept) {
  const auto v = get(name);
  if (!v) return;
  const int n = std::atoi(v->c_str());
  if (n >= lo && n <= hi && std::to_string(n) == *v)
    *field = n;
  else
    log_warning(std::string(name) + "='" + *v + "' is not " + std::to_string(lo) + ".." +
                std::to_string(hi) + "; using " + kept);
}

}  // namespace

bool env_value_is_true(const std::string& v) {
  std::string l;
  for (char c : v) l.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return l == "1" || l == "true" || l == "yes" || l == "on";
}

Env Env::from_process() {
  Env e;
  e.model_path = get("DEEPINFER_MODEL_PATH");
  if (auto v = get("DEEPINFER_LOG_LEVEL")) e.log_level = *v;
  if (auto v = get("DEEPINFER_NUM_THREADS")) {
    char* end = nullptr;
    long n = std::strtol(v->c_str(), &end, 10);
    if (end == v->c_str() || *end != '\0' || n < 0 || n > 4096) {
      log_warning("DEEPINFER_NUM_THREADS='" + *v +
                  "' is not a thread count in [0, 4096]; using all cores");
    } else {
      e.num_threads = static_cast<int>(n);
    }
  }
  if (auto v = get("DEEPINFER_CUDA_ATTENTION")) {
    if (*v == "simt" || *v == "fd" || *v == "auto") {
      e.cuda_attention = *v;
    } else if (*v == "tc") {
      log_warning("DEEPINFER_CUDA_ATTENTION=tc: the tensor-core kernel attention_tc was removed "
                  "(the split-key kernel fd replaces it); using auto");
    } else {
      log_warning("DEEPINFER_CUDA_ATTENTION='" + *v + "' is not simt, fd or auto; using auto");
    }
  }
  if (auto v = get("DEEPINFER_CUDA_MOE_TC")) {
    if (*v == "v1" || *v == "v2" || *v == "v2s3" || *v == "v2n256" || *v == "v3") {
      e.cuda_moe_tc = *v;
    } else {
      log_warning("DEEPINFER_CUDA_MOE_TC='" + *v + "' is not v1, v2, v2s3, v2n256 or v3; using v3");
    }
  }

  if (auto v = get("DEEPINFER_CUDA_HC")) {
    // fused_nopdl / fused_s6 (session 7): cuda_backend.cpp hc_path.
    if (*v == "fused" || *v == "composed" || *v == "fused_nopdl" || *v == "fused_s6") {
      e.cuda_hc = *v;
    } else {
      log_warning("DEEPINFER_CUDA_HC='" + *v +
                  "' is not fused, fused_nopdl, fused_s6 or composed; using fused");
    }
  }
  if (auto v = get("DEEPINFER_GEMV_DENSE")) {
    if (*v == "old" || *v == "single" || *v == "multi" || *v == "deep") e.gemv_dense = *v;
    else log_warning("DEEPINFER_GEMV_DENSE='" + *v + "' is not old, single, multi or deep; using multi");
  }
  if (auto v = get("DEEPINFER_EXPERTS_MMA")) {
    if (*v == "0" || *v == "1") e.experts_mma = *v == "1";
    else log_warning("DEEPINFER_EXPERTS_MMA='" + *v + "' is not 0 or 1; using 1");
  }
  if (auto v = get("DEEPINFER_GEMV_EXPERTS")) {
    if (*v == "1" || *v == "2") e.gemv_experts_version = *v == "1" ? 1 : 2;
    else log_warning("DEEPINFER_GEMV_EXPERTS='" + *v + "' is not 1 or 2; using 2");
  }
  if (auto v = get("DEEPINFER_PREFILL_GEMM")) {
    if (*v == "0" || *v == "1" || *v == "2" || *v == "3") e.prefill_gemm = (*v)[0] - '0';
    else log_warning("DEEPINFER_PREFILL_GEMM='" + *v + "' is not 0, 1, 2 or 3; using 1");
  }
  if (auto v = get("DEEPINFER_PREFILL_GEMM_CHUNK")) {
    char* end = nullptr;
    const long n = std::strtol(v->c_str(), &end, 10);
    if (end == v->c_str() || *end != '\0' || n < 1 || n > 256)
      log_warning("DEEPINFER_PREFILL_GEMM_CHUNK='" + *v + "' is not in [1, 256]; using 16");
    else e.prefill_gemm_chunk = static_cast<int>(n);
  }

  if (auto v = get("DEEPINFER_BI_EXPERTS")) {
    if (*v == "mma" || *v == "gemv") e.bi_experts = *v;
    else log_warning("DEEPINFER_BI_EXPERTS='" + *v + "' is not mma or gemv; using mma");
  }
  if (get("DEEPINFER_BI_LINEAR"))  // session 9: gemv_tc was deleted (linear_tc_wa: same bits, faster)
    log_warning("DEEPINFER_BI_LINEAR was removed (see DEEPINFER_SMALL_LINEAR); ignored");
  if (auto v = get("DEEPINFER_GEMV_PDL")) {
    if (*v == "0" || *v == "1") e.gemv_pdl = *v == "1";
    else log_warning("DEEPINFER_GEMV_PDL='" + *v + "' is not 0 or 1; using 1");
  }
  if (auto v = get("DEEPINFER_SMALL_PDL")) {
    if (*v == "0" || *v == "1") e.small_pdl = *v == "1";
    else log_warning("DEEPINFER_SMALL_PDL='" + *v + "' is not 0 or 1; using 1");
  }
  for (auto [name, field] : {std::pair<const char*, std::string*>{"DEEPINFER_GEMV_KERNEL", &e.gemv_kernel},
                             {"DEEPINFER_EXPERTS_KERNEL", &e.experts_kernel},
                             {"DEEPINFER_SMALL_LINEAR", &e.small_linear}}) {
    if (auto v = get(name)) {
      static const char* const kNames[] = {"auto", "s7", "v1", "v2",  "v3",  "v4",  "a", "b",
                                           "c",    "d",  "tc", "tc1", "tc2", "tc3", "w", "w1",
                                           "w2",   "w3", "x1", "x2",  "x3",  "x4"};
      // x5..x9 select session 13's routed-expert modes only, x0 session 15's (experts_mma.h).
      static const char* const kExpertsOnly[] = {"x0", "x5", "x6", "x7", "x8", "x9"};
      const bool experts = field == &e.experts_kernel;
      bool ok = false;
      for (const char* k : kNames) ok = ok || *v == k;
      for (const char* k : kExpertsOnly) ok = ok || (experts && *v == k);
      if (ok) *field = *v;
      else
        log_warning(std::string(name) + "='" + *v +
                    "' is not auto, s7, v1..v4, a..d, tc, tc1..tc3, w, w1..w3 or x1..x4" +
                    (experts ? " (or x0, x5..x9)" : "") + "; using auto");
    }
  }

  if (auto v = get("DEEPINFER_ATTENTION_KERNEL")) {
    if (*v == "auto" || *v == "fd" || *v == "x1" || *v == "x2" || *v == "x3" || *v == "x4" ||
        *v == "x5" || *v == "x6" || *v == "x7" || *v == "x8")
      e.attention_kernel = *v;
    else
      log_warning("DEEPINFER_ATTENTION_KERNEL='" + *v + "' is not auto, fd or x1..x8; using auto");
  }
  read_int("DEEPINFER_ATTENTION_BI_CHUNKS", 1, 64, &e.attention_bi_chunks, "the default");
  if (auto v = get("DEEPINFER_CUDA_GRAPHS")) {
    if (*v == "0" || *v == "1") e.cuda_graphs = *v == "1";
    else log_warning("DEEPINFER_CUDA_GRAPHS='" + *v + "' is not 0 or 1; using 1");
  }
  if (auto v = get("DEEPINFER_SIDE_STREAM")) {
    if (*v == "0" || *v == "1")
      e.side_stream = *v == "1";
    else
      log_warning("DEEPINFER_SIDE_STREAM='" + *v + "' is not 0 or 1; using 1");
  }
  if (auto v = get("DEEPINFER_HEAD_BLAS")) {
    if (*v == "0" || *v == "1" || *v == "2")
      e.head_blas = (*v)[0] - '0';
    else
      log_warning("DEEPINFER_HEAD_BLAS='" + *v + "' is not 0, 1 or 2; using 1");
  }
  read_int("DEEPINFER_HEAD_BLAS_MAX_ROWS", 16, 2048, &e.head_blas_max_rows,
           std::to_string(e.head_blas_max_rows));
  read_int("DEEPINFER_DENSE_WG", 0, 64, &e.dense_wg, std::to_string(e.dense_wg));
  read_int("DEEPINFER_DENSE_WG_MAX_ROWS", 64, 2048, &e.dense_wg_max_rows,
           std::to_string(e.dense_wg_max_rows));
  read_int("DEEPINFER_LINEAR_WR", 0, 1, &e.linear_wr, std::to_string(e.linear_wr));
  read_int("DEEPINFER_LINEAR_WG", 0, 64, &e.linear_wg, std::to_string(e.linear_wg));
  read_int("DEEPINFER_LINEAR_WG_MAX_ROWS", 64, 65536, &e.linear_wg_max_rows,
           std::to_string(e.linear_wg_max_rows));
  read_int("DEEPINFER_EXPERTS_WG", 0, 1048576, &e.experts_wg, std::to_string(e.experts_wg));
  read_int("DEEPINFER_EXPERTS_WG_VARIANT", 0, 4, &e.experts_wg_variant,
           std::to_string(e.experts_wg_variant));
  if (auto v = get("DEEPINFER_SPIN_WAIT")) {
    if (*v == "0" || *v == "1" || *v == "2")
      e.spin_wait = (*v)[0] - '0';
    else
      log_warning("DEEPINFER_SPIN_WAIT='" + *v + "' is not 0, 1 or 2; using 1");
  }
  if (auto v = get("DEEPINFER_WA_FUSED_REDUCE")) {
    if (*v == "0" || *v == "1")
      e.wa_fused_reduce = *v == "1";
    else
      log_warning("DEEPINFER_WA_FUSED_REDUCE='" + *v + "' is not 0 or 1; using 1");
  }
  if (auto v = get("DEEPINFER_DECODE_FUSION")) {
    if (*v == "0" || *v == "1")
      e.decode_fusion = *v == "1";
    else
      log_warning("DEEPINFER_DECODE_FUSION='" + *v + "' is not 0 or 1; using 1");
  }

  std::string home = get("HOME").value_or("/root");
  if (auto v = get("HF_HOME")) {
    e.hf_home = *v;
  } else if (auto x = get("XDG_CACHE_HOME")) {
    e.hf_home = *x + "/huggingface";
  } else {
    e.hf_home = home + "/.cache/huggingface";
  }
  e.hf_hub_cache = get("HF_HUB_CACHE").value_or(e.hf_home + "/hub");
  if (auto v = get("HF_ENDPOINT")) {
    std::string ep = *v;
    while (!ep.empty() && ep.back() == '/') ep.pop_back();
    e.hf_endpoint = ep;
  }
  if (auto v = get("HF_TOKEN")) {
    e.hf_token = trim(*v);
  } else {
    std::string token_path = get("HF_TOKEN_PATH").value_or(e.hf_home + "/token");
    std::ifstream f(token_path);
    if (f) {
      std::stringstream ss;
      ss << f.rdbuf();
      std::string t = trim(ss.str());
      if (!t.empty()) e.hf_token = t;
    }
  }
  if (auto v = get("HF_HUB_OFFLINE")) e.hf_hub_offline = env_value_is_true(*v);
  return e;
}

const Env& env() {
  static const Env instance = Env::from_process();
  return instance;
}

}  // namespace deepinfer
