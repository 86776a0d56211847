#include "dist/expert_load.h"

#include <algorithm>
#include <string>

namespace deepinfer::dist {

StatusOr<ExpertLoadRecorder> ExpertLoadRecorder::create(int num_layers, int num_logical_experts,
                                                        int window_steps) {
  if (num_layers < 1) return InvalidArgument("num_layers must be >= 1, got " + std::to_string(num_layers));
  if (num_logical_experts < 1) {
    return InvalidArgument("num_logical_experts must be >= 1, got " + std::to_string(num_logical_experts));
  }
  if (window_steps < 1) {
    return InvalidArgument("window_steps must be >= 1, got " + std::to_string(window_steps));
  }
  ExpertLoadRecorder r;
  r.num_layers_ = num_layers;
  r.num_logical_ = num_logical_experts;
  r.window_steps_ = window_steps;
  const size_t row = static_cast<size_t>(num_layers) * num_logical_experts;
  r.current_.assign(row, 0);
  r.history_.assign(row * window_steps, 0);
  r.window_sum_.assign(row, 0);
  return r;
}

Status ExpertLoadRecorder::record(int layer, const std::vector<int32_t>& topk_ids) {
  if (layer < 0 || layer >= num_layers_) {
    return OutOfRange("layer " + std::to_string(layer) + " outside [0, " + std::to_string(num_layers_) + ")");
  }
  for (size_t i = 0; i < topk_ids.size(); ++i) {
    if (topk_ids[i] < 0 || topk_ids[i] >= num_logical_) {
      return InvalidArgument("topk_ids[" + std::to_string(i) + "] = " + std::to_string(topk_ids[i]) +
                             " outside [0, " + std::to_string(num_logical_) + ")");
    }
  }
  int64_t* row = current_.data() + static_cast<size_t>(layer) * num_logical_;
  for (const int32_t e : topk_ids) ++row[e];
  return OkStatus();
}

void ExpertLoadRecorder::end_step() {
  const size_t n = current_.size();
  int64_t* slot = history_.data() + static_cast<size_t>(next_slot_) * n;
  for (size_t i = 0; i < n; ++i) {
    window_sum_[i] += current_[i] - slot[i];  // slot holds the step leaving the window (or zeros)
    slot[i] = current_[i];
  }
  std::fill(current_.begin(), current_.end(), 0);
  next_slot_ = (next_slot_ + 1) % window_steps_;
  steps_in_window_ = std::min(steps_in_window_ + 1, window_steps_);
}

}  // namespace deepinfer::dist
