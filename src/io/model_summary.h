// What `deepinfer inspect` prints: config summary, parameter count and bytes per dtype of a
// local model directory (config.json + safetensors).
//
// Counting rule (also in `deepinfer inspect --help`):
//   * parameters = logical weight elements of every floating-point tensor in the checkpoint;
//     a packed FP4 byte holds 2 parameters (FP4 tensors are reported as dtype F4);
//   * quantisation scale tensors (FP8 block scales, FP4 group scales: `*.scale`,
//     `*.weight_scale_inv`, F8_E8M0) are not parameters; they are counted separately;
//   * integer tables (tid2eid hash-routing tables) are not parameters; counted separately;
//   * a tied lm_head is counted once (it is not in the checkpoint); MTP (`mtp.*`) parameters are
//     included in the total and also reported on their own.
// Bytes are the stored bytes of the tensors (total = every tensor, scales and tables included).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "io/config.h"

namespace deepinfer::io {

struct DtypeUsage {
  int64_t tensors = 0;
  int64_t elements = 0;  // logical elements (parameters for weight dtypes)
  uint64_t bytes = 0;
};

struct ModelSummary {
  std::string path;                 // resolved model directory
  ModelConfig config;
  int64_t num_tensors = 0;
  int64_t num_files = 0;
  int64_t parameters = 0;           // see the counting rule above
  int64_t mtp_parameters = 0;       // part of `parameters` living in mtp.* tensors
  std::map<std::string, DtypeUsage> params_by_dtype;  // "F32", "BF16", "F8_E4M3", "F4", ...
  DtypeUsage scales;                // quantisation scale tensors
  DtypeUsage index_tables;          // integer tables (tid2eid)
  uint64_t total_bytes = 0;         // all tensor bytes
  bool weights_ok = false;          // the weight registry accepted the checkpoint
  std::string weights_error;        // its message otherwise
  int64_t mapped_weights = 0;       // registry entries when weights_ok
};

// `dir`: a local model directory (config.json + model.safetensors or a sharded index).
StatusOr<ModelSummary> summarize_model(const std::string& dir);

std::string format_summary_text(const ModelSummary& s);
nlohmann::json summary_to_json(const ModelSummary& s);

// The counting rule above, for --help.
const char* parameter_counting_rule();

}  // namespace deepinfer::io
