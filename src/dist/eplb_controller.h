// Live EPLB: the load statistics of a running expert-parallel model, and the decision, between
// steps, to move to a better placement of the expert slots (vLLM's --enable-eplb).
//
//   EplbController (one per rank; every rank the same options):
//     create(options, comm, layers, experts)  validates the options; placement() is the initial
//                                              placement (identity without redundant experts,
//                                              else a rebalance on a uniform load)
//     context.placement = ctl->placement(); context.load_recorder = ctl->recorder();
//     load the model with that context, then ctl->set_apply(fn that applies a placement)
//     after every step of every rank (a forward or an idle step): ctl->after_step()
//
//   after_step() closes the recorder's step; every `step_interval` steps it
//     1. sums the window load (ExpertLoadRecorder::load(), [layers, logical]) over the ranks —
//        Communicator::exchange_counts of host int64 (exact; every rank gets the same sums);
//     2. runs rebalance_experts on the sum (options.policy / num_nodes / num_groups);
//     3. applies the proposal — calls the apply function, then adopts it — when
//        should_apply(hottest(current), hottest(proposed), min_improvement) holds and the
//        proposal differs from the current placement. hottest(p) = Σ_layers max_gpu load
//        (gpu_loads: each expert's load split evenly over its replicas): the MoE layers run one
//        after another and each waits for its hottest GPU.
//   Every rank computes the same sums, placement and decision (pure functions of the same
//   integers), so all ranks apply together or none does. after_step is therefore collective
//   on the steps where the interval is reached: every rank calls it after every step, idle ones
//   included, in the same order.
//
// An apply error is returned as is; the ranks may then hold different placements (some layers
// moved on some ranks), so the caller must treat it as fatal for the group.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"
#include "dist/communicator.h"
#include "dist/eplb.h"
#include "dist/expert_load.h"

namespace deepinfer::dist {

struct EplbOptions {
  int num_redundant_experts = 0;  // --num-redundant-experts: extra slots over all ranks (>= 0)
  int window_steps = 1000;        // --eplb-window-size: steps summed into the load (>= 1)
  int step_interval = 3000;       // --eplb-step-interval: steps between rebalances (>= 1)
  double min_improvement = 0.05;  // apply when the hottest-GPU load drops by >= this fraction
                                  //   of the current one, in [0, 1)
  EplbPolicy policy = EplbPolicy::kAuto;
  int num_nodes = 1;              // divides the world size (hierarchical policy)
  int num_groups = 1;             // router expert groups (DeepSeek-V4: 1); divides the experts
};

// InvalidArgument naming the option: num_redundant_experts < 0 or (experts + redundant) not a
// multiple of world_size, window_steps / step_interval < 1, min_improvement outside [0, 1),
// num_nodes < 1 or not dividing world_size, num_groups < 1 or not dividing the experts, the
// hierarchical policy with num_groups % num_nodes != 0.
Status validate_eplb_options(const EplbOptions& options, int num_layers, int num_logical_experts,
                             int world_size);

// The placement before any statistics: identity_placement with no redundant experts, else
// rebalance_experts on a uniform load (every expert 1), which replicates the lowest experts.
StatusOr<ExpertPlacement> initial_eplb_placement(const EplbOptions& options, int num_layers,
                                                 int num_logical_experts, int world_size);

// Σ over layers of the hottest GPU's load under `placement` (gpu_loads). load: [layers, logical].
double hottest_gpu_load(const ExpertPlacement& placement, const std::vector<int64_t>& load);

// The decision rule: current > 0 and (current − proposed) >= min_improvement · current and
// proposed < current (a tie never moves weights).
bool should_apply(double current_hottest, double proposed_hottest, double min_improvement);

// What one rebalance evaluation found (every rank gets the same).
struct EplbDecision {
  int64_t step = 0;                 // after_step count when it ran
  int64_t window_tokens = 0;        // Σ of the global window load (routing picks)
  double current_hottest = 0;       // hottest_gpu_load of the placement in use
  double proposed_hottest = 0;      // hottest_gpu_load of rebalance_experts' proposal
  bool applied = false;
};

class EplbController {
 public:
  // Applies a placement to this rank's model (e.g. DeepseekV4Model::apply_expert_placement).
  using ApplyFn = std::function<Status(const ExpertPlacement&)>;

  // comm (borrowed, outlives the controller): the expert-parallel group.
  static StatusOr<std::unique_ptr<EplbController>> create(const EplbOptions& options,
                                                          Communicator* comm, int num_layers,
                                                          int num_logical_experts);

  const EplbOptions& options() const { return options_; }
  // The placement in use: the initial one, then the last applied.
  const ExpertPlacement& placement() const { return placement_; }
  // For ExpertParallelContext::load_recorder (stable for the controller's lifetime).
  ExpertLoadRecorder* recorder() { return &recorder_; }
  const ExpertLoadRecorder& recorder() const { return recorder_; }
  void set_apply(ApplyFn apply) { apply_ = std::move(apply); }

  // After every step of this rank (see the top). FailedPrecondition when a placement is to be
  // applied and no apply function was set.
  Status after_step();
  // Steps 1–3 of after_step now, whatever the interval (collective). Exposed for tests and a
  // forced rebalance.
  Status rebalance_now();

  int64_t steps() const { return steps_; }
  int64_t num_rebalances() const { return num_applied_; }
  const std::optional<EplbDecision>& last_decision() const { return last_decision_; }

 private:
  EplbController(const EplbOptions& options, Communicator* comm, ExpertLoadRecorder recorder)
      : options_(options), comm_(comm), recorder_(std::move(recorder)) {}
  EplbOptions options_;
  Communicator* comm_ = nullptr;
  ExpertLoadRecorder recorder_;
  ExpertPlacement placement_;
  ApplyFn apply_;
  int num_layers_ = 0;
  int num_logical_ = 0;
  int64_t steps_ = 0;
  int64_t num_applied_ = 0;
  std::optional<EplbDecision> last_decision_;
};

}  // namespace deepinfer::dist
