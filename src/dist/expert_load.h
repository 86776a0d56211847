// EPLB load statistics: how many (token, k) routing decisions each logical expert received, per
// MoE layer, summed over a sliding window of the last `window_steps` engine steps.
//
// The engine calls record(layer, topk_ids) with the router's selected logical ids of every MoE
// layer in a step, end_step() once the step is done, and every N steps feeds load() to
// rebalance_experts (eplb.h) and applies the new placement between steps.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace deepinfer::dist {

class ExpertLoadRecorder {
 public:
  static StatusOr<ExpertLoadRecorder> create(int num_layers, int num_logical_experts, int window_steps);

  // topk_ids: [num_tokens, top_k] flattened logical expert ids of one layer in the current step.
  Status record(int layer, const std::vector<int32_t>& topk_ids);
  // Closes the current step: it enters the window, the oldest step leaves when the window is full.
  void end_step();
  // [num_layers, num_logical_experts]: counts of the closed steps in the window.
  const std::vector<int64_t>& load() const { return window_sum_; }
  int steps_in_window() const { return steps_in_window_; }

 private:
  ExpertLoadRecorder() = default;
  int num_layers_ = 0;
  int num_logical_ = 0;
  int window_steps_ = 0;
  int next_slot_ = 0;
  int steps_in_window_ = 0;
  std::vector<int64_t> current_;     // [num_layers, num_logical]: the open step
  std::vector<int64_t> history_;     // [window_steps, num_layers, num_logical]: ring of closed steps
  std::vector<int64_t> window_sum_;  // [num_layers, num_logical]
};

}  // namespace deepinfer::dist
